"""The catch-up on the embedded AWS's Kinesis: containers taking a reduced shard's batches in
turn read it back with real ``GetShardIterator`` (``AT_TIMESTAMP``, ``AT_SEQUENCE_NUMBER``) and
``GetRecords`` calls, and decide what one container decides (docs/architecture.md, "Scaling out
the controller")."""

from __future__ import annotations

import base64

from controller.actuator import InMemoryActuator
from controller.ledger import InMemoryLedger
from controller.policy import memory_type
from controller.stream import KinesisHistory, lambda_record
from load.clock import HandClock
from tests.factories import mapped, registered
from tests.unit.test_catch_up import START, _batches, _container, _run


def test_containers_taking_a_shards_batches_in_turn_decide_as_one_does() -> None:
    from stack.local.emulator import EmbeddedAws

    one = _run(1, None)
    with EmbeddedAws() as aws:
        kinesis = aws.client("kinesis")
        kinesis.create_stream(StreamName="reduced", ShardCount=2)
        ledger = registered(InMemoryLedger(memory_types=memory_type))
        actuator = mapped(InMemoryActuator())
        clock = HandClock(START)
        apps = [
            _container(ledger, actuator, clock, history=KinesisHistory("reduced", kinesis))
            for _ in range(3)
        ]
        decisions = []
        shard = None
        for number, (at, event) in enumerate(_batches()):
            [record] = event["Records"]
            put = kinesis.put_record(
                StreamName="reduced",
                PartitionKey="orders",
                Data=base64.b64decode(record["kinesis"]["data"]),
            )
            shard = shard or put["ShardId"]
            assert put["ShardId"] == shard  # one queue, one shard
            iterator = kinesis.get_shard_iterator(
                StreamName="reduced",
                ShardId=shard,
                ShardIteratorType="AT_SEQUENCE_NUMBER",
                StartingSequenceNumber=put["SequenceNumber"],
            )["ShardIterator"]
            [read] = kinesis.get_records(ShardIterator=iterator, Limit=1)["Records"]
            clock.now = at
            batch = {"Records": [lambda_record(shard, read)]}
            decisions += apps[number % 3].process_kinesis(batch, 1e12).decisions
    assert [(d.new_state.last_evaluated_at, d.action.value, d.target) for d in decisions] == one
