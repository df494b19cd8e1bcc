"""The adaptive limit algorithm: its steps one by one (the invariants every algorithm keeps
are in test_algorithm_contract.py)."""

from __future__ import annotations

from controller.model import Action, Decision, QueueState, Sample
from controller.policy import ALGORITHMS, decide
from controller.policy.adaptive import AdaptiveLimit, AdaptiveMemory
from controller.settings import PolicyParams
from controller.window import QueueWindow
from tests.factories import config, sample, state

PARAMS = PolicyParams()
ALGORITHM = AdaptiveLimit()


def attached(concurrency: int, at: float = 900.0, **memory: object) -> QueueState:
    """A queue the algorithm has run for a while, last changed at ``at``."""
    record = AdaptiveMemory(good_level=concurrency, **memory)  # type: ignore[arg-type]
    return state(concurrency, last_change_at=at).evolve(algorithm="adaptive", memory=record)


def memory_of(current: QueueState) -> AdaptiveMemory:
    assert isinstance(current.memory, AdaptiveMemory)
    return current.memory


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
    assert memory_of(decision.new_state).ceiling == decision.target + 1


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
    assert memory_of(current).probe_until == 992.0 + ALGORITHM.pulse_s
    current, reverted = run(current, window, 993.0)
    assert reverted.target == 8
    assert memory_of(current).judge_at == 993.0 + ALGORITHM.judge_after_s
    for document in steady(992, 8, 11, ok=10):
        window.add(document)
    current, verdict = run(current, window, 999.5)
    assert (verdict.action, verdict.target) == (Action.ADDITIVE_INCREASE, 9)
    assert memory_of(current).ceiling == 10


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
    assert current.concurrency == 8 and memory_of(current).ceiling == 9
    assert memory_of(current).next_probe_at > 999.5 + ALGORITHM.probe_backoff_s[0] * 0.5
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
    test_at = memory_of(current).paused_until
    current, testing = run(current, storm, test_at)
    assert testing.action is Action.RESUME and testing.enabled
    current, _ = run(current, storm, test_at + ALGORITHM.pulse_s)
    assert not current.enabled and memory_of(current).judge_at > 0
    for document in steady(int(test_at), 2, 3, ok=10):
        storm.add(document)
    current, resumed = run(current, storm, memory_of(current).judge_at)
    assert resumed.action is Action.RESUME and resumed.enabled
    assert memory_of(current).paused_until == 0 and current.enabled


def test_memory_kept_under_another_algorithm_is_not_read() -> None:
    """A queue whose algorithm changes starts that algorithm fresh."""
    window = window_of(*steady(960, 30, 10, ok=10))
    near_ceiling = attached(8, ceiling=9)
    probed = decide(ALGORITHM, near_ceiling, config(), window, 992.0, PARAMS)
    assert probed.target == 9  # a pulse probe just under the remembered ceiling
    foreign = near_ceiling.evolve(algorithm="aimd")
    grown = decide(ALGORITHM, foreign, config(), window, 992.0, PARAMS)
    assert grown.target == 8 * ALGORITHM.first_growth  # no ceiling known: a first growth
    assert grown.new_state.algorithm == "adaptive"
    assert memory_of(grown.new_state).ceiling == 0


def test_growth_waits_out_retry_after() -> None:
    window = window_of(*steady(960, 30, 13, ok=10))
    held = attached(10).evolve(hold_until=1000.0)
    decision = decide(ALGORITHM, held, config(), window, 992.0, PARAMS)
    assert (decision.action, decision.target) == (Action.HOLD, 10)
    assert "Retry-After" in decision.reason
    assert decision.new_state.memory == held.memory
