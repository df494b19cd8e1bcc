"""The ideal drain time: each downstream run at exactly its capacity, given the arrivals.

A fluid model: messages arrive at the scheduled rates (the backlog at time 0), and a
downstream processes them at its capacity whenever any wait, instantly (latency ignored), with
no waste. Queues sharing a downstream are pooled: the oracle judges their combined demand, and
each of them gets that pool's drain time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from load.sim.scenario import QueueSpec, Scenario, Schedule, value_at


def ideal_drain_times(scenario: Scenario) -> dict[str, float | None]:
    """Per queue, the earliest time every message could have been done (``None``: never)."""
    drains: dict[str, float | None] = {}
    for downstream in scenario.downstreams:
        queues = [spec for spec in scenario.queues if spec.downstream == downstream.name]
        if not queues:
            continue
        drain = pooled_drain_time(downstream.capacity_rps, queues, scenario.duration_s)
        for spec in queues:
            drains[spec.name] = drain
    return drains


def pooled_drain_time(
    capacity: Schedule, queues: Sequence[QueueSpec], duration_s: float
) -> float | None:
    """When a capacity schedule is done with the queues' pooled backlog and arrivals.

    Arrivals stop at ``duration_s``; the capacity's last step lasts for ever, so a drain after
    the scenario's end is still a time (the oracle is not bound by the run's length).
    """
    breakpoints = {0.0, duration_s}
    breakpoints.update(start for start, _ in capacity)
    for spec in queues:
        breakpoints.update(start for start, _ in spec.arrivals_rps if start < duration_s)
    starts = sorted(point for point in breakpoints if point <= duration_s)
    backlog = float(sum(spec.backlog for spec in queues))
    drained_at: float | None = 0.0 if backlog == 0 else None
    for index, start in enumerate(starts):
        end = starts[index + 1] if index + 1 < len(starts) else math.inf
        arriving = (
            sum(value_at(spec.arrivals_rps, start) for spec in queues)
            if start < duration_s
            else 0.0
        )
        rate = value_at(capacity, start)
        if backlog > 0:
            net = rate - arriving
            if net > 0 and start + backlog / net <= end:
                emptied_at = start + backlog / net
                backlog = 0.0
                # Once the backlog is gone, arrivals are served as they come: the last one is
                # done when they stop, at the segment's end.
                drained_at = end if arriving > 0 else emptied_at
                continue
            if math.isinf(end):
                return None
            backlog += (arriving - rate) * (end - start)
            continue
        if arriving > rate:
            if math.isinf(end):
                return None
            backlog = (arriving - rate) * (end - start)
        elif arriving > 0:
            drained_at = end
    return drained_at


def invocation_pace(scenario: Scenario, spec: QueueSpec) -> float | None:
    """The calls a second one of ``spec``'s invocations makes in the simulator: its batch's
    calls one after another at the downstream's latency, plus the invocation's overhead
    (``None``: a latency that changes over the run or with the load). A heavy tail
    (``latency_tail``) keeps it: its factor's mean is 1, and over many invocations the calls a
    second are the batch over the mean invocation time."""
    downstream = scenario.downstream(spec.downstream)
    if downstream.latency_model != "constant" or len(downstream.latency_ms) != 1:
        return None
    return pace(spec.batch_size, downstream.latency_ms[0][1], spec.invocation_overhead_ms)


def pace(batch_size: int, latency_ms: float, invocation_overhead_ms: float) -> float:
    """The calls a second one invocation makes: its batch's calls one after another at
    ``latency_ms`` each, plus the invocation's overhead."""
    busy_s = batch_size * latency_ms / 1000.0
    return batch_size / (busy_s + invocation_overhead_ms / 1000.0)


def paced_drain_time(
    scenario: Scenario, downstream: str, paces: Sequence[float | None]
) -> float | None:
    """The ideal drain of the queues on ``downstream`` when their invocations make at most
    ``paces[i]`` calls a second each during the capacity schedule's step ``i``: the step's
    capacity, capped at what their ``max_concurrency`` invocations together send at that pace
    (the oracle's own ideal assumes they can send it all; a step without a pace keeps it)."""
    queues = [spec for spec in scenario.queues if spec.downstream == downstream]
    callers = sum(spec.max_concurrency for spec in queues)
    steps = scenario.downstream(downstream).capacity_rps
    capacity = tuple(
        (start, rate if pace is None else min(rate, callers * pace))
        for (start, rate), pace in zip(steps, paces, strict=True)
    )
    return pooled_drain_time(capacity, queues, scenario.duration_s)
