"""The contract every registered algorithm keeps, whatever the evidence: the shared guards and
the seam make it so (docs/algorithms.md). Each algorithm's own rule is tested in its own file."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from controller.model import Backlog, Decision, QueueState
from controller.policy import (
    ALGORITHMS,
    DEFAULT_ALGORITHM,
    LimitAlgorithm,
    algorithm_named,
    decide,
    evidence_since,
)
from controller.settings import PolicyParams
from controller.window import QueueWindow, WindowStats
from stack.local.template import load_template
from tests.factories import config, sample, state, waiting
from tests.paths import ROOT

PARAMS = PolicyParams()
TEMPLATE = ROOT / "template.yaml"
NAMES = sorted(ALGORITHMS)

# (seconds after the start the document is emitted, ok calls, rejected calls, duration ms)
documents = st.lists(
    st.tuples(
        st.floats(0, 120, allow_nan=False),
        st.integers(0, 20),
        st.integers(0, 20),
        st.integers(100, 2000),
    ),
    max_size=120,
)
bounds = st.tuples(st.integers(2, 40), st.integers(0, 60)).map(
    lambda pair: PolicyParams(cmin=pair[0], cmax=pair[0] + pair[1])
)


def run(
    algorithm: LimitAlgorithm[object],
    found: list[tuple[float, int, int, int]],
    params: PolicyParams,
    start: int,
    backlog: Backlog | None = None,
) -> list[tuple[Decision, WindowStats]]:
    """Decide once a second while the documents arrive (the queue's backlog always
    ``backlog``); each decision with the evidence since the last change (and its settle
    margin) as it stood when the decision was made."""
    window = QueueWindow()
    current: QueueState = state(start)
    pending = sorted(found)
    steps = []
    for tick in range(130):
        now = 1000.0 + tick
        while pending and pending[0][0] + 1000.0 <= now:
            offset, ok, throttled, duration = pending.pop(0)
            window.add(
                sample(at=1000.0 + offset, ok=ok, throttled=throttled, invocation_ms=duration)
            )
        evidence = window.stats(evidence_since(current, now, params), now + 1.0)
        decision = decide(algorithm, current, config(), window, now, params, backlog)
        steps.append((decision, evidence))
        current = decision.new_state
    return steps


def test_the_registry_is_what_the_template_allows() -> None:
    parameter = load_template(TEMPLATE)["Parameters"]["PolicyAlgorithm"]
    assert sorted(parameter["AllowedValues"]) == NAMES
    assert parameter["Default"] == DEFAULT_ALGORITHM


@pytest.mark.parametrize("name", NAMES)
def test_each_name_gives_its_algorithm(name: str) -> None:
    algorithm = algorithm_named(name)
    assert algorithm.name == name
    assert isinstance(algorithm, LimitAlgorithm)


def test_an_unknown_name_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=f"must be one of {', '.join(NAMES)}; got 'magic'"):
        algorithm_named("magic")


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=30)
@given(found=documents, params=bounds, start=st.integers(2, 100))
def test_bounds_always_hold(
    name: str, found: list[tuple[float, int, int, int]], params: PolicyParams, start: int
) -> None:
    # The first decision may pull a mapping found outside the bounds inside them.
    for decision, _ in run(algorithm_named(name), found, params, start):
        assert params.cmin <= decision.target <= params.cmax
        assert params.cmin <= decision.new_state.concurrency <= params.cmax


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=30)
@given(found=documents, start=st.integers(2, 100))
# A pause test clean in its own seconds, then a refused call from an invocation that started
# after its end (found by hypothesis: the adaptive law climbed on the test alone).
@example(
    found=[(71.0, 0, 20, 100), (87.5, 1, 0, 501), (90.0, 0, 1, 100), (110.0, 0, 0, 100)], start=2
)
def test_never_raises_on_evidence_of_pressure(
    name: str, found: list[tuple[float, int, int, int]], start: int
) -> None:
    for decision, evidence in run(algorithm_named(name), found, PARAMS, start):
        if decision.target > decision.previous:
            assert evidence.pressure_rate < PARAMS.t1


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=20)
@given(found=documents, start=st.integers(2, 100))
def test_never_probes_a_queue_with_nothing_waiting(
    name: str, found: list[tuple[float, int, int, int]], start: int
) -> None:
    steps = run(algorithm_named(name), found, PARAMS, start, backlog=waiting(0))
    assert not [decision for decision, _ in steps if decision.probes]


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=20)
@given(found=documents, start=st.integers(2, 100))
def test_the_same_inputs_give_the_same_decisions(
    name: str, found: list[tuple[float, int, int, int]], start: int
) -> None:
    first = run(algorithm_named(name), found, PARAMS, start)
    assert first == run(algorithm_named(name), found, PARAMS, start)


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=60, allow_nan=False),
            st.integers(0, 20),
            st.integers(0, 20),
        ),
        min_size=1,
        max_size=80,
    )
)
def test_one_cut_per_settle_period(name: str, found: list[tuple[float, int, int]]) -> None:
    """Whatever arrives, a second cut needs evidence from after the first one.

    A decrease that only takes back the raise just before it (a pulse probe's scheduled return
    to its base level, docs/algorithms.md) is not a cut: it rests on no evidence by design."""
    algorithm = algorithm_named(name)
    window = QueueWindow()
    current = state(100)
    cuts: list[float] = []
    raised_from: int | None = None
    for offset, ok, throttled in found:
        window.add(sample(at=1000 + offset, ok=ok, throttled=throttled, invocation_ms=300))
    for tick in range(0, 70, 2):
        now = 1000.0 + tick
        decision = decide(algorithm, current, config(), window, now, PARAMS)
        if decision.target > decision.previous:
            raised_from = decision.previous
        elif decision.target < decision.previous:
            if raised_from is None or decision.target < raised_from:
                cuts.append(now)
            raised_from = None
        current = decision.new_state
    for first, second in itertools.pairwise(cuts):
        evidence_between = window.stats(first + PARAMS.settle_margin_s, second + 1.0)
        assert evidence_between.requests >= PARAMS.min_samples
