"""Policy parameters: defaults, environment and overrides, each within a range where it still
controls (``BOUNDS``): any value inside decides, any outside is refused by name."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.constants import WINDOW_RETENTION_S
from controller.ledger import InMemoryLedger
from controller.loop import ControlLoop
from controller.model import Action
from controller.policy import decide, memory_type
from controller.policy.aimd import Aimd
from controller.policy.evidence import vetted_evidence
from controller.settings import BOUNDS, ENV_PREFIX, PolicyParams, SettingsError
from controller.window import QueueWindow
from stack.local.template import load_template
from tests.factories import config, kinesis_event, sample, state
from tests.paths import ROOT

WHOLE = {f.name for f in dataclasses.fields(PolicyParams) if f.type in (int, "int")}


def test_defaults_are_the_original_design() -> None:
    params = PolicyParams()
    assert (params.t1, params.t2, params.beta, params.alpha, params.cmin, params.cmax) == (
        0.05,
        0.98,
        0.5,
        5,
        2,
        100,
    )


def test_environment_overrides_defaults() -> None:
    params = PolicyParams.from_env({"QUEUEMESH_T1": "0.1", "QUEUEMESH_CMAX": "40", "HOME": "x"})
    assert params.t1 == 0.1
    assert params.cmax == 40


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"cmin": 1}, "cmin must be in 2..1000; got 1"),
        ({"cmax": 1001}, "cmax must be in 2..1000; got 1001"),
        ({"cmin": 60, "cmax": 50}, "need Cmin <= Cmax; got Cmin=60, Cmax=50"),
        ({"alpha": 2.5}, "whole number"),
        ({"t1": "lots"}, "must be a number"),
        ({"gamma": 3}, "unknown policy parameter"),
        ({"window_s": "inf"}, "finite"),
        ({"t1": "nan"}, "finite"),
        ({"window_s": WINDOW_RETENTION_S + 1}, "window_s must be in 10..600 s; got 601.0"),
        ({"settle_margin_s": 1e9}, "settle_margin_s must be in 0..60 s"),
        ({"stale_after_s": 0}, "stale_after_s must be in 10..600 s"),
        ({"alpha": 1001}, "alpha must be in 1..1000"),
        # Each of these once left a queue under a 40% storm uncut, with no error anywhere.
        ({"min_samples": 1e6}, "min_samples must be in 1..1000; got 1000000"),
        ({"min_samples": "1e18"}, "min_samples must be in 1..1000"),
        ({"window_s": 0.001}, "window_s must be in 10..600 s; got 0.001"),
        ({"stale_after_s": 0.001}, "stale_after_s must be in 10..600 s; got 0.001"),
        ({"beta": 0.999}, "beta must be in 0.01..0.99; got 0.999"),
    ],
)
def test_bad_overrides_say_what_is_wrong(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        PolicyParams().with_overrides(overrides)


def test_every_parameter_has_a_range_holding_its_default() -> None:
    defaults = PolicyParams()
    assert list(BOUNDS) == [f.name for f in dataclasses.fields(PolicyParams)]
    for name, bound in BOUNDS.items():
        assert bound.low < bound.high
        assert bound.holds(getattr(defaults, name)), name
    assert BOUNDS["window_s"].high == BOUNDS["stale_after_s"].high == WINDOW_RETENTION_S


def test_the_ends_of_every_range_hold() -> None:
    for name, bound in BOUNDS.items():
        for end in (bound.low, bound.high):
            others = {"cmin": 2, "cmax": 1000} if name in ("cmin", "cmax") else {}
            params = PolicyParams().with_overrides({**others, name: end})
            assert getattr(params, name) == end


def test_the_documented_table_is_the_bounds() -> None:
    """docs/deploy.md's table of ranges says what ``BOUNDS`` and the defaults say."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` \| ([^|]+?) \| ([^|]+?) \|", text, re.MULTILINE)
    defaults = PolicyParams()
    assert {name: (variable, bound, float(default)) for name, variable, bound, default in rows} == {
        name: (ENV_PREFIX + name.upper(), str(bound), float(getattr(defaults, name)))
        for name, bound in BOUNDS.items()
    }


def test_the_templates_policy_parameters_lie_within_the_bounds() -> None:
    """Every value the template's parameters accept starts the controller."""
    template = load_template(ROOT / "template.yaml")
    variables = template["Resources"]["ControllerFunction"]["Properties"]["Environment"]
    passed = {
        variable[len(ENV_PREFIX) :].lower(): value["Ref"]
        for variable, value in variables["Variables"].items()
        if variable[len(ENV_PREFIX) :].lower() in BOUNDS
    }
    assert set(passed) == {"t1", "t2", "beta", "alpha", "cmin", "cmax"}
    for name, parameter in passed.items():
        declared = template["Parameters"][parameter]
        for key in ("Default", "MinValue", "MaxValue"):
            assert BOUNDS[name].holds(float(declared[key])), (parameter, key)


# --- in range, every queue is decided; out of range, refused by name ---------------------------


@st.composite
def params_in_range(draw: st.DrawFn) -> PolicyParams:
    values: dict[str, Any] = {}
    for name, bound in BOUNDS.items():
        if name in WHOLE:
            values[name] = draw(st.integers(int(bound.low), int(bound.high)))
        else:
            values[name] = draw(st.floats(bound.low, bound.high))
    values["cmin"], values["cmax"] = sorted((values["cmin"], values["cmax"]))
    return PolicyParams(**values)


NOW = 10_000.0


def storm_window(delay_s: float) -> QueueWindow:
    """Every second of the evidence kept, up to ``delay_s`` before now (telemetry's transit):
    1,000 calls, 40% of them answered 429."""
    window = QueueWindow()
    first = int(NOW - WINDOW_RETENTION_S) + 1
    for second in range(first, int(NOW - delay_s)):
        window.add(sample(at=second + 0.9, ok=600, throttled=400, invocation_ms=500))
    return window


@settings(max_examples=150)
@given(params=params_in_range(), delay_s=st.floats(0.0, 5.0))
def test_any_params_in_range_decide_on_telemetry_a_few_seconds_old(
    params: PolicyParams, delay_s: float
) -> None:
    window = storm_window(delay_s)
    queue_state = state(params.cmax, last_change_at=0.0)

    _, refusal = vetted_evidence(queue_state, window.snapshot(), NOW, params)
    decision = decide(Aimd(), queue_state, config(), window, NOW, params)

    assert refusal is None
    if params.t1 <= 0.4 and params.cmax > params.cmin:
        assert decision.action is Action.MULTIPLICATIVE_DECREASE
        assert decision.target < params.cmax


def outside(name: str) -> st.SearchStrategy[float | int]:
    bound = BOUNDS[name]
    if name in WHOLE:
        # Whole numbers a float holds exactly (a value is read as a number, then as a whole one).
        exact = 2**53
        return st.integers(-exact, int(bound.low) - 1) | st.integers(int(bound.high) + 1, exact)
    below = st.floats(max_value=bound.low, exclude_max=True, allow_nan=False, allow_infinity=False)
    above = st.floats(min_value=bound.high, exclude_min=True, allow_nan=False, allow_infinity=False)
    return below | above


out_of_range = st.sampled_from(sorted(BOUNDS)).flatmap(
    lambda name: st.tuples(st.just(name), outside(name))
)


@settings(max_examples=150)
@given(out_of_range)
def test_any_value_out_of_range_is_refused_naming_the_setting_and_its_range(
    name_and_value: tuple[str, float | int],
) -> None:
    name, value = name_and_value
    expected = f"{name} must be in {BOUNDS[name]}; got {value!r}"
    with pytest.raises(SettingsError, match=f"^{re.escape(expected)}$"):
        PolicyParams().with_overrides({name: value})
    variable = ENV_PREFIX + name.upper()
    with pytest.raises(SettingsError, match=f"^{re.escape(variable)}=.*: {re.escape(expected)}$"):
        PolicyParams.from_env({variable: repr(value)})


def test_cmin_and_cmax_from_the_environment_are_checked_together() -> None:
    params = PolicyParams.from_env({"QUEUEMESH_CMIN": "200", "QUEUEMESH_CMAX": "500"})
    assert (params.cmin, params.cmax) == (200, 500)
    with pytest.raises(SettingsError, match=r"^QUEUEMESH_CMIN: need Cmin <= Cmax; got Cmin=200"):
        PolicyParams.from_env({"QUEUEMESH_CMIN": "200"})


def test_a_queue_is_decided_under_its_newest_overrides() -> None:
    """A warm controller keeps the parameters per set of overrides, never per queue: a CONFIG
    read again with another Cmax is decided under the new one, and queues with the same
    overrides share one set."""
    controller = ControlLoop(
        InMemoryLedger(memory_types=memory_type), InMemoryActuator(), PolicyParams()
    )

    first = controller.params_for(config("orders", cmax=40))
    assert first.cmax == 40
    assert controller.params_for(config("orders", cmax=80, cmin=3)).cmax == 80
    assert controller.params_for(config("orders", cmin=3, cmax=80)).cmin == 3
    assert controller.params_for(config("payments", cmax=40)) is first
    assert controller.params_for(config("orders")) is controller.params


# --- where a value out of range stops: its queue, or the controller's cold start --------------

SILENT_OFF_SWITCHES = {
    "min_samples 1e6": {"min_samples": 1e6},
    "min_samples 1e18": {"min_samples": 1e18},
    "window_s 0.001": {"window_s": 0.001},
    "stale_after_s 0.001": {"stale_after_s": 0.001},
}


@pytest.mark.parametrize(
    "overrides", SILENT_OFF_SWITCHES.values(), ids=list(SILENT_OFF_SWITCHES.keys())
)
def test_an_override_out_of_range_isolates_its_queue_with_one_log_line(
    overrides: dict[str, float], caplog: pytest.LogCaptureFixture
) -> None:
    ledger, actuator = InMemoryLedger(memory_types=memory_type), InMemoryActuator()
    for queue in ("bad", "orders"):
        ledger.put_config(config(queue, **(overrides if queue == "bad" else {})))
        actuator.add_mapping(f"esm-{queue}", 100)
    controller = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())
    app = ControllerApp(controller, clock=lambda: 115.0, emit=lambda line: None)
    storm = [
        sample(queue, at=100.0 + s + 0.9, ok=6, throttled=4)
        for s in range(10)
        for queue in ("bad", "orders")
    ]

    assert app.handle(kinesis_event(storm), None) == {"batchItemFailures": []}

    assert [call.uuid for call in actuator.calls] == ["esm-orders"]
    assert actuator.read("esm-orders", 0).max_concurrency == 50
    assert actuator.read("esm-bad", 0).max_concurrency == 100
    assert ledger.get_states(["bad"]) == {}
    assert controller.counters["configs_invalid"] == 1
    assert controller.counters["samples_config_invalid"] == 10
    (name,) = overrides
    (warning,) = [r.getMessage() for r in caplog.records if "CONFIG of bad" in r.getMessage()]
    assert f"{name} must be in {BOUNDS[name]}" in warning


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("QUEUEMESH_MIN_SAMPLES", "1e6"),
        ("QUEUEMESH_WINDOW_S", "0.001"),
        ("QUEUEMESH_STALE_AFTER_S", "0.001"),
    ],
)
def test_an_environment_value_out_of_range_fails_the_cold_start_naming_it(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controller import handler

    # The AWS clients are built (never called) before the parameters are read.
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    name = variable[len(ENV_PREFIX) :].lower()
    expected = f"{variable}={value!r}: {name} must be in {BOUNDS[name]}"
    with pytest.raises(SettingsError, match=f"^{re.escape(expected)}"):
        handler.build_app({"QUEUEMESH_TABLE": "ledger", variable: value})
