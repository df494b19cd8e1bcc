"""The reduced stream on the embedded AWS's Kinesis: the queues of one group (sharing a
downstream, or one CONFIG ``Group``) land on one shard, however their names hash, so one
controller lane decides their group whole (docs/architecture.md, "A group on one lane")."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from typing import Any

from controller.ledger import DynamoLedger, create_ledger_table
from controller.policy import memory_type
from controller.reduce import reduce_samples
from controller.reducer_app import ReducerApp
from controller.stream import KinesisSink
from controller.telemetry import reduced
from tests.factories import config, kinesis_event, sample

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


def test_a_group_made_by_config_alone_lands_on_one_shard() -> None:
    """The members name no downstream: the reducer reads their CONFIG ``Group`` from the
    ledger (the embedded DynamoDB) and keys them by it."""
    from stack.local.emulator import EmbeddedAws

    with EmbeddedAws() as aws:
        kinesis = aws.client("kinesis")
        kinesis.create_stream(StreamName="reduced", ShardCount=4)
        dynamodb = aws.client("dynamodb")
        ledger = DynamoLedger(
            create_ledger_table(dynamodb, "ledger"), dynamodb, memory_types=memory_type
        )
        for queue in GROUP:
            ledger.put_config(replace(config(queue), group="billing"))
        ledger.put_config(config("invoices"))
        app = ReducerApp(KinesisSink("reduced", kinesis), ledger, clock=lambda: 1010.0)
        batch = kinesis_event([sample(queue, 1000.9) for queue in (*GROUP, "invoices")])
        assert app.handle(batch, None) == {"batchItemFailures": []}
        where = _shard_of_each_queue(kinesis, "reduced")
    assert set(where) == {*GROUP, "invoices"}
    assert len({where[q] for q in GROUP}) == 1
