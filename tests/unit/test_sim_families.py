"""Families of scenarios: draws are deterministic, valid and within the documented ranges; the
family scorecard's keys and maths on hand-made draws; `simulate --family` and its errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.constants import MAX_PRIORITY
from load.oracle import pace, pooled_drain_time
from load.scorecard import family_summary, spread
from load.sim import draw_parts as parts
from load.sim import families as fam
from load.sim.families import FAMILIES, draw_document, draw_name, draw_scenario
from load.sim.scenario import Scenario, load_scenario
from load.sim.services import arrived_by
from stack.cli import main

draws = st.tuples(st.sampled_from(FAMILIES), st.integers(1, 10**6), st.integers(1, fam.MAX_DRAWS))


def within(value: float, bounds: tuple[float, float]) -> bool:
    return bounds[0] <= value <= bounds[1]


def test_a_draw_is_a_function_of_family_seed_and_draw() -> None:
    assert draw_document("throttling", 1001, 7) == draw_document("throttling", 1001, 7)
    assert draw_document("throttling", 1001, 7) != draw_document("throttling", 1001, 8)
    assert draw_document("throttling", 1001, 7) != draw_document("throttling", 1002, 7)
    assert draw_document("shared", 1001, 7) != draw_document("throttling", 1001, 7)
    assert draw_scenario("mixed", 3, 2).name == draw_name("mixed", 3, 2) == "mixed-3-2"


def test_an_unknown_family_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown family 'calm'"):
        draw_document("calm", 1, 1)


@settings(max_examples=150)
@given(draws)
def test_every_draw_is_a_valid_scenario_within_the_common_ranges(
    draw: tuple[str, int, int],
) -> None:
    family, seed, number = draw
    scenario = draw_scenario(family, seed, number)
    fleet = family == "fleet"
    assert scenario.duration_s == parts.DURATION_S
    assert all(within(bound, parts.TELEMETRY_DELAY_S) for bound in scenario.telemetry_delay_s)
    messages = sum(
        arrived_by(queue.backlog, queue.arrivals_rps, scenario.duration_s)
        for queue in scenario.queues
    )
    # Rates are rounded to 0.01/s after scaling: a few messages over at the most.
    assert 0 < messages <= (fam.FLEET_MAX_MESSAGES if fleet else parts.MAX_MESSAGES) * 1.01
    caps = fam.FLEET_MAX_CONCURRENCY if fleet else parts.MAX_CONCURRENCY
    for queue in scenario.queues:
        assert within(queue.batch_size, parts.BATCH_SIZE)
        assert within(queue.visibility_timeout_s, parts.VISIBILITY_TIMEOUT_S)
        assert within(queue.max_receive_count, parts.MAX_RECEIVE_COUNT)
        assert within(queue.max_concurrency, caps)
        assert queue.min_concurrency == parts.MIN_CONCURRENCY
        assert queue.arrivals_rps[-1][1] == 0
        assert queue.arrivals_rps[-1][0] <= parts.EVENTS_END_S
    for downstream in scenario.downstreams:
        assert all(start < parts.EVENTS_END_S for start, _ in downstream.capacity_rps)
        assert all(start < parts.EVENTS_END_S for start, _ in downstream.latency_ms)
        assert all(within(rate, (0, fam.NOISE_5XX[1])) for _, rate in downstream.noise_5xx_rate)
        # The oracle drains every draw within the events' half of the run (_drainable), but
        # for a backlog halved a dozen times.
        queues = [queue for queue in scenario.queues if queue.downstream == downstream.name]
        drain = pooled_drain_time(downstream.capacity_rps, queues, scenario.duration_s)
        assert drain is not None and drain <= parts.DURATION_S
    CHECKS[family](scenario)


def only_queue_sends(scenario: Scenario, latency_ms: float) -> float:
    (queue,) = scenario.queues
    return queue.max_concurrency * pace(queue.batch_size, latency_ms, queue.invocation_overhead_ms)


def no_load_ms(scenario: Scenario) -> float:
    return scenario.downstreams[0].latency_ms[0][1]


def check_healthy(scenario: Scenario) -> None:
    (downstream,) = scenario.downstreams
    (queue,) = scenario.queues
    base = no_load_ms(scenario)
    assert within(base, parts.LATENCY_MS) and downstream.answers_429
    assert len(downstream.capacity_rps) == 1 and downstream.noise_5xx_rate == ((0.0, 0.0),)
    headroom = downstream.capacity_rps[0][1] / only_queue_sends(scenario, base)
    assert within(round(headroom, 2), (fam.HEADROOM[0] - 0.01, fam.HEADROOM[1] + 0.01))
    if downstream.latency_tail is not None:
        assert within(downstream.latency_tail, fam.TAIL_SHAPE)
    slowest = max(latency for _, latency in downstream.latency_ms)
    assert slowest <= base * fam.BROWNOUT_FACTOR[1] + fam.PAUSE_FOR_S[1] * 1000
    assert queue.timeout_ms is not None and within(queue.timeout_ms, fam.HEALTHY_TIMEOUT_MS)
    assert slowest < queue.timeout_ms


def check_throttling(scenario: Scenario) -> None:
    (downstream,) = scenario.downstreams
    assert len(scenario.queues) == 1 and downstream.answers_429
    assert downstream.latency_model == "constant" and len(downstream.latency_ms) == 1
    assert within(no_load_ms(scenario), parts.LATENCY_MS)
    first = downstream.capacity_rps[0][1] / only_queue_sends(scenario, no_load_ms(scenario))
    assert within(round(first, 2), (fam.CAPACITY_SHARE[0] - 0.01, fam.CAPACITY_SHARE[1] + 0.01))


def check_latency(scenario: Scenario) -> None:
    (downstream,) = scenario.downstreams
    assert within(len(scenario.queues), fam.LATENCY_QUEUES)
    assert not downstream.answers_429 and downstream.latency_model == "queueing"
    assert within(no_load_ms(scenario), fam.LATENCY_NO_LOAD_MS)
    timeouts = [queue.timeout_ms for queue in scenario.queues]
    assert all(t is not None and within(t, fam.LATENCY_TIMEOUT_MS) for t in timeouts)
    # Degrading never puts the no-load latency past a client's timeout.
    assert max(latency for _, latency in downstream.latency_ms) * 2 <= max(
        min(t for t in timeouts if t is not None), 2 * no_load_ms(scenario)
    )


def check_shared(scenario: Scenario) -> None:
    (downstream,) = scenario.downstreams
    assert within(len(scenario.queues), fam.SHARED_QUEUES) and downstream.answers_429
    assert within(no_load_ms(scenario), parts.LATENCY_MS)


def check_mixed(scenario: Scenario) -> None:
    (downstream,) = scenario.downstreams
    (queue,) = scenario.queues
    assert downstream.answers_429 and within(no_load_ms(scenario), parts.LATENCY_MS)
    # Throttling and slowing: the latency rises for a while, and the capacity changes (but for
    # a flash crowd, which has the work instead).
    assert max(latency for _, latency in downstream.latency_ms) > no_load_ms(scenario)
    assert queue.timeout_ms is not None and queue.timeout_ms >= fam.LATENCY_TIMEOUT_MS[0]


def check_throttling_announced(scenario: Scenario) -> None:
    check_throttling(scenario)
    assert all(downstream.announce in fam.QUOTA_STYLES for downstream in scenario.downstreams)


def check_fleet(scenario: Scenario) -> None:
    assert within(len(scenario.queues), fam.FLEET_QUEUES)
    assert len(scenario.downstreams) in (1, 2)
    regimes = dict(part.split()[:2] for part in scenario.description.split("; ")[1:-2])
    for downstream in scenario.downstreams:
        tenants = [queue for queue in scenario.queues if queue.downstream == downstream.name]
        assert tenants and downstream.answers_429 and len(downstream.latency_ms) == 1
        # At least the drawn latency; slower only to keep the lowest capacity in its bound.
        assert no_load_ms(scenario) >= parts.LATENCY_MS[0]
        floor = sum(
            parts.MIN_CONCURRENCY
            * pace(queue.batch_size, downstream.latency_ms[0][1], queue.invocation_overhead_ms)
            for queue in tenants
        )
        rates = [rate for _, rate in downstream.capacity_rps]
        lowest, first = min(rates), rates[0]
        assert lowest <= fam.FLEET_LOWEST_MAX_RPS + 0.1
        low, high = fam.FLEET_LOWEST[regimes[downstream.name]]
        # Rounded to 0.1/s, and at least 1/s.
        assert low * floor - 0.1 <= lowest <= max(1.0, high * floor + 0.1)
        if len(rates) > 1:
            drop = fam.FLEET_DROP
            assert drop[0] * lowest - 0.5 <= first <= drop[1] * lowest + 0.5
    for queue in scenario.queues:
        assert within(queue.weight, (fam.FLEET_WEIGHT[0] - 0.01, fam.FLEET_WEIGHT[1] + 0.01))
        assert 0 <= queue.priority <= MAX_PRIORITY
        assert queue.group in (None, queue.downstream)
    prioritized = sum(1 for queue in scenario.queues if queue.priority)
    assert prioritized <= len(scenario.queues) * fam.FLEET_PRIORITIZED
    assert len({queue.group for queue in scenario.queues}) <= len(scenario.downstreams)


CHECKS = {
    "throttling-announced": check_throttling_announced,
    "healthy": check_healthy,
    "throttling": check_throttling,
    "latency": check_latency,
    "shared": check_shared,
    "mixed": check_mixed,
    "fleet": check_fleet,
}


def test_every_family_has_its_range_checks() -> None:
    assert set(CHECKS) == set(FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_draws_each_of_its_shapes(family: str) -> None:
    descriptions = " ".join(draw_scenario(family, 1, n).description for n in range(1, 120))
    shapes = {
        "healthy": fam.HEALTHY_LATENCIES,
        "throttling": fam.CAPACITY_SHAPES,
        "latency": ("steady", "slower", "less-capacity"),
        "shared": fam.CAPACITY_SHAPES,
        "mixed": fam.CAPACITY_SHAPES[1:],
        "throttling-announced": (*fam.CAPACITY_SHAPES, *fam.QUOTA_STYLES),
        "fleet": (
            *fam.FLEET_LOWEST,
            *fam.FLEET_SHAPES,
            *fam.FLEET_STANDINGS,
            "api-2",
            "group named in CONFIG",
            "grouped by Downstream",
        ),
    }[family]
    assert all(shape in descriptions for shape in shapes)


@settings(max_examples=40)
@given(st.integers(1, 10**6), st.integers(1, fam.MAX_DRAWS))
def test_a_fleet_draw_is_deterministic_and_parses_with_its_standings(
    seed: int, number: int
) -> None:
    document = draw_document("fleet", seed, number)
    assert json.dumps(document) == json.dumps(draw_document("fleet", seed, number))
    scenario = draw_scenario("fleet", seed, number)
    by_name = {queue["name"]: queue for queue in document["queues"]}
    assert len(by_name) == len(scenario.queues)
    for queue in scenario.queues:
        drawn = by_name[queue.name]
        # What the document says is what the simulator passes to CONFIG.
        assert (queue.group, queue.weight, queue.priority) == (
            drawn.get("group"),
            drawn.get("weight", 1.0),
            drawn.get("priority", 0),
        )


@settings(max_examples=30)
@given(st.integers(1, 10**6), st.integers(1, fam.MAX_DRAWS))
def test_an_announced_draw_is_the_blind_familys_same_draw_announcing(
    seed: int, number: int
) -> None:
    for family, blind in fam.ANNOUNCED_FAMILIES.items():
        announced = draw_document(family, seed, number)
        assert announced["name"] == draw_name(family, seed, number)
        styles = {downstream.pop("announce") for downstream in announced["downstreams"]}
        assert len(styles) == 1
        original = draw_document(blind, seed, number)
        assert announced["description"].startswith(original["description"])
        for key in ("name", "description"):
            del announced[key], original[key]
        assert announced == original


# --- the family scorecard ---------------------------------------------------------------------


def totals(
    wasted: float = 0.0,
    drain_s: float | None = 100.0,
    drain_ratio: float | None = 1.0,
    age_p99_s: float | None = 50.0,
    dlq: int = 0,
    timed_out: int = 0,
    calls: int = 1000,
    goodput_min: float | None = 0.8,
    pause: int = 0,
) -> dict[str, Any]:
    return {
        "wasted_ratio": wasted,
        "drain_s": drain_s,
        "drain_ratio": drain_ratio,
        "age_p99_s": age_p99_s,
        "dlq_messages": dlq,
        "calls_timed_out": timed_out,
        "calls_total": calls,
        "goodput_share_min": goodput_min,
        "longest_pause_s": pause,
    }


def test_spread_is_mean_nearest_rank_p90_and_worst_with_none_as_infinite() -> None:
    values = [float(v) for v in range(1, 11)]
    assert spread(values) == {"mean": 5.5, "p90": 9.0, "worst": 10.0}
    assert spread([1.0, None, 3.0]) == {"mean": 2.0, "p90": None, "worst": None}
    assert spread([*values[:9], None]) == {"mean": 5.0, "p90": 9.0, "worst": None}
    assert spread([]) == {"mean": None, "p90": None, "worst": None}
    # Where lower is worse (a goodput share), the p90 is the value nine draws in ten reach.
    shares = [value / 10 for value in values]
    assert spread(shares, lower_is_worse=True) == {"mean": 0.55, "p90": 0.2, "worst": 0.1}
    assert spread([0.0, None], lower_is_worse=True) == {"mean": 0.0, "p90": None, "worst": None}
    assert str(spread([0.0], lower_is_worse=True)["worst"]) == "0.0"


def test_harm_needs_a_clean_static_run_and_a_slower_drain_or_older_messages() -> None:
    static = totals()
    draws = [
        # Harmful: drains 1.04x static's time; ages 1.06x; never drains where static did.
        {"static": static, "q": totals(drain_s=104.0)},
        {"static": static, "q": totals(age_p99_s=53.0)},
        {"static": static, "q": totals(drain_s=None, drain_ratio=None)},
        # Not: within 1.03x and 1.05x; static wasted 1% (not clean); neither drained.
        {"static": static, "q": totals(drain_s=103.0, age_p99_s=52.5)},
        {"static": totals(wasted=0.01), "q": totals(drain_s=300.0)},
        {"static": totals(drain_s=None), "q": totals(drain_s=None)},
    ]
    summary = family_summary("healthy", "q", 1001, draws)
    assert summary["harmful_draws"] == 3
    assert family_summary("healthy", "static", 1001, draws)["harmful_draws"] == 0


def test_family_summary_keys_counts_and_bound_rule() -> None:
    bound = totals(wasted=0.02, drain_ratio=1.5)
    draws = [
        # Within the rule: wastes 0.05 <= 2 x 0.02 + 0.01, drains 1.65 <= 1.1 x 1.5.
        {"static": totals(), "hindsight": bound, "q": totals(wasted=0.05, drain_ratio=1.65)},
        # Outside: wastes too much; then drains too slowly.
        {"static": totals(), "hindsight": bound, "q": totals(wasted=0.051, drain_ratio=1.0)},
        {"static": totals(), "hindsight": bound, "q": totals(drain_ratio=1.66)},
        # No bound on this draw; it dead-letters and times out a fifth of its calls, starves
        # a queue and pauses one for 40 s.
        {
            "static": totals(),
            "q": totals(dlq=3, timed_out=200, drain_ratio=None, goodput_min=0.2, pause=40),
        },
    ]
    summary = family_summary("throttling", "q", 1001, draws)
    assert list(summary) == [
        "family",
        "policy",
        "draws",
        "seed",
        "harmful_draws",
        "dead_letter_draws",
        "undrained_draws",
        "wasted",
        "drain_ratio",
        "timed_out_share",
        "draws_within_bound_rule",
        "goodput_share_min",
        "longest_pause_s",
    ]
    assert summary["draws"] == 4 and summary["seed"] == 1001
    assert summary["dead_letter_draws"] == 1
    assert summary["undrained_draws"] == 1
    assert summary["draws_within_bound_rule"] == 1
    assert summary["wasted"] == {"mean": 0.0253, "p90": 0.051, "worst": 0.051}
    assert summary["timed_out_share"] == {"mean": 0.05, "p90": 0.2, "worst": 0.2}
    assert summary["drain_ratio"]["worst"] is None
    assert summary["goodput_share_min"] == {"mean": 0.65, "p90": 0.2, "worst": 0.2}
    assert summary["longest_pause_s"] == {"mean": 10.0, "p90": 40, "worst": 40}
    unbounded = [{key: run for key, run in draw.items() if key != "hindsight"} for draw in draws]
    assert family_summary("x", "q", 1, unbounded)["draws_within_bound_rule"] is None


# --- the command ------------------------------------------------------------------------------


def test_simulate_family_json_and_emitted_draws_run_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["simulate", "--family", "throttling", "--draws", "1", "--seed", "5"]
    assert main([*args, "--policy", "queuemesh", "--json", "--emit", str(tmp_path)]) == 0
    (summary,) = json.loads(capsys.readouterr().out)
    assert (summary["family"], summary["policy"], summary["draws"]) == (
        "throttling",
        "queuemesh",
        1,
    )
    emitted = tmp_path / "throttling-5-1.json"
    assert json.loads(emitted.read_text(encoding="utf-8")) == draw_document("throttling", 5, 1)
    assert load_scenario(str(emitted)) == draw_scenario("throttling", 5, 1)
    # The emitted draw, run alone, is the family's run of it.
    assert main(["simulate", "--scenario", str(emitted), "--policy", "queuemesh", "--json"]) == 0
    card = json.loads(capsys.readouterr().out)
    assert summary["wasted"]["mean"] == card["totals"]["wasted_ratio"]
    assert summary["drain_ratio"]["mean"] == card["totals"]["drain_ratio"]


def test_simulate_family_prints_a_table_per_family(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--family", "healthy", "--draws", "1", "--policy", "static"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("family healthy (1 draws, seed 1001;")
    assert "harmful" in out and "in_bound" in out and "\nstatic " in out


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--family", "healthy"], "--family needs --draws N"),
        (["--family", "healthy", "--draws", "0"], "--draws 0: draw 1-1000 scenarios"),
        (["--family", "healthy", "--draws", "2", "--seed", "0"], "a family's seed is 1 or more"),
        (["--family", "healthy", "--draws", "2", "--seeds", "1-2"], "leave out --seeds"),
        (["--scenario", "noisy", "--family", "healthy"], "either --scenario or --family"),
        ([], "either --scenario or --family"),
        (["--scenario", "noisy", "--emit", "x"], "--draws and --emit go with --family"),
        (["--family", "calm", "--draws", "2"], "invalid choice: 'calm'"),
    ],
)
def test_simulate_family_refuses_bad_arguments_in_one_line(
    args: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert exit_code(["simulate", *args]) == 2
    err = capsys.readouterr().err
    assert complaint in err and err.count("\n") == 1 and "Traceback" not in err


def exit_code(argv: list[str]) -> object:
    """``main``'s return code, or argparse's exit code where it exits itself."""
    try:
        return main(argv)
    except SystemExit as exit:
        return exit.code


def test_emit_to_an_unwritable_place_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    args = ["simulate", "--family", "healthy", "--draws", "1", "--emit", str(blocker / "x")]
    assert main(args) == 2
    assert "--emit" in capsys.readouterr().err
