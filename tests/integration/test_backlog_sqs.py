"""The SQS backlog adapter on a real boto3 client against moto's server: one
``GetQueueAttributes`` gives the messages waiting and the queue's visibility timeout."""

from __future__ import annotations

import math

from controller.backlog import SqsBacklog
from controller.model import Backlog
from tests.aws_fixtures import moto_client


def test_a_read_counts_the_visible_messages_and_gives_the_visibility_timeout(
    moto_endpoint: str,
) -> None:
    sqs = moto_client("sqs", moto_endpoint)
    url = sqs.create_queue(QueueName="backlog-read", Attributes={"VisibilityTimeout": "45"})[
        "QueueUrl"
    ]
    for body in ("a", "b", "c"):
        sqs.send_message(QueueUrl=url, MessageBody=body)
    backlog = SqsBacklog(sqs)
    assert backlog.read("backlog-read", math.inf) == Backlog(3, 45.0)
    # A received message is hidden for the visibility timeout: no longer waiting.
    sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)
    assert backlog.read("backlog-read", math.inf) == Backlog(2, 45.0)
