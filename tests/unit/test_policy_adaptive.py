"""The adaptive limit algorithm: its steps one by one (the invariants every algorithm keeps
are in test_algorithm_contract.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import Action, Backlog, Decision, QueueState, Sample
from controller.policy import ALGORITHMS, decide
from controller.policy.adaptive import AdaptiveLimit, AdaptiveMemory
from controller.settings import PolicyParams
from controller.window import QueueWindow
from tests.factories import config, sample, state, waiting

PARAMS = PolicyParams()
ALGORITHM = AdaptiveLimit()
# The end of a pulse probe of one step raised at 992 (its shortest: past the poller's step).
PULSE_END = 992.0 + ALGORITHM.pulse_s + ALGORITHM.pulse_margin_s


def attached(concurrency: int, at: float = 900.0, **memory: object) -> QueueState:
    """A queue the algorithm has run for a while, last changed at ``at``."""
    record = AdaptiveMemory(**memory)  # type: ignore[arg-type]
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


def test_a_new_queue_is_not_cut_before_any_pressure() -> None:
    # Attaching to a mapping at 100 with nothing known: the poller's ramp is left alone.
    decision = decide(ALGORITHM, state(100), config(), QueueWindow(), 1000.0, PARAMS)
    assert (decision.action, decision.target) == (Action.HOLD, 100)


def test_a_healthy_queue_is_never_cut_below_its_use() -> None:
    # 40 invocations busy all the time under a cap of 50, every call answered: no cut, ever,
    # whatever the clean evidence looks like from one decision to the next.
    current = attached(50)
    window = window_of(*steady(900, 100, 40, ok=10))
    for now in range(905, 1000, 3):
        current, decision = run(current, window, float(now))
        assert decision.target >= 50, decision.reason


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
    current = attached(8, ceiling=9, broke_at=12)
    window = window_of(*steady(960, 30, 10, ok=10))
    current, raised = run(current, window, 992.0)
    assert (raised.action, raised.target) == (Action.ADDITIVE_INCREASE, 9)
    assert memory_of(current).probe_until == PULSE_END
    current, reverted = run(current, window, PULSE_END)
    # Back to the base, recorded as the probe's end, not as a cut (nothing was refused).
    assert (reverted.action, reverted.target) == (Action.PROBE_END, 8)
    assert current.last_action is Action.PROBE_END
    assert memory_of(current).judge_at == PULSE_END + ALGORITHM.judge_after_s
    for document in steady(992, 8, 11, ok=10):
        window.add(document)
    current, verdict = run(current, window, 999.5)
    # Clean at 9 (below the level that broke): 9 is the level, and the next probe, a step
    # twice as big, starts at once from it.
    assert (verdict.action, verdict.target) == (Action.ADDITIVE_INCREASE, 11)
    assert (memory_of(current).probe_base, memory_of(current).ceiling) == (9, 10)
    current, reverted = run(current, window, memory_of(current).probe_until)
    assert (reverted.action, reverted.target) == (Action.PROBE_END, 9)


def pulsed_from_8_to_9(**memory: object) -> tuple[QueueState, QueueWindow]:
    """A clean queue at 8 under a remembered ceiling of 9 (and ``memory``), just after a pulse
    probe raised it to 9 and put it back; nothing from the pulse has reported yet."""
    current = attached(8, ceiling=9, **memory)
    window = window_of(*steady(960, 30, 10, ok=10))
    current, _ = run(current, window, 992.0)
    current, _ = run(current, window, PULSE_END)
    return current, window


def test_a_pulse_of_small_batches_stands_until_it_can_have_made_enough_calls_to_judge() -> None:
    # Batches of 2 calls, 1.2 s an invocation: at 3, an invocation time's pulse makes about 10
    # calls, too few to judge, and failed so again and again. 3 invocations make 20 in 4 s.
    current = attached(2, ceiling=3)
    window = window_of(
        *[
            sample(at=960 + second + 0.9, ok=2, invocation_ms=1200)
            for second in range(30)
            for _ in range(2)
        ]
    )
    current, raised = run(current, window, 992.0)
    assert (raised.action, raised.target) == (Action.ADDITIVE_INCREASE, 3), raised.reason
    pulse = memory_of(current).probe_until - 992.0
    assert pulse * 3 * 2 / 1.2 >= PARAMS.min_samples, raised.reason


def test_a_failed_probe_backs_off_and_remembers_the_ceiling() -> None:
    current, window = pulsed_from_8_to_9()
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


def test_a_pause_test_that_saw_no_calls_tests_again_rather_than_resume() -> None:
    # Every message waited out its visibility timeout during the test (the refused ones of the
    # last test): nothing says Cmin fits now. Resumed, the queue would meet the same overload
    # a telemetry round trip long.
    current = attached(2)
    storm = window_of(*steady(960, 30, 3, ok=2, throttled=8))
    current, _ = run(current, storm, 992.0)
    test_at = memory_of(current).paused_until
    current, _ = run(current, storm, test_at)
    current, _ = run(current, storm, test_at + ALGORITHM.pulse_s)
    judged_at = memory_of(current).judge_at + PARAMS.stale_after_s
    current, verdict = run(current, storm, judged_at)
    assert verdict.action is Action.HOLD and not current.enabled
    assert "no calls" in verdict.reason
    assert memory_of(current).paused_until == judged_at + ALGORITHM.pause_s[0]
    assert current.wake_at == memory_of(current).paused_until


@settings(max_examples=25)
@given(cap=st.integers(20, 100), per_second=st.integers(1, 5))
def test_a_stream_that_keeps_few_invocations_busy_is_cut_from_what_it_runs(
    cap: int, per_second: int
) -> None:
    # A backlog drained at the start (the poller climbed, then ran down), then a stream that
    # keeps ``per_second`` invocations of 800 ms busy for minutes under a cap far above it,
    # until the downstream refuses 30% of its calls. It was read as a poller still climbing
    # since the start, and cut from the cap: 85 -> 74 -> 64 ... over minutes, refusing
    # meanwhile. What it runs sizes the cut.
    window = window_of(
        *steady(595, 5, 2, ok=10),
        *steady(600, 20, 40, ok=10),
        *steady(620, 282, per_second, ok=10),
        *steady(902, 30, per_second, ok=7, throttled=3),
    )
    decision = decide(ALGORITHM, attached(cap), config(), window, 932.0, PARAMS)
    assert decision.target <= max(PARAMS.cmin, per_second), decision.reason


def test_a_cap_filled_before_the_evidence_sizes_a_cut_on_newest_reports() -> None:
    # 24 invocations busy for the 30 s before the last change; since then only the first few
    # reports (telemetry up to 40 s late), 8% refused. Read on those alone, 24 running looked
    # like 2, and were cut to 2.
    window = window_of(
        *steady(862, 40, 30, ok=10),
        *steady(902, 8, 2, ok=92, throttled=8),
    )
    decision = decide(ALGORITHM, attached(24), config(), window, 932.0, PARAMS)
    assert decision.action is Action.MULTIPLICATIVE_DECREASE
    assert 18 <= decision.target < 24, decision.reason


def storm_accepting(per_100: int) -> QueueWindow:
    """30 s of a storm on a queue whose cap of 10 the poller fills: 10 invocations of 800 ms a
    second (8 in use), ``per_100`` of each second's 100 calls accepted."""
    return window_of(
        *steady(960, 30, per_100, ok=1, throttled=9),
        *steady(960, 30, 10 - per_100, ok=0, throttled=10),
    )


def test_a_cut_that_leaves_cmin_far_overloaded_pauses_at_once() -> None:
    # 2% accepted of 10 invocations fit 0.2 (pessimistically 0.17): Cmin (2) would draw about
    # 90% pressure, so the queue pauses at Cmin now rather than run it until fresh evidence
    # says so, and is tested at Cmin when the pause is over.
    current, paused = run(attached(10), storm_accepting(2), 992.0)
    assert (paused.action, paused.target, paused.enabled) == (Action.PAUSE, 2, False)
    assert current.wake_at == 992.0 + ALGORITHM.pause_s[0]
    current, testing = run(current, storm_accepting(2), memory_of(current).paused_until)
    assert (testing.action, testing.target, testing.enabled) == (Action.RESUME, 2, True)


def test_a_cut_that_leaves_cmin_narrowly_overloaded_runs_it() -> None:
    # 15% accepted fit 1.4: Cmin would draw about 30%, over the pause line, but the queue
    # runs at Cmin until its own evidence shows that.
    decision = decide(ALGORITHM, attached(10), config(), storm_accepting(15), 992.0, PARAMS)
    assert (decision.action, decision.target) == (Action.MULTIPLICATIVE_DECREASE, 2)
    assert decision.enabled


TEST_S = 3.0


def failed_test_periods(
    ok: int, throttled: int, tests: int = 4, test_s: float = TEST_S
) -> list[float]:
    """The pauses at the floor: the first, then one after each of ``tests`` failed tests whose
    invocations (3 a second from its start past its end) each met ``throttled`` 429s beside
    ``ok`` successes. Each test ends ``test_s`` after it began (at the first telemetry batch,
    where no wake-up ended it: a test lasts until its own first report), judged once its
    invocations have reported."""
    current = attached(2)
    storm = window_of(*steady(960, 30, 3, ok=2, throttled=8))
    current, _ = run(current, storm, 992.0)
    periods = [memory_of(current).pause_s]
    for _ in range(tests):
        test_at = memory_of(current).paused_until
        current, _ = run(current, storm, test_at)
        current, _ = run(current, storm, test_at + test_s)
        for document in steady(int(test_at), int(test_s) + 1, 3, ok=ok, throttled=throttled):
            storm.add(document)
        judged_at = memory_of(current).judge_at
        current, failed = run(current, storm, judged_at)
        assert failed.action is Action.HOLD and not current.enabled
        assert current.wake_at == memory_of(current).paused_until
        periods.append(memory_of(current).paused_until - judged_at)
    return periods


def test_failed_tests_at_the_floor_pause_for_longer_up_to_the_longest_period() -> None:
    # 80% rejected over a 10 s test (a test lasts until its first report): worth far more
    # than the longest pause, which the doubling reaches.
    periods = failed_test_periods(ok=2, throttled=8, tests=6, test_s=10.0)
    first, longest = ALGORITHM.pause_s[0], ALGORITHM.failed_test_pause_max_s
    assert 0.8 * 10.0 / ALGORITHM.pause_budget > longest
    doubling = [min(longest, first * 2**failed) for failed in range(len(periods))]
    assert periods == doubling and periods[-1] == longest


def test_a_floor_that_keeps_failing_is_tested_at_most_every_few_minutes() -> None:
    # A capacity under what Cmin sends for good (a cliff): every test refuses most of its
    # calls, and each refused message comes back to be refused again by the next test, on its
    # way to the dead-letter queue. Past the first doublings the tests are minutes apart.
    periods = failed_test_periods(ok=1, throttled=9, tests=6, test_s=20.0)
    assert periods[-1] >= 240.0


def test_a_narrowly_failed_test_pauses_only_as_long_as_its_cost_calls_for() -> None:
    # 20% rejected (a capacity just under what the floor sends): the test's waste is within
    # the budget after 0.2 x 3 s / pause_budget, and the floor is tested again then.
    periods = failed_test_periods(ok=8, throttled=2)
    enough = 0.2 * TEST_S / ALGORITHM.pause_budget
    first, longest = ALGORITHM.pause_s[0], ALGORITHM.failed_test_pause_max_s
    assert first < enough < longest
    assert periods == pytest.approx([first] + [enough] * 4)


def test_memory_kept_under_another_algorithm_is_not_read() -> None:
    """A queue whose algorithm changes starts that algorithm fresh."""
    window = window_of(*steady(960, 30, 10, ok=10))
    near_ceiling = attached(8, ceiling=9)
    probed = decide(ALGORITHM, near_ceiling, config(), window, 992.0, PARAMS)
    assert probed.target == 9  # a pulse probe just under the remembered ceiling
    foreign = near_ceiling.evolve(algorithm="aimd")
    grown = decide(ALGORITHM, foreign, config(), window, 992.0, PARAMS)
    assert grown.target == 8 * ALGORITHM.max_growth  # no ceiling known: full speed
    assert grown.new_state.algorithm == "adaptive"
    assert memory_of(grown.new_state).ceiling == 0


def test_growth_waits_out_retry_after() -> None:
    window = window_of(*steady(960, 30, 13, ok=10))
    held = attached(10).evolve(hold_until=1000.0)
    decision = decide(ALGORITHM, held, config(), window, 992.0, PARAMS)
    assert (decision.action, decision.target) == (Action.HOLD, 10)
    assert "Retry-After" in decision.reason
    assert decision.new_state.memory == held.memory


def test_a_clean_level_at_the_ceiling_that_broke_expires_it_and_growth_reaches_the_cap() -> None:
    # Cut from 40 to 9 (ceiling 10); the capacity is back. Probes pass up to 40, then the
    # ceiling is gone and growth keeps up with the poller: the cap within a bounded number of
    # decisions.
    current = attached(9, at=0.0, ceiling=10, broke_at=40)
    now = 1000.0
    for _ in range(40):
        window = window_of(*steady(now - 30, 30, current.concurrency + 2, ok=10))
        current, _ = run(current, window, now)
        now += 3.0
        if current.concurrency == PARAMS.cmax and memory_of(current).probe_until == 0:
            break
    assert current.concurrency == PARAMS.cmax
    assert memory_of(current).ceiling == 0


def passed_above_the_level_that_broke(refused: bool) -> tuple[QueueState, Decision]:
    """Cut from 9 to 8 (by 429s, or not: ``refused``): clean pulses at 9, then at 13 (half
    the level more: past the level that broke, no gap to halve)."""
    current = attached(8, ceiling=9, broke_at=9, ceiling_refused=refused)
    window = window_of(*steady(960, 30, 10, ok=10))
    now = 992.0
    for level in (9, 13):
        current, raised = run(current, window, now)
        assert raised.target == level, raised.reason
        for document in steady(int(now), 7, level + 1, ok=10):
            window.add(document)
        now = memory_of(current).probe_until
        current, _ = run(current, window, now)
        now += 6.5
    return run(current, window, now)


def test_past_a_ceiling_set_by_429s_growth_goes_on_by_judged_pulses() -> None:
    # A capacity back in part: a committed doubling (13 -> 26) would meet its 429s for a
    # telemetry round trip; a pulse meets them for about one invocation time.
    current, verdict = passed_above_the_level_that_broke(refused=True)
    assert (verdict.action, verdict.target) == (Action.ADDITIVE_INCREASE, 19), verdict.reason
    assert memory_of(current).probe_base == 13 and memory_of(current).probe_until > 0


def test_past_a_ceiling_set_by_latency_growth_returns_to_full_speed() -> None:
    current, verdict = passed_above_the_level_that_broke(refused=False)
    assert (verdict.action, verdict.target) == (Action.ADDITIVE_INCREASE, 26), verdict.reason
    assert memory_of(current).ceiling == 0 and memory_of(current).probe_until == 0.0


def test_a_ceiling_set_by_429s_is_remembered_as_refused() -> None:
    current, cut = run(
        attached(40, at=0.0), window_of(*steady(960, 30, 40, ok=7, throttled=3)), 992.0
    )
    assert cut.action is Action.MULTIPLICATIVE_DECREASE and memory_of(current).ceiling_refused


def storm_seconds(start: int, per_second: int, ok: int, throttled: int) -> list[Sample]:
    """``per_second`` invocations of 800 ms started in second ``start``."""
    return [
        sample(at=start + 0.9, ok=ok, throttled=throttled, invocation_ms=800)
        for _ in range(per_second)
    ]


def test_a_cut_on_a_storm_s_first_reports_is_corrected_on_the_rest() -> None:
    # At 20 and saturated; the capacity falls at 1000. The first reports of the storm (the
    # calls made early in second 1000) show 20% rejected: a cut to that share, to 15.
    current = attached(20, at=0.0)
    window = window_of(*steady(960, 40, 20, ok=10))
    for document in storm_seconds(1000, 10, ok=8, throttled=2):
        window.add(document)
    current, first = run(current, window, 1002.0)
    assert (first.action, first.target) == (Action.MULTIPLICATIVE_DECREASE, 15)
    # The rest of the invocations that started before the cut report 80-90% rejected: the cut
    # is made again on them at once, without waiting for evidence from after it.
    for document in storm_seconds(1000, 10, ok=1, throttled=9):
        window.add(document)
    for document in storm_seconds(1001, 20, ok=2, throttled=8):
        window.add(document)
    _, corrected = run(current, window, 1003.0)
    assert corrected.action is Action.MULTIPLICATIVE_DECREASE
    assert corrected.target <= 4 and corrected.reason.startswith("Correcting the cut")
    # Past the correction period, but with no report newer than the storm's: the telemetry
    # trails by 9 s, so these are still the cut's own reports arriving, and they correct it.
    _, trailing = run(current, window, 1002.0 + ALGORITHM.correction_s + 1.0)
    assert trailing.reason.startswith("Correcting the cut")
    # Too late for a correction: reports from after the cut have come in (the telemetry
    # trails by a second), and the correction period past that lag is over.
    window.add(sample(at=1010.9, ok=1, invocation_ms=800))
    _, late = run(current, window, 1002.0 + ALGORITHM.correction_s + 2.0)
    assert late.action is Action.HOLD


def test_a_correction_keeps_a_level_the_storm_s_full_reports_say_fits() -> None:
    # Cut from 16 to 8 on a storm's first reports. The rest of them show half of 16
    # invocations' calls refused: 8 fit. Sized pessimistically (a standard error under it,
    # rounded down) that is 7, but 8 is already what the reports fit, and 7 would leave a
    # probe's backoff of the capacity unused; a storm twice as strong is still corrected.
    def corrected(throttled: int) -> Decision:
        current = attached(
            8,
            at=1002.0,
            cut_at=1002.0,
            cut_evidence_since=1000.0,
            cut_requests=100,
            cut_running=16.0,
        )
        window = window_of(*steady(960, 40, 16, ok=10))
        for second in (1000, 1001):
            for document in storm_seconds(second, 12, ok=10 - throttled, throttled=throttled):
                window.add(document)
        _, decision = run(current, window, 1003.0)
        return decision

    held = corrected(throttled=5)
    assert (held.action, held.target) == (Action.HOLD, 8), held.reason
    deeper = corrected(throttled=6)
    assert deeper.reason.startswith("Correcting the cut"), deeper.reason
    assert deeper.target == 5


def test_a_second_storm_inside_a_correction_s_period_is_cut_at_once() -> None:
    # Corrected to 20 at 1002 on 6,000 calls of a storm: 40 invocations in use, half their
    # calls refused. The capacity falls again at 1000: the reports of seconds 1000 and 1001,
    # among those from before the correction, show 90% refused, where about 3 fit. The
    # correction waits for twice the calls it was sized on, the guards for invocations
    # started after it, a telemetry round trip more of the storm; that second storm is cut
    # now. One that fits more than half the level still waits for its evidence.
    def corrected(ok: int) -> Decision:
        current = attached(
            20,
            at=1002.0,
            cut_at=1002.0,
            cut_evidence_since=980.0,
            cut_requests=6000,
            cut_running=40.0,
            ceiling=21,
            broke_at=40,
        )
        window = window_of(*steady(980, 20, 40, ok=5, throttled=5))
        for second in (1000, 1001):
            for document in storm_seconds(second, 6, ok=ok, throttled=10 - ok):
                window.add(document)
        _, decision = run(current, window, 1004.0)
        return decision

    second_storm = corrected(ok=1)
    assert second_storm.action is Action.MULTIPLICATIVE_DECREASE, second_storm.reason
    assert second_storm.target <= 4 and second_storm.reason.startswith("Correcting the cut")
    weaker = corrected(ok=3)
    assert (weaker.action, weaker.target) == (Action.HOLD, 20), weaker.reason


def test_a_cut_the_storm_s_full_reports_show_landed_low_is_raised_to_what_they_fit() -> None:
    # Cut from 16 to 3 on first reports that showed a few of the invocations in use. The rest
    # of them show 16 invocations a second, half their calls refused: about 6 fit, more than
    # one level over 3, and the cut is made again, up, still under the level that broke.
    def cut_to_3(ceiling: int) -> QueueState:
        return attached(
            3,
            at=1002.0,
            cut_at=1002.0,
            cut_evidence_since=1000.0,
            cut_requests=100,
            cut_running=4.0,
            ceiling=ceiling,
            broke_at=16,
        )

    window = window_of(*steady(960, 40, 16, ok=10))
    for second in (1000, 1001):
        for document in storm_seconds(second, 16, ok=5, throttled=5):
            window.add(document)
    raised, decision = run(cut_to_3(ceiling=4), window, 1003.0)
    assert decision.reason.startswith("Correcting the cut up"), decision.reason
    assert 3 + 1 < decision.target < 16
    assert memory_of(raised).ceiling == decision.target + 1
    assert memory_of(raised).broke_at == 16
    # A level the cut did not set (its ceiling is over another: a group's share since) is
    # not the law's to raise.
    _, shared = run(cut_to_3(ceiling=9), window, 1003.0)
    assert shared.target <= 3, shared.reason
    # Nothing visible in the queue (the messages the storm refused wait out their visibility
    # timeout) does not hold it: it is no probe, and they come back to the level it sets.
    emptied = decide(ALGORITHM, cut_to_3(ceiling=4), config(), window, 1003.0, PARAMS, waiting(0))
    assert (emptied.target, emptied.reason) == (decision.target, decision.reason)
    assert emptied.restores and not emptied.probes


def poller_climb(start: int, seconds: int) -> list[Sample]:
    """Clean invocations of 800 ms started by a poller climbing from ``start``: 5 in its
    first second, 5 more in each one after, for ``seconds`` seconds."""
    return [
        sample(at=start + second + 0.9, ok=10, invocation_ms=800)
        for second in range(seconds)
        for _ in range(5 + 5 * second)
    ]


def test_the_first_cut_counts_the_invocations_the_poller_has_added_since_its_reports() -> None:
    # A mapping at 100 the poller is still climbing (5 more a second): the reports show about
    # 25 running on average, the poller runs 50 or more by now. The cut starts from what runs
    # (the reports' average would cut to about 17).
    current = attached(100, at=0.0)
    window = window_of(*poller_climb(980, 10))
    for document in storm_seconds(990, 20, ok=7, throttled=3):
        window.add(document)
    _, decision = run(current, window, 992.0)
    assert decision.action is Action.MULTIPLICATIVE_DECREASE
    assert decision.target >= 30, decision.reason


def test_a_correction_reads_the_invocations_a_climbing_poller_ran_in_the_storm() -> None:
    # A mapping at 100 the poller climbs (5 more a second from 980) into a storm from 988: a
    # cut on its first reports read 35 running and cut to 21. The rest of the storm's reports
    # show 40% of the calls refused, from a third of each second's invocations so far: their
    # busy time reads about 12 running where the ramp had reached 45-60. The correction sizes
    # on what ran in the worst second (55 at 991: about 31 fit), not on the 35 read before.
    current = attached(
        21,
        at=992.0,
        cut_at=992.0,
        cut_evidence_since=988.0,
        cut_requests=100,
        cut_running=35.0,
        broke_at=100,
        ceiling=22,
        ceiling_refused=True,
    )
    window = window_of(*poller_climb(980, 8))
    for second in range(988, 992):
        for document in storm_seconds(second, 15, ok=6, throttled=4):
            window.add(document)
    _, corrected = run(current, window, 995.0)
    assert corrected.reason.startswith("Correcting the cut up"), corrected.reason
    assert corrected.target > 21


def test_a_storm_in_a_new_queue_s_first_second_of_reports_is_cut_from_the_poller_s_ramp() -> None:
    # A mapping at 100 never decided: its first reports, from one second (no pair of seconds
    # to read the concurrency from), show 3 invocations with a fifth of their calls rejected.
    # The poller started there and has climbed to about 10 since: the cut starts from that
    # (from the cap it would be to about 72, and the poller would go on climbing into it).
    window = window_of(*storm_seconds(1000, 3, ok=8, throttled=2))
    decision = decide(ALGORITHM, state(100), config(), window, 1003.0, PARAMS)
    assert decision.action is Action.MULTIPLICATIVE_DECREASE
    assert 2 <= decision.target <= 10, decision.reason


def test_one_second_of_fresh_reports_at_a_steady_level_is_cut_from_the_cap() -> None:
    # 40 invocations busy for 40 s, then a change at 996: the one second of fresh reports (the
    # first 5 of its invocations) reads low, and no poller start is in view: the cut starts
    # from the cap, not from the 5 reported so far.
    window = window_of(*steady(958, 40, 40, ok=10))
    for document in storm_seconds(998, 5, ok=7, throttled=3):
        window.add(document)
    decision = decide(ALGORITHM, attached(40, at=996.0), config(), window, 1001.0, PARAMS)
    assert decision.action is Action.MULTIPLICATIVE_DECREASE
    assert decision.target >= 20, decision.reason


def test_a_failed_probe_waits_in_proportion_to_what_it_cost() -> None:
    def backoff_after(throttled: int) -> float:
        current, window = pulsed_from_8_to_9()
        for document in steady(992, 1, 11, ok=10 - throttled, throttled=throttled):
            window.add(document)
        for document in steady(993, 7, 10, ok=10):
            window.add(document)
        current, verdict = run(current, window, 999.5)
        assert verdict.action is Action.HOLD and memory_of(current).ceiling == 9
        return memory_of(current).probe_backoff_s

    low, high = ALGORITHM.probe_backoff_s
    assert low <= backoff_after(1) < backoff_after(3) <= high


def test_a_timeout_storm_is_quartered_not_cut_to_its_accepted_share() -> None:
    # Past a latency cliff every call times out: the accepted share (0) says nothing of the
    # level that fits; a quarter of what runs is kept.
    current = attached(40, at=0.0)
    window = window_of(*steady(960, 30, 40, ok=10))
    for second in (992, 993):
        for _ in range(40):
            window.add(
                Sample(
                    queue="orders",
                    event_time=second + 0.9,
                    requests=10,
                    timed_out=10,
                    latency_ms_sum=10_000.0,
                    latency_count=10,
                    invocation_ms=800,
                )
            )
    current, decision = run(current, window, 995.0)
    assert (decision.action, decision.target) == (Action.MULTIPLICATIVE_DECREASE, 10)
    assert not memory_of(current).ceiling_refused
    # Each call that timed out reports its timeout (1,000 ms): growth stops short of it.
    assert memory_of(current).timeout_latency_ms == 1_000.0


def pulse_verdict(*documents: Sample) -> Decision:
    """The verdict on a pulse from 8 to 9 once ``documents`` have reported, before anything
    fresh at the base level has."""
    current, window = pulsed_from_8_to_9()
    for document in documents:
        window.add(document)
    _, verdict = run(current, window, PULSE_END + ALGORITHM.judge_after_s)
    return verdict


def judged_pulse_from_8_to_9(ok: int, throttled: int) -> Decision:
    """The verdict on a pulse from 8 to 9 whose calls met ``throttled`` of ``ok + throttled``
    429s."""
    return pulse_verdict(*steady(992, 1, 9, ok=ok, throttled=throttled))


def test_a_storm_met_by_a_pulse_is_cut_on_the_pulse_evidence() -> None:
    # 80% pressure, far more than one extra invocation explains: cut now, on the pulse's calls.
    verdict = judged_pulse_from_8_to_9(ok=2, throttled=8)
    assert verdict.action is Action.MULTIPLICATIVE_DECREASE, verdict.reason
    assert verdict.target <= 3


def test_a_pulse_passes_only_under_the_clean_share() -> None:
    # A level just over the capacity draws a few refusals in a thousand: committed by a probe,
    # it would go on drawing them under T1, each message back a visibility timeout later.
    def verdict_with(throttled: int) -> Decision:
        late = sample(at=992.9, ok=100 - throttled, throttled=throttled, invocation_ms=800)
        return pulse_verdict(*steady(992, 1, 9, ok=100), late)

    # 1 and 4 refused calls in 1,000: under and over the clean share (0.25%).
    passed = verdict_with(throttled=1)
    assert passed.reason.startswith("Probe passed"), passed.reason
    failed = verdict_with(throttled=4)
    assert (failed.action, failed.target) == (Action.HOLD, 8), failed.reason


def test_a_failed_pulse_the_raise_explains_is_not_a_storm() -> None:
    # 10% pressure at 9 over a base of 8: the extra invocation's share, not a storm beneath.
    verdict = judged_pulse_from_8_to_9(ok=9, throttled=1)
    assert (verdict.action, verdict.target) == (Action.HOLD, 8), verdict.reason


def just_over_documents() -> list[Sample]:
    """About 16 invocations running (20 of 800 ms a second from 960) and 0.4% of their calls
    refused, every second: a level just over the capacity."""
    documents = steady(960, 30, 20, ok=10)
    documents += [
        sample(at=960 + second + 0.9, ok=9, throttled=1, invocation_ms=800)
        for second in range(0, 30, 1)
    ]
    return documents


def just_over(concurrency: int) -> Decision:
    """``just_over_documents`` under a cap of ``concurrency``."""
    _, decision = run(attached(concurrency, at=0.0), window_of(*just_over_documents()), 991.0)
    return decision


def test_a_level_one_invocation_over_the_capacity_is_cut_by_one() -> None:
    # 8 running (10 invocations of 800 ms a second) since a change 5 s ago, 1 call in 9
    # refused: 11% of the calls, no more than the one invocation too many makes. The capacity
    # fits between 7 and 8 (7.1 invocations): step down one. The accepted share, sized with its
    # margin on these 270 calls and rounded down, would cut to 6.
    documents = steady(987, 3, 10, ok=8, throttled=1)
    _, decision = run(attached(8, at=985.0), window_of(*documents), 990.0)
    assert (decision.action, decision.target) == (Action.MULTIPLICATIVE_DECREASE, 7)
    assert "one invocation too many explains it" in decision.reason, decision.reason


@given(
    running=st.floats(min_value=1.0, max_value=1000.0),
    pressure=st.floats(min_value=0.0, max_value=1.0),
    requests=st.integers(min_value=1, max_value=100_000),
)
def test_the_level_that_fits_is_under_the_running_and_within_their_accepted_share(
    running: float, pressure: float, requests: int
) -> None:
    level = ALGORITHM.fitting_level(running, pressure, requests)
    assert level <= math.ceil(running) - 1
    if pressure * running <= 1.0:
        assert level == math.ceil(running) - 1
    else:
        assert level <= running * (1.0 - pressure)


def test_a_level_drawing_refusals_under_t1_holds_in_the_band() -> None:
    # No step down on a few refusals: stepping down and probing back drew more refused calls
    # than the level does (docs/measurements.md, "Rules the families do not need (stop 56)").
    decision = just_over(16)
    assert (decision.action, decision.target) == (Action.HOLD, 16), decision.reason
    assert decision.reason.startswith("Within band"), decision.reason


def refusing_steadily(current: QueueState, backlog: Backlog | None) -> Decision:
    """``just_over_documents`` (200 calls a second) decided at 991 with ``backlog``."""
    window = window_of(*just_over_documents())
    return decide(ALGORITHM, current, config(), window, 991.0, PARAMS, backlog=backlog)


def test_a_level_refusing_in_the_band_steps_down_one_near_the_backlogs_end() -> None:
    # Refused calls set the ceiling: each refused message comes back a visibility timeout
    # (30 s) later, after a backlog that drains first (2,000 at 200 calls a second: 10 s).
    current = attached(16, at=0.0, ceiling=17, ceiling_refused=True)
    asking = refusing_steadily(current, None)
    assert (asking.action, asking.target, asking.asks_backlog) == (Action.HOLD, 16, True)
    assert asking.reason.startswith("Within band"), asking.reason
    stepped = refusing_steadily(current, waiting(2000))
    assert (stepped.action, stepped.target) == (Action.MULTIPLICATIVE_DECREASE, 15)
    assert stepped.reason.startswith("Near the backlog's end"), stepped.reason
    memory = memory_of(stepped.new_state)
    assert (memory.ceiling, memory.cut_at, memory.ceiling_refused) == (16, 991.0, True)
    # A backlog that outlasts the visibility timeout (100 s of it): the refused messages come
    # back while it drains, and the level holds.
    held = refusing_steadily(current, waiting(20_000))
    assert (held.action, held.target, held.asks_backlog) == (Action.HOLD, 16, False)
    # Where timeouts or latency set the ceiling, or none is known, no backlog is asked for.
    for unrefused in (attached(16, at=0.0, ceiling=17), attached(16, at=0.0)):
        assert not refusing_steadily(unrefused, None).asks_backlog


def test_a_level_refusing_steadily_with_no_durations_reported_asks_for_no_backlog() -> None:
    # Workers whose documents carry no invocation durations give no pace to drain a backlog
    # at: the backlog could not be judged, so reading it would be a wasted SQS call.
    current = attached(16, at=0.0, ceiling=17, ceiling_refused=True)
    documents = [dataclasses.replace(d, invocation_ms=None) for d in just_over_documents()]
    decision = decide(ALGORITHM, current, config(), window_of(*documents), 991.0, PARAMS)
    assert (decision.action, decision.target, decision.asks_backlog) == (Action.HOLD, 16, False)
    assert decision.reason.startswith("Within band"), decision.reason


def test_refusals_in_the_newest_seconds_alone_ask_for_no_step() -> None:
    # A fall's first reports: the band's pressure, but all of it in the newest seconds.
    current = attached(16, at=0.0, ceiling=17, ceiling_refused=True)
    documents = steady(960, 30, 20, ok=10)
    documents += [
        sample(at=985 + second + 0.9, ok=5, throttled=5, invocation_ms=800) for second in range(5)
    ]
    window = window_of(*documents)
    for backlog in (None, waiting(2000)):
        decision = decide(ALGORITHM, current, config(), window, 991.0, PARAMS, backlog=backlog)
        assert (decision.action, decision.target) == (Action.HOLD, 16), decision.reason
        assert not decision.asks_backlog


def test_a_step_down_near_the_end_is_corrected_by_the_reports_from_before_it() -> None:
    # The step was taken on the first reports of a fall: the invocations that started before
    # it go on reporting, most of their calls refused, and size a cut as a storm's would.
    current = attached(16, at=0.0, ceiling=17, ceiling_refused=True)
    stepped = refusing_steadily(current, waiting(2000)).new_state
    fall = steady(986, 5, 20, ok=2, throttled=8)
    window = window_of(*just_over_documents(), *fall)
    corrected = decide(ALGORITHM, stepped, config(), window, 996.0, PARAMS)
    assert corrected.action is Action.MULTIPLICATIVE_DECREASE, corrected.reason
    assert corrected.target < 10, corrected.reason
    assert corrected.reason.startswith("Correcting the cut"), corrected.reason


def test_a_storms_first_reports_after_a_clean_history_are_cut_to_be_corrected() -> None:
    # 29 clean seconds at 16, then 4 of the newest second's 20 invocations with 4 of their 10
    # calls refused: 0.27% over the evidence (over the clean share, under T1), 8% since the
    # first second that met T1, after 5,800 clean calls (under the 10% the newest second alone
    # cuts on). Not held in the band, where the whole evidence's 0.27% puts the level: a cut
    # on those seconds, which the rest of the storm's reports correct.
    documents = steady(960, 29, 20, ok=10) + steady(989, 1, 16, ok=10)
    documents += steady(989, 1, 4, ok=6, throttled=4)
    _, decision = run(attached(16, at=0.0), window_of(*documents), 991.0)
    assert (decision.action, decision.target) == (Action.MULTIPLICATIVE_DECREASE, 14)
    assert decision.reason.startswith("Overload: newest pressure 8.0%"), decision.reason
    assert memory_of(decision.new_state).cut_at == 991.0


def after_first_reports(*history: Sample) -> Decision:
    """The verdict at a cap of 4 on ``history`` and then a storm's first reports: 9 calls in
    the newest second, too few to size on, and 8 in the one before, 9 of the 17 refused."""
    documents = [
        *history,
        sample(at=988.9, ok=4, throttled=4, invocation_ms=800),
        sample(at=989.9, ok=4, throttled=5, invocation_ms=800),
    ]
    _, decision = run(attached(4, at=0.0), window_of(*documents), 991.0)
    return decision


def test_a_storms_first_few_reports_wait_for_enough_calls_to_cut_on() -> None:
    # After 29 clean seconds at 4 invocations of 5 calls: 1.5% over the evidence and 37 calls
    # since the first second that met T1, too few to cut on.
    decision = after_first_reports(*steady(960, 29, 4, ok=5))
    assert (decision.action, decision.target) == (Action.HOLD, 4), decision.reason
    assert decision.reason.startswith("Within band"), decision.reason
    # With 10 calls an invocation in the history, 57 calls since then, 15.8% refused: a cut,
    # one invocation too many explaining that share so far, corrected once the rest report.
    cut = after_first_reports(*steady(960, 29, 4, ok=10))
    assert (cut.action, cut.target) == (Action.MULTIPLICATIVE_DECREASE, 3), cut.reason
    assert memory_of(cut.new_state).cut_at == 991.0


def test_a_level_used_whole_grows_though_its_newest_reports_still_trail() -> None:
    # Cut to 3 at 900; three invocations busy ever since. Reports arrive up to 35 s late:
    # seconds older than that are whole, each newer one holds one report in four so far. The
    # last window_s of evidence reads under one invocation in use; the settled seconds say 3.
    current = attached(3, at=900.0)
    window = window_of(*steady(902, 63, 4, ok=10), *steady(965, 35, 1, ok=10))
    decision = decide(ALGORITHM, current, config(), window, 1000.0, PARAMS)
    assert decision.action is Action.ADDITIVE_INCREASE and decision.target > 3, decision.reason


def invocations(
    second: int, concurrency: float, latency_ms: float, timed_out: int = 0
) -> list[Sample]:
    """The invocations of 10 calls each that start in ``second`` when ``concurrency`` of them
    run at once and each call takes ``latency_ms`` (Little's law: concurrency / duration
    start a second), ``timed_out`` of all their calls timed out."""
    duration_ms = 10 * latency_ms
    count = max(1, round(concurrency * 1000.0 / duration_ms))
    documents = []
    for index in range(count):
        late = min(10, max(0, timed_out - 10 * index))
        documents.append(
            Sample(
                queue="orders",
                event_time=second + 0.5 + duration_ms / 1000.0,
                requests=10,
                ok=10 - late,
                timed_out=late,
                latency_ms_sum=duration_ms,
                latency_count=10,
                invocation_ms=duration_ms,
            )
        )
    return documents


def seconds_of(
    start: int, levels: list[float], latency: list[float], timed_out: list[int]
) -> QueueWindow:
    """A window of one second per level, from ``start``."""
    window = QueueWindow()
    for offset, (level, latency_ms, late) in enumerate(
        zip(levels, latency, timed_out, strict=True)
    ):
        for document in invocations(start + offset, level, latency_ms, late):
            window.add(document)
    return window


class TestLatencyIsLoadOnlyWhereTheLoadMovesIt:
    """Latency cuts only where it moved with the concurrency and calls time out (latency.py)."""

    NOW = 1000.0
    SPAN = 60

    def judged(self, window: QueueWindow, level: int = 40) -> Decision:
        return decide(ALGORITHM, attached(level, at=0.0), config(), window, self.NOW, PARAMS)

    def test_a_brownout_at_an_unchanged_level_never_cuts(self) -> None:
        # The cap of 40 filled throughout; the downstream answers 4x slower from second 20 on,
        # and a few calls time out (under T1): the concurrency did not move, so it is no load.
        latency = [50.0] * 20 + [200.0] * (self.SPAN - 20)
        timed_out = [0] * 50 + [2] * (self.SPAN - 50)
        window = seconds_of(940, [40.0] * self.SPAN, latency, timed_out)
        decision = self.judged(window)
        assert decision.target >= 40, decision.reason

    def test_latency_that_grows_with_the_concurrency_but_never_times_out_does_not_cut(
        self,
    ) -> None:
        levels = [10.0 + second for second in range(self.SPAN)]
        latency = [20.0 + 2.0 * level for level in levels]
        window = seconds_of(940, levels, latency, [0] * self.SPAN)
        decision = self.judged(window, level=70)
        assert decision.target >= 70, decision.reason

    def test_load_driven_timeouts_cut_to_the_level_under_the_timeout(self) -> None:
        # The poller's ramp: latency 20 ms + 2 ms per invocation in flight; from 60 in flight
        # (140 ms) a few calls hit the timeout (a little over 140 ms), under T1.
        levels = [10.0 + second for second in range(self.SPAN)]
        latency = [20.0 + 2.0 * level for level in levels]
        timed_out = [2 if level >= 60 else 0 for level in levels]
        window = seconds_of(940, levels, latency, timed_out)
        decision = self.judged(window, level=70)
        assert decision.action is Action.MULTIPLICATIVE_DECREASE, decision.reason
        assert decision.reason.startswith("Load-driven timeouts")
        # 0.8 x the slowest second (158 ms) on the line: (126 - 20) / 2 = 53 invocations.
        assert 35 <= decision.target <= 56
        assert not memory_of(decision.new_state).ceiling_refused
        # The slowest second that has fully reported: the newest seconds are left out.
        assert 150.0 <= memory_of(decision.new_state).timeout_latency_ms <= max(latency)

    def test_growth_stops_short_of_the_latency_where_calls_timed_out(self) -> None:
        # Load-driven timeouts cut at a slowest second of 160 ms: clean at 45 in use, the queue
        # grows while its calls take 60 ms, and holds at 140 ms (over 0.8 x 160).
        current = attached(50, at=0.0, timeout_latency_ms=160.0)
        for latency_ms, grows in ((60.0, True), (140.0, False)):
            window = seconds_of(940, [45.0] * self.SPAN, [latency_ms] * self.SPAN, [0] * self.SPAN)
            decision = decide(ALGORITHM, current, config(), window, self.NOW, PARAMS)
            assert (decision.target > 50) is grows, decision.reason

    def test_growth_stops_at_the_level_whose_latency_in_proportion_nears_the_timeout(
        self,
    ) -> None:
        # Load-driven timeouts cut at a slowest second of 160 ms: clean at 50, its calls taking
        # 120 ms, the queue may double by the poller's ramp, but 50 x 0.8 x 160 / 120 = 53
        # is as far as the latency, grown in proportion, stays under 0.8 x 160.
        current = attached(50, at=0.0, timeout_latency_ms=160.0)
        window = seconds_of(940, [50.0] * self.SPAN, [120.0] * self.SPAN, [0] * self.SPAN)
        decision = decide(ALGORITHM, current, config(), window, self.NOW, PARAMS)
        assert 50 < decision.target <= 53, decision.reason

    @pytest.mark.parametrize(("cut_from", "probed"), [(40.6, True), (5.0, False)])
    def test_a_latency_near_the_timeout_far_under_the_cut_s_level_is_probed(
        self, cut_from: float, probed: bool
    ) -> None:
        # Timeouts cut a queue at 356 ms from about 40.6 invocations in use to Cmin; there its
        # calls still take 291 ms (over 0.8 x 356), nothing timing out: on a load line through
        # the origin 2 invocations explain at most a twentieth of it, the rest is the
        # downstream's, and a pulse tests the next level. Just under a level of 5 the latency
        # may be the load's: held.
        current = attached(2, at=0.0, timeout_latency_ms=356.0, cut_running=cut_from, ceiling=3)
        window = seconds_of(940, [2.0] * self.SPAN, [291.0] * self.SPAN, [0] * self.SPAN)
        decision = decide(ALGORITHM, current, config(), window, self.NOW, PARAMS)
        assert (decision.target == 3) is probed, decision.reason
        assert (memory_of(decision.new_state).probe_until > 0) is probed
        # The audit trail says why either way.
        assert "near where calls timed out" in decision.reason
        assert ("the downstream's, not its load's" in decision.reason) is probed

    @settings(max_examples=60)
    @given(
        level=st.integers(5, 90),
        latency_ms=st.floats(5.0, 2_000.0),
        timeout_latency_ms=st.floats(10.0, 5_000.0),
    )
    def test_growth_never_goes_past_the_timeout_s_headroom_in_proportion(
        self, level: int, latency_ms: float, timeout_latency_ms: float
    ) -> None:
        current = attached(level, at=0.0, timeout_latency_ms=timeout_latency_ms)
        window = seconds_of(940, [level] * self.SPAN, [latency_ms] * self.SPAN, [0] * self.SPAN)
        decision = decide(ALGORITHM, current, config(), window, self.NOW, PARAMS)
        if decision.target > level:
            headroom = ALGORITHM.timeout_headroom * timeout_latency_ms
            assert latency_ms * decision.target / level < headroom, decision.reason

    @settings(max_examples=40)
    @given(
        latency=st.lists(st.floats(5.0, 2_000.0), min_size=SPAN, max_size=SPAN),
        timed_out=st.lists(st.integers(0, 1), min_size=SPAN, max_size=SPAN),
    )
    def test_at_a_constant_concurrency_no_latency_cuts(
        self, latency: list[float], timed_out: list[int]
    ) -> None:
        # A heavy tail, pauses, a brownout: whatever the latency does second by second at a
        # level the poller fills, with timeouts under T1, the queue is not cut.
        window = seconds_of(940, [40.0] * self.SPAN, latency, timed_out)
        decision = self.judged(window)
        assert decision.target >= 40, decision.reason

    @settings(max_examples=40)
    @given(
        levels=st.lists(st.floats(2.0, 40.0), min_size=SPAN, max_size=SPAN),
        latency=st.lists(st.floats(5.0, 2_000.0), min_size=SPAN, max_size=SPAN),
        timed_out=st.lists(st.integers(0, 10), min_size=SPAN, max_size=SPAN),
    )
    def test_a_cut_without_refusals_keeps_a_quarter_of_what_runs(
        self, levels: list[float], latency: list[float], timed_out: list[int]
    ) -> None:
        window = seconds_of(940, levels, latency, timed_out)
        decision = self.judged(window)
        if sum(timed_out) == 0:
            assert decision.target >= 40, decision.reason
        elif decision.target < 40:
            assert decision.target >= math.floor(PARAMS.beta**2 * min(levels)) - 1


class TestTelemetryThatTrails:
    """Waits that follow the telemetry's lag (the families draw delays of 1-40 s)."""

    def test_a_few_reports_in_the_window_do_not_leave_a_lagging_queue_unjudged(self) -> None:
        # Invocations of 3 s, 40% refused, reporting 25 s late: the last 30 s of starts hold
        # one report of 5 calls, under min_samples. The span up to it is judged: a cut.
        window = window_of(
            *[
                sample(at=start + 3.0, ok=3, throttled=2, invocation_ms=3000)
                for start in [*range(940, 970), *range(940, 970), 975]
            ]
        )
        _, decision = run(attached(12, at=0.0), window, 1000.0)
        assert decision.action is Action.MULTIPLICATIVE_DECREASE, decision.reason
        assert decision.target < 12

    def test_a_pulse_is_not_judged_before_its_last_second_has_reported(self) -> None:
        # Only the pulse's earliest invocations have reported (short ones, ended before its last
        # second): clean, and enough calls, but not yet what the raised level ran.
        current, window = pulsed_from_8_to_9()
        for _ in range(3):
            window.add(sample(at=992.09, ok=10, invocation_ms=50))
        current, early = run(current, window, PULSE_END + ALGORITHM.judge_after_s)
        assert early.action is Action.HOLD
        assert early.reason.startswith("Waiting for the probe's telemetry"), early.reason
        # Once the telemetry has caught up with the pulse's last second, it is judged.
        for document in steady(992, 1, 9, ok=10):
            window.add(document)
        _, judged = run(current, window, PULSE_END + ALGORITHM.judge_after_s + 1.0)
        assert judged.reason.startswith("Probe passed"), judged.reason

    @pytest.mark.parametrize("broke_at", [0, 9])
    def test_a_pulse_retesting_a_level_that_broke_waits_for_what_the_base_level_ran(
        self, broke_at: int
    ) -> None:
        # 9 broke before (a cut, or a failed probe): a few refusals in a hundred calls there.
        # The pulse's first reports are clean and enough calls, but they show under a third
        # of the busy time the base level's two seconds before it do (10 invocations of 800
        # ms a second): committed on them, 9 drew refusals under T1, and each refused
        # message came back a visibility timeout later (issue 29's tails).
        # A climb's pulse to a level that never broke is judged on them, as before.
        current, window = pulsed_from_8_to_9(broke_at=broke_at)
        for document in [*steady(990, 2, 10, ok=10), *steady(992, 1, 6, ok=10)]:
            window.add(document)
        current, early = run(current, window, PULSE_END + ALGORITHM.judge_after_s)
        if not broke_at:
            assert early.reason.startswith("Probe passed"), early.reason
            return
        assert early.action is Action.HOLD
        assert early.reason.startswith("Waiting for the probe's telemetry"), early.reason
        # The rest of the pulse's invocations report, two of their calls refused.
        for document in [*steady(992, 1, 5, ok=10), *steady(993, 1, 9, ok=10)]:
            window.add(document)
        window.add(sample(at=993.9, ok=8, throttled=2, invocation_ms=800))
        current, judged = run(current, window, PULSE_END + ALGORITHM.judge_after_s + 1.0)
        assert (judged.action, judged.target) == (Action.HOLD, 8), judged.reason
        assert judged.reason.startswith("Probe failed"), judged.reason

    def test_a_pulse_with_too_little_telemetry_moves_no_ceiling(self) -> None:
        # Nothing of the pulse reported, while the base level kept reporting: it failed on no
        # evidence, so what is known to break (15, above the ceiling of 9) stays.
        current, window = pulsed_from_8_to_9(broke_at=15)
        for document in steady(995, 30, 1, ok=10):
            window.add(document)
        current, verdict = run(current, window, 1025.0)
        assert "too little telemetry" in verdict.reason, verdict.reason
        assert (memory_of(current).ceiling, memory_of(current).broke_at) == (9, 15)


def timing_out(start: int, count: int, ok: int, timed_out: int) -> list[Sample]:
    """``count`` invocations of 800 ms started in second ``start``, ``timed_out`` of each one's
    calls timed out (80 ms a call, the timed-out ones too: their timeout)."""
    calls = ok + timed_out
    return [
        Sample(
            queue="orders",
            event_time=start + 0.9,
            requests=calls,
            ok=ok,
            timed_out=timed_out,
            latency_ms_sum=80.0 * calls,
            latency_count=calls,
            invocation_ms=800,
        )
        for _ in range(count)
    ]


def cut_on_first_timeouts() -> tuple[QueueState, QueueWindow]:
    """At 20 and saturated; the downstream slows past the client's timeout at 1000. The
    first reports show 20% of calls timed out (100 calls): a cut to that share, to 15."""
    current = attached(20, at=0.0)
    window = window_of(*steady(960, 40, 20, ok=10))
    for document in timing_out(1000, 10, ok=8, timed_out=2):
        window.add(document)
    current, first = run(current, window, 1002.0)
    assert (first.action, first.target) == (Action.MULTIPLICATIVE_DECREASE, 15), first.reason
    return current, window


def test_a_cut_on_the_first_timeouts_is_corrected_on_the_rest() -> None:
    current, window = cut_on_first_timeouts()
    # The rest of the invocations from before the cut report every call timed out: the cut is
    # made again on them at once, to a quarter of what ran (the accepted share says nothing
    # past a latency cliff), rather than a telemetry round trip later.
    for document in timing_out(1000, 10, ok=0, timed_out=10) + timing_out(1001, 20, 0, 10):
        window.add(document)
    current, corrected = run(current, window, 1003.0)
    assert (corrected.action, corrected.target) == (Action.MULTIPLICATIVE_DECREASE, 5)
    assert corrected.reason.startswith("Correcting the cut"), corrected.reason
    # Corrected to what those reports call for, it is not cut again on them.
    _, again = run(current, window, 1004.0)
    assert again.action is Action.HOLD, again.reason


def test_a_cut_on_timeouts_is_corrected_on_each_report_more_of_them() -> None:
    # Cut 20 -> 15 on the first reports of timeouts. Half as many calls again come in, every
    # one timed out: an invocation whose calls time out runs a timeout per message and
    # reports last, so the share only grows as the rest arrive. The cut is made again on them
    # now (70 of 150 timed out: to 9), not once the reports hold twice the calls it was sized
    # on, as a cut on refusals waits.
    current, window = cut_on_first_timeouts()
    for document in timing_out(1000, 5, ok=0, timed_out=10):
        window.add(document)
    current, corrected = run(current, window, 1003.0)
    assert (corrected.action, corrected.target) == (Action.MULTIPLICATIVE_DECREASE, 9)
    assert corrected.reason.startswith("Correcting the cut"), corrected.reason
    # No report more, no correction more.
    _, again = run(current, window, 1004.0)
    assert again.action is Action.HOLD, again.reason


def test_a_cut_on_timeouts_at_the_quarter_is_corrected_on_to_their_accepted_share() -> None:
    current, window = cut_on_first_timeouts()
    for document in timing_out(1000, 10, ok=0, timed_out=10) + timing_out(1001, 20, 0, 10):
        window.add(document)
    current, corrected = run(current, window, 1003.0)
    assert corrected.target == 5, corrected.reason
    # More of the invocations from before the cut report, every call timed out (520 of 600):
    # the level, at the quarter of what ran, goes on to their accepted share (2 of the 20,
    # less the margin), rather than waiting a telemetry round trip of timeouts at 5.
    for document in timing_out(1002, 20, ok=0, timed_out=10):
        window.add(document)
    current, deeper = run(current, window, 1004.0)
    assert (deeper.action, deeper.target) == (Action.MULTIPLICATIVE_DECREASE, 2), deeper.reason
    assert "past the quarter" in deeper.reason, deeper.reason
    # No report more, no correction more.
    _, again = run(current, window, 1005.0)
    assert again.action is Action.HOLD, again.reason


def at_latency(start: int, seconds: int, per_second: int, latency_ms: float) -> list[Sample]:
    """``steady``'s clean invocations of 10 calls, each call taking ``latency_ms``."""
    return [
        Sample(
            queue="orders",
            event_time=start + second + 0.9,
            requests=10,
            ok=10,
            latency_ms_sum=10 * latency_ms,
            latency_count=10,
            invocation_ms=800,
        )
        for second in range(seconds)
        for _ in range(per_second)
    ]


@pytest.mark.parametrize(("latency_ms", "chained"), [(100.0, True), (700.0, False)])
def test_a_probe_past_timeouts_chains_only_far_from_the_timeout(
    latency_ms: float, chained: bool
) -> None:
    # Timeouts cut at 1,000 ms; a pulse from 8 to 9 passes. At 100 ms a call, the next probe's
    # level (11: under a remembered timeout a step is the streak's), its latency grown in
    # proportion, stays far under the timeout: it starts at once. At 700 ms it may reach 0.8 x
    # the timeout: 9 is committed alone.
    current = attached(8, ceiling=9, broke_at=9, timeout_latency_ms=1000.0)
    window = window_of(*at_latency(960, 30, 10, latency_ms))
    current, raised = run(current, window, 992.0)
    assert raised.target == 9, raised.reason
    for document in at_latency(992, 7, 10, latency_ms):
        window.add(document)
    now = memory_of(current).probe_until
    current, _ = run(current, window, now)
    current, verdict = run(current, window, now + 6.5)
    assert verdict.reason.startswith("Probe passed"), verdict.reason
    assert verdict.target == (11 if chained else 9), verdict.reason
    assert (memory_of(current).probe_until > 0) is chained


@pytest.mark.parametrize(("pulse_latency_ms", "passed"), [(294.0, True), (345.0, False)])
def test_a_pulse_from_a_level_slowed_past_the_headroom_is_judged_on_the_margin_left(
    pulse_latency_ms: float, passed: bool
) -> None:
    # Timeouts cut at 356 ms; the base level of 2 runs at 291 ms, past 0.8 x 356 already
    # (the downstream's latency, not its load's). A pulse to 3 at 294 ms passes: it took the
    # latency little of the way to the timeout. One at 345 ms took it past 0.8 of that way
    # (291 + 0.8 x 65 = 343): it fails, though no call timed out.
    current = attached(2, at=0.0, timeout_latency_ms=356.0, cut_running=40.6, ceiling=3)
    window = window_of(*at_latency(960, 30, 10, 291.0))
    current, raised = run(current, window, 992.0)
    assert raised.target == 3, raised.reason
    for document in at_latency(992, 2, 10, pulse_latency_ms):
        window.add(document)
    for document in at_latency(994, 10, 10, 291.0):
        window.add(document)
    now = memory_of(current).probe_until
    current, _ = run(current, window, now)
    current, verdict = run(current, window, now + 8.0)
    assert verdict.reason.startswith("Probe passed") is passed, verdict.reason
    assert verdict.target == (3 if passed else 2), verdict.reason


def test_passed_pulses_raise_by_a_growing_share_and_halve_the_gap_to_a_level_that_broke() -> None:
    # One after a cut or a failed probe, then x1.5 twice, x2, x3, x5 a telemetry round trip.
    steps = [ALGORITHM.probe_step(10, streak, AdaptiveMemory()) for streak in (0, 2, 4, 8, 16, 32)]
    assert steps == [1, 5, 5, 10, 20, 40]
    # Below a level that broke, at most half the way to it (and at least one).
    assert ALGORITHM.probe_step(10, 16, AdaptiveMemory(broke_at=16)) == 3
    assert ALGORITHM.probe_step(10, 8, AdaptiveMemory(broke_at=11)) == 1
    # Under a latency where timeouts cut, the step is the streak's, at most half the level.
    remembered = AdaptiveMemory(timeout_latency_ms=900.0)
    assert [ALGORITHM.probe_step(10, s, remembered) for s in (2, 4, 8)] == [2, 4, 5]


def test_a_clean_pause_test_starts_the_climb_back_with_a_pulse_at_once() -> None:
    current = attached(2)
    storm = window_of(*steady(960, 30, 3, ok=2, throttled=8))
    current, _ = run(current, storm, 992.0)
    test_at = memory_of(current).paused_until
    current, _ = run(current, storm, test_at)
    current, _ = run(current, storm, test_at + ALGORITHM.pulse_s)
    for document in steady(int(test_at), 2, 3, ok=10):
        storm.add(document)
    current, resumed = run(current, storm, memory_of(current).judge_at)
    assert (resumed.action, resumed.target) == (Action.RESUME, 3), resumed.reason
    assert current.enabled and memory_of(current).probe_until > 0
    # What broke before the pause bounds no step of the climb.
    assert memory_of(current).broke_at == 0


def floor_test_begun() -> tuple[QueueState, QueueWindow, float]:
    """A queue paused at Cmin, its test of Cmin begun; the window and the test's start."""
    current = attached(2)
    storm = window_of(*steady(960, 30, 3, ok=2, throttled=8))
    current, _ = run(current, storm, 992.0)
    test_at = memory_of(current).paused_until
    current, _ = run(current, storm, test_at)
    assert current.enabled
    return current, storm, test_at


def floor_test_judged_at() -> tuple[QueueState, QueueWindow, float]:
    """A queue whose test of Cmin ran its pulse (woken on time at its end) and was paused to be
    judged; the window, and when its judging is due."""
    current, storm, test_at = floor_test_begun()
    current, over = run(current, storm, test_at + ALGORITHM.pulse_s + 0.5)
    assert not current.enabled and memory_of(current).judge_at > 0, over.reason
    return current, storm, memory_of(current).judge_at


def test_a_short_test_of_the_floor_is_judged_once_its_invocations_have_reported() -> None:
    # A test of a second and a half at Cmin: its two invocations of 3.4 s (9 calls each) ran
    # past its end, and 18 calls are all it sends, never min_samples. Their reports were
    # waited for until stale_after_s, with no wake-up at the wait's end (the minute's tick
    # judged it, 60-120 s after its reports).
    current, storm, judge_at = floor_test_judged_at()
    test_end = memory_of(current).probe_ended_at
    storm.add(sample(at=test_end + 2.0, ok=9, invocation_ms=3400))
    current, waiting = run(current, storm, judge_at + 5.0)
    assert waiting.action is Action.HOLD and not current.enabled, waiting.reason
    assert current.wake_at == judge_at + PARAMS.stale_after_s
    storm.add(sample(at=test_end + 2.1, ok=9, invocation_ms=3400))
    current, verdict = run(current, storm, judge_at + 8.0)
    assert verdict.action is Action.RESUME and current.enabled, verdict.reason
    assert verdict.reason.startswith("Pause test passed")


def test_a_short_test_of_the_floor_does_not_pass_on_a_few_calls_refused_under_the_limit() -> None:
    # 2 of 24 calls refused (8%, under the pausing pressure of 12%): a capacity just under
    # what Cmin sends reads so on a test of a second as often as not, and, resumed, refused
    # 15-25% of Cmin's calls until paused again (long-recovery). The same share over 480 calls
    # is Cmin fitting.
    for calls, verdict_starts in ((1, "Pause test failed"), (20, "Pause test passed")):
        current, storm, judge_at = floor_test_judged_at()
        test_end = memory_of(current).probe_ended_at
        for _ in range(2 * calls):
            storm.add(sample(at=test_end + 1.0, ok=11, throttled=1, invocation_ms=1000))
        current, verdict = run(current, storm, judge_at)
        assert verdict.reason.startswith(verdict_starts), verdict.reason
        assert current.enabled is (calls == 20)


def test_a_test_of_the_floor_reported_clean_climbs_on_without_pausing_again() -> None:
    # No run came at the test's scheduled end: the first to come is a telemetry round trip
    # later, with the test's first reports. Clean on enough calls, the test has passed.
    current, storm, test_at = floor_test_begun()
    for document in steady(int(test_at), 1, 2, ok=10):
        storm.add(document)
    current, verdict = run(current, storm, test_at + 25.0)
    assert verdict.target == 3 and current.enabled, verdict.reason
    assert memory_of(current).paused_until == 0 and memory_of(current).probe_until > 0
    # The capacity came back from under the floor: once that pulse passes, the next step is
    # the size of the level (3 -> 6), not x1.5.
    pulse_at = int(test_at + 25.0)
    current, _ = run(current, storm, memory_of(current).probe_until)
    for document in steady(pulse_at, 4, 3, ok=10):
        storm.add(document)
    current, verdict = run(current, storm, memory_of(current).judge_at + 1.0)
    assert verdict.target == 6, verdict.reason


def test_a_test_of_the_floor_with_few_clean_reports_goes_on_and_a_refusal_ends_it() -> None:
    current, storm, test_at = floor_test_begun()
    storm.add(sample(at=test_at + 0.9, ok=5, invocation_ms=800))
    current, verdict = run(current, storm, test_at + 25.0)
    assert verdict.action is Action.HOLD and current.enabled, verdict.reason
    assert "testing on" in verdict.reason
    storm.add(sample(at=test_at + 1.9, ok=3, throttled=2, invocation_ms=800))
    current, verdict = run(current, storm, test_at + 26.0)
    assert verdict.action is Action.PAUSE and not current.enabled, verdict.reason
    assert memory_of(current).judge_at == test_at + 26.0 + ALGORITHM.judge_after_s


def chained_pulse(current: QueueState, visible: int, params: PolicyParams = PARAMS) -> Decision:
    """The pulse a queue at 8 with three passes in a row starts (the whole level: 8 -> 16),
    its backlog read: 8 invocations of 800 ms, 10 calls each, 12.5 calls an invocation-second."""
    window = window_of(*steady(960, 30, 10, ok=10))
    return decide(ALGORITHM, current, config(), window, 992.0, params, backlog=waiting(visible))


def test_a_chained_step_past_refusals_is_no_bigger_than_the_backlog_pays_in_receives() -> None:
    # Refused calls set the ceiling: a step of 8 for its pulse (2.5 s, the poller's climb to
    # 16 included) would have 250 calls refused were the capacity at 8, more than 3% of 5,000
    # waiting (150): a step of 5 is what they pay for (about 119 refused calls).
    refused = attached(8, ceiling=9, probe_streak=8, ceiling_refused=True)
    bounded = chained_pulse(refused, 5000)
    assert bounded.target == 13, bounded.reason
    assert "a step of 5, not 8" in bounded.reason
    # A backlog that pays for it takes the streak's step; so does a ceiling set by timeouts
    # (their cost is what the latency rules bound).
    assert chained_pulse(refused, 100_000).target == 16
    timed_out = attached(8, ceiling=9, probe_streak=8)
    assert chained_pulse(timed_out, 5000).target == 16


def test_a_bounded_step_near_cmax_names_the_step_cmax_leaves() -> None:
    # Cmax 14 leaves the streak's step of 8 at 6; the backlog pays for 5: the reason compares
    # it with the 6 the queue could have taken, not the 8 it never could.
    refused = attached(8, ceiling=9, probe_streak=8, ceiling_refused=True)
    bounded = chained_pulse(refused, 5000, dataclasses.replace(PARAMS, cmax=14))
    assert bounded.target == 13, bounded.reason
    assert "a step of 5, not 6" in bounded.reason


@settings(max_examples=40, deadline=None)
@given(
    streak=st.sampled_from([0, 2, 4, 8, 16]),
    visible=st.integers(3000, 200_000),
    more=st.integers(0, 200_000),
)
def test_a_bigger_backlog_never_takes_a_smaller_step(streak: int, visible: int, more: int) -> None:
    # At least one, never more than the streak's step, and growing with the messages waiting.
    current = attached(8, ceiling=9, probe_streak=streak, ceiling_refused=True)
    step = chained_pulse(current, visible).target - 8
    assert 1 <= step <= ALGORITHM.probe_step(8, streak, memory_of(current))
    assert chained_pulse(current, visible + more).target - 8 >= step


def test_no_probe_when_the_backlog_drains_before_its_verdict() -> None:
    # 8 invocations of 800 ms, 10 calls each: 100 calls a second; a pulse's verdict comes some
    # 6 s later (its pulse, the wait to judge, the telemetry's lag).
    # Refused calls set the ceiling: a probe's refusals would come back a visibility timeout
    # later, so none is started on a backlog that drains first.
    current = attached(8, ceiling=9, ceiling_refused=True)
    window = window_of(*steady(960, 30, 10, ok=10))
    held = decide(ALGORITHM, current, config(), window, 992.0, PARAMS, backlog=waiting(50, 1.0))
    assert held.action is Action.HOLD and "before its verdict" in held.reason
    probed = decide(ALGORITHM, current, config(), window, 992.0, PARAMS, backlog=waiting(5000))
    assert probed.target == 9, probed.reason
    # Where latency or timeouts set it, a probe refuses nothing: it runs on any backlog.
    unrefused = attached(8, ceiling=9)
    probed = decide(ALGORITHM, unrefused, config(), window, 992.0, PARAMS, backlog=waiting(50))
    assert probed.target == 9, probed.reason


@pytest.mark.parametrize(
    ("visible", "visibility_timeout_s", "probes"),
    [
        (2000, 60.0, False),  # drains in 20 s, before a refused message would be back
        (2000, 10.0, True),  # its refused messages would be back while 1,000 still wait
        (10000, 60.0, True),  # a long backlog: 100 s of it left when they are back
    ],
)
def test_no_probe_when_the_backlog_drains_before_a_refused_message_would_come_back(
    visible: int, visibility_timeout_s: float, probes: bool
) -> None:
    # 100 calls a second (as above), the verdict some 6 s away: a refused message of the
    # probe comes back a visibility timeout later, and the drain then waits for it.
    current = attached(8, ceiling=9, ceiling_refused=True)
    window = window_of(*steady(960, 30, 10, ok=10))
    backlog = waiting(visible, visibility_timeout_s)
    decision = decide(ALGORITHM, current, config(), window, 992.0, PARAMS, backlog=backlog)
    assert decision.probes is probes, decision.reason
    if not probes:
        assert decision.action is Action.HOLD and decision.target == 8
        assert f"after the {visibility_timeout_s:.0f}s visibility timeout" in decision.reason


def test_a_probe_held_for_the_backlog_leaves_no_pulse_in_memory() -> None:
    # The loop plans a queue, reads its backlog because the plan probes, and plans it again
    # (issue 29, throttling 7/54: the probe asked for every second, held every second). The
    # held step is what is carried out: the mapping stays, and the memory keeps no pulse.
    current = attached(8, ceiling=9, ceiling_refused=True)
    window = window_of(*steady(960, 30, 10, ok=10))
    asked = decide(ALGORITHM, current, config(), window, 992.0, PARAMS)
    assert asked.probes and memory_of(asked.new_state).probe_until > 992.0
    held = decide(ALGORITHM, current, config(), window, 992.0, PARAMS, backlog=waiting(50))
    assert not held.changes_mapping and held.new_state.concurrency == 8
    memory = memory_of(held.new_state)
    assert (memory.probe_until, memory.judge_at) == (0.0, 0.0)
    assert memory.next_probe_at == memory_of(current).next_probe_at


def climb_from_cmin(current: QueueState) -> list[tuple[Action, int, bool, str]]:
    """The decisions of a queue just cut to Cmin at 992 whose storm is over: a minute of clean
    reports, 2 invocations a second, each decided a second after it."""
    window = storm_accepting(15)
    decisions = []
    for second in range(993, 1053):
        for document in steady(second, 1, max(2, current.concurrency), ok=10):
            window.add(document)
        current, decision = run(current, window, second + 1.5)
        decisions.append((decision.action, decision.target, decision.enabled, decision.reason))
    return decisions


@settings(max_examples=20, deadline=None)
@given(probe_base=st.integers(0, 1000))
def test_the_probe_base_a_cut_to_cmin_keeps_decides_nothing(probe_base: int) -> None:
    # A cut keeps the base of the last pulse (``probe_base``: read only from a pulse's start,
    # which sets it, to its verdict; a cut ends any pulse's judging). Whatever it holds after
    # the cut, the climb back from Cmin decides the same, through its pulses.
    before = attached(10, ceiling=12, broke_at=14, probe_base=9, probe_step=1)
    cut_to_cmin, cut = run(before, storm_accepting(15), 992.0)
    assert (cut.action, cut.target) == (Action.MULTIPLICATIVE_DECREASE, PARAMS.cmin)
    kept = memory_of(cut_to_cmin)
    assert kept.probe_base == 9
    other = dataclasses.replace(kept, probe_base=probe_base)
    decisions = climb_from_cmin(cut_to_cmin)
    assert any(reason.startswith("Probe") for *_, reason in decisions)
    assert climb_from_cmin(cut_to_cmin.evolve(memory=other)) == decisions
