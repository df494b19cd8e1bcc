"""Overload that shows as latency: cut only where the queue's own load causes it.

A call's latency rises for two reasons. The queue's own calls crowd the downstream: then, by
Little's law, the latency grows with the invocations in flight and falls when they fall. Or
the downstream itself is slow (a heavy tail, pauses, a brownout at unchanged capacity): then
no cut helps, and every cut only lengthens the drain. A latency's level or shape says nothing
of which it is; what a change of the concurrency did to it does.

So latency alone never cuts (on a downstream that never refuses, each invocation more still
adds throughput until calls time out). Timeouts at or above T1 are pressure, cut as sizing
cuts them. Timeouts under T1 cut only when the load evidence says the queue's own load causes
them: over the window's last ``load_span_s`` seconds of invocation starts that have all
reported, each second's concurrency (its invocations' busy time, Little's law) and its mean
call latency move together (correlation at least ``load_correlation``, on at least
``latency_seconds`` seconds). At an unchanged level a brownout's latency moves alone, and the
concurrency of a level the poller fills stays put, so neither reads as load; a cut, a raise or
the poller's ramp moves the concurrency, and a load-driven latency moves with it. The cut then
takes what the timeouts require: the accepted share of the invocations in use.

Every cut on timeouts remembers the latency they came at (growth and probes stop short of
it), and one made on the first reports of timeouts is corrected on each report more of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import StatisticsError, correlation, linear_regression

from controller.model import QueueStateName
from controller.policy.adaptive.memory import (
    AdaptiveMemory,
    AdaptiveSituation,
    AdaptiveVerdict,
    ceiling_above,
    move,
)
from controller.policy.adaptive.probing import refused
from controller.policy.adaptive.sizing import Sizing, correctable
from controller.policy.base import clamp
from controller.window import WindowStats


class Latency(Sizing):
    """Timeouts that the queue's own load causes, cut to the level under them."""

    def load_line(self, situation: AdaptiveSituation) -> LoadLine | None:
        """How the latency moved with the concurrency over the window's last ``load_span_s``
        seconds (``None``: it did not move with it; see the module)."""
        stats, params = situation.stats, situation.params
        if stats.newest_event_time is None:
            return None
        # The newest seconds are still being reported, fastest invocations first: both their
        # concurrency and their latency read low, together.
        until = stats.newest_event_time - 2.0 * stats.mean_invocation_s
        points = [
            (bucket.busy_ms / 1000.0, bucket.latency_ms_sum / bucket.latency_count)
            for _, bucket in situation.window.seconds(until - self.load_span_s, until)
            if bucket.latency_count >= params.min_samples and bucket.timed_samples
        ]
        if len(points) < self.latency_seconds:
            return None
        concurrency, latency = zip(*points, strict=True)
        try:
            if correlation(concurrency, latency) < self.load_correlation:
                return None
            slope, intercept = linear_regression(concurrency, latency)
        except StatisticsError:
            # A constant concurrency or latency: nothing moved together.
            return None
        return LoadLine(intercept, slope, max(latency))

    def slowed_downstream(self, situation: AdaptiveSituation) -> bool:
        """The level is at most the headroom's margin (``1 - timeout_headroom``) of the
        invocations the last cut was sized from: there the queue's own load explains at most
        that margin of a latency near the one timeouts cut at (on a load line through the
        origin, the steepest), and the rest is the downstream's, which no hold lowers."""
        running = situation.memory.cut_running
        return situation.state.concurrency <= (1.0 - self.timeout_headroom) * running

    def timeout_cut(self, situation: AdaptiveSituation) -> AdaptiveVerdict | None:
        """A cut when calls time out (rather than being refused) and the latency moved with the
        concurrency: to the level whose latency, on the load line, stays ``timeout_headroom``
        under the slowest second's (the timeout is at least that: a call waits no longer), at
        most to the accepted share of the invocations in use, by half of them at most
        (``None``: no such cut)."""
        state, stats, params = situation.state, situation.stats, situation.params
        current = state.concurrency
        if not stats.timed_out or refused(stats) or current <= params.cmin:
            return None
        line = self.load_line(situation)
        if line is None:
            return None
        running = self.in_use(situation)
        share = stats.timed_out / stats.requests
        under_timeout = (self.timeout_headroom * line.slowest_ms - line.intercept_ms) / line.slope
        fitting = min(self.fitting(running, share, stats.requests), under_timeout)
        target = clamp(min(current - 1, math.floor(max(fitting, running * params.beta))), params)
        return self.cut_verdict(
            situation,
            replace(
                correctable(situation, timeouts_onset(situation), running),
                timeout_latency_ms=line.slowest_ms,
            ),
            stats,
            target,
            f"Load-driven timeouts: {share:.1%} of calls timed out with about {running:.1f} "
            f"invocations in use, and the latency grew {line.slope:.0f} ms with each. Scaled "
            f"from {current} -> {target}.",
        )

    def cut_verdict(
        self,
        situation: AdaptiveSituation,
        memory: AdaptiveMemory,
        stats: WindowStats,
        target: int,
        reason: str,
        *,
        by_refusals: bool = False,
    ) -> AdaptiveVerdict:
        """``Sizing``'s cut, which also remembers, when calls timed out, the slowest second's
        mean latency: the client's timeout is at least that (a call that times out reports
        its timeout, so no second's mean exceeds it, however few its calls), so growth and
        probes stop short of it, wherever the cut came from. A cut that forgot it (the first
        reports of a timeout storm sized it by their share) probed back into the timeouts:
        5 -> 27 in 130 s on one draw, every call timing out again."""
        if stats.timed_out and not by_refusals:
            slowest = max(
                (
                    bucket.latency_ms_sum / bucket.latency_count
                    for _, bucket in situation.window.seconds(stats.since, stats.until)
                    if bucket.latency_count
                ),
                default=0.0,
            )
            memory = replace(memory, timeout_latency_ms=max(memory.timeout_latency_ms, slowest))
        return super().cut_verdict(
            situation, memory, stats, target, reason, by_refusals=by_refusals
        )

    def correction(self, situation: AdaptiveSituation) -> AdaptiveVerdict | None:
        """A cut sized on the first reports of timeouts, made again on all of them (``None``:
        none due; refusals are corrected as ``Sizing`` corrects them).

        The first reports of timeouts after a slowdown or a fall of the capacity are a few
        among a clean history: a cut on them takes a few invocations where every call times
        out (31 -> 28 on 8% of calls timed out, all of them timing out meanwhile), and the
        next waits for evidence from after it, a telemetry round trip of timeouts. So each
        batch that brings more reports of the invocations that started before the cut sizes
        it again on their share, as the cut sizes timeouts. Not once they hold
        ``correction_evidence`` times the calls it was sized on, as refusals wait: an
        invocation whose calls time out runs a timeout per message, so its reports come last,
        and the share grows as they arrive (latency family seed 101 draw 10: correcting at
        each doubling of the evidence took 60 -> 49 -> 47 -> 40 -> 28 -> 16 over 29 s while
        every call timed out). Each is made to a quarter of what ran at most, as the cut is,
        and, once the level is there, to the accepted share of those invocations: reports of
        the same invocations that keep timing out are no fresh evidence of the level, but the
        quarter of what ran gave nothing either."""
        refusals = super().correction(situation)
        if refusals is not None:
            return refusals
        state, memory, now = situation.state, situation.memory, situation.now
        if not self.correction_due(situation):
            return None
        before = situation.window.stats(memory.cut_evidence_since, memory.cut_at)
        if before.requests <= memory.cut_requests or not before.timed_out or refused(before):
            return None
        current, params = state.concurrency, situation.params
        running = memory.cut_running
        pressure, requests = before.pressure_rate, before.requests
        target = clamp(self.timeout_level(running, pressure, requests, params), params)
        past_quarter = target >= current
        if past_quarter:
            # The level is at the quarter of what ran already, and these reports show more of
            # those invocations' calls timed out: their accepted share, however deep. A cut
            # to the quarter and no further waited a telemetry round trip of timeouts for
            # fresh evidence (latency seed 7 draw 177: 56 -> 14 at 72% of the calls before it
            # timed out, 92% once all had reported; 14 -> 3 only 93 s later, on its own).
            target = clamp(math.floor(self.fitting(running, pressure, requests)), params)
        if target >= current:
            return None
        sized = ", past the quarter of them" if past_quarter else ""
        return move(
            target,
            QueueStateName.CRITICAL_BACKOFF,
            f"Correcting the cut: {before.timed_out / before.requests:.1%} of the "
            f"{before.requests} calls from before it timed out with about {running:.1f} "
            f"invocations in use{sized}. Scaled from {current} -> {target}.",
            replace(
                memory, ceiling=ceiling_above(target), cut_at=now, cut_requests=before.requests
            ),
            before,
            breaches=state.consecutive_breaches + 1,
            wake_at=0.0,
        )


def timeouts_onset(situation: AdaptiveSituation) -> float:
    """Where the evidence of a cut on the first timeouts begins, for its correction: the
    first second whose calls timed out (a load-driven cut may rest on a few among a clean
    history, none of them a second at T1)."""
    stats = situation.stats
    return next(
        (
            float(second)
            for second, bucket in situation.window.seconds(stats.since, stats.until)
            if bucket.timed_out
        ),
        stats.since,
    )


@dataclass(frozen=True, slots=True)
class LoadLine:
    """The mean call latency against the invocations in flight, second by second: ``intercept_ms
    + slope x invocations``, and the slowest second's mean latency."""

    intercept_ms: float
    slope: float
    slowest_ms: float
