"""Probing: growing while clean, and pulse probes near the remembered ceiling.

Far from any known ceiling the level grows by real steps. Near it, a pulse probe raises the cap
by a step for about one invocation time and puts it back; only invocations that started during
the pulse are judged (with the base level's own evidence since), so a failed probe costs
about one invocation per extra slot whatever the telemetry delay. A failed probe waits as long
as its cost calls for (``back_off``); a passing one is the fresh evidence for its level and the
next, a bigger step, starts at once. Clean above the level that broke, the ceiling
expires when timeouts set it (near a latency where they cut, every step is a pulse of its
own); where the downstream refused calls (429, 503) pulses go on, each judged before the next,
each step no bigger than the messages waiting can pay for in receives (``affordable_step``).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import replace

from controller.policy.adaptive.memory import (
    AdaptiveMemory,
    AdaptiveSituation,
    AdaptiveVerdict,
    ceiling_above,
    hold,
    move,
    near_timeout,
    rising,
)
from controller.policy.adaptive.tuning import Tuning
from controller.policy.base import clamp
from controller.settings import PolicyParams
from controller.window import WindowSnapshot, WindowStats


class Probing(Tuning):
    """Growth and pulse probes, with the adaptive limit's tunables as ``self``."""

    def grow(self, situation: AdaptiveSituation) -> AdaptiveVerdict:
        """Below any level known to break: keep up with the poller's own ramp (it adds
        ``poller_ramp_per_s`` invocations a second while messages wait, so a cap growing slower
        than that is what holds a healthy backlog back), at most ``max_growth`` times the level
        in one step; under a known ceiling, halve the gap to it. A step that breaks is cut in
        proportion."""
        state, memory, stats = situation.state, situation.memory, situation.stats
        now = situation.now
        current, ceiling = state.concurrency, memory.ceiling
        ramp = math.ceil(self.poller_ramp_per_s * max(0.0, now - state.last_change_at))
        target = max(current + 1, min(math.floor(current * self.max_growth), current + ramp))
        if ceiling:
            target = min(target, current + max(1, (ceiling - current) // 2), ceiling - 1)
        mean = stats.mean_latency_ms
        if memory.timeout_latency_ms > 0 and mean:
            # Where timeouts cut, a step stops under the level whose latency, grown in
            # proportion to the level (on a load line it grows less), would come within the
            # headroom of theirs: growth held only at that headroom doubled a queue from about
            # 0.7 of it, every call timing out again (latency seed 100 draw 36: 50 -> 100).
            under = self.timeout_headroom * memory.timeout_latency_ms / mean
            target = min(target, math.ceil(current * under) - 1)
        target = clamp(target, situation.params)
        if target <= current:
            bound = f"the ceiling ({ceiling})" if ceiling else "the latency where calls timed out"
            return hold(state, f"At {bound}; holding at {current}.", memory)
        limit = f"below the ceiling {ceiling}" if ceiling else "no known ceiling"
        return move(
            target,
            rising(target, situation.params),
            f"Clean: pressure {stats.pressure_rate:.1%} < {self.grow_below:.1%} with the "
            f"allowance in use, {limit}. Scaled from {current} -> {target}.",
            memory,
            stats,
            breaches=0,
        )

    def probe(self, situation: AdaptiveSituation, because: str = "") -> AdaptiveVerdict:
        """Near the ceiling: a pulse probe once the backoff has passed (``probe_step``);
        ``because``: why it probes where the law would otherwise hold, for the audit trail."""
        state, memory, stats = situation.state, situation.memory, situation.stats
        now = situation.now
        current, ceiling = state.concurrency, memory.ceiling
        if now < memory.next_probe_at:
            return hold(
                state,
                f"Clean; next probe in {memory.next_probe_at - now:.0f}s (ceiling {ceiling}). "
                f"Holding at {current}.",
                memory,
                stats,
            )
        if situation.backlog is not None and self.backlog_ends_first(situation, stats):
            return hold(
                state,
                f"Clean; {situation.backlog.visible} messages waiting drain at {current} before "
                "a probe could pay: before its verdict, or its refused messages back after the "
                f"{situation.backlog.visibility_timeout_s:.0f}s visibility timeout. "
                f"Holding at {current}.",
                memory,
                stats,
            )
        why = f"Probe: clean at {current} (pressure {stats.pressure_rate:.1%}), ceiling {ceiling}"
        if because:
            why += f", {because}"
        return self.start_pulse(situation, memory, current, why, stats)

    def start_pulse(
        self,
        situation: AdaptiveSituation,
        memory: AdaptiveMemory,
        base: int,
        why: str,
        stats: WindowStats,
    ) -> AdaptiveVerdict:
        """Raise the cap above ``base`` by ``affordable_step`` for about one invocation time,
        then back to ``base``."""
        now, params = situation.now, situation.params
        # The streak's step as far as Cmax lets it go: the one a bounded step's reason names.
        step = clamp(base + self.probe_step(base, memory.probe_streak, memory), params) - base
        affordable = self.affordable_step(situation, memory, base, step, stats)
        if affordable < step:
            # Said in the audit trail: the climb is slower than the streak's steps on purpose.
            why += f"; a step of {affordable}, not {step}: its refusals' receives bound it"
        target = clamp(base + affordable, params)
        pulse = self.pulse_length(situation, target, stats)
        return move(
            target,
            rising(target, params),
            f"{why}; raising to {target} for {pulse:.1f}s, then back to {base} until the "
            "probe's invocations are judged.",
            replace(
                memory,
                probe_base=base,
                probe_step=target - base,
                probe_started_at=now,
                probe_until=now + pulse,
                judge_at=0.0,
            ),
            stats,
            breaches=0,
            wake_at=now + pulse,
        )

    def pulse_length(self, situation: AdaptiveSituation, target: int, stats: WindowStats) -> float:
        """How long a pulse to ``target`` stands: about one invocation time (at least
        ``pulse_s`` and a margin past it), so that enough invocations start under the raised cap
        to be judged, and as long as ``target`` invocations take to make ``min_samples`` calls
        at ``stats``' pace; the poller adds a few invocations per second, so a bigger raise
        needs a longer pulse.

        Small batches at a small level make few calls an invocation time: a pulse from 2 to 3
        of 1.2 s, batches of 2, reported about 10 calls, failed for too little telemetry and was
        tried again the same every 40 s, the level held at 2 for good (throttling seed 100
        draw 56, undrained)."""
        shortest = self.pulse_s + self.pulse_margin_s
        pace = stats.invocation_pace
        judged = situation.params.min_samples / (target * pace) if pace else 0.0
        climb = (target - situation.state.concurrency - 1) / self.poller_ramp_per_s
        return max(shortest, stats.mean_invocation_s, judged) + climb

    def affordable_step(
        self,
        situation: AdaptiveSituation,
        memory: AdaptiveMemory,
        base: int,
        step: int,
        stats: WindowStats,
    ) -> int:
        """A pulse's raise ``step`` above ``base`` (``probe_step``'s), where refused calls set
        the ceiling and the backlog is known, at most the one whose refused calls, were the
        capacity at ``base`` (every raised call refused for the pulse's length, at ``stats``'
        pace), stay within ``chain_refusal_share`` of the messages waiting.

        Each refused call spends a receive of a waiting message, one that has most often met
        refusals already (the blind seconds of a storm's start, its cuts): a chained step sized
        by the level alone spent a tenth of a backlog's receives in one pulse (throttling seed
        7 draw 17: 18 -> 36 for 5.7 s at a capacity of about 19, some 680 refused calls with
        6,915 waiting; four messages dead-lettered in the next storms)."""
        backlog, pace = situation.backlog, stats.invocation_pace
        if not memory.ceiling_refused or backlog is None or pace is None:
            return step
        refusals_paid_for = self.chain_refusal_share * backlog.visible

        def refused_at_most(raise_by: int) -> float:
            target = clamp(base + raise_by, situation.params)
            return (target - base) * pace * self.pulse_length(situation, target, stats)

        while step > 1 and refused_at_most(step) > refusals_paid_for:
            step -= 1
        return step

    def probe_step(self, base: int, streak: int, memory: AdaptiveMemory) -> int:
        """A pulse's raise above ``base`` after ``streak`` (0, then 2, 4, 8, ...) passes in a
        row: one after a cut or a failed probe, then ``probe_growth`` of the level twice, then
        a share that doubles with each pass (x1.5, x1.5, x2, x3, x5 a round trip); below the
        level that last broke (``memory.broke_at``), at most half the way to it. Where timeouts
        cut (a latency remembered) the step is the streak's, at most ``probe_growth`` of it.

        Each pass costs a telemetry round trip (20-40 s late in the families): at x1.5 a pass,
        a capacity back from a pause took ten of them, 2 -> 77 in 300 s, while the backlog
        waited. Below a level that broke, a step past half the gap fails again and again: its
        refusals, each back a visibility timeout later, set the drain; halving the gap finds
        the capacity between them."""
        if streak <= 0:
            return 1
        if memory.timeout_latency_ms > 0:  # the queue a big raise builds shows after its pulse
            return max(1, min(streak, math.floor(base * self.probe_growth)))
        step = math.floor(base * self.probe_growth * max(1, streak // 4))
        if memory.broke_at > base:
            step = min(step, math.ceil((memory.broke_at - base) / 2))
        return max(1, step)

    def backlog_ends_first(self, situation: AdaptiveSituation, stats: WindowStats) -> bool:
        """Where refused calls set the ceiling, the messages waiting (when known: read before
        a raise) drain at the current level before a pulse started now could pay: before it
        could be judged, or before a message it had refused would come back (the queue's
        visibility timeout, 10-120 s in the families).

        A refused message is what the drain then waits for: back a visibility timeout after
        the probe, it ends the drain that much after the refusal, where the backlog would have
        drained sooner; a probe that passes can shorten only what is left to drain. Held until
        the verdict alone, near a backlog's end probes kept drawing refusals whose messages
        came back after it (issue 29's tails; throttling seed 7 draw 44: a pulse to 9 with
        2,438 waiting at 78 calls a second had 78 calls refused, their messages done 85 s
        later). Elsewhere a probe refuses nothing: held, it kept a healthy queue of bursts
        under its cap into the next burst (healthy 1001 draw 163: p99 age 1.08x)."""
        backlog = situation.backlog
        if backlog is None or not backlog_decides(situation.memory, stats):
            return False
        invocation_s = stats.mean_invocation_s
        calls_per_s = situation.state.concurrency * stats.requests / stats.samples / invocation_s
        verdict_in = max(self.pulse_s, invocation_s) + self.judge_after_s + reporting_lag(situation)
        return backlog.visible < calls_per_s * max(verdict_in, backlog.visibility_timeout_s)

    def end_pulse(self, situation: AdaptiveSituation) -> AdaptiveVerdict:
        """The pulse is over: back to the base level, and judge the pulse's invocations once
        their telemetry has had time to arrive."""
        state, memory, now = situation.state, situation.memory, situation.now
        base = memory.probe_base
        judge_at = now + self.judge_after_s
        return move(
            base,
            state.state,
            f"Probe pulse over: back to {base}; judging the invocations that started at "
            f"{state.concurrency}. Scaled from {state.concurrency} -> {base}.",
            replace(memory, probe_until=0.0, probe_ended_at=now, judge_at=judge_at),
            wake_at=judge_at,
            ends_probe=True,
        )

    def awaiting_telemetry(self, situation: AdaptiveSituation, pulse: WindowStats) -> bool:
        """The pulse's reports are still to come: the telemetry has not caught up with the
        pulse's last second (no report of an invocation that ended in it), or too few of its calls
        have reported, ``judge_patience_s`` past the time reports take to arrive
        (``reporting_lag``), or, probing a level that broke (``memory.broke_at``), its reports
        show less busy time than as many seconds of the base level just before it
        (``before_pulse``); never longer than ``stale_after_s``. (A test of Cmin waits for its
        own reports: ``pausing.test_reported``.)

        Reports can take longer than any fixed wait (up to 40 s in the families): judged on
        the reports of its first second alone, a pulse that overloads from its second second
        passes (chained doubling into a storm a telemetry round trip long); judged before any
        report, it fails on no evidence, and so does the next, and a level that fits more is
        held for good. A level that broke is most often just over a capacity that has not
        moved: its few refusals fall anywhere among the pulse's calls, so its first reports pass
        it clean (35 of some 210 calls, ``throttling`` seed 100 draw 26), and committed it
        draws refusals under T1, each message back a visibility timeout later (issue 29's
        tails). Where the poller does not fill ``base``, the wait ends at ``stale_after_s``.
        A climb's pulse under every level that broke is judged on its first reports: an
        overload there is no few calls."""
        memory, params = situation.memory, situation.params
        waited = situation.now - memory.judge_at
        failed = pulse.requests >= params.min_samples and pulse.pressure_rate >= self.clean_below
        if failed or waited >= params.stale_after_s:
            # More reports could not make a failed pulse pass.
            return False
        newest = situation.window.newest_event_time()
        if newest is not None and newest < memory.probe_ended_at - self.pulse_s:
            return True
        retest = 0 < memory.broke_at <= memory.probe_base + memory.probe_step
        if retest and pulse.busy_ms < before_pulse(memory, situation.window).busy_ms:
            return True
        patience = self.judge_patience_s + reporting_lag(situation)
        return pulse.requests < params.min_samples and waited < patience

    def passed(self, pulse: WindowStats, base: WindowStats, params: PolicyParams) -> bool:
        """Clean at the probed level: the pulse's invocations under ``clean_below`` (a level
        committed above it would go on drawing refusals under T1); and the base level's own
        evidence since the pulse ended clean too: a probe never commits a raise into an
        overload that began after it."""
        return (
            pulse.requests >= params.min_samples
            and pulse.pressure_rate < self.clean_below
            and base.pressure_rate < params.t1
        )

    def commit(self, situation: AdaptiveSituation, pulse: WindowStats) -> AdaptiveVerdict:
        """A passed probe: the probed level becomes the level."""
        memory, now = situation.memory, situation.now
        params = situation.params
        probed = memory.probe_base + memory.probe_step
        target = clamp(probed, params)
        ceiling, broke_at, streak = memory.ceiling, memory.broke_at, memory.probe_streak
        # Near a latency where timeouts cut, a passed pulse says little of the level above
        # it (the queue a raise builds takes longer than a pulse to show): the level is
        # committed, and every step up is a pulse of its own. Near means the pulse's latency,
        # grown in proportion to the level the next step reaches (a chained pulse, or a
        # doubling once the ceiling expires), would reach the timeout's headroom: far under
        # it, after the slowdown that timed out is over, probes chain and the ceiling expires
        # as elsewhere (committed one step at a time, a queue cut to 2 took 35 s a level back
        # up).
        chained_step = self.probe_step(probed, 2 * max(1, streak), memory)
        near_timeouts = near_timeout(
            memory, pulse, self.timeout_headroom, (probed + chained_step) / max(1, probed)
        )
        expired = probed > max(ceiling, broke_at) and not near_timeout(
            memory, pulse, self.timeout_headroom, self.max_growth
        )
        # Past the ceiling but not yet above the level that broke, or above it where 429s set
        # the ceiling: the pulse was the fresh evidence for its level, so the next probe, a
        # step twice as big, starts at once. Past refusals a committed doubling that overshoots
        # a capacity back only in part is refused for a telemetry round trip, a pulse for one
        # invocation time.
        chain = (memory.ceiling_refused or not expired) and not near_timeouts
        if probed >= ceiling and probed < params.cmax and chain:
            if self.backlog_ends_first(situation, pulse):
                # No next pulse: the level is committed as it is, the ceiling just over it.
                return self._committed(situation, pulse, target, expired=False)
            chained = replace(
                memory,
                ceiling=ceiling_above(probed),
                probe_backoff_s=self.probe_backoff_s[0],
                probe_streak=2 * max(1, streak),
            )
            why = f"Probe passed: pressure {pulse.pressure_rate:.1%} at {probed}"
            if expired and broke_at:
                why += f", above {broke_at}, where refused calls set the ceiling"
            return self.start_pulse(situation, chained, probed, why, pulse)
        if expired:
            # Clean above the level whose overload set the ceiling (one pulse clean at that
            # level may be luck), an overload of latency or timeouts: it is over. Forget the
            # ceiling and grow at full speed again (a new overload sets a new one), from the
            # probe's start: its invocations are the fresh evidence a first step would wait for.
            ramp = math.ceil(self.poller_ramp_per_s * max(0.0, now - memory.probe_started_at))
            target = clamp(min(math.floor(probed * self.max_growth), probed + ramp), params)
            memory = replace(memory, ceiling=0, broke_at=0, probe_streak=0)
        return self._committed(replace(situation, memory=memory), pulse, target, expired=expired)

    def _committed(
        self, situation: AdaptiveSituation, pulse: WindowStats, target: int, *, expired: bool
    ) -> AdaptiveVerdict:
        """A passed probe's level committed as ``target`` (``expired``: its ceiling is gone)."""
        state, memory, now = situation.state, situation.memory, situation.now
        ceiling = memory.ceiling
        return move(
            target,
            rising(target, situation.params),
            f"Probe passed: pressure {pulse.pressure_rate:.1%} at "
            f"{memory.probe_base + memory.probe_step}"
            f"{'; the ceiling has expired' if expired else ''}. "
            f"Scaled from {state.concurrency} -> {target}.",
            replace(
                memory,
                ceiling=max(ceiling, ceiling_above(target)) if ceiling else 0,
                probe_backoff_s=self.probe_backoff_s[0],
                next_probe_at=now,
                judge_at=0.0,
                probe_step=0,
            ),
            pulse,
            breaches=0,
            wake_at=0.0,
        )

    def back_off(self, situation: AdaptiveSituation, pulse: WindowStats) -> AdaptiveVerdict:
        """A failed probe: the probed level is the ceiling; a big step is retried smaller at
        once, a step of one waits until its cost fits the budget.

        A failed pulse costs the calls it had rejected; spending at most ``probe_budget`` of
        the goodput on them gives the wait (within ``probe_backoff_s``): a queue far above one
        invocation's worth probes often (recovery is found within seconds), a small one rarely.
        """
        state, memory, now = situation.state, situation.memory, situation.now
        params = situation.params
        probed = memory.probe_base + memory.probe_step
        low, high = self.probe_backoff_s
        if memory.probe_step > 1:
            backoff = memory.probe_backoff_s or low
            next_probe_at = now
        else:
            goodput = pulse.ok / pulse_span_s(memory)
            cost = pulse.pressure
            # A probe that cost nothing (too slow, or too little telemetry) may try again soon.
            wait = cost / (self.probe_budget * goodput) if goodput else (high if cost else low)
            backoff = min(high, max(low, wait))
            next_probe_at = now + self.spread(situation, backoff)
        judged = pulse.requests >= params.min_samples
        verdict = (
            f"pressure {pulse.pressure_rate:.1%} at {probed}" if judged else "too little telemetry"
        )
        # A pulse too little reported says nothing of its level: what is known to break stays.
        ceiling, broke_at = memory.ceiling, memory.broke_at
        if judged:
            ceiling, broke_at = (min(ceiling, probed) if ceiling else probed), probed
        failed = replace(
            memory,
            ceiling=ceiling,
            broke_at=broke_at,
            ceiling_refused=pulse.pressure_rate >= self.clean_below and refused(pulse),
            probe_backoff_s=backoff,
            probe_streak=0,
            next_probe_at=next_probe_at,
            judge_at=0.0,
            probe_step=0,
        )
        return hold(
            state,
            f"Probe failed ({verdict}); next probe in {next_probe_at - now:.0f}s. Holding at "
            f"{state.concurrency}.",
            failed,
            pulse,
            wake_at=0.0,
        )

    def spread(self, situation: AdaptiveSituation, backoff_s: float) -> float:
        """The wait before the next probe, spread by up to ``probe_jitter`` either way.

        Queues sharing a downstream would otherwise probe in step (and a probe's blind seconds
        would fall at the same phase every cycle). The spread comes from a hash of the queue
        and the time, so the same inputs give the same decision.
        """
        base = backoff_s or self.probe_backoff_s[0]
        digest = zlib.crc32(f"{situation.state.queue}:{situation.now:.3f}".encode())
        unit = digest / 0xFFFFFFFF * 2.0 - 1.0
        return base * (1.0 + self.probe_jitter * unit)


def backlog_decides(memory: AdaptiveMemory, stats: WindowStats) -> bool:
    """Whether the messages waiting can decide ``Probing.backlog_ends_first`` on ``stats``:
    refused calls set the ceiling (each refusal sends a message back a visibility timeout
    later), and some invocation reported its duration (the pace the backlog drains at)."""
    return memory.ceiling_refused and stats.timed_samples > 0


def reporting_lag(situation: AdaptiveSituation) -> float:
    """How far the telemetry trails the decision: now less the newest report's event time
    (0: nothing reported). About the shortest telemetry delay while the queue runs."""
    newest = situation.window.newest_event_time()
    return 0.0 if newest is None else max(0.0, situation.now - newest)


def pulse_stats(memory: AdaptiveMemory, window: WindowSnapshot) -> WindowStats:
    """Whole seconds from the pulse's start to its end: invocations started under the raised
    cap, and the base level running beside them."""
    return window.stats(math.floor(memory.probe_started_at), memory.probe_ended_at)


def before_pulse(memory: AdaptiveMemory, window: WindowSnapshot) -> WindowStats:
    """As many whole seconds of invocation starts just before the pulse as ``pulse_stats``
    reads: the base level running, and reported at least as fully as the pulse's own (they
    are older). Once the pulse's invocations have all reported, their busy time is at least
    theirs where the poller fills the base level (the pulse ran more)."""
    start = math.floor(memory.probe_started_at)
    seconds = math.ceil(memory.probe_ended_at) - start
    return window.stats(start - seconds, start)


def pulse_span_s(memory: AdaptiveMemory) -> float:
    """How long the evidence ``pulse_stats`` reads lasts (at least a second)."""
    return max(1.0, memory.probe_ended_at - math.floor(memory.probe_started_at))


def overload_beneath(memory: AdaptiveMemory, pulse: WindowStats, params: PolicyParams) -> bool:
    """The pulse's invocations met more pressure than its raise can explain (at most the
    raised share of the calls, T1 beside): an overload at the base level that began during the
    probe, which the base's own evidence shows only a settle period later."""
    raised_share = memory.probe_step / (memory.probe_base + memory.probe_step)
    return pulse.requests >= params.min_samples and pulse.pressure_rate >= params.t1 + raised_share


def refused(stats: WindowStats) -> bool:
    """At most half of the pressure in ``stats`` is timeouts: the rest is calls the downstream
    refused (429, 503), each of which a level above the capacity pays for at once."""
    return stats.pressure >= 2 * stats.timed_out
