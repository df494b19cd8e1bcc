"""A Kinesis batch in, the controller's evidence out: per-(queue, second) totals.

The deployed controller reads the reduced stream (docs/architecture.md, "Shards"): each record
one queue's ``QueueSecond``s, decoded by ``controller.telemetry.reduced``. A record of raw
telemetry (a CloudWatch Logs payload, as recordings, replay and the benchmarks hold) is reduced
here with the reducer's own core, so the controller decides on the same evidence either way.

Redelivery, whatever the record: a record at or below the last sequence number ingested from
its partition (shard and partition key: Lambda keeps order per partition key, also with a
parallelization factor, but not across keys) is left out; a reduced record already windowed is
recognised by its id, a log event already reduced by its key.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.book import Count
from controller.cache import LruCache
from controller.constants import CACHED_PARTITIONS, CACHED_RECORD_IDS
from controller.reduce import Reducer, Reduction
from controller.telemetry import DecodeResult, SkipReason, TelemetryDecoder, reduced
from controller.telemetry.records import record_bytes
from controller.window import QueueSecond

Partition = tuple[str, str]


@dataclass(slots=True)
class Reading:
    """One batch read: the evidence to window and what to remember once it is windowed."""

    evidence: list[QueueSecond] = field(default_factory=list)
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

    def __init__(self, decoder: TelemetryDecoder, retention_s: float) -> None:
        self.decoder = decoder
        self.reducer = Reducer(retention_s)
        self._ingested: LruCache[Partition, int] = LruCache(CACHED_PARTITIONS)
        self._windowed_ids: LruCache[str, float] = LruCache(CACHED_RECORD_IDS)

    def read(self, records: Sequence[Any], now: float) -> Reading:
        """The evidence in ``records`` not read before; never raises."""
        reading = Reading()
        telemetry = DecodeResult(skipped=reading.skipped)
        for record in records:
            partition, sequence = position(record)
            if sequence is not None:
                if sequence <= self._ingested_at(partition):
                    reading.redelivered += 1
                    continue
                reading.positions.append((partition, sequence))
            sequence_number, raw = record_bytes(record, reading.skipped)
            if raw is None:
                continue
            if not reduced.is_reduced(raw):
                decode = self.decoder.decode_record_data
                decode(raw, sequence_number=sequence_number, into=telemetry)
                continue
            decoded = reduced.decode(raw, reading.skipped)
            if decoded is None:
                continue
            if decoded.record_id in reading.record_ids or decoded.record_id in self._windowed_ids:
                reading.skipped[SkipReason.DUPLICATE_RECORD] += 1
                continue
            reading.record_ids[decoded.record_id] = max(
                (queue_second.event_time for queue_second in decoded.seconds), default=now
            )
            reading.evidence.extend(decoded.seconds)
        reading.reduction = self.reducer.reduce(telemetry, now)
        reading.evidence.extend(reading.reduction.seconds)
        reading.dropped = reading.reduction.dropped
        return reading

    def windowed(self, reading: Reading, now: float) -> None:
        """``reading``'s evidence is in the windows: remember it, so that a redelivery of any
        of it is not counted twice."""
        for partition, sequence in reading.positions:
            if sequence > self._ingested_at(partition):
                self._ingested[partition] = sequence
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
