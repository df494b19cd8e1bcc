"""Sliding windows of telemetry per queue, keyed by event time.

Samples land in one-second buckets by the time their invocation started, so late and
out-of-order deliveries count where they belong and evidence can be cut at the moment of the
last change. Memory is bounded by ``retention_s`` behind the newest sample seen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controller.model import Sample


@dataclass(slots=True)
class Totals:
    """What some invocations' telemetry adds up to: one second's bucket, or a span of them.

    ``add`` and ``count`` accumulate in place; the window keeps one per second of invocation
    starts and sums them into a fresh ``WindowStats``.
    """

    samples: int = 0
    requests: int = 0
    ok: int = 0
    pressure: int = 0
    throttled: int = 0
    server_errors: int = 0
    client_errors: int = 0
    timed_out: int = 0
    latency_ms_sum: float = 0.0
    latency_count: int = 0
    busy_ms: float = 0.0
    timed_samples: int = 0
    retry_after_s: float = 0.0
    newest_event_time: float | None = None

    @property
    def pressure_rate(self) -> float:
        return self.pressure / self.requests if self.requests else 0.0

    @property
    def success_rate(self) -> float:
        return self.ok / self.requests if self.requests else 0.0

    @property
    def mean_invocation_s(self) -> float:
        """How long the invocations that reported their duration ran, on average (0: none)."""
        return self.busy_ms / self.timed_samples / 1000.0 if self.timed_samples else 0.0

    @property
    def mean_latency_ms(self) -> float | None:
        """The calls' mean round-trip time; ``None`` when no latency was reported."""
        return self.latency_ms_sum / self.latency_count if self.latency_count else None

    def count(self, sample: Sample) -> None:
        """Add one worker document."""
        self.samples += 1
        self.requests += sample.requests
        self.ok += sample.ok
        self.pressure += sample.pressure
        self.throttled += sample.throttled
        self.server_errors += sample.server_errors
        self.client_errors += sample.client_errors
        self.timed_out += sample.timed_out
        self.latency_ms_sum += sample.latency_ms_sum
        self.latency_count += sample.latency_count
        if sample.invocation_ms is not None:
            self.busy_ms += sample.invocation_ms
            self.timed_samples += 1
        self.retry_after_s = max(self.retry_after_s, sample.retry_after_s)
        self._saw(sample.event_time)

    def add(self, other: Totals) -> None:
        """Add another span's totals."""
        self.samples += other.samples
        self.requests += other.requests
        self.ok += other.ok
        self.pressure += other.pressure
        self.throttled += other.throttled
        self.server_errors += other.server_errors
        self.client_errors += other.client_errors
        self.timed_out += other.timed_out
        self.latency_ms_sum += other.latency_ms_sum
        self.latency_count += other.latency_count
        self.busy_ms += other.busy_ms
        self.timed_samples += other.timed_samples
        self.retry_after_s = max(self.retry_after_s, other.retry_after_s)
        if other.newest_event_time is not None:
            self._saw(other.newest_event_time)

    def _saw(self, event_time: float) -> None:
        if self.newest_event_time is None or event_time > self.newest_event_time:
            self.newest_event_time = event_time


@dataclass(slots=True, kw_only=True)
class WindowStats(Totals):
    """What one queue's telemetry says over ``[since, until)`` (invocation start times).

    A snapshot the window hands out: deciders read it and never change it.
    """

    since: float
    until: float
    # The first second of invocation starts the window held (``None``: no samples): a queue
    # younger than the span has run only since then.
    first_second: float | None = None

    def in_use(self, span_s: float) -> float | None:
        """Concurrency really in use over ``span_s`` seconds: busy time / elapsed time."""
        if not self.timed_samples or span_s <= 0:
            return None
        return self.busy_ms / 1000.0 / span_s


class QueueWindow:
    def __init__(self, retention_s: float = 600.0) -> None:
        self._retention_s = retention_s
        self._buckets: dict[int, Totals] = {}
        self._newest_event_time: float | None = None
        self.dropped_too_old = 0

    @property
    def newest_event_time(self) -> float | None:
        return self._newest_event_time

    def __len__(self) -> int:
        """Buckets held: what retention bounds."""
        return len(self._buckets)

    def add(self, sample: Sample) -> bool:
        """Count ``sample``; ``False`` (and counted) when it is older than the retention."""
        newest = self._newest_event_time
        if newest is not None and sample.event_time < newest - self._retention_s:
            self.dropped_too_old += 1
            return False
        self._buckets.setdefault(math.floor(sample.started_at), Totals()).count(sample)
        if newest is None or sample.event_time > newest:
            self._newest_event_time = sample.event_time
            self._prune(sample.event_time - self._retention_s)
        return True

    def stats(self, since: float, until: float) -> WindowStats:
        """Totals of the one-second buckets starting in ``[since, until)``."""
        stats = WindowStats(since=since, until=until)
        for key, bucket in self._buckets.items():
            # A bucket straddling ``since`` is left out whole: invocations that began before a
            # change must not be judged under it.
            if since <= key < until:
                stats.add(bucket)
                if stats.first_second is None or key < stats.first_second:
                    stats.first_second = key
        return stats

    def seconds(self, since: float, until: float) -> list[tuple[int, Totals]]:
        """The one-second buckets starting in ``[since, until)`` with their seconds, oldest
        first (read only)."""
        return [(key, self._buckets[key]) for key in sorted(self._buckets) if since <= key < until]

    def _prune(self, horizon: float) -> None:
        cutoff = math.floor(horizon)
        for key in [key for key in self._buckets if key < cutoff]:
            del self._buckets[key]
