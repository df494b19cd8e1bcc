"""Records into the batches a Kinesis event source mapping would deliver."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from load.recording import RecordedLine


@dataclass(frozen=True, slots=True)
class Batch:
    time: float
    shard: str
    records: tuple[RecordedLine, ...]


def kinesis_batches(
    records: Iterable[RecordedLine], batch_size: int, window_s: float
) -> list[Batch]:
    """Group records into the batches a Kinesis ESM would deliver, in delivery order.

    Per shard, in sequence order: a batch opens with the first record not yet delivered and
    closes when it holds
    ``batch_size`` records (delivered at that record's arrival) or when ``window_s`` has passed
    since it opened (delivered then). Shards are independent; batches of different shards are
    delivered in time order (shard id breaks ties). A shard's next batch opens only after the
    previous one was delivered, as Lambda processes one batch per shard at a time.
    """
    by_shard: dict[str, list[RecordedLine]] = {}
    for record in records:
        by_shard.setdefault(record.shard, []).append(record)
    batches: list[Batch] = []
    for shard, shard_records in by_shard.items():
        # A shard delivers in sequence order, whatever the approximate arrival stamps say.
        ordered = sorted(shard_records, key=lambda r: int(r.sequence))
        index = 0
        while index < len(ordered):
            opened = ordered[index].arrival
            closes = opened + window_s
            end = index + 1
            while end < len(ordered) and end - index < batch_size:
                if ordered[end].arrival > closes:
                    break
                end += 1
            chunk = tuple(ordered[index:end])
            delivered = chunk[-1].arrival if len(chunk) == batch_size else closes
            batches.append(Batch(delivered, shard, chunk))
            index = end
    batches.sort(key=lambda batch: (batch.time, batch.shard, int(batch.records[0].sequence)))
    return batches
