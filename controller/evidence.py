"""A Kinesis batch in, the controller's evidence out: per-(queue, second) totals.

The deployed controller reads the reduced stream (docs/architecture.md, "Shards"): each record
one queue's ``QueueSecond``s, decoded by ``controller.telemetry.reduced``. A record of raw
telemetry (a CloudWatch Logs payload, as recordings, replay and the benchmarks hold) is reduced
here with the reducer's own core, so the controller decides on the same evidence either way.

Redelivery, whatever the record: a record at or below the last sequence number ingested from
its partition (shard and partition key: Lambda keeps order per partition key, also with a
parallelization factor, but not across keys) is left out; a reduced record already windowed is
recognised by its id, a log event already reduced by its key.

Catching up (with a ``StreamHistory``): Lambda hands a shard's batches to whichever container
is free, so a container may not have seen the records of a queue that went to others since.
Before a batch, it reads the shard back from where it last left off (or ``CATCH_UP_SPAN_S``
before now) up to the batch's first record: that history is windowed, not decided (another
container decided it). A container remembers, per shard, the sequence number below which it
has windowed every record. A catch-up that does not complete names the batch's queues to be
started afresh, as a cold container would (docs/architecture.md, "Scaling out the
controller").
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.book import Count
from controller.cache import LruCache
from controller.constants import (
    CACHED_PARTITIONS,
    CACHED_RECORD_IDS,
    CACHED_SHARDS,
    CATCH_UP_SPAN_S,
)
from controller.ports import StreamHistory, StreamStart
from controller.reduce import Reducer, Reduction
from controller.telemetry import DecodeResult, SkipReason, TelemetryDecoder, reduced
from controller.telemetry.records import record_bytes
from controller.window import QueueSecond

Partition = tuple[str, str]


@dataclass(slots=True)
class Reading:
    """One batch read: the evidence to window and what to remember once it is windowed."""

    evidence: list[QueueSecond] = field(default_factory=list)
    # Caught up on: evidence other containers were handed, to window without deciding it; the
    # queues to start afresh (their shard could not be read back); per shard, the sequence
    # number below which every record is now read.
    history: list[QueueSecond] = field(default_factory=list)
    restarted: set[str] = field(default_factory=set)
    read_below: dict[str, int] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)
    # Samples the reducing left out by time (counted as the loop counts its own).
    dropped: Counter[Count] = field(default_factory=Counter)
    redelivered: int = 0
    positions: list[tuple[Partition, int]] = field(default_factory=list)
    reduction: Reduction = field(default_factory=Reduction)
    record_ids: dict[str, float] = field(default_factory=dict)

    @property
    def documents(self) -> int:
        """The worker documents the evidence sums."""
        return sum(queue_second.totals.samples for queue_second in self.evidence)


class EvidenceReader:
    """What a warm controller container knows of the records it has read."""

    def __init__(
        self, decoder: TelemetryDecoder, retention_s: float, history: StreamHistory | None = None
    ) -> None:
        """Without ``history`` no shard is read back: one container reads every batch."""
        self.decoder = decoder
        self.reducer = Reducer(retention_s)
        self._history = history
        self._ingested: LruCache[Partition, int] = LruCache(CACHED_PARTITIONS)
        self._windowed_ids: LruCache[str, float] = LruCache(CACHED_RECORD_IDS)
        # Per shard: (the sequence number below which every record was read here, when).
        self._read_below: LruCache[str, tuple[int, float]] = LruCache(CACHED_SHARDS)

    def read(self, records: Sequence[Any], now: float, deadline: float = math.inf) -> Reading:
        """The evidence in ``records`` not read before, and what the shards they come from
        held that this container had not read (with a history); never raises."""
        reading = Reading()
        telemetry = DecodeResult(skipped=reading.skipped)
        if self._history is not None:
            for record in self._catch_up(self._history, records, now, deadline, reading):
                # Redelivered or already windowed here: nothing to count, it was counted.
                self._take(record, now, reading, reading.history, Counter(), None)
        for record in records:
            self._take(record, now, reading, reading.evidence, reading.skipped, telemetry)
        reading.reduction = self.reducer.reduce(telemetry, now)
        reading.evidence.extend(reading.reduction.seconds)
        reading.dropped = reading.reduction.dropped
        return reading

    def _take(
        self,
        record: Any,
        now: float,
        reading: Reading,
        into: list[QueueSecond],
        skipped: Counter[str],
        telemetry: DecodeResult | None,
    ) -> None:
        """One record's evidence into ``into``, unless read before; raw telemetry into
        ``telemetry`` (``None``: left out, as read back from the reduced stream)."""
        partition, sequence = position(record)
        if sequence is not None:
            if sequence <= self._ingested_at(partition):
                reading.redelivered += telemetry is not None
                return
            reading.positions.append((partition, sequence))
        sequence_number, raw = record_bytes(record, skipped)
        if raw is None:
            return
        if not reduced.is_reduced(raw):
            if telemetry is not None:
                decode = self.decoder.decode_record_data
                decode(raw, sequence_number=sequence_number, into=telemetry)
            return
        decoded = reduced.decode(raw, skipped)
        if decoded is None:
            return
        if decoded.record_id in reading.record_ids or decoded.record_id in self._windowed_ids:
            skipped[SkipReason.DUPLICATE_RECORD] += 1
            return
        reading.record_ids[decoded.record_id] = max(
            (queue_second.event_time for queue_second in decoded.seconds), default=now
        )
        into.extend(decoded.seconds)

    def _catch_up(
        self,
        history: StreamHistory,
        records: Sequence[Any],
        now: float,
        deadline: float,
        reading: Reading,
    ) -> list[Any]:
        """The records of each shard in ``records`` that came before the batch and this
        container has not read: from where it left off the shard, when that is recent, else
        from ``CATCH_UP_SPAN_S`` before ``now``."""
        first: dict[str, int] = {}
        queues: dict[str, set[str]] = {}
        for record in records:
            (shard, key), sequence = position(record)
            if sequence is not None and sequence < first.get(shard, sequence + 1):
                first[shard] = sequence
            queues.setdefault(shard, set()).add(key)
        read_back: list[Any] = []
        for shard, below in first.items():
            known = self._read_below.get(shard)
            if known is not None and below <= known[0]:
                continue  # a batch retried: everything before it was read
            recent = known is not None and known[1] >= now - CATCH_UP_SPAN_S
            start = (
                StreamStart(sequence=known[0])
                if known is not None and recent
                else StreamStart(time=now - CATCH_UP_SPAN_S)
            )
            caught_up = history.read(shard, start, below, deadline)
            if caught_up.complete:
                read_back += caught_up.records
                reading.read_below[shard] = below
            else:
                reading.restarted |= queues[shard]
        return read_back

    def windowed(self, reading: Reading, now: float) -> None:
        """``reading``'s evidence is in the windows: remember it, so that a redelivery of any
        of it is not counted twice."""
        for partition, sequence in reading.positions:
            if sequence > self._ingested_at(partition):
                self._ingested[partition] = sequence
        for shard, below in reading.read_below.items():
            self._read_below[shard] = (below, now)
        for log_events in reading.reduction.log_events.values():
            self.reducer.forwarded(log_events, now)
        ids = self._windowed_ids
        for record_id, newest in reading.record_ids.items():
            ids[record_id] = newest
        horizon = now - self.reducer.retention_s
        ids.evict_oldest_while(lambda newest: newest < horizon)

    def _ingested_at(self, partition: Partition) -> int:
        sequence = self._ingested.get(partition)
        return -1 if sequence is None else sequence


def position(record: Any) -> tuple[Partition, int | None]:
    """((shard, partition key), sequence number as an integer): sequence numbers are never
    compared as text."""
    if not isinstance(record, Mapping):
        return ("", ""), None
    shard = str(record.get("eventID", "")).split(":", 1)[0]
    kinesis = record.get("kinesis")
    if not isinstance(kinesis, Mapping):
        return (shard, ""), None
    partition = (shard, str(kinesis.get("partitionKey", "")))
    sequence = kinesis.get("sequenceNumber")
    if type(sequence) is int:
        return partition, sequence
    if type(sequence) is str and sequence.isdecimal():
        try:
            return partition, int(sequence)
        except ValueError:  # longer than int() reads (4,300 digits)
            pass
    return partition, None


__all__ = ["EvidenceReader", "Reading", "position"]
