"""What one queue's share of an invocation's downstream calls answered: the counts the EMF
document carries, and the latencies, held bounded however many calls an invocation makes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from worker import announced

# Latencies a tally holds: whenever that many have piled up, each pair becomes its mean (a value
# then stands for twice as many calls in a row), so however many calls an invocation makes a
# queue's tally holds at most this many; its EMF document sends at most 99.
LATENCIES_HELD = 4096  # even: the values pair up


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
    # In the order the calls came: each value the mean latency of ``latency_run`` calls in a row
    # (one call each until ``LATENCIES_HELD`` have been held), then the next run's calls so far.
    latencies_ms: list[float] = field(default_factory=list)
    latency_run: int = 1
    pending_latency_ms: float = 0.0  # their sum
    pending_latencies: int = 0
    retry_after_s: float = 0.0
    downstreams: set[str] = field(default_factory=set)
    # The answer that announced the least remaining quota (``worker.announced``): that
    # remaining, and the answer's headers (the client's object) with when it came (epoch
    # seconds), read whole only once, by ``limit``. And the 429s that named a concurrency or a
    # rate limit.
    least_remaining: float | None = None
    announcing: tuple[Any, float] | None = None
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
            self._add_latency(latency_ms)
        if retry_after_s is not None and retry_after_s > self.retry_after_s:
            self.retry_after_s = retry_after_s

    def announce(
        self, headers: Any, answered_at: float, remaining: float | None, kind: str | None
    ) -> None:
        """Take in what one answer announced (``announced.glance``): its headers, that came at
        ``answered_at`` (epoch seconds), the least ``remaining`` quota they announce and the
        ``kind`` of limit a 429 names."""
        if remaining is not None and (
            self.least_remaining is None or remaining <= self.least_remaining
        ):
            # On a tie the later answer's: the fresher reset.
            self.least_remaining, self.announcing = remaining, (headers, answered_at)
        if kind == announced.CONCURRENCY:
            self.throttled_concurrency += 1
        elif kind == announced.RATE:
            self.throttled_rate += 1

    @property
    def limit(self) -> announced.Limit | None:
        """The announced limit with the least remaining quota, or None."""
        return None if self.announcing is None else announced.limit(*self.announcing)

    def _add_latency(self, latency_ms: float) -> None:
        if self.latency_run == 1:
            self.latencies_ms.append(latency_ms)
        else:
            self.pending_latency_ms += latency_ms
            self.pending_latencies += 1
            if self.pending_latencies < self.latency_run:
                return
            self.latencies_ms.append(self.pending_latency_ms / self.latency_run)
            self.pending_latency_ms, self.pending_latencies = 0.0, 0
        if len(self.latencies_ms) >= LATENCIES_HELD:
            held = self.latencies_ms
            self.latencies_ms = [
                (first + second) / 2 for first, second in zip(held[::2], held[1::2], strict=True)
            ]
            self.latency_run *= 2

    @property
    def latency_count(self) -> int:
        """The calls with a latency."""
        return self.latency_run * len(self.latencies_ms) + self.pending_latencies

    def latency_runs(self) -> Iterator[tuple[float, int]]:
        """The latencies in the order the calls came, as (sum in ms, calls) of runs of calls in
        a row: one call each until ``LATENCIES_HELD`` have been held."""
        for mean in self.latencies_ms:
            yield mean * self.latency_run, self.latency_run
        if self.pending_latencies:
            yield self.pending_latency_ms, self.pending_latencies
