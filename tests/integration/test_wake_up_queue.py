"""Wake-ups on the deployed stack (template.yaml on the embedded AWS, the local runtime
polling its mappings): a queue the controller pauses on its own telemetry is decided again when
its pause ends, through the delayed message on the wake-up queue, not at the next one-minute
tick. Faults on the wake-up queue: tests/integration/test_wake_up_faults.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from controller.ledger import DynamoLedger
from controller.model import AuditEntry, QueueState, Sample
from controller.policy import memory_type
from load.recording import emf_line, subscription_payload
from stack.local.deployment import Deployment
from stack.local.emulator import EmbeddedAws
from stack.local.runtime import LocalRuntime
from tests.factories import sample

# How late after its wake-up time a paused queue may be decided again through the wake-up
# queue: the delivery (whole seconds, never early), the local poller's receive (every 0.25 s
# when idle) and an invocation of a warm controller, with room for a loaded machine. The
# scheduled tick's lateness is up to its period, 60 s.
WOKEN_WITHIN_S = 5.0
# The law's first pause (the adaptive law's shortest), which the storm below causes.
PAUSE_S = 15.0


def storm_samples(queue: str, now: float) -> list[Sample]:
    """Two invocations of the queue, every call refused: overload at Cmin pauses it."""
    return [
        sample(queue, at=now - 0.5 + 0.1 * index, ok=0, throttled=10, invocation_ms=400)
        for index in range(2)
    ]


@pytest.fixture(scope="module")
def stack(emulated_aws: EmbeddedAws) -> Iterator[tuple[EmbeddedAws, Deployment, LocalRuntime]]:
    deployment = emulated_aws.deploy(parameters={"ExampleDownstreamUrl": "http://127.0.0.1:9/"})
    runtime = LocalRuntime(emulated_aws, deployment).start()
    try:
        yield emulated_aws, deployment, runtime
    finally:
        runtime.stop()


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s:g} s")


def test_a_paused_queue_is_decided_again_through_its_wake_up_not_the_tick(
    stack: tuple[EmbeddedAws, Deployment, LocalRuntime],
) -> None:
    aws, deployment, runtime = stack
    [queue] = deployment.queues
    assert deployment.wake_up_queue is not None and runtime.wake_ups is not None
    functions = aws.client("lambda")
    functions.update_event_source_mapping(
        UUID=queue.esm_uuid, ScalingConfig={"MaximumConcurrency": 2}
    )
    ledger = DynamoLedger(deployment.table_name, aws.client("dynamodb"), memory_types=memory_type)
    # The queue's telemetry reaches the controller (raw, reduced in its container).
    payload = subscription_payload(
        [(s.event_time, emf_line(s)) for s in storm_samples(queue.name, time.time())],
        f"/aws/lambda/{queue.function_name}",
        "worker",
    )
    aws.client("kinesis").put_record(
        StreamName=deployment.reduced_stream_name, Data=payload, PartitionKey=queue.name
    )

    def state() -> QueueState | None:
        return ledger.get_states([queue.name]).get(queue.name)

    paused = wait_for(lambda: (s := state()) and not s.enabled and s, 30.0, "the pause")
    wake_at = paused.wake_at
    assert wake_at > time.time()
    assert functions.get_event_source_mapping(UUID=queue.esm_uuid)["State"] == "Disabled"

    def woken() -> list[AuditEntry]:
        return [
            entry
            for entry in ledger.audit_trail(queue.name)
            if entry.timestamp >= wake_at and "Pause over" in entry.reason
        ]

    [entry] = wait_for(woken, PAUSE_S + 30.0, "the pause's end")
    assert wake_at <= entry.timestamp < wake_at + WOKEN_WITHIN_S
    # Decided by a wake-up's invocation of the controller: the scheduled tick has not run.
    assert runtime.schedules is not None and runtime.schedules.invocations == 0
    assert runtime.wake_ups.counters.invocations >= 1
    # The test pulse of Cmin enabled the mapping (its own wake-up, a few seconds on, ends it):
    # ledger and mapping agree once no step is under way.
    assert entry.new_value == 2

    def agreed() -> bool:
        mapping = functions.get_event_source_mapping(UUID=queue.esm_uuid)
        stored = state()
        return stored is not None and (mapping["State"] == "Enabled") == stored.enabled

    wait_for(agreed, 10.0, "ledger and mapping agreeing")


def test_a_message_that_is_no_wake_up_is_consumed_and_never_retried(
    stack: tuple[EmbeddedAws, Deployment, LocalRuntime],
) -> None:
    aws, deployment, runtime = stack
    assert deployment.wake_up_queue is not None and runtime.wake_ups is not None
    sqs = aws.client("sqs")
    before = runtime.wake_ups.counters
    deleted, errors = before.deleted, before.errors
    sqs.send_message(QueueUrl=deployment.wake_up_queue.url, MessageBody="not a wake-up")
    wait_for(lambda: runtime.wake_ups.counters.deleted > deleted, 10.0, "the message consumed")  # type: ignore[union-attr]
    assert runtime.wake_ups.counters.errors == errors
    dead = sqs.get_queue_attributes(
        QueueUrl=str(deployment.wake_up_queue.dlq_url),
        AttributeNames=["ApproximateNumberOfMessages"],
    )["Attributes"]["ApproximateNumberOfMessages"]
    assert dead == "0"


def test_moto_holds_a_message_back_its_delay(
    stack: tuple[EmbeddedAws, Deployment, LocalRuntime],
) -> None:
    """SQS's DelaySeconds, on the embedded AWS (the local stack relies on it)."""
    aws, _, _ = stack
    sqs = aws.client("sqs")
    url = sqs.create_queue(QueueName="delays")["QueueUrl"]
    sent = time.time()
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "0", "MessageBody": "later", "DelaySeconds": 2}]
    )
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessagesDelayed"] == "1"
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
    received = wait_for(
        lambda: sqs.receive_message(QueueUrl=url).get("Messages"), 10.0, "the delayed message"
    )
    assert received[0]["Body"] == "later"
    assert time.time() - sent >= 2.0
