"""The controller's events on the local stack's EventBridge: a storm and a pause reach a queue
through a rule, and a bus that refuses them changes nothing the batch did."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from controller.events import SOURCE, DetailType, EventBridgePublisher
from controller.schema import HealthMetric
from stack.local.template import transform_template
from tests.aws_fixtures import moto_client
from tests.factories import health_count, storm_with_events
from tests.paths import ROOT

_names = itertools.count()


@pytest.fixture
def routed_queue(moto_endpoint: str) -> tuple[Any, str]:
    """An SQS queue fed by the template's rule on the default bus (its pattern as deployed,
    its target a queue to read)."""
    sqs, events = moto_client("sqs", moto_endpoint), moto_client("events", moto_endpoint)
    name = f"oncall-{next(_names)}"
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    template = transform_template(ROOT / "template.yaml", {"ExampleDownstreamUrl": "https://x"})
    pattern = template["Resources"]["ControllerEventsRule"]["Properties"]["EventPattern"]
    events.put_rule(Name=name, EventPattern=json.dumps(pattern), State="ENABLED")
    events.put_targets(Rule=name, Targets=[{"Id": "oncall", "Arn": arn}])
    return sqs, url


def received(sqs: Any, url: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for _ in range(5):  # bounded: moto delivers at once
        answer = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
        batch = answer.get("Messages", [])
        if not batch:
            break
        messages += [json.loads(m["Body"]) for m in batch]
    return messages


def test_a_storm_and_a_pause_reach_the_bus_and_the_rule_routes_the_pause(
    moto_endpoint: str, routed_queue: tuple[Any, str]
) -> None:
    events = moto_client("events", moto_endpoint)
    put: list[dict[str, Any]] = []
    events.meta.events.register(
        "provide-client-params.events.PutEvents", lambda params, **_: put.append(params)
    )
    run = storm_with_events(EventBridgePublisher(events))
    sent = {json.loads(e["Detail"])["Queue"]: e for call in put for e in call["Entries"]}
    assert {q: e["DetailType"] for q, e in sent.items()} == {
        "orders": DetailType.CONCURRENCY_CHANGED,
        "billing": DetailType.QUEUE_PAUSED,
    }
    assert all(e["Source"] == SOURCE for e in sent.values())
    assert health_count(run.documents, HealthMetric.EVENTS_UNPUBLISHED) == 0
    sqs, url = routed_queue
    [routed] = received(sqs, url)
    assert (routed["source"], routed["detail-type"]) == (SOURCE, DetailType.QUEUE_PAUSED)
    [pause] = run.trails["billing"]
    assert routed["detail"]["Queue"] == "billing"
    assert (routed["detail"]["Action"], routed["detail"]["Reason"]) == (pause.action, pause.reason)


def test_a_failing_put_events_changes_nothing_the_batch_did_and_is_counted(
    moto_endpoint: str,
) -> None:
    events = moto_client("events", moto_endpoint)

    def refuse(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "AccessDeniedException"}}, "PutEvents")

    events.meta.events.register("before-call.events.PutEvents", refuse)
    run, quiet = storm_with_events(EventBridgePublisher(events)), storm_with_events(None)
    assert (run.response, run.trails, run.mappings) == (
        quiet.response,
        quiet.trails,
        quiet.mappings,
    )
    assert health_count(run.documents, HealthMetric.EVENTS_UNPUBLISHED) == 2
