"""The demo's result: the timeline the view sampled and what the downstream, the queues and the
ledger counted, scored as the simulator scores a run."""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class QueueTimeline:
    """One queue's row per second of the run."""

    max_concurrency: list[int] = field(default_factory=list)
    in_flight: list[int] = field(default_factory=list)
    backlog: list[int] = field(default_factory=list)
    dead_lettered: list[int] = field(default_factory=list)
    state: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, list[Any]]:
        return {
            "max_concurrency": self.max_concurrency,
            "in_flight": self.in_flight,
            "backlog": self.backlog,
            "dead_lettered": self.dead_lettered,
            "state": self.state,
        }


@dataclass(slots=True)
class Timeline:
    """One row per second of the run, for the summary and the plot: the downstream's
    capacity, and each queue's (by the scenario's name) mapping, work and state."""

    t: list[float] = field(default_factory=list)
    capacity: list[float] = field(default_factory=list)
    queues: dict[str, QueueTimeline] = field(default_factory=dict)

    def in_flight(self) -> list[int]:
        """Every queue's invocations in flight, summed per row: they call the one downstream."""
        return [sum(row) for row in zip(*(q.in_flight for q in self.queues.values()), strict=True)]


@dataclass(frozen=True, slots=True)
class QueueRun:
    """What a queue of the run counted: its SQS name (``sqs_name``), its local poller, the
    messages its producer sent, and when its last message was done (``None``: not all were)."""

    sqs_name: str
    poller: Any
    messages_sent: int
    drained_at: float | None


def demo_result(
    scenario: Any,
    policy: str,
    duration_s: float,
    ended_at: float,
    runs: Mapping[str, QueueRun],
    downstream: Any,
    ledger: Any,
    timeline: Timeline,
    wall_s: float,
    origin: float,
    errors: list[str],
) -> dict[str, Any]:
    """The run's result: per queue (by the scenario's name, in its order) what the queue and
    the ledger counted; in total, those summed and what the one downstream answered."""
    from controller.settings import PolicyParams
    from load.oracle import ideal_drain_times, invocation_pace, paced_drain_time
    from load.scorecard import drain_ratio, reaction_time
    from load.sim.trace import QueueTrace

    main = scenario.queues[0]
    drains = [run.drained_at for run in runs.values()]
    drained_at = None if None in drains else max(d for d in drains if d is not None)
    counters = downstream.counters()
    last = max([*counters.per_second, int(ended_at)])
    ok_per_s = [
        counters.per_second[s].ok if s in counters.per_second else 0 for s in range(last + 1)
    ]
    timed_out_per_s = [
        counters.per_second[s].timed_out if s in counters.per_second else 0 for s in range(last + 1)
    ]
    # Rejected as the scorecard counts it: answered 429, or timed out on the client side.
    rejected_per_s = [
        counters.per_second[s].rejected + counters.per_second[s].timed_out
        if s in counters.per_second
        else 0
        for s in range(last + 1)
    ]
    calls_per_s = [ok + rejected for ok, rejected in zip(ok_per_s, rejected_per_s, strict=True)]
    epoch_origin = time.time() - (time.monotonic() - origin)
    ideal = ideal_drain_times(scenario)
    audits = {name: ledger.audit_trail(run.sqs_name) for name, run in runs.items()}
    queues: dict[str, dict[str, Any]] = {}
    for name, run in runs.items():
        _, queue_counters, depth = run.poller.snapshot()
        changes = [entry for entry in audits[name] if entry.new_value != entry.previous_value]
        detection = _detection_latencies(counters.first_rejection_after_drop, changes, epoch_origin)
        done = len(run.poller.done_ids)
        drained = run.drained_at
        queues[name] = {
            "messages_total": run.messages_sent,
            "messages_done": done,
            "dlq_messages": depth.dead_lettered,
            "messages_pending": depth.visible + depth.in_flight,
            "drain_s": _tenths(drained),
            "ideal_drain_s": _tenths(ideal.get(name)),
            "drain_ratio": drain_ratio(drained, ideal.get(name)),
            "esm_updates": len(changes),
            "detection_latency_s": max(detection) if detection else None,
            "detection_latencies_s": detection,
            "duplicate_deliveries": max(0, queue_counters.deleted - done),
            "peak_in_flight": queue_counters.peak_in_flight,
        }
    trace = QueueTrace(
        name=main.name,
        downstream=main.downstream,
        calls_per_s=calls_per_s,
        rejected_per_s=rejected_per_s,
    )
    t1 = PolicyParams().t1
    steps = scenario.downstreams[0].capacity_rps
    bounds = [start for start, _ in steps[1:]] + [math.inf]
    in_flight = timeline.in_flight()
    paces = [
        running_pace(calls_per_s, rejected_per_s, timeline.t, in_flight, start, until)
        for (start, _), until in zip(steps, bounds, strict=True)
    ]
    paced_ideal = (
        None
        if all(pace is None for pace in paces)
        else paced_drain_time(scenario, main.downstream, paces)
    )
    simulated_pace = invocation_pace(scenario, main)
    calls_total = sum(calls_per_s)
    calls_rejected = sum(rejected_per_s)
    every_change = sorted(
        (
            entry
            for trail in audits.values()
            for entry in trail
            if entry.new_value != entry.previous_value
        ),
        key=lambda entry: entry.timestamp,
    )
    detection = _detection_latencies(
        counters.first_rejection_after_drop, every_change, epoch_origin
    )
    summed = ("messages_total", "messages_done", "dlq_messages", "messages_pending")
    totals = {key: sum(queue[key] for queue in queues.values()) for key in summed} | {
        "calls_total": calls_total,
        "calls_rejected": calls_rejected,
        "calls_timed_out": sum(timed_out_per_s),
        "wasted_ratio": round(calls_rejected / calls_total, 4) if calls_total else 0.0,
        "drain_s": _tenths(drained_at),
        "ideal_drain_s": _tenths(ideal.get(main.name)),
        "drain_ratio": drain_ratio(drained_at, ideal.get(main.name)),
        "esm_updates": len(every_change),
        "reaction_s": reaction_time(trace, steps, t1, ended_at),
        "detection_latency_s": max(detection) if detection else None,
        "detection_latencies_s": detection,
        "duplicate_deliveries": sum(queue["duplicate_deliveries"] for queue in queues.values()),
        "peak_in_flight": sum(queue["peak_in_flight"] for queue in queues.values()),
    }
    states = ledger.get_states([run.sqs_name for run in runs.values()])
    return {
        "scenario": scenario.name,
        "policy": policy,
        "duration_s": duration_s,
        "ended_at_s": round(ended_at, 1),
        "wall_s": round(wall_s, 1),
        "sqs_queues": {name: run.sqs_name for name, run in runs.items()},
        "queues": queues,
        "totals": totals,
        "ledger": {name: _ledger_json(states.get(run.sqs_name)) for name, run in runs.items()},
        "transitions": sorted(
            (
                {
                    "t": round(entry.timestamp - epoch_origin, 1),
                    "queue": name,
                    "action": entry.action,
                    "previous": entry.previous_value,
                    "target": entry.new_value,
                    "reason": entry.reason,
                }
                for name, trail in audits.items()
                for entry in trail
            ),
            key=lambda transition: transition["t"],
        ),
        "timeline": {
            "t": timeline.t,
            "capacity_rps": timeline.capacity,
            "ok_per_s": ok_per_s,
            "rejected_per_s": rejected_per_s,
            "timed_out_per_s": timed_out_per_s,
            "queues": {name: queue.to_json() for name, queue in timeline.queues.items()},
        },
        "pace": {
            "from_s": [start for start, _ in steps],
            "calls_per_invocation_s": [None if pace is None else round(pace, 2) for pace in paces],
            "simulated_calls_per_invocation_s": (
                None if simulated_pace is None else round(simulated_pace, 2)
            ),
            "ideal_drain_s": _tenths(paced_ideal),
            "drain_ratio": drain_ratio(drained_at, paced_ideal),
        },
        "errors": errors[:20],
    }


def _tenths(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 1)


def _ledger_json(state: Any) -> dict[str, Any] | None:
    """A queue's state in the ledger, as the result shows it (``None``: never decided)."""
    if state is None:
        return None
    return {
        "state": state.state.value,
        "concurrency": state.concurrency,
        "previous_concurrency": state.previous_concurrency,
        "last_action": state.last_action.value,
        "last_reason": state.last_reason,
        "version": state.version,
    }


def running_pace(
    calls_per_s: Sequence[int],
    rejected_per_s: Sequence[int],
    times: Sequence[float],
    in_flight: Sequence[int],
    since: float,
    until: float,
) -> float | None:
    """Calls a second per running invocation, as this host ran them from ``since`` to
    ``until``: over the whole seconds in which invocations ran and the downstream refused none
    of their calls (so that their own pace, not the capacity, set how many they made), each
    second's invocations read from the view's sample nearest its middle (``None``: no such
    second)."""
    calls = invocations = 0
    for second, (made, refused) in enumerate(zip(calls_per_s, rejected_per_s, strict=True)):
        if not since <= second < until or refused or not made:
            continue
        middle = second + 0.5
        after = bisect.bisect_left(times, middle)
        nearby = [index for index in (after - 1, after) if 0 <= index < len(times)]
        if not nearby:
            continue
        running = in_flight[min(nearby, key=lambda index: abs(times[index] - middle))]
        if running:
            calls += made
            invocations += running
    return calls / invocations if invocations else None


def _detection_latencies(
    first_rejections: Mapping[float, float], changes: list[Any], epoch_origin: float
) -> list[float]:
    """Per capacity drop: from the first 429 after it to the first mapping cut after that (a
    probe's end lowers the mapping too, but it is no cut)."""
    from controller.model import Action

    latencies: list[float] = []
    for _, first_429 in sorted(first_rejections.items()):
        cuts = [
            entry.timestamp - epoch_origin
            for entry in changes
            if entry.new_value < entry.previous_value
            and entry.action != Action.PROBE_END
            and entry.timestamp - epoch_origin >= first_429
        ]
        if cuts:
            latencies.append(round(min(cuts) - first_429, 2))
    return latencies
