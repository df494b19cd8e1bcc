"""The scorecard of one simulated run: the contract's keys, per queue and in total."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from load.oracle import ideal_drain_times
from load.sim.engine import QueueTrace, SimResult
from load.sim.scenario import Schedule

# The rejected share behind ``reaction_s`` is taken over the last few seconds of calls (those
# since the drop only), so one clean second amid a storm does not end it.
REACTION_WINDOW_S = 5
DEFAULT_T1 = 0.05


def scorecard(result: SimResult, t1: float = DEFAULT_T1) -> dict[str, Any]:
    """``{"scenario", "policy", "seed", "queues": {name: {...}}, "totals": {...}}``."""
    scenario = result.scenario
    ideals = ideal_drain_times(scenario)
    queues: dict[str, dict[str, Any]] = {}
    for spec in scenario.queues:
        trace = result.queues[spec.name]
        capacity = scenario.downstream(spec.downstream).capacity_rps
        queues[spec.name] = _queue_score(
            trace,
            ideals.get(spec.name),
            result.esm_updates.get(spec.name, 0),
            reaction_time(trace, capacity, t1, result.ended_at),
        )
    return {
        "scenario": scenario.name,
        "policy": result.policy,
        "seed": result.seed,
        "queues": queues,
        "totals": _totals(list(queues.values())),
    }


def reaction_time(
    trace: QueueTrace, capacity: Schedule, t1: float, ended_at: float
) -> float | None:
    """Worst time from a capacity drop until the queue's rolling rejected share is below T1.

    ``None`` when the downstream's capacity never drops during the run. Windows without calls
    are skipped; a share still at or above T1 when the run ends (or no calls since the drop)
    counts as the time from the drop to the end.
    """
    worst: float | None = None
    drops = [
        start
        for (start, value), (_, before) in zip(capacity[1:], capacity, strict=False)
        if value < before and start < ended_at
    ]
    last_second = len(trace.calls_per_s) - 1
    for drop in drops:
        first = int(drop)
        reacted: float | None = None
        for second in range(first, min(last_second, int(ended_at)) + 1):
            since = max(first, second - REACTION_WINDOW_S + 1)
            calls = sum(trace.calls_per_s[since : second + 1])
            rejected = sum(trace.rejected_per_s[since : second + 1])
            # Seconds without calls say nothing (an empty or paused queue): skip them.
            if calls and rejected / calls < t1:
                reacted = second + 1 - drop
                break
        if reacted is None:
            reacted = ended_at - drop
        worst = reacted if worst is None else max(worst, reacted)
    return worst


def _queue_score(
    trace: QueueTrace, ideal: float | None, esm_updates: int, reaction: float | None
) -> dict[str, Any]:
    drained = trace.messages_done == trace.messages_total and trace.pending_at_end == 0
    drain = trace.last_done_at if drained else None
    if drained and drain is None:
        drain = 0.0
    return {
        "messages_total": trace.messages_total,
        "messages_done": trace.messages_done,
        "dlq_messages": trace.dlq_messages,
        "messages_pending": trace.pending_at_end,
        "calls_total": trace.calls_total,
        "calls_rejected": trace.calls_rejected,
        "calls_5xx_noise": trace.calls_noise,
        "wasted_ratio": _ratio(trace.calls_rejected, trace.calls_total),
        "drain_s": _round(drain, 2),
        "ideal_drain_s": _round(ideal, 2),
        "drain_ratio": _drain_ratio(drain, ideal),
        "esm_updates": esm_updates,
        "reaction_s": _round(reaction, 2),
    }


def _totals(queues: Sequence[dict[str, Any]]) -> dict[str, Any]:
    summed = {
        key: sum(queue[key] for queue in queues)
        for key in (
            "messages_total",
            "messages_done",
            "dlq_messages",
            "messages_pending",
            "calls_total",
            "calls_rejected",
            "calls_5xx_noise",
            "esm_updates",
        )
    }
    drains = [queue["drain_s"] for queue in queues]
    drain = None if any(value is None for value in drains) else max(drains, default=0.0)
    ideals = [queue["ideal_drain_s"] for queue in queues]
    ideal = None if any(value is None for value in ideals) else max(ideals, default=0.0)
    reactions = [queue["reaction_s"] for queue in queues if queue["reaction_s"] is not None]
    return {
        **summed,
        "wasted_ratio": _ratio(summed["calls_rejected"], summed["calls_total"]),
        "drain_s": drain,
        "ideal_drain_s": ideal,
        "drain_ratio": _drain_ratio(drain, ideal),
        "reaction_s": max(reactions) if reactions else None,
    }


def _ratio(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def _drain_ratio(drain: float | None, ideal: float | None) -> float | None:
    if drain is None or ideal is None or ideal <= 0:
        return None
    return round(drain / ideal, 3)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
