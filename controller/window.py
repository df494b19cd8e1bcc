"""Sliding windows of telemetry per queue, keyed by event time.

Samples land in one-second buckets by the time their invocation started, so late and
out-of-order deliveries count where they belong and evidence can be cut at the moment of the
last change. Memory is bounded by ``retention_s`` behind the newest sample seen. Deciders read
frozen copies only (``WindowStats``, ``WindowSnapshot``): no live bucket leaves the window.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, fields
from operator import itemgetter

from controller.model import Sample


@dataclass(frozen=True, slots=True)
class Quota:
    """The rate limit a queue's downstream announced (rate-limit headers) in one document.

    A fixed window: ``limit`` calls per ``window_s`` seconds, ``remaining`` of them left in
    the current window at ``event_time``, and that window ending at ``reset_at`` (epoch
    seconds). Any of them may be missing: a downstream sends what it sends.
    """

    downstream: str | None
    event_time: float
    remaining: float | None
    limit: float | None
    window_s: float | None
    reset_at: float | None

    @classmethod
    def announced_by(cls, sample: Sample) -> Quota | None:
        """The quota ``sample`` reports (``None``: it announced none)."""
        if sample.quota_limit is None and sample.quota_remaining is None:
            return None
        reset_s = sample.quota_reset_s
        reset_at = None if reset_s is None else sample.event_time + reset_s
        return cls(
            sample.downstream,
            sample.event_time,
            sample.quota_remaining,
            sample.quota_limit,
            sample.quota_window_s,
            reset_at,
        )

    @property
    def steady_rate(self) -> float | None:
        """Calls a second the quota sustains window after window (``None``: not announced)."""
        if self.limit is None or not self.window_s:
            return None
        return self.limit / self.window_s

    def sustained_rate(self, now: float) -> float | None:
        """Calls a second the quota sustains from ``now`` for all its users: the quota over
        its window, and, while the announced window lasts, no more than its remaining spread
        over the window's rest as it stood when announced (``None``: too little announced).
        Once ``reset_at`` has passed the quota is whole again: the steady rate."""
        steady = self.steady_rate
        if self.remaining is None or self.reset_at is None or self.reset_at <= now:
            return steady
        left = self.remaining / max(self.reset_at - self.event_time, 1e-3)
        return left if steady is None else min(steady, left)

    def resets_after(self, now: float) -> bool:
        """The quota's rest of the window binds now: it sustains less than its steady rate
        until ``reset_at``, which is still to come."""
        steady, rate = self.steady_rate, self.sustained_rate(now)
        return rate is not None and (steady is None or rate < steady)


@dataclass(slots=True)
class Totals:
    """The window's running count of some invocations' telemetry: one second's bucket, or a
    span of them being added up. ``count`` and ``add`` accumulate in place; deciders never see
    one, only the ``WindowStats`` it is frozen into.
    """

    # Invocations reported: a per-invocation document is one, an aggregated one each it sums.
    samples: int = 0
    requests: int = 0
    ok: int = 0
    pressure: int = 0
    throttled: int = 0
    throttled_concurrency: int = 0
    throttled_rate: int = 0
    server_errors: int = 0
    client_errors: int = 0
    timed_out: int = 0
    latency_ms_sum: float = 0.0
    latency_count: int = 0
    busy_ms: float = 0.0
    timed_samples: int = 0
    retry_after_s: float = 0.0
    newest_event_time: float | None = None

    def count(self, sample: Sample) -> None:
        """Add one worker document."""
        invocations = sample.invocations
        self.samples += invocations
        self.requests += sample.requests
        self.ok += sample.ok
        self.pressure += sample.pressure
        self.throttled += sample.throttled
        self.throttled_concurrency += sample.throttled_concurrency
        self.throttled_rate += sample.throttled_rate
        self.server_errors += sample.server_errors
        self.client_errors += sample.client_errors
        self.timed_out += sample.timed_out
        self.latency_ms_sum += sample.latency_ms_sum
        self.latency_count += sample.latency_count
        if sample.invocation_ms is not None:
            self.busy_ms += sample.invocation_ms
            self.timed_samples += invocations
        self.retry_after_s = max(self.retry_after_s, sample.retry_after_s)
        self._saw(sample.event_time)

    def add(self, other: WindowStats) -> None:
        """Add a frozen span's totals."""
        self.samples += other.samples
        self.requests += other.requests
        self.ok += other.ok
        self.pressure += other.pressure
        self.throttled += other.throttled
        self.throttled_concurrency += other.throttled_concurrency
        self.throttled_rate += other.throttled_rate
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

    def frozen(self, since: float, until: float, first_second: float | None) -> WindowStats:
        """These totals as the stats of ``[since, until)``."""
        counts = {name: getattr(self, name) for name in _TOTALS}
        return WindowStats(**counts, since=since, until=until, first_second=first_second)

    def _saw(self, event_time: float) -> None:
        if self.newest_event_time is None or event_time > self.newest_event_time:
            self.newest_event_time = event_time


_TOTALS = tuple(field.name for field in fields(Totals))


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowStats:
    """What one queue's telemetry says over ``[since, until)`` (invocation start times): a
    frozen copy of the window's ``Totals`` over that span."""

    samples: int
    requests: int
    ok: int
    pressure: int
    throttled: int
    # The 429s among ``throttled`` whose answer named a concurrency limit, or a rate limit.
    throttled_concurrency: int
    throttled_rate: int
    server_errors: int
    client_errors: int
    timed_out: int
    latency_ms_sum: float
    latency_count: int
    busy_ms: float
    timed_samples: int
    retry_after_s: float
    newest_event_time: float | None
    since: float
    until: float
    # The first second of invocation starts the window held (``None``: no samples): a queue
    # younger than the span has run only since then.
    first_second: float | None = None

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
    def invocation_pace(self) -> float | None:
        """The calls a second one invocation makes (``calls_per_invocation_second``)."""
        return calls_per_invocation_second(
            self.requests, self.samples, self.busy_ms, self.timed_samples
        )

    @property
    def mean_latency_ms(self) -> float | None:
        """The calls' mean round-trip time; ``None`` when no latency was reported."""
        return self.latency_ms_sum / self.latency_count if self.latency_count else None

    def in_use(self, span_s: float) -> float | None:
        """Concurrency really in use over ``span_s`` seconds: busy time / elapsed time."""
        if not self.timed_samples or span_s <= 0:
            return None
        return self.busy_ms / 1000.0 / span_s


Second = tuple[int, WindowStats]


def calls_per_invocation_second(
    requests: int, samples: int, busy_ms: float, timed_samples: int
) -> float | None:
    """The calls a second one invocation makes: ``requests`` over ``samples`` invocations,
    over their mean duration (``busy_ms`` over the ``timed_samples`` that reported one);
    ``None`` when none was made or no invocation reported its duration. The one formula of a
    queue's pace: over a span's stats (``WindowStats.invocation_pace``) and over sums a caller
    adds up itself (the group law, one pass per member)."""
    if not samples or not requests or not timed_samples or busy_ms <= 0:
        return None
    return requests / samples / (busy_ms / timed_samples / 1000.0)


@dataclass(frozen=True, slots=True)
class QueueSecond:
    """One queue's telemetry totals over the invocations that started in one second: what the
    reducing stage forwards (``controller.reduce``, the reduced record of docs/telemetry.md).

    A window adds it as it adds the samples it sums (to the bit, for counts), so a queue's
    evidence reduced on several shards is windowed whole by the one controller that reads the
    queue's partition. ``quota`` is the newest quota its downstream announced in that second,
    if it did (the one the window would have kept from the second's documents), and
    ``downstream`` the downstream the second's newest document naming one named.
    """

    queue: str
    second: int
    totals: WindowStats
    quota: Quota | None = None
    downstream: str | None = None

    @property
    def event_time(self) -> float:
        """The newest document's event time: where retention and staleness are judged."""
        newest = self.totals.newest_event_time
        return float(self.second) if newest is None else newest

    @property
    def started_at(self) -> float:
        return float(self.second)

    @property
    def documents(self) -> int:
        """Worker documents these totals sum."""
        return self.totals.samples


Evidence = Sample | QueueSecond


@dataclass(frozen=True, slots=True)
class WindowSnapshot:
    """A queue's window as it stood when a decision began, read only: each second of
    invocation starts with its frozen totals, in the order the window first saw them (the
    order its spans are added up in, so a snapshot's stats are the window's to the bit)."""

    buckets: tuple[Second, ...] = ()

    def stats(self, since: float, until: float) -> WindowStats:
        """Totals of the one-second buckets starting in ``[since, until)``."""
        return _span(self.buckets, since, until)

    def newest_event_time(self, since: float = -math.inf, until: float = math.inf) -> float | None:
        """The event time of the newest report among the buckets starting in ``[since,
        until)`` (``None``: none): their stats' ``newest_event_time``, without adding every
        other count up."""
        times = [stats.newest_event_time for key, stats in self.buckets if since <= key < until]
        return max((time for time in times if time is not None), default=None)

    def seconds(self, since: float, until: float) -> tuple[Second, ...]:
        """The one-second buckets starting in ``[since, until)`` with their seconds, oldest
        first."""
        within = [bucket for bucket in self.buckets if since <= bucket[0] < until]
        return tuple(sorted(within, key=itemgetter(0)))


def _span(buckets: Iterable[Second], since: float, until: float) -> WindowStats:
    total = Totals()
    first_second: int | None = None
    for key, bucket in buckets:
        # A bucket straddling ``since`` is left out whole: invocations that began before a
        # change must not be judged under it.
        if since <= key < until:
            total.add(bucket)
            if first_second is None or key < first_second:
                first_second = key
    return total.frozen(since, until, first_second)


class QueueWindow:
    def __init__(self, retention_s: float = 600.0) -> None:
        self._retention_s = retention_s
        self._buckets: dict[int, Totals] = {}
        # Each bucket's frozen copy, in the buckets' order; the seconds counted since the last
        # copy (an ordered set) are copied again when next read.
        self._frozen: dict[int, WindowStats] = {}
        self._stale: dict[int, None] = {}
        self._newest_event_time: float | None = None
        self._quota: Quota | None = None
        self._downstream: str | None = None
        self._downstream_named_at = -math.inf
        self.dropped_too_old = 0

    @property
    def newest_event_time(self) -> float | None:
        return self._newest_event_time

    @property
    def quota(self) -> Quota | None:
        """The newest quota (by event time) the queue's downstream announced."""
        return self._quota

    @property
    def downstream(self) -> str | None:
        """The downstream the queue's newest telemetry naming one named (``None``: none
        did): the queues naming one downstream are decided together (``controller.groups``)."""
        return self._downstream

    def __len__(self) -> int:
        """Buckets held: what retention bounds."""
        return len(self._buckets)

    def add(self, evidence: Evidence) -> bool:
        """Count ``evidence`` (one document, or one second's reduced totals); ``False`` (and
        counted) when it is older than the retention."""
        newest = self._newest_event_time
        event_time = evidence.event_time
        if newest is not None and event_time < newest - self._retention_s:
            self.dropped_too_old += 1
            return False
        if isinstance(evidence, QueueSecond):
            key = evidence.second
            self._buckets.setdefault(key, Totals()).add(evidence.totals)
            quota = evidence.quota
            named = evidence.downstream
        else:
            key = math.floor(evidence.started_at)
            self._buckets.setdefault(key, Totals()).count(evidence)
            # Checked here: most documents announce nothing and pay no call for it.
            announces = evidence.quota_limit is not None or evidence.quota_remaining is not None
            quota = Quota.announced_by(evidence) if announces else None
            named = evidence.downstream
        self._stale[key] = None
        if quota is not None:
            self._note_quota(quota)
        if named is not None and event_time >= self._downstream_named_at:
            self._downstream, self._downstream_named_at = named, event_time
        if newest is None or event_time > newest:
            self._newest_event_time = event_time
            self._prune(event_time - self._retention_s)
        return True

    def snapshot(self) -> WindowSnapshot:
        """The window as it stands, frozen."""
        return WindowSnapshot(tuple(self._fresh().items()))

    def stats(self, since: float, until: float) -> WindowStats:
        """Totals of the one-second buckets starting in ``[since, until)``."""
        return _span(self._fresh().items(), since, until)

    def _fresh(self) -> dict[int, WindowStats]:
        # A second first counted since the last copy is new to both dicts, and the stale set
        # keeps the order they were counted in: the copies stay in the buckets' order.
        for key in self._stale:
            self._frozen[key] = self._buckets[key].frozen(key, key + 1, key)
        self._stale.clear()
        return self._frozen

    def _note_quota(self, quota: Quota) -> None:
        if self._quota is None or quota.event_time >= self._quota.event_time:
            self._quota = quota

    def _prune(self, horizon: float) -> None:
        if self._quota is not None and self._quota.event_time < horizon:
            self._quota = None
        cutoff = math.floor(horizon)
        for key in [key for key in self._buckets if key < cutoff]:
            del self._buckets[key]
            self._frozen.pop(key, None)
            self._stale.pop(key, None)
