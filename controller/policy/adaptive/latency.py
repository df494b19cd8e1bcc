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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import StatisticsError, correlation, linear_regression

from controller.policy.adaptive.memory import AdaptiveMemory, AdaptiveSituation, AdaptiveVerdict
from controller.policy.adaptive.probing import refused
from controller.policy.adaptive.sizing import Sizing
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
            replace(situation.memory, timeout_latency_ms=line.slowest_ms),
            stats,
            target,
            f"Load-driven timeouts: {share:.1%} of calls timed out with about {running:.1f} "
            f"invocations in use, and the latency grew {line.slope:.0f} ms with each. Scaled "
            f"from {current} -> {target}.",
        )

    def near_timeout(self, memory: AdaptiveMemory, stats: WindowStats) -> bool:
        """``stats``' calls as a whole are within ``timeout_headroom`` of the latency at which
        load-driven timeouts last cut: no growth, and a probe fails."""
        mean = stats.mean_latency_ms
        limit = self.timeout_headroom * memory.timeout_latency_ms
        return mean is not None and memory.timeout_latency_ms > 0 and mean >= limit


@dataclass(frozen=True, slots=True)
class LoadLine:
    """The mean call latency against the invocations in flight, second by second: ``intercept_ms
    + slope x invocations``, and the slowest second's mean latency."""

    intercept_ms: float
    slope: float
    slowest_ms: float
