"""The reducing stage's pure core: decoded telemetry in, per-(queue, second) totals out.

CloudWatch Logs spreads one queue's documents over every shard of the telemetry stream (by log
stream, or at random), so no one invocation reading it sees a queue whole. The reducer reads
any shard at any parallelization factor, sums what it decoded into one ``QueueSecond`` per
queue and second of invocation starts (the window's own arithmetic, ``Totals``), and forwards
them partitioned by each queue's group (its CONFIG ``Group``, read through the ledger and
cached by ``ConfiguredGroups``, else the downstream it names, else the queue): the controller
that reads a queue's partition sees all of its evidence, and all of its group's
(docs/architecture.md, "Shards").

Summing loses which log event said what, so redelivered log events are recognised here, before
the sum: a ``Reducer`` remembers the log events it has forwarded, as the controller remembered
those it windowed, and drops a re-sent one (counted ``duplicate_log_event``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from controller.book import Count
from controller.cache import LruCache
from controller.constants import (
    CACHED_LOG_EVENTS,
    CACHED_QUEUES,
    CONFIG_TTL_S,
    MAX_CLOCK_SKEW_S,
    WINDOW_RETENTION_S,
)
from controller.model import Sample
from controller.ports import ConfigSource, LedgerError
from controller.telemetry import DecodeResult, LogEventKey, SkipReason
from controller.window import QueueSecond, Quota, Totals


@dataclass(slots=True)
class Reduction:
    """One batch reduced: its seconds (by queue, then second), the log events summed into
    each queue's (to remember once forwarded) and the samples left out by time (counted)."""

    seconds: list[QueueSecond] = field(default_factory=list)
    log_events: dict[str, list[LogEventKey]] = field(default_factory=dict)
    dropped: Counter[Count] = field(default_factory=Counter)


def reduce_samples(samples: Iterable[Sample]) -> list[QueueSecond]:
    """The samples summed per queue and second of invocation start, ordered by queue then
    second."""
    totals: dict[tuple[str, int], Totals] = {}
    quotas: dict[tuple[str, int], Quota] = {}
    # The downstream named by each second's newest document naming one, and that time.
    named: dict[tuple[str, int], tuple[float, str]] = {}
    for sample in samples:
        key = (sample.queue, math.floor(sample.started_at))
        bucket = totals.get(key)
        if bucket is None:
            bucket = totals[key] = Totals()
        bucket.count(sample)
        if sample.downstream is not None:
            known_name = named.get(key)
            if known_name is None or sample.event_time >= known_name[0]:
                named[key] = (sample.event_time, sample.downstream)
        quota = Quota.announced_by(sample)
        if quota is not None:
            known = quotas.get(key)
            # The newest, as a window keeps it from the documents themselves.
            if known is None or quota.event_time >= known.event_time:
                quotas[key] = quota
    return [
        QueueSecond(
            queue,
            second,
            totals[queue, second].frozen(second, second + 1, second),
            quotas.get((queue, second)),
            named[queue, second][1] if (queue, second) in named else None,
        )
        for queue, second in sorted(totals)
    ]


class Reducer:
    """A warm reducer container: reduces decoded batches, remembering the log events it
    forwarded (at most ``capacity``, none older than ``retention_s``) so that a re-sent one is
    not summed twice."""

    def __init__(
        self, retention_s: float = WINDOW_RETENTION_S, capacity: int = CACHED_LOG_EVENTS
    ) -> None:
        self.retention_s = retention_s
        self._forwarded: LruCache[LogEventKey, float] = LruCache(capacity)

    def reduce(self, decoded: DecodeResult, now: float) -> Reduction:
        """Sum ``decoded``'s samples not yet forwarded (duplicates counted in its ``skipped``),
        leaving out those stamped too far from ``now`` to be evidence: a document stamped in
        the future would make its whole second look newer than it is."""
        reduction = Reduction()
        earliest, latest = now - self.retention_s, now + MAX_CLOCK_SKEW_S
        kept: list[Sample] = []
        in_batch: set[LogEventKey] = set()
        forwarded = self._forwarded
        skipped = decoded.skipped
        for sample, log_event in zip(decoded.samples, decoded.log_event_keys, strict=True):
            if log_event is not None:
                if log_event in in_batch or log_event in forwarded:
                    skipped[SkipReason.DUPLICATE_LOG_EVENT] += 1
                    continue
                in_batch.add(log_event)
            if sample.event_time > latest:
                reduction.dropped[Count.SAMPLES_FROM_FUTURE] += 1
                continue
            if sample.event_time < earliest:
                reduction.dropped[Count.SAMPLES_TOO_OLD] += 1
                continue
            kept.append(sample)
            if log_event is not None:
                reduction.log_events.setdefault(sample.queue, []).append(log_event)
        reduction.seconds = reduce_samples(kept)
        return reduction

    def forwarded(self, log_events: Sequence[LogEventKey], now: float) -> None:
        """These log events' sums reached the controller: remember them until they would be
        too old to window anyway."""
        remembered = self._forwarded
        for log_event in log_events:
            remembered[log_event] = log_event[2]
        horizon = now - self.retention_s
        remembered.evict_oldest_while(lambda event_time: event_time < horizon)


@dataclass(frozen=True, slots=True)
class GroupsRead:
    """The CONFIG ``Group`` of each queue asked for that has one, and the queues whose CONFIG
    item could not be read (``fault`` says why): keyed by the group last read for them, else
    as if they had none, this batch."""

    groups: dict[str, str]
    unread: tuple[str, ...] = ()
    fault: str = ""


class ConfiguredGroups:
    """Each queue's CONFIG ``Group``, as the reducer keys its records by: read through the
    ledger (one ``read_configs`` per batch for the queues not known, a BatchGetItem per 100),
    each answer (a group, or none: no ``Group``, not registered, not decodable) kept for at
    most ``capacity`` queues until the end of the ``ttl_s``-long period of epoch time it was
    read in. Every reducer container forgets its answers at the same moments, so a new or
    changed ``Group`` moves the queue's key in all of them at their first batch after the
    next period's start (the whole minute), not at as many moments as there are containers:
    only a change written while they read it anew (about a batch) can leave them apart, for
    one period. A read that fails costs only the queues it was for, this batch: they keep the
    group this container last read for them, else are keyed by their telemetry (the
    downstream they name, else the queue); reported in ``GroupsRead.unread``, and read again
    with the next batch."""

    def __init__(
        self, ledger: ConfigSource, ttl_s: float = CONFIG_TTL_S, capacity: int = CACHED_QUEUES
    ) -> None:
        self.ttl_s = ttl_s
        self._ledger = ledger
        # queue -> (the period it was read in, its group); ``None``: it has none.
        self._known: LruCache[str, tuple[int, str | None]] = LruCache(capacity)

    def read(self, queues: Iterable[str], now: float, deadline: float) -> GroupsRead:
        """The groups of ``queues`` at ``now`` (epoch seconds); the ledger's calls end by
        ``deadline`` (``time.monotonic()``)."""
        period = math.floor(now / self.ttl_s)
        groups: dict[str, str] = {}
        unknown = []
        for queue in sorted(set(queues)):
            known = self._known.get(queue)
            if known is None or known[0] != period:
                unknown.append(queue)
            elif known[1] is not None:
                groups[queue] = known[1]
        if not unknown:
            return GroupsRead(groups)
        self._ledger.set_deadline(deadline)
        try:
            configs = self._ledger.read_configs(unknown).valid
        except LedgerError as fault:
            # An older answer still says where the queue's records went: keep them there.
            for queue in unknown:
                known = self._known.get(queue)
                if known is not None and known[1] is not None:
                    groups[queue] = known[1]
            return GroupsRead(groups, tuple(unknown), str(fault))
        for queue in unknown:
            config = configs.get(queue)
            group = None if config is None else config.group
            self._known[queue] = (period, group)
            if group is not None:
                groups[queue] = group
        return GroupsRead(groups)
