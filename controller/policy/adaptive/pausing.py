"""Pausing below the floor: overload at Cmin cannot be cut further.

The mapping is disabled for a bounded period, growing while tests fail but no longer than a
failed test's cost calls for, then tested with a short pulse at Cmin, and resumed only if that
pulse was clean (a pulse that saw no calls is no evidence: tested again after the shortest
pause). A cut that shows Cmin itself would overload hard pauses at once, at Cmin.
A paused mapping sends no telemetry: every step asks to be woken (``wake_at``), and the run
that ends a test is most often the one its first reports cause: reported clean, the test goes
on until enough calls pass it, and the climb back starts at once.
"""

from __future__ import annotations

import math
from dataclasses import replace

from controller.model import QueueStateName
from controller.policy.adaptive.memory import (
    AdaptiveMemory,
    AdaptiveSituation,
    AdaptiveVerdict,
    ceiling_above,
    hold,
    move,
)
from controller.policy.adaptive.probing import Probing, pulse_span_s, pulse_stats
from controller.settings import PolicyParams
from controller.window import WindowStats

# The probe streak a clean test of Cmin starts the climb back with: two passes in a row
# (``probe_step``'s 2, 4), so the pass after its first pulse steps by the whole level.
CLIMB_FROM_FLOOR_STREAK = 4


class Pausing(Probing):
    """Pausing below the floor, built on probing's pulses and waits."""

    def pausing_pressure(self, params: PolicyParams) -> float:
        """The pressure at Cmin that pauses the mapping: a share of failed calls at which
        messages would run through their receives into the dead-letter queue. Below it the
        queue keeps running at Cmin (pausing on a downstream shared with busier queues would
        only hand them its share)."""
        return max(params.t1, self.pause_above)

    def pause(self, situation: AdaptiveSituation) -> AdaptiveVerdict:
        """Pause at Cmin, whose own evidence shows it overloads."""
        stats = situation.stats
        return self._paused(
            situation,
            stats,
            f"Overload at Cmin: pressure {stats.pressure_rate:.1%} even at "
            f"{situation.state.concurrency}",
        )

    def pause_far_below(
        self, situation: AdaptiveSituation, stats: WindowStats, running: float, fit: float
    ) -> AdaptiveVerdict:
        """Pause instead of a cut whose fitting level (``fit`` of the ``running`` invocations)
        lies so far below Cmin that Cmin would draw at least ``pause_at_once`` pressure: set
        to Cmin, the queue would only wait a telemetry round trip to show it. The level that
        broke is remembered as a cut's is."""
        state, params = situation.state, situation.params
        at_floor = replace(
            situation,
            state=replace(state, concurrency=params.cmin),
            memory=replace(
                situation.memory,
                ceiling=ceiling_above(params.cmin),
                broke_at=state.concurrency,
                ceiling_refused=True,
            ),
        )
        return self._paused(
            at_floor,
            stats,
            f"Overload far below the floor: pressure {stats.pressure_rate:.1%} with about "
            f"{running:.1f} invocations in use fits {fit:.1f}, Cmin ({params.cmin}) would draw "
            f"{floor_pressure(fit, params):.0%}; scaled from {state.concurrency} -> "
            f"{params.cmin}",
        )

    def _paused(
        self, situation: AdaptiveSituation, stats: WindowStats, why: str
    ) -> AdaptiveVerdict:
        # The shortest, also after a cut that predicts a hard overload at Cmin: near the floor
        # the prediction can be far off (slow-recovery: 93% of 16 invocations' calls refused
        # predicted 83% at Cmin, which drew 17%), and a longer first pause finds a capacity
        # late.
        state, now = situation.state, situation.now
        period = self.pause_s[0]
        return move(
            state.concurrency,
            QueueStateName.CRITICAL_BACKOFF,
            f"{why}; pausing the mapping for {period:.0f}s.",
            replace(situation.memory, pause_s=period, paused_until=now + period),
            stats,
            enabled=False,
            breaches=state.consecutive_breaches + 1,
            wake_at=now + period,
        )

    def while_paused(self, situation: AdaptiveSituation) -> AdaptiveVerdict:
        """Paused, then testing Cmin, then judging the test."""
        state, memory, now = situation.state, situation.memory, situation.now
        if state.enabled:
            return self._testing(situation)
        if memory.judge_at > 0:
            return self._judging(situation)
        if now < memory.paused_until:
            return hold(
                state,
                f"Paused for {memory.paused_until - now:.0f}s more (overload at Cmin).",
                memory,
                wake_at=memory.paused_until,
            )
        return move(
            state.concurrency,
            QueueStateName.CRITICAL_BACKOFF,
            f"Pause over: testing {state.concurrency} for {self.pulse_s:g}s.",
            replace(memory, probe_started_at=now, probe_until=now + self.pulse_s),
            enabled=True,
            wake_at=now + self.pulse_s,
        )

    def _testing(self, situation: AdaptiveSituation) -> AdaptiveVerdict:
        state, memory, now = situation.state, situation.memory, situation.now
        if now < memory.probe_until:
            return hold(state, f"Testing Cmin ({state.concurrency}) after a pause.", memory)
        # The run that ends a test is most often the one its first reports cause (a paused
        # mapping sends none, and the scheduled tick is a minute away): the test has run a
        # telemetry round trip, not its pulse, and its reports go on arriving run by run.
        # Paused to wait for them all, a capacity back from below the floor waited one more
        # round trip unused. While they come in clean, the test goes on until enough of them
        # pass it; a refused call ends it at once, to be judged as before.
        ended = replace(memory, probe_until=0.0, probe_ended_at=now)
        test = pulse_stats(ended, situation.window)
        params = situation.params
        if test.requests >= params.min_samples and test.pressure_rate < self.clean_below:
            return self._climb_from_floor(replace(situation, memory=ended), test)
        reporting = test.requests > 0 and test.pressure == 0
        if reporting and now - memory.probe_started_at < params.stale_after_s:
            return hold(
                state,
                f"Testing Cmin ({state.concurrency}): {test.requests} calls reported, all "
                f"clean; testing on until {params.min_samples} have.",
                memory,
                test,
            )
        judge_at = now + self.judge_after_s
        return move(
            state.concurrency,
            QueueStateName.CRITICAL_BACKOFF,
            "Pause test over: paused again until its invocations are judged.",
            replace(ended, judge_at=judge_at),
            enabled=False,
            wake_at=judge_at,
        )

    def _judging(self, situation: AdaptiveSituation) -> AdaptiveVerdict:
        state, memory, now = situation.state, situation.memory, situation.now
        if now < memory.judge_at:
            return hold(state, "Paused; judging the test at Cmin.", memory)
        test = pulse_stats(memory, situation.window)
        params = situation.params
        limit = self.pausing_pressure(params)
        # Judged on its first reports only where enough of them fail it beyond their noise: a
        # test's first 20 of 30 calls read clean where its last ones are refused.
        least = share_bound(test.pressure_rate, test.requests, -self.pause_test_z)
        failed = test.requests >= params.min_samples and least >= limit
        waited_out = memory.judge_at + params.stale_after_s
        if now < waited_out and not failed and not test_reported(situation, test):
            # Woken when the wait ends: a paused mapping's telemetry is the test's alone, so
            # once it has all come in, no more reports come to run the controller.
            return hold(
                state, "Paused; waiting for the test's telemetry.", memory, test, wake_at=waited_out
            )
        if test.requests == 0:
            # Nothing to test with (every message waiting out a visibility timeout, often the
            # refused ones of the last test): no evidence that Cmin fits. Resumed on it, the
            # mapping met the same overload a telemetry round trip long, the same messages
            # refused again on their way to the dead-letter queue. Test again soon.
            period = self.pause_s[0]
            return hold(
                state,
                f"Pause test saw no calls; paused for {period:.0f}s more.",
                replace(memory, paused_until=now + period, judge_at=0.0),
                test,
                wake_at=now + period,
            )
        if test.pressure_rate < self.clean_below:
            return self._climb_from_floor(situation, test)
        # Passed only where its calls show Cmin under the limit beyond their noise: a test of a
        # second or two reports 20-30 calls, and a capacity just under what Cmin sends refuses
        # 2 of them as often as not (long-recovery: 7-10% read, 15-25% once resumed).
        share = share_bound(test.pressure_rate, test.requests, self.pause_test_z)
        if share < limit:
            return move(
                state.concurrency,
                QueueStateName.RECOVERING,
                f"Pause test passed (pressure {test.pressure_rate:.1%}, at most {share:.1%} "
                f"< {limit:.1%}); resuming at {state.concurrency}.",
                self._resumed_at_level(situation),
                test,
                enabled=True,
                breaches=0,
                wake_at=0.0,
            )
        period = self._period_after(memory, test)
        return hold(
            state,
            f"Pause test failed (pressure {test.pressure_rate:.1%} at {state.concurrency}); "
            f"paused for {period:.0f}s more.",
            replace(memory, pause_s=period, paused_until=now + period, judge_at=0.0),
            test,
            wake_at=now + period,
        )

    def _climb_from_floor(self, situation: AdaptiveSituation, test: WindowStats) -> AdaptiveVerdict:
        """A clean test: a passed probe of Cmin, the fresh evidence a first probe would wait a
        telemetry round trip for; the climb back starts at once, enabled, two passes into its
        streak (steps x1.5, then x2, x3, x5, ...).

        The capacity has moved since a level broke (what broke then bounds no step): from
        under what Cmin sends to at least that, most often back where it was before the fall,
        far above the floor. Climbing from Cmin one pass in (2 -> 3 -> 4 -> 8 -> 24), each pass
        a telemetry round trip, the backlog waited 90-120 s for a capacity already back
        (throttling seed 7, draws 18 and 38). A first step the size of the level is too much
        where the capacity came back just above what Cmin sends (the shipped long-recovery
        wasted 0.119, target 0.06): the first step stays x1.5."""
        climbing = replace(
            self._resumed_at_level(situation), probe_streak=CLIMB_FROM_FLOOR_STREAK, broke_at=0
        )
        passed = f"Pause test passed (pressure {test.pressure_rate:.1%}, clean)"
        base = situation.state.concurrency
        return replace(self.start_pulse(situation, climbing, base, passed, test), enabled=True)

    def _resumed_at_level(self, situation: AdaptiveSituation) -> AdaptiveMemory:
        """The memory of a mapping resumed at its level after a passed test: no pause, its
        level the ceiling's floor, the next probe a backoff away."""
        return replace(
            situation.memory,
            pause_s=0.0,
            paused_until=0.0,
            judge_at=0.0,
            ceiling=ceiling_above(situation.state.concurrency),
            next_probe_at=situation.now + self.spread(situation, 0.0),
        )

    def _period_after(self, memory: AdaptiveMemory, test: WindowStats) -> float:
        """The pause after a failed test: twice the last (a lasting overload is tested less
        often), up to ``failed_test_pause_max_s``, but no longer than the test's cost calls for.

        A test costs its pressure share of what Cmin sent during it; the pause that keeps that
        cost within ``pause_budget`` of what Cmin would send over the pause is enough. A narrow
        failure (a capacity just under what Cmin sends) costs little, so the floor is tested
        again soon and a capacity that returns is found sooner; a floor far above the capacity
        pauses the longest.
        """
        enough = test.pressure_rate * pulse_span_s(memory) / self.pause_budget
        return max(self.pause_s[0], min(self.failed_test_pause_max_s, 2 * memory.pause_s, enough))


def test_reported(situation: AdaptiveSituation, test: WindowStats) -> bool:
    """The test's invocations (``test``) have reported, as far as telemetry can tell: at least
    as many as its level runs at a time, and the telemetry has caught up past the test's end
    (an invocation running when it ended has reported; those that ended before most often
    reported sooner). A paused mapping runs nothing else. Waited for ``min_samples`` calls
    (``awaiting_telemetry``), which a test of a second at Cmin most often never sends, a short
    test was judged only at ``stale_after_s``; judged on them, a test of 30 calls passed on its
    first 20 clean ones."""
    newest = situation.window.newest_event_time()
    caught_up = newest is not None and newest >= situation.memory.probe_ended_at
    return caught_up and test.samples >= situation.state.concurrency


def share_bound(share: float, calls: int, z: float) -> float:
    """``share`` of ``calls`` (a rate of refusals) moved ``z`` standard errors, up (``z`` > 0:
    the most it can be taken to be on so few calls) or down (the least), within 0..1."""
    moved = share + z * math.sqrt(share * (1.0 - share) / max(1, calls))
    return min(1.0, max(0.0, moved))


def floor_pressure(fit: float, params: PolicyParams) -> float:
    """The share of Cmin's calls a downstream that fits ``fit`` invocations would refuse."""
    return max(0.0, 1.0 - fit / params.cmin)
