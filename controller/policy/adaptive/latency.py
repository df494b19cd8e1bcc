"""Overload that shows as latency: a downstream that slows down before it times out.

The level is the median, over the evidence's seconds of invocation starts, of each second's
mean call latency; only seconds with at least ``min_samples`` timed calls count, and at least
``latency_seconds`` of them are needed. A single slow call moves one second's mean, not the
median, and a heavy tail that does not depend on load moves every second alike, so neither
reads as a rise. The baseline is the lowest such second seen (the no-load latency, as far
as the queue has shown it). At ``1 + latency_tolerance`` times the baseline the level is cut
in proportion (Little's law: at the same throughput, the concurrency that fits is the one in
use times baseline x (1 + tolerance / 2) / level), by at most ``latency_cut_depth`` of it at
once; from ``1 + tolerance / 2`` growth stops, and a pulse probe whose calls are that slow
fails. Probes keep a level's own evidence short (every pulse is a change, and invocations
report only when they end), so its seconds may never be enough to judge it: a failed pulse's
calls as a whole (the base level ran beside the raise of one) are judged as the base level's
latency.

A latency that does not fall when the concurrency is cut, or that stays high at Cmin, does not
come from load: the downstream itself slowed down (a brownout). The baseline moves up to it,
so the queue is not held at its floor for a latency no concurrency would fix; timeouts, if
they come, are pressure like 429s. A latency with a part load does not add falls less than
Little's law says, which is why a cut is bounded: the check on the level it set tells load
from a downstream that slowed down before the queue is cut far below what fits.
"""

from __future__ import annotations

import math
from dataclasses import replace

from controller.policy.adaptive.memory import AdaptiveMemory, AdaptiveSituation, AdaptiveVerdict
from controller.policy.adaptive.sizing import Sizing
from controller.policy.base import clamp
from controller.settings import PolicyParams
from controller.window import WindowSnapshot, WindowStats


class Latency(Sizing):
    """Overload that shows as latency, cut as sizing cuts."""

    def rise(self, memory: AdaptiveMemory, latencies: list[float]) -> float:
        """The evidence's latency over the baseline (1.0: none, or too few seconds to say)."""
        if len(latencies) < self.latency_seconds or memory.latency_floor_ms <= 0:
            return 1.0
        ordered = sorted(latencies)
        middle = len(ordered) // 2
        median = (
            ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
        )
        return median / memory.latency_floor_ms

    def with_floor(self, situation: AdaptiveSituation, latencies: list[float]) -> AdaptiveMemory:
        """The memory with its baseline lowered to the fastest second of the evidence, or moved
        up to the evidence's latency when that latency does not come from load (see the
        module)."""
        state, memory = situation.state, situation.memory
        if not latencies:
            return memory
        floor = memory.latency_floor_ms
        latency_rise = self.rise(memory, latencies)
        # The last latency cut is checked on the evidence from the level it set (again after a
        # failed probe above it), for ``latency_check_s``: at another level, or later, the
        # latency is about another level or another load.
        checking = (
            memory.latency_cut_rise > 0
            and state.concurrency == memory.latency_cut_level
            and situation.now - memory.latency_cut_at <= self.latency_check_s
        )
        judged = len(latencies) >= self.latency_seconds
        # The cut left the latency within 10% of where it was: it did not fall.
        if checking and judged and latency_rise >= memory.latency_cut_rise * 0.9:
            # Moved so that this latency reads at the growth limit: held there, not cut again.
            floor = floor * latency_rise / self.holding_rise
        elif state.concurrency <= situation.params.cmin and latency_rise >= self.holding_rise:
            floor = floor * latency_rise
        elif floor <= 0 or min(latencies) < floor:
            floor = min(latencies)
        if checking and not judged:
            return replace(memory, latency_floor_ms=floor)
        return replace(
            memory,
            latency_floor_ms=floor,
            latency_cut_rise=0.0,
            latency_cut_at=0.0,
            latency_cut_level=0,
        )

    def too_slow(self, memory: AdaptiveMemory, stats: WindowStats) -> bool:
        """``stats``' calls as a whole are slow enough to stop growth (a pulse probe's
        check)."""
        mean = stats.mean_latency_ms
        limit = memory.latency_floor_ms * self.holding_rise
        return mean is not None and memory.latency_floor_ms > 0 and mean >= limit

    def slow_pulse(
        self, situation: AdaptiveSituation, failed: AdaptiveVerdict, pulse: WindowStats
    ) -> AdaptiveVerdict:
        """A failed probe whose base level's own evidence called for nothing: its pulse's
        calls, as a whole, are the base level's latency too (the base ran beside the raise of
        one); at the cutting rise they cut from the base level (see the module)."""
        memory, concurrency = failed.memory, situation.state.concurrency
        mean = pulse.mean_latency_ms
        if (
            mean is None
            or pulse.latency_count < situation.params.min_samples
            or memory.latency_floor_ms <= 0
            or concurrency <= situation.params.cmin
        ):
            return failed
        latency_rise = mean / memory.latency_floor_ms
        # A latency cut still waiting for its check is judged on its level's own evidence: cut
        # again on a pulse, a latency that is not load would be cut step after step.
        if latency_rise < self.cutting_rise or memory.latency_cut_rise > 0:
            return failed
        after_probe = replace(situation, memory=memory)
        return self.latency_cut(after_probe, pulse, float(concurrency), latency_rise)

    def latency_cut(
        self,
        situation: AdaptiveSituation,
        stats: WindowStats,
        running: float,
        latency_rise: float,
    ) -> AdaptiveVerdict:
        """Cut ``running`` invocations to the concurrency whose latency would sit half way to
        the tolerance, by at most ``latency_cut_depth`` of them."""
        memory, now = situation.memory, situation.now
        current = situation.state.concurrency
        # Little's law at a steady throughput; a latency with a part that load does not add
        # (the downstream's own) falls less than that, and a deeper cut would overshoot: the
        # check on the level it sets tells which it was.
        fitting = math.floor(
            running * max(1.0 - self.latency_cut_depth, self.holding_rise / latency_rise)
        )
        target = clamp(min(current - 1, fitting), situation.params)
        return self.cut_verdict(
            situation,
            replace(
                memory, latency_cut_rise=latency_rise, latency_cut_at=now, latency_cut_level=target
            ),
            stats,
            target,
            f"Latency overload: {latency_rise:.2f}x the no-load latency "
            f"({memory.latency_floor_ms:.0f} ms) >= {self.cutting_rise:.2f}x with about "
            f"{running:.1f} invocations in use. Scaled from {current} -> {target}.",
        )


def second_latencies(
    stats: WindowStats, window: WindowSnapshot, params: PolicyParams
) -> list[float]:
    """Each evidence second's mean call latency (ms), for seconds with enough timed calls."""
    return [
        bucket.latency_ms_sum / bucket.latency_count
        for _, bucket in window.seconds(stats.since, stats.until)
        if bucket.latency_count >= params.min_samples
    ]
