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
class _Bucket:
    samples: int = 0
    requests: int = 0
    ok: int = 0
    pressure: int = 0
    throttled: int = 0
    server_errors: int = 0
    client_errors: int = 0
    busy_ms: float = 0.0
    timed_samples: int = 0
    retry_after_s: float = 0.0
    newest_event_time: float = -math.inf


@dataclass(frozen=True, slots=True)
class WindowStats:
    """What one queue's telemetry says over ``[since, until)`` (invocation start times)."""

    since: float
    until: float
    samples: int = 0
    requests: int = 0
    ok: int = 0
    pressure: int = 0
    throttled: int = 0
    server_errors: int = 0
    client_errors: int = 0
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

    def in_use(self, span_s: float) -> float | None:
        """Concurrency really in use over ``span_s`` seconds: busy time / elapsed time."""
        if not self.timed_samples or span_s <= 0:
            return None
        return self.busy_ms / 1000.0 / span_s


class QueueWindow:
    def __init__(self, retention_s: float = 600.0) -> None:
        self._retention_s = retention_s
        self._buckets: dict[int, _Bucket] = {}
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
        bucket = self._buckets.setdefault(math.floor(sample.started_at), _Bucket())
        bucket.samples += 1
        bucket.requests += sample.requests
        bucket.ok += sample.ok
        bucket.pressure += sample.pressure
        bucket.throttled += sample.throttled
        bucket.server_errors += sample.server_errors
        bucket.client_errors += sample.client_errors
        if sample.invocation_ms is not None:
            bucket.busy_ms += sample.invocation_ms
            bucket.timed_samples += 1
        bucket.retry_after_s = max(bucket.retry_after_s, sample.retry_after_s)
        bucket.newest_event_time = max(bucket.newest_event_time, sample.event_time)
        if newest is None or sample.event_time > newest:
            self._newest_event_time = sample.event_time
            self._prune(sample.event_time - self._retention_s)
        return True

    def stats(self, since: float, until: float) -> WindowStats:
        """Totals of the one-second buckets starting in ``[since, until)``."""
        totals = _Bucket()
        for key, bucket in self._buckets.items():
            # A bucket straddling ``since`` is left out whole: invocations that began before a
            # change must not be judged under it.
            if not since <= key < until:
                continue
            totals.samples += bucket.samples
            totals.requests += bucket.requests
            totals.ok += bucket.ok
            totals.pressure += bucket.pressure
            totals.throttled += bucket.throttled
            totals.server_errors += bucket.server_errors
            totals.client_errors += bucket.client_errors
            totals.busy_ms += bucket.busy_ms
            totals.timed_samples += bucket.timed_samples
            totals.retry_after_s = max(totals.retry_after_s, bucket.retry_after_s)
            totals.newest_event_time = max(totals.newest_event_time, bucket.newest_event_time)
        return WindowStats(
            since=since,
            until=until,
            samples=totals.samples,
            requests=totals.requests,
            ok=totals.ok,
            pressure=totals.pressure,
            throttled=totals.throttled,
            server_errors=totals.server_errors,
            client_errors=totals.client_errors,
            busy_ms=totals.busy_ms,
            timed_samples=totals.timed_samples,
            retry_after_s=totals.retry_after_s,
            newest_event_time=totals.newest_event_time if totals.samples else None,
        )

    def _prune(self, horizon: float) -> None:
        cutoff = math.floor(horizon)
        for key in [key for key in self._buckets if key < cutoff]:
            del self._buckets[key]
