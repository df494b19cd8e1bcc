"""What one queue's share of an invocation's downstream calls answered: the counts the EMF
document carries, and the latencies as their sum and count (the aggregated form: docs/telemetry.md),
so a tally holds the same few numbers however many calls an invocation makes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from worker import announced


@dataclass(slots=True)
class Tally:
    """What one queue's share of an invocation's downstream calls answered."""

    requests: int = 0
    ok: int = 0
    throttled: int = 0
    server_errors: int = 0
    overloaded: int = 0
    client_errors: int = 0
    timed_out: int = 0
    # The calls with a latency (answered, or timed out after waiting): their sum and number.
    latency_ms_sum: float = 0.0
    latency_count: int = 0
    retry_after_s: float = 0.0
    downstreams: set[str] = field(default_factory=set)
    # The answer that announced the least remaining quota (``worker.announced``; kept by the
    # invocation's fold, the later on a tie): that remaining, and the answer's headers (the
    # client's object) with when it came (epoch seconds), read whole only once, by ``limit``;
    # and the last answer that announced one (``latest``), read only if it is not that one.
    # And the 429s that named a concurrency or a rate limit.
    least_remaining: float | None = None
    announcing: tuple[Any, float] | None = None
    latest: tuple[Any, float] | None = None
    throttled_concurrency: int = 0
    throttled_rate: int = 0

    def add(
        self,
        status: int | None,
        latency_ms: float | None,
        retry_after_s: float | None,
        downstream: str | None,
        timed_out: bool = False,
    ) -> None:
        """Count one call; ``status`` None is a transport failure (no answer), ``timed_out``
        one where the client gave up waiting (connect or read), with the time it waited."""
        # The common answer (2xx) is decided first: this runs on every call.
        if status is not None:
            if status < 300:
                if status < 200:
                    return  # 1xx is not an answer
                self.ok += 1
            elif status < 400:
                return  # a redirect is followed by the call that counts
            elif status == 429:
                self.throttled += 1
            elif status < 500:
                self.client_errors += 1
            else:
                self.server_errors += 1
                if status == 503:
                    self.overloaded += 1
        elif timed_out:
            self.timed_out += 1
            retry_after_s = None  # no answer to say it
        else:
            latency_ms = retry_after_s = None  # no answer, and no wait worth a latency
        self.requests += 1
        if downstream and downstream not in self.downstreams:
            self.downstreams.add(downstream)
        if latency_ms is not None:
            self.latency_ms_sum += latency_ms
            self.latency_count += 1
        if retry_after_s is not None and retry_after_s > self.retry_after_s:
            self.retry_after_s = retry_after_s

    def throttled_by(self, kind: str | None) -> None:
        """Count the kind of limit a 429 names (``announced.limit_kind``; None: none)."""
        if kind == announced.CONCURRENCY:
            self.throttled_concurrency += 1
        elif kind == announced.RATE:
            self.throttled_rate += 1

    @property
    def limit(self) -> announced.Limit | None:
        """The announced limit with the least remaining quota, or the latest one announced
        where it is the same limit announced later (``announced.newer``), or None."""
        if self.announcing is None:
            return None
        least = announced.limit(*self.announcing)
        if self.latest is None or self.latest is self.announcing or least is None:
            return least
        latest = announced.limit(*self.latest)
        return latest if announced.newer(latest, least) else least

    def absorb(self, other: Tally) -> None:
        """Add ``other``'s calls (another invocation's, for an aggregated document); the
        announced limit is kept apart (``worker.aggregate``)."""
        self.requests += other.requests
        self.ok += other.ok
        self.throttled += other.throttled
        self.server_errors += other.server_errors
        self.overloaded += other.overloaded
        self.client_errors += other.client_errors
        self.timed_out += other.timed_out
        self.latency_ms_sum += other.latency_ms_sum
        self.latency_count += other.latency_count
        self.retry_after_s = max(self.retry_after_s, other.retry_after_s)
        self.downstreams |= other.downstreams
        self.throttled_concurrency += other.throttled_concurrency
        self.throttled_rate += other.throttled_rate
