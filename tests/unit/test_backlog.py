"""The SQS backlog adapter on a stubbed boto3 client: one lookup of the URL, one read a call."""

from __future__ import annotations

import math

import boto3
import pytest
from botocore.stub import Stubber

from controller.backlog import (
    BACKLOG_ATTRIBUTES,
    VISIBILITY_ATTRIBUTE,
    VISIBLE_ATTRIBUTE,
    InMemoryBacklog,
    SqsBacklog,
)
from controller.model import Backlog
from controller.ports import BacklogUnavailable

URL = "https://sqs.eu-west-1.amazonaws.com/111122223333/orders"


def sqs_client() -> object:
    return boto3.client(
        "sqs", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x"
    )


def attributes(visible: object, timeout: object = "30") -> dict[str, object]:
    return {"Attributes": {VISIBLE_ATTRIBUTE: visible, VISIBILITY_ATTRIBUTE: timeout}}


def test_the_url_is_looked_up_once_and_each_read_is_one_call() -> None:
    client = sqs_client()
    asked = {"QueueUrl": URL, "AttributeNames": list(BACKLOG_ATTRIBUTES)}
    with Stubber(client) as stub:
        stub.add_response("get_queue_url", {"QueueUrl": URL}, {"QueueName": "orders"})
        stub.add_response("get_queue_attributes", attributes("7", "45"), asked)
        stub.add_response("get_queue_attributes", attributes("0"), asked)
        backlog = SqsBacklog(client)
        assert [backlog.read("orders", math.inf) for _ in range(2)] == [
            Backlog(visible=7, visibility_timeout_s=45.0),
            Backlog(visible=0, visibility_timeout_s=30.0),
        ]
        stub.assert_no_pending_responses()


@pytest.mark.parametrize(
    "answer",
    [
        {"Attributes": {}},
        attributes("many"),
        attributes("7", timeout="soon"),
        {"Attributes": {VISIBLE_ATTRIBUTE: "7"}},
        {},
    ],
)
def test_an_answer_without_every_count_is_unavailable(answer: dict[str, object]) -> None:
    client = sqs_client()
    with Stubber(client) as stub:
        stub.add_response("get_queue_url", {"QueueUrl": URL})
        stub.add_response("get_queue_attributes", answer)
        with pytest.raises(BacklogUnavailable, match="backlog of orders"):
            SqsBacklog(client).read("orders", math.inf)


def test_a_missing_queue_is_unavailable_at_once() -> None:
    client = sqs_client()
    with Stubber(client) as stub:
        stub.add_client_error("get_queue_url", "AWS.SimpleQueueService.NonExistentQueue")
        with pytest.raises(BacklogUnavailable, match="NonExistentQueue"):
            SqsBacklog(client).read("orders", math.inf)
        stub.assert_no_pending_responses()


def test_the_twin_answers_what_it_was_told_and_records_each_read() -> None:
    told = Backlog(visible=5, visibility_timeout_s=90.0)
    twin = InMemoryBacklog(orders=3, refunds=told)
    twin.fail_next(BacklogUnavailable("injected"))
    with pytest.raises(BacklogUnavailable):
        twin.read("orders", math.inf)
    assert twin.read("orders", math.inf) == Backlog(3, 30.0)
    assert twin.read("refunds", math.inf) == told
    with pytest.raises(BacklogUnavailable, match="no such queue"):
        twin.read("billing", math.inf)
    assert twin.reads == ["orders", "orders", "refunds", "billing"]
