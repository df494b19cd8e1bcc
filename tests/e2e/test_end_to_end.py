"""EMF lines put into CloudWatch Logs -> subscription -> Kinesis -> controller handler ->
mapping concurrency changed, state and audit in the ledger. All on moto's server over HTTP."""

from __future__ import annotations

import io
import json
import time
import zipfile
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from controller import handler as controller_handler
from controller.ledger import DynamoLedger, create_ledger_table
from controller.model import Mode, QueueConfig
from controller.policy import memory_type
from load.recording import RecordedLine, emf_line, kinesis_event
from stack.local.emulator import EmbeddedAws
from tests.factories import sample

REGION = "us-east-1"
TABLE = "queuemesh-ledger"
LOG_GROUP = "/aws/lambda/orders-worker"


def controller_on(emulated_aws: EmbeddedAws, monkeypatch: pytest.MonkeyPatch) -> str:
    """An emptied emulated AWS that every client (and the controller's handler, built afresh)
    reaches through the environment, the ledger named ``TABLE``; its endpoint."""
    emulated_aws.reset()
    endpoint = emulated_aws.endpoint
    for key, value in {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "QUEUEMESH_TABLE": TABLE,
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(controller_handler, "_app", None)
    return endpoint


@pytest.fixture
def aws(emulated_aws: EmbeddedAws, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    yield controller_on(emulated_aws, monkeypatch)


def deploy_pipeline() -> tuple[str, str]:
    """A worker function reading an SQS queue through a mapping, a stream, a subscription."""
    iam, sqs, lam = boto3.client("iam"), boto3.client("sqs"), boto3.client("lambda")
    role = iam.create_role(
        RoleName="worker",
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": []}),
    )["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("app.py", "def handler(event, context):\n    return None\n")
    lam.create_function(
        FunctionName="orders-worker",
        Runtime="python3.12",
        Role=role,
        Handler="app.handler",
        Code={"ZipFile": code.getvalue()},
    )
    queue_url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    esm = lam.create_event_source_mapping(
        EventSourceArn=queue_arn,
        FunctionName="orders-worker",
        BatchSize=10,
        ScalingConfig={"MaximumConcurrency": 100},
    )["UUID"]
    kinesis, logs = boto3.client("kinesis"), boto3.client("logs")
    kinesis.create_stream(StreamName="telemetry", ShardCount=1)
    stream_arn = kinesis.describe_stream(StreamName="telemetry")["StreamDescription"]["StreamARN"]
    logs.create_log_group(logGroupName=LOG_GROUP)
    logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName="2026/11/29/[$LATEST]abc")
    logs.put_subscription_filter(
        logGroupName=LOG_GROUP,
        filterName="queuemesh",
        filterPattern='{ $._aws.CloudWatchMetrics[0].Namespace = "QueueMesh" }',
        destinationArn=stream_arn,
        roleArn=role,
    )
    create_ledger_table(boto3.client("dynamodb"), TABLE)
    DynamoLedger(TABLE, memory_types=memory_type).put_config(
        QueueConfig(queue="orders", esm_uuid=esm, mode=Mode.ACTIVE)
    )
    return esm, stream_arn


def kinesis_event_from_stream(stream_arn: str) -> dict[str, Any]:
    """What a Kinesis event source mapping would hand the controller: every record so far."""
    kinesis = boto3.client("kinesis")
    shard = kinesis.list_shards(StreamName="telemetry")["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(
        StreamName="telemetry", ShardId=shard, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    records = kinesis.get_records(ShardIterator=iterator, Limit=1000)["Records"]
    lines = [RecordedLine.from_kinesis(shard, record) for record in records]
    return kinesis_event(lines, stream_arn, REGION)


class LambdaContext:
    function_name = "queuemesh-controller"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:queuemesh-controller"
    aws_request_id = "e2e"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def put_storm(stream_arn: str) -> dict[str, Any]:
    """Ten seconds of a worker meeting 429s, one PutLogEvents per invocation, plus noise;
    returns what the Kinesis mapping would hand the controller."""
    logs = boto3.client("logs")
    now = time.time()
    for second in range(10):
        at = now - 12 + second
        logs.put_log_events(
            logGroupName=LOG_GROUP,
            logStreamName="2026/11/29/[$LATEST]abc",
            logEvents=[
                {"timestamp": int(at * 1000), "message": "START RequestId: abc"},
                {
                    "timestamp": int(at * 1000),
                    "message": emf_line(sample(at=at, ok=7, throttled=3, invocation_ms=400)),
                },
            ],
        )
    event = kinesis_event_from_stream(stream_arn)
    assert len(event["Records"]) == 10
    return event


def test_emf_in_cloudwatch_logs_moves_the_mapping(
    aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The original rule, whose outcome is known to the unit."""
    monkeypatch.setenv("QUEUEMESH_ALGORITHM", "aimd")
    esm, stream_arn = deploy_pipeline()
    event = put_storm(stream_arn)

    response = controller_handler.handler(event, LambdaContext())

    assert response == {"batchItemFailures": []}
    mapping = boto3.client("lambda").get_event_source_mapping(UUID=esm)
    assert mapping["ScalingConfig"]["MaximumConcurrency"] == 50
    ledger = DynamoLedger(TABLE, memory_types=memory_type)
    state = ledger.get_states(["orders"])["orders"]
    assert (state.concurrency, state.previous_concurrency, state.state.value) == (
        50,
        100,
        "THROTTLED",
    )
    [audit] = ledger.audit_trail("orders")
    assert (audit.previous_value, audit.new_value) == (100, 50)
    assert audit.reason.startswith("HTTP 429 breach: Error rate 30.0% >= T1 (5.0%).")


def test_the_default_algorithm_cuts_a_storm_to_what_runs(aws: str) -> None:
    """The deployed default (adaptive) cuts a mapping it has never decided from its cap to the
    accepted share of the invocations the poller can have started (no attach cut before
    the storm), and the ledger agrees with the mapping."""
    esm, stream_arn = deploy_pipeline()
    response = controller_handler.handler(put_storm(stream_arn), LambdaContext())
    assert response == {"batchItemFailures": []}
    mapping = boto3.client("lambda").get_event_source_mapping(UUID=esm)
    state = DynamoLedger(TABLE, memory_types=memory_type).get_states(["orders"])["orders"]
    assert mapping["ScalingConfig"]["MaximumConcurrency"] == state.concurrency < 100
    [audit] = DynamoLedger(TABLE, memory_types=memory_type).audit_trail("orders")
    assert (audit.previous_value, audit.new_value) == (100, state.concurrency)
    assert audit.reason.startswith("Overload: pressure 30.0% >= T1 (5.0%)")
