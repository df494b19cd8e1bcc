"""The guards every algorithm shares, and the original rule's invariants."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import Action, Mode, QueueStateName
from controller.policy import ALGORITHMS, decide
from controller.policy.aimd import aimd_step
from controller.settings import PolicyParams
from controller.window import QueueWindow
from tests.factories import config, sample, state

PARAMS = PolicyParams()


def window_of(*samples_: object) -> QueueWindow:
    window = QueueWindow()
    for item in samples_:
        window.add(item)  # type: ignore[arg-type]
    return window


def storm(start: float, seconds: int = 10, queue: str = "orders") -> QueueWindow:
    return window_of(
        *(
            sample(queue, at=start + s + 0.9, ok=8, throttled=2, invocation_ms=500)
            for s in range(seconds)
        )
    )


def test_the_original_manual_sequence() -> None:
    first = aimd_step(state(100), 0.20, 0.80, PARAMS, now=1.0)
    assert (first.target, first.state, first.action) == (
        50,
        QueueStateName.THROTTLED,
        Action.MULTIPLICATIVE_DECREASE,
    )
    assert first.reason == (
        "HTTP 429 breach: Error rate 20.0% >= T1 (5.0%). Applied factor Beta=0.5. "
        "Scaled from 100 -> 50."
    )
    second = aimd_step(first.new_state, 0.20, 0.80, PARAMS, now=2.0)
    assert (second.target, second.state) == (25, QueueStateName.CRITICAL_BACKOFF)
    third = aimd_step(second.new_state, 0.01, 0.99, PARAMS, now=3.0)
    assert (third.target, third.state, third.action) == (
        30,
        QueueStateName.RECOVERING,
        Action.ADDITIVE_INCREASE,
    )


def test_recovery_reaches_healthy_at_cmax() -> None:
    decision = aimd_step(state(97, QueueStateName.RECOVERING), 0.0, 1.0, PARAMS, now=1.0)
    assert (decision.target, decision.state) == (100, QueueStateName.HEALTHY)


def test_no_decision_on_too_few_calls() -> None:
    window = window_of(sample(at=100.9, ok=1, throttled=5))
    decision = decide(ALGORITHMS["aimd"](), state(100), config(), window, 101.0, PARAMS)
    assert decision.action is Action.HOLD
    assert "Insufficient evidence" in decision.reason


def test_old_429s_cannot_halve_twice() -> None:
    """After a cut at t=110, a lagging stream of invocations that started before it is not
    evidence against the new concurrency."""
    cut = decide(ALGORITHMS["aimd"](), state(100), config(), storm(100), 110.0, PARAMS)
    assert cut.target == 50
    lagging = storm(100)
    for s in range(5):
        lagging.add(sample(at=109.0 + s, ok=0, throttled=10, invocation_ms=s * 1000 + 500))
    again = decide(ALGORITHMS["aimd"](), cut.new_state, config(), lagging, 115.0, PARAMS)
    assert again.action is Action.HOLD
    assert again.target == 50


def test_new_evidence_after_the_change_is_judged() -> None:
    cut = decide(ALGORITHMS["aimd"](), state(100), config(), storm(100), 110.0, PARAMS)
    window = storm(100)
    for s in range(6):
        window.add(sample(at=113.0 + s + 0.9, ok=8, throttled=2, invocation_ms=500))
    again = decide(ALGORITHMS["aimd"](), cut.new_state, config(), window, 120.0, PARAMS)
    assert again.target == 25
    assert again.state is QueueStateName.CRITICAL_BACKOFF


def test_holds_when_telemetry_stops() -> None:
    window = window_of(*(sample(at=100 + s + 0.9) for s in range(10)))
    decision = decide(ALGORITHMS["aimd"](), state(50), config(), window, 200.0, PARAMS)
    assert decision.action is Action.HOLD


def test_honours_retry_after_before_raising() -> None:
    window = window_of(
        *(sample(at=100 + s + 0.9, ok=8, throttled=2, retry_after_s=30) for s in range(10))
    )
    cut = decide(ALGORITHMS["aimd"](), state(100), config(), window, 110.0, PARAMS)
    assert cut.new_state.hold_until == 140.0
    healthy = window_of(*(sample(at=113 + s + 0.9, ok=10) for s in range(10)))
    early = decide(ALGORITHMS["aimd"](), cut.new_state, config(), healthy, 125.0, PARAMS)
    assert early.action is Action.HOLD
    assert "Retry-After" in early.reason
    later = window_of(*(sample(at=141 + s + 0.9, ok=10) for s in range(10)))
    raised = decide(ALGORITHMS["aimd"](), cut.new_state, config(), later, 152.0, PARAMS)
    assert raised.action is Action.ADDITIVE_INCREASE


def test_pinned_queues_are_never_moved() -> None:
    decision = decide(
        ALGORITHMS["aimd"](), state(40), config(mode=Mode.PINNED), storm(100), 110.0, PARAMS
    )
    assert decision.action is Action.HOLD
    assert decision.target == 40


def test_overridden_bounds_pull_the_mapping_inside() -> None:
    params = PARAMS.with_overrides({"cmax": 20})
    decision = decide(ALGORITHMS["aimd"](), state(100), config(), storm(100), 110.0, params)
    assert decision.target == 20


rates = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
concurrency = st.integers(min_value=2, max_value=100)


@settings(max_examples=300, deadline=None)
@given(concurrency, rates, rates, st.integers(0, 5))
def test_aimd_bounds_hold_and_pressure_never_raises(
    current: int, pressure: float, success: float, breaches: int
) -> None:
    before = state(current, breaches=breaches)
    decision = aimd_step(before, pressure, success, PARAMS, now=10.0)
    assert PARAMS.cmin <= decision.target <= PARAMS.cmax
    if pressure >= PARAMS.t1:
        assert decision.target <= current
        assert decision.state in (QueueStateName.THROTTLED, QueueStateName.CRITICAL_BACKOFF)
    assert decision == aimd_step(before, pressure, success, PARAMS, now=10.0)
    assert decision.reason


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=60, allow_nan=False),
            st.integers(0, 20),
            st.integers(0, 20),
        ),
        min_size=1,
        max_size=80,
    ),
    st.sampled_from(sorted(ALGORITHMS)),
)
def test_one_decrease_per_settle_period(
    documents: list[tuple[float, int, int]], algorithm_name: str
) -> None:
    """Whatever arrives, a second decrease needs evidence from after the first one."""
    algorithm = ALGORITHMS[algorithm_name]()
    window = QueueWindow()
    current = state(100)
    decreases: list[float] = []
    for offset, ok, throttled in documents:
        window.add(sample(at=1000 + offset, ok=ok, throttled=throttled, invocation_ms=300))
    for tick in range(0, 70, 2):
        now = 1000.0 + tick
        decision = decide(algorithm, current, config(), window, now, PARAMS)
        assert PARAMS.cmin <= decision.target <= PARAMS.cmax
        if decision.target < decision.previous:
            decreases.append(now)
        current = decision.new_state
    for first, second in itertools.pairwise(decreases):
        evidence_between = window.stats(first + PARAMS.settle_margin_s, second + 1.0)
        assert evidence_between.requests >= PARAMS.min_samples
