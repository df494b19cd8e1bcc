"""Execution environments for the simulator's aggregated telemetry (docs/simulator.md): the
worker's documents per environment, one per queue and second of invocation starts
(``worker.aggregate``), behind ``simulate(..., aggregated_telemetry=True)``.

Each queue's function has its environments; an invocation takes the lowest-numbered one free
(Lambda reuses a warm environment; which one is not documented, and the lowest keeps the
fewest warm, so after a cut the highest go idle, holding their last second until they run
again or the run ends). An environment holds, per second of invocation start, the sum of its
invocations' samples, and lets a second's go at the end of the first invocation after which
the next is not expected to start within that second, as the worker does.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from typing import TypeVar

from controller.model import Sample
from load.sim.trace import TelemetryDelivery

_Number = TypeVar("_Number", int, float)


class Environments:
    """The execution environments of every queue's function, and the telemetry they hold."""

    def __init__(self) -> None:
        self._free: dict[str, list[int]] = {}
        self._made: dict[str, int] = {}
        # Per (queue, environment): per second of invocation start, the samples summed; and
        # when its last invocation ended.
        self._held: dict[tuple[str, int], dict[int, Sample]] = {}
        self._last_ended: dict[tuple[str, int], float] = {}

    def take(self, queue: str) -> int:
        """An environment for a new invocation of ``queue``'s function."""
        free = self._free.setdefault(queue, [])
        if free:
            return heapq.heappop(free)
        made = self._made.get(queue, 0)
        self._made[queue] = made + 1
        return made

    def ended(self, environment: int, sample: Sample, now: float) -> list[Sample]:
        """The invocation that ``sample`` reports ended at ``now`` (the controller's epoch
        seconds) in ``environment``: the documents its environment writes now."""
        key = (sample.queue, environment)
        heapq.heappush(self._free[sample.queue], environment)
        held = self._held.setdefault(key, {})
        started_at = sample.started_at
        last_ended = self._last_ended.get(key)
        self._last_ended[key] = now
        waited = math.inf if last_ended is None else max(started_at - last_ended, 0.0)
        second = math.floor(started_at)
        known = held.get(second)
        held[second] = sample if known is None else summed(known, sample)
        passed = [start for start in held if start + 1 <= now + waited]
        return [_as_document(held.pop(start), start) for start in sorted(passed)]

    def drain(self) -> list[Sample]:
        """Every second still held (the run ended), oldest first."""
        documents = [
            _as_document(sample, start)
            for held in self._held.values()
            for start, sample in held.items()
        ]
        self._held.clear()
        return sorted(documents, key=lambda document: document.event_time)


def as_aggregated(
    deliveries: Iterable[TelemetryDelivery], ended_at: float
) -> list[TelemetryDelivery]:
    """Per-invocation telemetry of a run that ended at ``ended_at`` re-encoded as aggregating
    workers write the same invocations: each queue's invocations take environments as the
    simulator gives them (the lowest free one, from each invocation's start to its end), and a
    document arrives when the document of the invocation whose end wrote it arrived (the delay
    is the write's, as the simulator draws it); what is still held arrives at the end, as the
    simulator completes its telemetry. Oldest first."""
    given = list(deliveries)
    environments = Environments()
    taken: dict[int, int] = {}
    # Each invocation's start and end, in time order; at one moment ends first (an
    # environment freed then is free for a start then), but an invocation's own end after its
    # start.
    moments = sorted(
        [(delivery.sample.started_at, 1, index) for index, delivery in enumerate(given)]
        + [
            (sample.event_time, 0 if sample.event_time > sample.started_at else 2, index)
            for index, sample in enumerate(delivery.sample for delivery in given)
        ]
    )
    written = []
    for moment, kind, index in moments:
        delivery = given[index]
        if kind == 1:
            taken[index] = environments.take(delivery.sample.queue)
            continue
        for document in environments.ended(taken.pop(index), delivery.sample, moment):
            written.append(TelemetryDelivery(delivery.arrival, document))
    written += [TelemetryDelivery(ended_at, document) for document in environments.drain()]
    return sorted(written, key=lambda delivery: delivery.arrival)


def summed(first: Sample, second: Sample) -> Sample:
    """Two invocations' samples of one queue as one document's: counts and sums added, the
    largest Retry-After, the later one's time and (when it has one) its announced limit, the
    one a window keeps."""
    later, earlier = (second, first) if second.event_time >= first.event_time else (first, second)
    announcer = later if later.quota_remaining is not None else earlier
    return Sample(
        queue=later.queue,
        event_time=later.event_time,
        requests=first.requests + second.requests,
        ok=first.ok + second.ok,
        throttled=first.throttled + second.throttled,
        server_errors=first.server_errors + second.server_errors,
        overloaded=_added(first.overloaded, second.overloaded),
        client_errors=first.client_errors + second.client_errors,
        latency_ms_sum=first.latency_ms_sum + second.latency_ms_sum,
        latency_count=first.latency_count + second.latency_count,
        retry_after_s=max(first.retry_after_s, second.retry_after_s),
        invocation_ms=_added(first.invocation_ms, second.invocation_ms),
        downstream=later.downstream if later.downstream == earlier.downstream else None,
        timed_out=first.timed_out + second.timed_out,
        quota_remaining=announcer.quota_remaining,
        quota_limit=announcer.quota_limit,
        quota_window_s=announcer.quota_window_s,
        quota_reset_s=(
            None
            if announcer.quota_reset_s is None
            else max(0.0, announcer.quota_reset_s + announcer.event_time - later.event_time)
        ),
        throttled_concurrency=first.throttled_concurrency + second.throttled_concurrency,
        throttled_rate=first.throttled_rate + second.throttled_rate,
        invocations=first.invocations + second.invocations,
    )


def _added(first: _Number | None, second: _Number | None) -> _Number | None:
    if first is None:
        return second
    return first if second is None else first + second


def _as_document(sample: Sample, start: int) -> Sample:
    """A held second as the document written for it: one invocation's as it is (its start
    is its time minus its duration), several with the second they started in."""
    if sample.invocations > 1:
        sample.started = float(start)
    return sample
