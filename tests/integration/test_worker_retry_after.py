"""Opt-in Retry-After respect: failed messages stay away until the downstream is ready."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws

from tests.worker_support import (  # noqa: F401 (fixtures)
    downstream,
    instrumentation,
    load_event,
)
from worker import visibility, wrapper
from worker.visibility import Postponement, VisibilityExtender

pytestmark = pytest.mark.usefixtures("instrumentation")

REGION = "us-east-1"


@pytest.fixture
def example_worker(
    monkeypatch: pytest.MonkeyPatch,
    downstream: str,  # noqa: F811
    instrumentation: None,  # noqa: F811 (first: it clears the QueueMesh environment)
) -> None:
    monkeypatch.setenv("QUEUEMESH_HANDLER", "worker.example.app.handler")
    monkeypatch.setenv("DOWNSTREAM_URL", downstream)
    monkeypatch.setenv("QUEUEMESH_RESPECT_RETRY_AFTER", "true")
    monkeypatch.setattr(wrapper, "_app_handler", None)


@pytest.fixture
def sqs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        monkeypatch.setattr(wrapper, "_extender", VisibilityExtender(rng=random.Random(5)))
        yield boto3.client("sqs", region_name=REGION)


def _event_from_queue(sqs: Any, queue_url: str, bodies: list[str]) -> dict[str, Any]:
    """Send the bodies, receive them back, and shape them as Lambda's SQS event."""
    for body in bodies:
        sqs.send_message(QueueUrl=queue_url, MessageBody=body)
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    received = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0)[
        "Messages"
    ]
    assert len(received) == len(bodies)
    template = load_event("sqs_mixed_answers.json")["Records"][0]
    return {
        "Records": [
            {
                **template,
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "md5OfBody": message["MD5OfBody"],
                "eventSourceARN": arn,
            }
            for message in received
        ]
    }


def _visible_ids(sqs: Any, queue_url: str) -> set[str]:
    messages = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0
    ).get("Messages", [])
    return {message["MessageId"] for message in messages}


def _ids_answered(event: dict[str, Any], status: int) -> set[str]:
    return {
        record["messageId"]
        for record in event["Records"]
        if json.loads(record["body"])["status"] == status
    }


@pytest.mark.usefixtures("example_worker")
def test_messages_that_failed_on_a_429_with_retry_after_stay_invisible(sqs: Any) -> None:
    queue_url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    bodies = [record["body"] for record in load_event("sqs_mixed_answers.json")["Records"]]
    event = _event_from_queue(sqs, queue_url, bodies)
    throttled = _ids_answered(event, 429)
    assert len(throttled) == 2

    response = wrapper.handler(event, None)

    failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
    assert failed == throttled | _ids_answered(event, 503)
    # Nothing deletes messages here (Lambda does): only the postponed ones are away.
    everything = {record["messageId"] for record in event["Records"]}
    visible = _visible_ids(sqs, queue_url)
    assert visible == everything - throttled


@pytest.mark.usefixtures("example_worker")
def test_when_the_whole_batch_fails_every_throttled_message_is_postponed(sqs: Any) -> None:
    queue_url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    bodies = [
        json.dumps({"status": 429, "retry_after": 30}),
        json.dumps({"status": 429, "retry_after": 60}),
        json.dumps({"status": 503}),
    ]
    event = _event_from_queue(sqs, queue_url, bodies)

    # powertools raises when every record failed: the exception passes through.
    with pytest.raises(Exception, match="All records failed"):
        wrapper.handler(event, None)

    assert _visible_ids(sqs, queue_url) == _ids_answered(event, 503)


@pytest.mark.usefixtures("example_worker")
def test_without_the_opt_in_no_message_is_touched(
    sqs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("QUEUEMESH_RESPECT_RETRY_AFTER")
    queue_url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    bodies = [record["body"] for record in load_event("sqs_mixed_answers.json")["Records"]]
    event = _event_from_queue(sqs, queue_url, bodies)

    wrapper.handler(event, None)

    assert _visible_ids(sqs, queue_url) == {record["messageId"] for record in event["Records"]}


def _stubbed(region: str = REGION) -> tuple[Any, Stubber]:
    client = boto3.client(
        "sqs", region_name=region, aws_access_key_id="x", aws_secret_access_key="x"
    )
    return client, Stubber(client)


def test_postponement_asks_sqs_for_the_delay_plus_jitter_in_batches_of_ten() -> None:
    client, stub = _stubbed()
    arn = f"arn:aws:sqs:{REGION}:111122223333:orders"
    url = "https://sqs.us-east-1.amazonaws.com/111122223333/orders"
    postponements = [Postponement(arn, f"handle-{index}", 40.0) for index in range(12)]
    expected_rng = random.Random(9)
    timeouts = [visibility.visibility_timeout(40.0, expected_rng) for _ in range(12)]
    for start, stop in ((0, 10), (10, 12)):
        entries = [
            {"Id": str(index - start), "ReceiptHandle": f"handle-{index}", "VisibilityTimeout": t}
            for index, t in zip(range(start, stop), timeouts[start:stop], strict=True)
        ]
        stub.add_response(
            "change_message_visibility_batch",
            {"Successful": [{"Id": entry["Id"]} for entry in entries], "Failed": []},
            {"QueueUrl": url, "Entries": entries},
        )
    regions: list[str] = []

    def factory(region: str) -> Any:
        regions.append(region)
        return client

    with stub:
        VisibilityExtender(client_factory=factory, rng=random.Random(9)).extend(postponements)
        stub.assert_no_pending_responses()
    assert regions == [REGION]
    assert all(40 < timeout <= 44 for timeout in timeouts)


def test_sqs_failures_are_swallowed_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    client, stub = _stubbed()
    arn = f"arn:aws:sqs:{REGION}:111122223333:orders"
    stub.add_client_error(
        "change_message_visibility_batch", "AWS.SimpleQueueService.NonExistentQueue"
    )
    stub.add_response(
        "change_message_visibility_batch",
        {
            "Successful": [],
            "Failed": [{"Id": "0", "SenderFault": True, "Code": "ReceiptHandleIsInvalid"}],
        },
    )
    extender = VisibilityExtender(client_factory=lambda region: client)

    with stub, caplog.at_level("WARNING", logger="queuemesh"):
        extender.extend([Postponement(arn, "handle", 5.0)])
        extender.extend([Postponement(arn, "handle", 5.0)])

    assert extender.failures == 2
    assert len([r for r in caplog.records if "Retry-After respect" in r.getMessage()]) == 1


@settings(max_examples=60)
@given(st.floats(0, 10**9), st.integers(0, 2**32))
def test_visibility_is_at_least_the_delay_and_at_most_twelve_hours(delay: float, seed: int) -> None:
    timeout = visibility.visibility_timeout(delay, random.Random(seed))
    assert timeout == visibility.MAX_VISIBILITY_TIMEOUT_S or delay <= timeout <= delay * 1.1 + 2
    assert 0 <= timeout <= 43_200


@pytest.mark.usefixtures("example_worker")
def test_unattributable_throttling_postpones_every_failed_message_of_the_queue(
    sqs: Any,
    downstream: str,  # noqa: F811
) -> None:
    import threading

    import urllib3

    queue_url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    bodies = [
        json.dumps({"status": 429, "retry_after": 90}),
        json.dumps({"status": 503}),
        json.dumps({"status": 200}),
    ]
    event = _event_from_queue(sqs, queue_url, bodies)
    pool = urllib3.PoolManager(retries=False, maxsize=3)

    def application(event: Any, context: Any) -> Any:
        records = list(event["Records"])
        statuses: dict[str, int] = {}

        def call(record: dict[str, Any]) -> None:
            answer = pool.request("POST", downstream, body=record["body"])
            statuses[record["messageId"]] = answer.status

        threads = [threading.Thread(target=call, args=(record,)) for record in records]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return {
            "batchItemFailures": [
                {"itemIdentifier": message_id}
                for message_id, status in statuses.items()
                if status != 200
            ]
        }

    wrapper.invoke(application, event, None)

    assert _visible_ids(sqs, queue_url) == _ids_answered(event, 200)
