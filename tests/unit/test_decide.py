"""The guards every algorithm shares, the situation they hand an algorithm, and the original
rule (``aimd``) with the operator's manual evaluation."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import Action, Backlog, Decision, Mode, QueueState, QueueStateName
from controller.policy import (
    ALGORITHMS,
    EvidenceJudge,
    LimitAlgorithm,
    Situation,
    Verdict,
    decide,
    evaluate_manually,
)
from controller.policy.base import NoMemory
from controller.policy.guards import decision_from
from controller.policy.vegas import VegasMemory
from controller.settings import PolicyParams
from controller.window import QueueWindow
from tests.factories import config, sample, state, waiting

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


def manually(
    before: QueueState, pressure: float, success: float, now: float, mode: Mode = Mode.ACTIVE
) -> Decision:
    return evaluate_manually(before, config(mode=mode), pressure, success, now, PARAMS)


def test_the_original_manual_sequence() -> None:
    first = manually(state(100), 0.20, 0.80, now=1.0)
    assert (first.target, first.state, first.action) == (
        50,
        QueueStateName.THROTTLED,
        Action.MULTIPLICATIVE_DECREASE,
    )
    assert first.reason == (
        "HTTP 429 breach: Error rate 20.0% >= T1 (5.0%). Applied factor Beta=0.5. "
        "Scaled from 100 -> 50."
    )
    second = manually(first.new_state, 0.20, 0.80, now=2.0)
    assert (second.target, second.state) == (25, QueueStateName.CRITICAL_BACKOFF)
    third = manually(second.new_state, 0.01, 0.99, now=3.0)
    assert (third.target, third.state, third.action) == (
        30,
        QueueStateName.RECOVERING,
        Action.ADDITIVE_INCREASE,
    )


def test_recovery_reaches_healthy_at_cmax() -> None:
    decision = manually(state(97, QueueStateName.RECOVERING), 0.0, 1.0, now=1.0)
    assert (decision.target, decision.state) == (100, QueueStateName.HEALTHY)


def test_manual_evaluation_holds_a_pinned_queue_as_decide_does() -> None:
    pinned = manually(state(40), 0.9, 0.1, now=5.0, mode=Mode.PINNED)
    assert (pinned.action, pinned.target) == (Action.HOLD, 40)
    assert pinned.reason == "Pinned by operator at 40; not adjusting."
    by_decide = decide(
        ALGORITHMS["aimd"](), state(40), config(mode=Mode.PINNED), storm(0), 5.0, PARAMS
    )
    assert pinned == by_decide


def test_manual_evaluation_keeps_whatever_memory_the_queue_holds() -> None:
    remembered = VegasMemory(estimated_limit=50.0, rtt_noload_ms=80.0)
    before = state(50).evolve(algorithm="vegas", memory=remembered)
    decision = manually(before, 0.2, 0.8, now=5.0)
    assert decision.target == 25
    assert (decision.new_state.algorithm, decision.new_state.memory) == ("vegas", remembered)


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


@settings(max_examples=300)
@given(concurrency, rates, rates, st.integers(0, 5))
def test_aimd_bounds_hold_and_pressure_never_raises(
    current: int, pressure: float, success: float, breaches: int
) -> None:
    before = state(current, breaches=breaches)
    decision = manually(before, pressure, success, now=10.0)
    assert PARAMS.cmin <= decision.target <= PARAMS.cmax
    if pressure >= PARAMS.t1:
        assert decision.target <= current
        assert decision.state in (QueueStateName.THROTTLED, QueueStateName.CRITICAL_BACKOFF)
    assert decision == manually(before, pressure, success, now=10.0)
    assert decision.reason


class Reckless(EvidenceJudge[NoMemory]):
    """Asks for ``wanted`` whatever the evidence says: what is left is the guards' doing."""

    name = "reckless"

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted

    def judge(self, situation: Situation[NoMemory]) -> Verdict[NoMemory]:
        reason = f"Wants {self.wanted}."
        state = situation.state
        return Verdict(
            self.wanted, state.state, reason, situation.memory, wake_at=situation.now + 1
        )


class Witness(LimitAlgorithm[NoMemory]):
    """Holds, and keeps the situation it was handed."""

    name = "witness"

    def __init__(self) -> None:
        self.seen: list[Situation[NoMemory]] = []

    def decide(self, situation: Situation[NoMemory]) -> Verdict[NoMemory]:
        self.seen.append(situation)
        state = situation.state
        return Verdict(state.concurrency, state.state, "Seen.", situation.memory)


def test_the_situation_is_frozen_and_outlives_the_window() -> None:
    window = window_of(*(sample(at=100 + s + 0.9, ok=9, throttled=1) for s in range(10)))
    witness = Witness()
    decide(witness, state(50), config(), window, 110.0, PARAMS)
    (seen,) = witness.seen
    assert (seen.stats.requests, seen.stats.pressure, seen.refusal) == (100, 10, None)
    assert (seen.now, seen.params, seen.memory) == (110.0, PARAMS, NoMemory())
    second, bucket = seen.window.seconds(100.0, 101.0)[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        seen.stats.requests = 0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        bucket.requests = 0  # type: ignore[misc]
    # Telemetry that arrives later changes the window, not what the decision was shown.
    window.add(sample(at=100.9, ok=0, throttled=10))
    assert (second, bucket.requests) == (100, 10)
    assert seen.window.stats(0.0, 200.0).requests == 100
    assert window.stats(0.0, 200.0).requests == 110


def test_a_refused_evidence_is_handed_over_with_its_reason() -> None:
    witness = Witness()
    decide(witness, state(50), config(), window_of(sample(at=100.9)), 101.0, PARAMS)
    (seen,) = witness.seen
    assert seen.refusal is not None
    assert seen.refusal.reason.startswith("Insufficient evidence: 10 calls")


def test_a_verdict_outside_the_bounds_is_clamped() -> None:
    healthy = window_of(*(sample(at=100 + s + 0.9, ok=10) for s in range(10)))
    raised = decide(Reckless(5000), state(50), config(), healthy, 110.0, PARAMS)
    assert (raised.target, raised.new_state.concurrency) == (PARAMS.cmax, PARAMS.cmax)
    cut = decide(Reckless(0), state(50), config(), healthy, 110.0, PARAMS)
    assert (cut.target, cut.action) == (PARAMS.cmin, Action.MULTIPLICATIVE_DECREASE)


def test_refused_evidence_holds_before_judge_is_asked() -> None:
    decision = decide(Reckless(80), state(50), config(), QueueWindow(), 110.0, PARAMS)
    assert decision.action is Action.HOLD
    assert decision.reason.startswith("No telemetry since the last change")


def test_retry_after_holds_any_algorithms_raise() -> None:
    held = state(50).evolve(hold_until=130.0)
    healthy = window_of(*(sample(at=100 + s + 0.9, ok=10) for s in range(10)))
    decision = decide(Reckless(80), held, config(), healthy, 110.0, PARAMS)
    assert (decision.action, decision.target) == (Action.HOLD, 50)
    assert "Retry-After" in decision.reason
    assert decision.new_state.wake_at == held.wake_at  # the raise's other wishes are dropped


def test_an_empty_queue_holds_any_algorithms_raise() -> None:
    healthy = window_of(*(sample(at=100 + s + 0.9, ok=10) for s in range(10)))
    before = state(50).evolve(algorithm="reckless", memory=NoMemory())
    decision = decide(Reckless(80), before, config(), healthy, 110.0, PARAMS, backlog=waiting(0))
    assert (decision.action, decision.target) == (Action.HOLD, 50)
    assert decision.reason == "Nothing waiting in the queue: no raise to 80; holding at 50."
    assert decision.new_state.wake_at == before.wake_at  # the raise's other wishes are dropped
    assert decision.new_state.memory is before.memory
    assert not decision.probes


def test_an_empty_queue_is_raised_where_the_raise_restores_a_level_that_fits() -> None:
    class Restoring(Reckless):
        def judge(self, situation: Situation[NoMemory]) -> Verdict[NoMemory]:
            return dataclasses.replace(super().judge(situation), restores=True)

    healthy = window_of(*(sample(at=100 + s + 0.9, ok=10) for s in range(10)))
    decision = decide(Restoring(80), state(50), config(), healthy, 110.0, PARAMS, waiting(0))
    assert (decision.action, decision.target) == (Action.ADDITIVE_INCREASE, 80)
    assert decision.restores and not decision.probes


@pytest.mark.parametrize("visible", [None, 1, 5000])
def test_a_queue_with_messages_waiting_or_unknown_is_raised(visible: int | None) -> None:
    healthy = window_of(*(sample(at=100 + s + 0.9, ok=10) for s in range(10)))
    backlog = None if visible is None else waiting(visible)
    decision = decide(Reckless(80), state(50), config(), healthy, 110.0, PARAMS, backlog=backlog)
    assert (decision.action, decision.target, decision.probes) == (
        Action.ADDITIVE_INCREASE,
        80,
        True,
    )


def test_an_empty_queue_is_still_cut_and_kept_within_bounds() -> None:
    cut = decide(Reckless(20), state(50), config(), storm(100), 110.0, PARAMS, backlog=waiting(0))
    assert (cut.action, cut.target) == (Action.MULTIPLICATIVE_DECREASE, 20)
    below = decide(Reckless(20), state(1), config(), storm(100), 110.0, PARAMS, backlog=waiting(0))
    assert below.target == PARAMS.cmin
    assert below.reason.startswith("Bounds are")


def test_the_situation_carries_the_backlog() -> None:
    seen: list[Backlog | None] = []

    class Watching(Reckless):
        def judge(self, situation: Situation[NoMemory]) -> Verdict[NoMemory]:
            seen.append(situation.backlog)
            return super().judge(situation)

    healthy = window_of(*(sample(at=100 + s + 0.9, ok=10) for s in range(10)))
    backlogs = [None, waiting(0), waiting(7, visibility_timeout_s=45.0)]
    for backlog in backlogs:
        decide(Watching(80), state(50), config(), healthy, 110.0, PARAMS, backlog=backlog)
    assert seen == backlogs


def test_a_cut_on_evidence_with_retry_after_holds_raises_until_it_passes() -> None:
    window = window_of(*(sample(at=100 + s + 0.9, retry_after_s=30) for s in range(10)))
    decision = decide(Reckless(20), state(50), config(), window, 110.0, PARAMS)
    assert decision.new_state.hold_until == 140.0


def test_the_verdict_names_the_action_and_keeps_the_algorithms_memory() -> None:
    healthy = window_of(*(sample(at=100 + s + 0.9, ok=10) for s in range(10)))
    decision = decide(Reckless(80), state(50), config(), healthy, 110.0, PARAMS)
    assert decision.action is Action.ADDITIVE_INCREASE
    assert (decision.new_state.algorithm, decision.new_state.memory) == ("reckless", NoMemory())
    assert decision.new_state.last_change_at == 110.0
    assert decision.new_state.previous_concurrency == 50
    assert decision.new_state.wake_at == 111.0


# -- how long a queue has been paused: from its first disabling through its test pulses ------
PAUSED_AT = 5_000.0


def _step(state: QueueState, now: float, enabled: bool | None, wake_at: float) -> QueueState:
    """``state`` after a verdict that sets ``enabled`` (None: unchanged) and ``wake_at``."""
    verdict = Verdict(
        state.concurrency,
        QueueStateName.CRITICAL_BACKOFF,
        "pause cycle",
        NoMemory(),
        enabled=enabled,
        wake_at=wake_at,
    )
    return decision_from(state, verdict, now).new_state


def test_a_pause_lasts_from_the_first_disabling_through_its_test_pulses() -> None:
    running = QueueState("orders", "esm-orders", QueueStateName.THROTTLED, 2, 4)
    paused = _step(running, PAUSED_AT, False, PAUSED_AT + 15)
    assert paused.paused_since == PAUSED_AT
    held = _step(paused, PAUSED_AT + 10, None, PAUSED_AT + 15)
    pulse = _step(held, PAUSED_AT + 15, True, PAUSED_AT + 20)
    again = _step(pulse, PAUSED_AT + 20, False, PAUSED_AT + 80)
    assert held.paused_since == pulse.paused_since == again.paused_since == PAUSED_AT
    # Enabled with no wake-up wanted: the queue runs free again.
    resumed = _step(again, PAUSED_AT + 80, True, 0.0)
    assert resumed.paused_since == 0.0
    # An enabled queue that asks to be woken (a probe), never paused: not a pause.
    assert _step(running, PAUSED_AT, None, PAUSED_AT + 5).paused_since == 0.0
    # A mapping an operator disabled is held as it is: not the controller's pause.
    disabled = running.evolve(enabled=False)
    assert _step(disabled, PAUSED_AT, None, 0.0).paused_since == 0.0


@pytest.mark.parametrize(("level", "base"), [(9, 8), (7, 8)])
def test_a_probes_end_is_recorded_as_such_whichever_way_it_moves(level: int, base: int) -> None:
    # Back to the probe's base: lower after the pulse, or higher where a group cut the queue
    # during it; neither is a cut or a raise of the queue's own.
    current = state(level, QueueStateName.RECOVERING)
    verdict = Verdict(base, QueueStateName.RECOVERING, "pulse over", NoMemory(), ends_probe=True)
    ended = decision_from(current, verdict, 1000.0)
    assert (ended.action, ended.new_state.last_action) == (Action.PROBE_END, Action.PROBE_END)
    # The same move without a probe's end is a cut or a raise, and staying put a hold.
    plain = decision_from(current, dataclasses.replace(verdict, ends_probe=False), 1000.0)
    assert plain.action is (
        Action.MULTIPLICATIVE_DECREASE if base < level else Action.ADDITIVE_INCREASE
    )
    held = decision_from(current, dataclasses.replace(verdict, target=level), 1000.0)
    assert held.action is Action.HOLD
