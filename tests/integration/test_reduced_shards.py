"""The reduced stream on the embedded AWS's Kinesis: the queues sharing a downstream land on
one shard, however their names hash, so one controller lane decides their group whole
(docs/architecture.md, "Shards: evidence whole per queue")."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from typing import Any

from controller.reduce import reduce_samples
from controller.stream import KinesisSink
from controller.telemetry import reduced
from tests.factories import sample

# Names Kinesis hashes onto three different shards of four when each is its own key.
GROUP = ("orders", "payments-api", "demo-api")


def _shard_of_each_queue(kinesis: Any, stream: str) -> dict[str, str]:
    where: dict[str, str] = {}
    for shard in kinesis.list_shards(StreamName=stream)["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for record in kinesis.get_records(ShardIterator=iterator)["Records"]:
            decoded = reduced.decode(record["Data"], Counter())
            assert decoded is not None
            where[decoded.seconds[0].queue] = shard["ShardId"]
    return where


def test_a_group_spread_by_its_names_lands_on_one_shard() -> None:
    from stack.local.emulator import EmbeddedAws

    with EmbeddedAws() as aws:
        kinesis = aws.client("kinesis")
        for stream in ("by-queue", "reduced"):
            kinesis.create_stream(StreamName=stream, ShardCount=4)
        samples = [replace(sample(q, 1000.9), downstream="payments") for q in GROUP]
        records = reduced.encode(reduce_samples([*samples, sample("invoices", 1000.9)]), "s:1")
        # Keyed by the queue, as before: the group spread over shards.
        kinesis.put_records(
            StreamName="by-queue",
            Records=[{"Data": r.data, "PartitionKey": r.queue} for r in records],
        )
        assert len({_shard_of_each_queue(kinesis, "by-queue")[q] for q in GROUP}) == 3
        assert KinesisSink("reduced", kinesis).put(records, deadline=math.inf) == set()
        where = _shard_of_each_queue(kinesis, "reduced")
    assert set(where) == {*GROUP, "invoices"}
    assert len({where[q] for q in GROUP}) == 1
