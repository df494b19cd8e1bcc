"""Netflix concurrency-limits' ``onSample`` fed from QueueMesh's windows, shared by its ports.

Netflix's limits hear one sample per request (``rtt``, ``inflight``, ``didDrop``), and in
practice through ``WindowedLimit``, which folds a window of requests into one update: the
window's average RTT, its in-flight count and whether any request dropped. QueueMesh's
vetted evidence is such a window already (invocations since the last change settled, at least
``min_samples`` calls), so each decision is one windowed ``onSample``:

- ``rtt``: the calls' mean ``DownstreamLatency`` (a timed-out call reports its time too);
- ``inflight``: the concurrency in use, busy time over the span the evidence covers;
- ``didDrop``: any call answered 429 or 503, or timed out.

The limit itself is the mapping's ``MaximumConcurrency``: an invocation makes its calls in
turn, so concurrent invocations are concurrent downstream requests. docs/algorithms.md has
the mapping, each rule's source file and its defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Generic, TypeVar

from controller.model import QueueState, QueueStateName
from controller.policy.base import EvidenceJudge, Situation, Verdict, clamp
from controller.window import WindowStats

M = TypeVar("M")


@dataclass(frozen=True, slots=True)
class LimitSample:
    """One windowed ``onSample``: what a Netflix limit's ``_update`` receives."""

    rtt_ms: float | None
    inflight: float
    did_drop: bool


@dataclass(frozen=True, slots=True)
class LimitUpdate(Generic[M]):
    """What a port's ``_update`` makes of a sample: the new limit (a real number), the rule
    that gave it (for the reason) and the port's new memory."""

    limit: float
    rule: str
    memory: M


class WindowedLimit(EvidenceJudge[M]):
    """A Netflix limit behind the seam: each admissible evidence is one windowed sample,
    and ``update`` is the port's update rule. The verdict carries its limit out."""

    def judge(self, situation: Situation[M]) -> Verdict[M]:
        sample = limit_sample(situation.state, situation.stats)
        return peer_verdict(self.name, situation, sample, self.update(situation, sample))

    def update(self, situation: Situation[M], sample: LimitSample) -> LimitUpdate[M]:
        """The port's update rule on one sample."""
        raise NotImplementedError(f"{type(self).__name__} does not implement update")


def limit_sample(state: QueueState, stats: WindowStats) -> LimitSample:
    """The evidence as one sample. ``rtt_ms`` is ``None`` when no call reported a latency."""
    newest = stats.newest_event_time
    span_s = 0.0 if newest is None else newest - math.ceil(stats.since)
    in_use = stats.in_use(span_s)
    # Without durations the in-use concurrency is unknown: take the mapping's own, so a
    # limit is never held back as "app limited" for want of a measurement.
    inflight = float(state.concurrency) if in_use is None else in_use
    return LimitSample(stats.mean_latency_ms, inflight, stats.pressure > 0)


def estimated_limit(remembered: float, state: QueueState) -> float:
    """The limit as a real number: the remembered estimate, unless the mapping is elsewhere (a
    first decision, an operator's change or new bounds), when the limit is the mapping's."""
    return remembered if int(remembered) == state.concurrency else float(state.concurrency)


def log10_root(limit: int) -> int:
    """Netflix's ``Log10RootFunction``: ``max(1, floor(log10(limit)))`` below 1000, else the
    integer square root."""
    if limit >= 1000:
        return math.isqrt(limit)
    return max(1, int(math.log10(limit))) if limit > 0 else 1


def peer_verdict(
    algorithm: str, situation: Situation[M], sample: LimitSample, update: LimitUpdate[M]
) -> Verdict[M]:
    """The verdict for a port's new limit (its integer part, within Cmin..Cmax), with the
    contract's state names: a cut is THROTTLED, then CRITICAL_BACKOFF while cuts follow each
    other; a raise is RECOVERING, and HEALTHY at Cmax; a hold keeps the state."""
    state, params, stats = situation.state, situation.params, situation.stats
    current = state.concurrency
    target = clamp(int(update.limit), params)
    breaches: int | None = None
    name = state.state
    if target < current:
        breaches = state.consecutive_breaches + 1
        name = QueueStateName.THROTTLED if breaches == 1 else QueueStateName.CRITICAL_BACKOFF
    elif target > current:
        breaches = 0
        name = QueueStateName.HEALTHY if target >= params.cmax else QueueStateName.RECOVERING
    reason = f"{algorithm}: {describe(sample)}: {update.rule}; limit {current} -> {target}."
    return Verdict(
        target,
        name,
        reason,
        update.memory,
        consecutive_breaches=breaches,
        pressure_rate=stats.pressure_rate,
        success_rate=stats.success_rate,
    )


def describe(sample: LimitSample) -> str:
    """The sample as a reason's prefix: ``rtt 80ms, inflight 12.0, drop``."""
    rtt = "no rtt" if sample.rtt_ms is None else f"rtt {sample.rtt_ms:.0f}ms"
    drop = "drop" if sample.did_drop else "no drop"
    return f"{rtt}, inflight {sample.inflight:.1f}, {drop}"
