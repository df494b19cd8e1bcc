from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest

from controller.ledger import GROUP_INDEX, WAKE_UP_INDEX, DynamoLedger
from controller.model import AuditEntry, AuditEvent, QueueConfig, QueueState, QueueStateName
from controller.policy import memory_type
from stack.local.deployment import Deployment
from stack.local.emulator import EmbeddedAws
from tests.paths import ROOT

DOWNSTREAM = "http://127.0.0.1:9/"


@pytest.fixture(scope="module")
def aws() -> Iterator[EmbeddedAws]:
    with EmbeddedAws() as emulator:
        yield emulator


@pytest.fixture(scope="module")
def deployment(aws: EmbeddedAws) -> Deployment:
    return aws.deploy(parameters={"ExampleDownstreamUrl": DOWNSTREAM})


def test_stack_is_created_through_cloudformation_with_the_templates_wiring(
    aws: EmbeddedAws, deployment: Deployment
) -> None:
    (queue,) = deployment.queues
    mapping = aws.client("lambda").get_event_source_mapping(UUID=queue.esm_uuid)
    assert mapping["EventSourceArn"] == queue.arn
    assert mapping["ScalingConfig"] == {"MaximumConcurrency": 100}
    assert mapping["State"] == "Enabled"
    worker = aws.client("lambda").get_function_configuration(FunctionName=queue.function_name)
    assert worker["Handler"] == "worker.wrapper.handler"
    assert worker["Environment"]["Variables"]["DOWNSTREAM_URL"] == DOWNSTREAM
    controller = aws.client("lambda").get_function_configuration(
        FunctionName=deployment.controller_function
    )
    assert controller["Environment"]["Variables"]["QUEUEMESH_TABLE"] == deployment.table_name
    redrive = aws.client("sqs").get_queue_attributes(
        QueueUrl=queue.url, AttributeNames=["RedrivePolicy"]
    )["Attributes"]["RedrivePolicy"]
    assert json.loads(redrive)["deadLetterTargetArn"] == queue.dlq_arn
    ttl = aws.client("dynamodb").describe_time_to_live(TableName=deployment.table_name)
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "ExpiresAt"
    assert any("SubscriptionFilter" in item for item in deployment.created_through_api)
    # The reducer reads the telemetry stream; the controller, the reduced one.
    functions = aws.client("lambda")
    reducer = functions.get_function_configuration(FunctionName=deployment.reducer_function)
    assert reducer["Handler"] == "controller.handler.reduce"
    variables = reducer["Environment"]["Variables"]
    assert variables["QUEUEMESH_REDUCED_STREAM"] == deployment.reduced_stream_name
    mapping = functions.get_event_source_mapping(UUID=deployment.reducer_esm_uuid)
    assert mapping["EventSourceArn"] == deployment.stream_arn
    controller = functions.get_event_source_mapping(UUID=deployment.controller_esm_uuid)
    assert controller["EventSourceArn"] == deployment.reduced_stream_arn
    assert deployment.reduced_stream_arn != deployment.stream_arn


def test_a_scheduled_rule_takes_no_put_event(aws: EmbeddedAws, deployment: Deployment) -> None:
    """The template's wake-up rule is scheduled: as in AWS, the controller's PutEvents does not
    reach it (moto's own matching would fail the call on the rule's Lambda target)."""
    events = aws.client("events")
    scheduled = [r for r in events.list_rules()["Rules"] if r.get("ScheduleExpression")]
    assert scheduled
    answer = events.put_events(
        Entries=[{"Source": "queuemesh", "DetailType": "QueueMesh Queue Paused", "Detail": "{}"}]
    )
    assert answer["FailedEntryCount"] == 0


def test_moto_does_not_consume_the_queue_itself(aws: EmbeddedAws, deployment: Deployment) -> None:
    sqs = aws.client("sqs")
    queue = deployment.queues[0]
    sqs.send_message(QueueUrl=queue.url, MessageBody="left alone")
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue.url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "1"
    sqs.purge_queue(QueueUrl=queue.url)


def test_worker_log_lines_reach_the_stream_through_the_subscription(
    aws: EmbeddedAws, deployment: Deployment
) -> None:
    logs = aws.client("logs")
    logs.create_log_stream(logGroupName=deployment.worker_log_group, logStreamName="probe")
    logs.put_log_events(
        logGroupName=deployment.worker_log_group,
        logStreamName="probe",
        logEvents=[{"timestamp": int(time.time() * 1000), "message": '{"probe": 1}'}],
    )
    kinesis = aws.client("kinesis")
    shard = kinesis.list_shards(StreamName=deployment.stream_name)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(
        StreamName=deployment.stream_name, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    records = kinesis.get_records(ShardIterator=iterator)["Records"]
    payload = json.loads(gzip.decompress(records[-1]["Data"]))
    assert payload["messageType"] == "DATA_MESSAGE"
    assert [event["message"] for event in payload["logEvents"]] == ['{"probe": 1}']


def test_the_deploy_runs_the_registrar_and_register_queue_writes_the_same_item(
    aws: EmbeddedAws, deployment: Deployment
) -> None:
    queue = deployment.queues[0]
    ledger = DynamoLedger(deployment.table_name, aws.client("dynamodb"), memory_types=memory_type)
    registered = QueueConfig(queue=queue.name, esm_uuid=queue.esm_uuid)
    assert ledger.list_configs() == [registered]
    assert any("ExampleQueueRegistration" in done for done in deployment.created_through_api)
    assert not any("Registration" in missing for missing in deployment.not_created)

    aws.register_queue(deployment, queue.name)
    assert ledger.list_configs() == [registered]
    item = aws.client("dynamodb").get_item(
        TableName=deployment.table_name,
        Key={"PK": {"S": f"QUEUE#{queue.name}"}, "SK": {"S": "CONFIG"}},
    )["Item"]
    assert item["EsmUuid"] == {"S": queue.esm_uuid}


def test_the_deployed_table_answers_the_ticks_wake_up_query(
    aws: EmbeddedAws, deployment: Deployment
) -> None:
    """The template's sparse indexes survive the deploy, so the tick's Queries work there."""
    client = aws.client("dynamodb")
    table = client.describe_table(TableName=deployment.table_name)["Table"]
    indexes = {index["IndexName"] for index in table["GlobalSecondaryIndexes"]}
    assert indexes == {WAKE_UP_INDEX, GROUP_INDEX}
    ledger = DynamoLedger(deployment.table_name, client, memory_types=memory_type)
    ledger.put_config(QueueConfig("woken", "esm-woken", group="billing"))
    assert ledger.group_members("billing") == ["woken"]
    state = QueueState("woken", "esm-woken", QueueStateName.HEALTHY, 2, 100, wake_at=1_000.0)
    ledger.commit(state, AuditEntry("woken", 900.0, AuditEvent.TRANSITION, 100, 2, "PAUSE", "p"))
    assert [due.queue for due in ledger.due_states(1_000.0)] == ["woken"]
    assert ledger.due_states(999.0) == []
    # A STATE naming the downstream its telemetry named is listed by the same index.
    named = QueueState("named", "esm-named", QueueStateName.HEALTHY, 2, 100, downstream="billing")
    ledger.commit(named, AuditEntry("named", 900.0, AuditEvent.TRANSITION, 100, 2, "PAUSE", "p"))
    assert ledger.group_members("billing") == ["named", "woken"]
    # A downstream recorded without a transition moves the queue within the index.
    ledger.record_downstream("named", "payments-api", 1)
    assert ledger.group_members("billing") == ["woken"]
    assert ledger.group_members("payments-api") == ["named"]


def test_the_deployed_reducer_keys_a_config_group_from_the_deployed_ledger(
    aws: EmbeddedAws,
    deployment: Deployment,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Built from its function's environment as Lambda builds it, the reducer reads the
    queues' CONFIG groups from the stack's table (its role's one ledger grant) and puts the
    group's records under one key of the stack's reduced stream."""
    from controller import handler
    from controller.telemetry import reduced
    from tests.factories import kinesis_event, sample

    for name, value in aws.environment().items():
        monkeypatch.setenv(name, value)
    variables = aws.client("lambda").get_function_configuration(
        FunctionName=deployment.reducer_function
    )["Environment"]["Variables"]
    assert variables["QUEUEMESH_TABLE"] == deployment.table_name
    ledger = DynamoLedger(deployment.table_name, aws.client("dynamodb"), memory_types=memory_type)
    for queue in ("billing-eu", "billing-us"):
        ledger.put_config(QueueConfig(queue, f"esm-{queue}", group="billing"))
    app = handler.build_reducer(dict(variables))
    at = time.time() - 5.0
    batch = kinesis_event([sample("billing-eu", at), sample("billing-us", at)])
    assert app.handle(batch, None) == {"batchItemFailures": []}
    printed = capsys.readouterr().out
    assert "GroupKeysUnread" not in printed and "CONFIG items not read" not in printed
    kinesis = aws.client("kinesis")
    keys = set()
    for shard in kinesis.list_shards(StreamName=deployment.reduced_stream_name)["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=deployment.reduced_stream_name,
            ShardId=shard["ShardId"],
            ShardIteratorType="TRIM_HORIZON",
        )["ShardIterator"]
        for record in kinesis.get_records(ShardIterator=iterator)["Records"]:
            if b'"queue":"billing-' in record["Data"]:
                keys.add(record["PartitionKey"])
    assert keys == {reduced.partition_key("billing-eu", "billing")}


class _Ungrouped:
    group_id = None


class _DeletedWhileRead:
    """A pending message whose group is read while a delete on another server thread removes
    a neighbour from the same pending set (the race ReceiveMessage lost: a 500)."""

    def __init__(self, pending: set[object], neighbour: object) -> None:
        self._pending, self._neighbour = pending, neighbour

    @property
    def group_id(self) -> str:
        self._pending.discard(self._neighbour)
        return "group"


def test_a_receive_survives_a_concurrent_delete_of_a_pending_message(aws: EmbeddedAws) -> None:
    from moto.sqs.models import Queue

    queue: Any = Queue.__new__(cast(Any, Queue))  # the property reads the pending set only
    neighbour = _Ungrouped()
    pending: set[object] = {neighbour}
    pending.add(_DeletedWhileRead(pending, neighbour))
    queue._pending_messages = pending
    assert queue.pending_message_groups <= {"group"}
    assert neighbour not in queue._pending_messages


READ_THE_STACK = """
from stack.local.emulator import EmbeddedAws
with EmbeddedAws() as aws:
    deployment = aws.deploy(parameters={"ExampleDownstreamUrl": "http://127.0.0.1:9/"})
    pages = aws.client("cloudformation").get_paginator("list_stack_resources")
    for _ in range(2):
        pages.paginate(StackName=deployment.stack_name).build_full_result()
    (queue,) = deployment.queues
    print(deployment.code_dirs[queue.function_name])
"""


def test_reading_the_stack_prints_no_moto_warning_and_runs_the_projects_code() -> None:
    """moto warns of every type its CloudFormation skips each time it reads the stack's
    resources (the dashboard reads them every refresh); none of that reaches the terminal."""
    completed = subprocess.run(
        [sys.executable, "-c", READ_THE_STACK],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stderr == ""
    # The shipped template's CodeUris are the project's packages (installed or checked out).
    assert completed.stdout == f"{ROOT / 'worker' / 'example'}\n"


def test_stop_closes_the_port() -> None:
    emulator = EmbeddedAws().start()
    port = emulator.port
    emulator.stop()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 1):
        pass


def test_a_parallelization_factor_splits_a_shard_by_partition_key_keeping_its_order() -> None:
    from stack.local.runtime.kinesis_poller import lanes

    records = [{"PartitionKey": f"key-{n % 7}", "SequenceNumber": str(n)} for n in range(50)]
    assert lanes(records, 1) == [records]
    split = lanes(records, 2)
    assert len(split) == 2
    assert (
        sorted((r for lane in split for r in lane), key=lambda r: int(r["SequenceNumber"]))
        == records
    )
    for lane in split:
        assert [int(r["SequenceNumber"]) for r in lane] == sorted(
            int(r["SequenceNumber"]) for r in lane
        )
    keys = [{r["PartitionKey"] for r in lane} for lane in split]
    assert not keys[0] & keys[1]
