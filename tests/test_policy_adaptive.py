"""The adaptive limit algorithm: its steps one by one, and invariants under any evidence."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import Action, Decision, QueueState, Sample
from controller.policy import ALGORITHMS, decide, evidence_since
from controller.policy.adaptive import AdaptiveLimit
from controller.settings import PolicyParams
from controller.window import QueueWindow, WindowStats
from tests.factories import config, sample, state

PARAMS = PolicyParams()
ALGORITHM = AdaptiveLimit()


def attached(concurrency: int, at: float = 900.0, **memory: object) -> QueueState:
    """A queue the algorithm has run for a while, last changed at ``at``."""
    return state(concurrency, last_change_at=at).evolve(good_level=concurrency, **memory)


def window_of(*documents: Sample) -> QueueWindow:
    window = QueueWindow()
    for document in documents:
        window.add(document)
    return window


def steady(
    start: float, seconds: int, per_second: int, ok: int, throttled: int = 0
) -> list[Sample]:
    """``per_second`` invocations of 800 ms starting in each second from ``start``."""
    return [
        sample(at=start + second + 0.9, ok=ok, throttled=throttled, invocation_ms=800)
        for second in range(seconds)
        for _ in range(per_second)
    ]


def run(current: QueueState, window: QueueWindow, now: float) -> tuple[QueueState, Decision]:
    decision = decide(ALGORITHM, current, config(), window, now, PARAMS)
    return decision.new_state, decision


def test_it_is_registered_and_keeps_the_original_rule_available() -> None:
    assert ALGORITHMS["adaptive"] is AdaptiveLimit
    assert "aimd" in ALGORITHMS


def test_a_new_queue_is_attached_at_a_modest_level_at_once() -> None:
    decision = decide(ALGORITHM, state(100), config(), QueueWindow(), 1000.0, PARAMS)
    assert (decision.action, decision.target) == (Action.MULTIPLICATIVE_DECREASE, 5)
    assert decision.reason.startswith("Attaching")


def test_no_telemetry_since_the_last_change_holds() -> None:
    decision = decide(ALGORITHM, attached(20), config(), QueueWindow(), 1000.0, PARAMS)
    assert decision.action is Action.HOLD
    assert decision.target == 20


def test_a_storm_is_cut_in_proportion_to_the_accepted_share_in_one_step() -> None:
    # 20 invocations in use, three quarters of their calls rejected: about 5 fit.
    window = window_of(*steady(960, 30, 25, ok=3, throttled=7))
    decision = decide(ALGORITHM, attached(20), config(), window, 992.0, PARAMS)
    assert decision.action is Action.MULTIPLICATIVE_DECREASE
    assert 2 <= decision.target <= 6
    assert decision.new_state.ceiling == decision.target + 1


def test_clean_and_fully_used_it_grows_and_idle_it_holds() -> None:
    busy = window_of(*steady(960, 30, 13, ok=10))
    grown = decide(ALGORITHM, attached(10), config(), busy, 992.0, PARAMS)
    assert grown.action is Action.ADDITIVE_INCREASE and grown.target > 10
    idle = window_of(*steady(960, 30, 2, ok=10))
    held = decide(ALGORITHM, attached(10), config(), idle, 992.0, PARAMS)
    assert held.action is Action.HOLD
    assert "not used" in held.reason


def test_a_pulse_probe_raises_reverts_and_commits_when_clean() -> None:
    current = attached(8, ceiling=9)
    window = window_of(*steady(960, 30, 10, ok=10))
    current, raised = run(current, window, 992.0)
    assert (raised.action, raised.target) == (Action.ADDITIVE_INCREASE, 9)
    assert current.probe_until == 992.0 + ALGORITHM.pulse_s
    current, reverted = run(current, window, 993.0)
    assert reverted.target == 8
    assert current.judge_at == 993.0 + ALGORITHM.judge_after_s
    for document in steady(992, 8, 11, ok=10):
        window.add(document)
    current, verdict = run(current, window, 999.5)
    assert (verdict.action, verdict.target) == (Action.ADDITIVE_INCREASE, 9)
    assert current.ceiling == 10


def test_a_failed_probe_backs_off_and_remembers_the_ceiling() -> None:
    current = attached(8, ceiling=9)
    window = window_of(*steady(960, 30, 10, ok=10))
    current, _ = run(current, window, 992.0)
    current, _ = run(current, window, 993.0)
    for document in steady(992, 1, 11, ok=7, throttled=3):
        window.add(document)
    for document in steady(993, 7, 10, ok=10):
        window.add(document)
    current, verdict = run(current, window, 999.5)
    assert verdict.action is Action.HOLD
    assert current.concurrency == 8 and current.ceiling == 9
    assert current.next_probe_at > 999.5 + ALGORITHM.probe_backoff_s[0] * 0.5
    current, later = run(current, window, 1001.0)
    assert later.action is Action.HOLD
    assert "next probe" in later.reason


def test_overload_at_the_floor_pauses_then_tests_and_resumes() -> None:
    current = attached(2)
    storm = window_of(*steady(960, 30, 3, ok=2, throttled=8))
    current, paused = run(current, storm, 992.0)
    assert paused.action is Action.PAUSE and paused.enabled is False
    assert current.wake_at == 992.0 + ALGORITHM.pause_s[0]
    current, waiting = run(current, storm, 1000.0)
    assert waiting.action is Action.HOLD and not current.enabled
    test_at = current.paused_until
    current, testing = run(current, storm, test_at)
    assert testing.action is Action.RESUME and testing.enabled
    current, _ = run(current, storm, test_at + ALGORITHM.pulse_s)
    assert not current.enabled and current.judge_at > 0
    for document in steady(int(test_at), 2, 3, ok=10):
        storm.add(document)
    current, resumed = run(current, storm, current.judge_at)
    assert resumed.action is Action.RESUME and resumed.enabled
    assert current.paused_until == 0 and current.enabled


# --- invariants ------------------------------------------------------------------------
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


def replay(
    found: list[tuple[float, int, int, int]], params: PolicyParams, start: int
) -> list[tuple[Decision, WindowStats]]:
    """Decide once a second while the documents arrive; each decision with the evidence since
    the last change (and its settle margin) as it stood when the decision was made."""
    window = QueueWindow()
    current = state(start)
    pending = sorted(found)
    steps = []
    for tick in range(0, 130):
        now = 1000.0 + tick
        while pending and pending[0][0] + 1000.0 <= now:
            offset, ok, throttled, duration = pending.pop(0)
            window.add(
                sample(at=1000.0 + offset, ok=ok, throttled=throttled, invocation_ms=duration)
            )
        evidence = window.stats(evidence_since(current, now, params), now + 1.0)
        decision = decide(ALGORITHM, current, config(), window, now, params)
        steps.append((decision, evidence))
        current = decision.new_state
    return steps


@settings(max_examples=40, deadline=None)
@given(documents, bounds, st.integers(2, 100))
def test_bounds_always_hold(
    found: list[tuple[float, int, int, int]], params: PolicyParams, start: int
) -> None:
    steps = replay(found, params, start)
    # The first decision may pull a mapping found outside the bounds inside them.
    for decision, _ in steps:
        assert params.cmin <= decision.target <= params.cmax


@settings(max_examples=40, deadline=None)
@given(documents, st.integers(2, 100))
def test_never_raises_on_evidence_of_pressure(
    found: list[tuple[float, int, int, int]], start: int
) -> None:
    for decision, evidence in replay(found, PARAMS, start):
        if decision.target > decision.previous:
            assert evidence.pressure_rate < PARAMS.t1


@settings(max_examples=30, deadline=None)
@given(documents, st.integers(2, 100))
def test_the_same_inputs_give_the_same_decisions(
    found: list[tuple[float, int, int, int]], start: int
) -> None:
    assert replay(found, PARAMS, start) == replay(found, PARAMS, start)
