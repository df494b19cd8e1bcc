from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pytest

from stack.local.deployment import QueueBinding
from stack.local.emulator import EmbeddedAws
from stack.local.runtime import (
    ContainerPool,
    FunctionSpec,
    InvocationFailed,
    LogShipper,
    QueuePoller,
    ScheduleRunner,
    failed_item_ids,
    first_failure,
    rate_seconds,
    sqs_event,
)
from stack.local.runtime.sqs_poller import MAPPING_REFRESH_S, READY_BATCHES, read_depth

LOG_GROUP = "/aws/lambda/test-worker"
THREADS_END_WITHIN_S = 10.0


def fake_worker(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Runs in a container process: takes 0.2 s (or the longest ``sleep`` a body asks for),
    fails messages whose body says ``fail`` (or ``fail_first``, on their first receive only),
    prints one line."""
    bodies = [json.loads(record["body"]) for record in event["Records"]]
    time.sleep(max([0.2, *(body.get("sleep", 0) for body in bodies)]))
    failures = [
        {"itemIdentifier": record["messageId"]}
        for record, body in zip(event["Records"], bodies, strict=True)
        if body.get("fail")
        or (body.get("fail_first") and record["attributes"]["ApproximateReceiveCount"] == "1")
    ]
    print(json.dumps({"records": len(event["Records"]), "function": context.function_name}))
    return {"batchItemFailures": failures}


class StartPoller(Protocol):
    def __call__(self, binding: QueueBinding, warm: int = 0) -> QueuePoller: ...


@pytest.fixture(scope="module")
def aws() -> Iterator[EmbeddedAws]:
    with EmbeddedAws() as emulator:
        logs = emulator.client("logs")
        logs.create_log_group(logGroupName=LOG_GROUP)
        yield emulator


def make_queue(
    aws: EmbeddedAws,
    name: str,
    max_concurrency: int,
    batch_size: int,
    visibility_timeout_s: int = 1,
) -> QueueBinding:
    sqs = aws.client("sqs")
    dlq_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    url = sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": str(visibility_timeout_s),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2}),
        },
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    role = aws.client("iam").create_role(
        RoleName=name,
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "lambda.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )["Role"]["Arn"]
    lambda_client = aws.client("lambda")
    function = f"{name}-fn"
    lambda_client.create_function(
        FunctionName=function,
        Runtime="python3.11",
        Role=role,
        Handler="tests.e2e.test_runtime.fake_worker",
        Code={"ZipFile": b"PK\x05\x06" + b"\x00" * 18},
        Timeout=10,
    )
    mapping = lambda_client.create_event_source_mapping(
        EventSourceArn=arn,
        FunctionName=function,
        BatchSize=batch_size,
        ScalingConfig={"MaximumConcurrency": max_concurrency},
        FunctionResponseTypes=["ReportBatchItemFailures"],
    )
    aws.detach_moto_pollers()
    return QueueBinding(name, url, arn, mapping["UUID"], function, dlq_url, dlq_arn)


def send(aws: EmbeddedAws, binding: QueueBinding, bodies: list[dict[str, Any]]) -> None:
    sqs = aws.client("sqs")
    for start in range(0, len(bodies), 10):
        sqs.send_message_batch(
            QueueUrl=binding.url,
            Entries=[
                {"Id": str(index), "MessageBody": json.dumps(body)}
                for index, body in enumerate(bodies[start : start + 10])
            ],
        )


def wait_until(
    condition: Callable[[], bool],
    limit_s: float = 90,
    seen: Callable[[], object] = lambda: "",
) -> None:
    """Poll ``condition`` until it holds; past ``limit_s`` fail with what ``seen`` shows."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached within {limit_s:g} s: {seen()}")
        time.sleep(0.2)


@pytest.fixture
def run_poller(aws: EmbeddedAws) -> Iterator[StartPoller]:
    started: list[tuple[QueuePoller, ContainerPool]] = []

    def start(binding: QueueBinding, warm: int = 0) -> QueuePoller:
        """Poll ``binding``, with ``warm`` containers started (their cold starts over) first."""
        spec = FunctionSpec.read(
            aws.client("lambda"), binding.function_name, LOG_GROUP, aws.environment()
        )
        pool = ContainerPool(spec)
        pool.prewarm(warm)
        poller = QueuePoller(aws, binding, pool, LogShipper(aws.client("logs"), LOG_GROUP))
        started.append((poller, pool))
        return poller.start()

    before = set(threading.enumerate())
    yield start
    for poller, pool in started:
        poller.request_stop()
        poller.stop()
        pool.close()
    # A slot whose invocation outlived the poller ends once its container is closed: promptly,
    # but on its own thread.
    deadline = time.monotonic() + THREADS_END_WITHIN_S
    while leftover := [t for t in threading.enumerate() if t not in before and t.is_alive()]:
        if time.monotonic() > deadline:
            raise AssertionError(f"threads left running: {[t.name for t in leftover]}")
        time.sleep(0.05)


def test_poller_respects_maximum_concurrency_and_deletes_successes(
    aws: EmbeddedAws, run_poller: StartPoller
) -> None:
    binding = make_queue(aws, "capped", max_concurrency=2, batch_size=2)
    send(aws, binding, [{"n": n} for n in range(24)])
    poller = run_poller(binding)
    wait_until(lambda: len(poller.done_ids) == 24)
    _, counters, _ = poller.snapshot()
    assert 1 <= counters.peak_in_flight <= 2
    assert counters.invocations >= 12
    attributes = aws.client("sqs").get_queue_attributes(
        QueueUrl=binding.url, AttributeNames=["All"]
    )
    assert attributes["Attributes"]["ApproximateNumberOfMessages"] == "0"
    assert attributes["Attributes"]["ApproximateNumberOfMessagesNotVisible"] == "0"
    events = aws.client("logs").filter_log_events(logGroupName=LOG_GROUP)["events"]
    assert {json.loads(event["message"])["function"] for event in events} == {"capped-fn"}


def test_failures_return_and_are_redriven_to_the_dead_letter_queue(
    aws: EmbeddedAws, run_poller: StartPoller
) -> None:
    # Each failing message is received twice, failed twice and moved to the dead-letter queue
    # by the third receive. A cold start (a process importing this module: seconds on a busy
    # host) could outlast the 5 s visibility timeout, so that a message came back while its
    # invocation still ran, and was dead-lettered before that invocation counted its failure:
    # the containers are warm before the first receive.
    binding = make_queue(aws, "failing", max_concurrency=3, batch_size=5, visibility_timeout_s=5)
    send(aws, binding, [{"n": n, "fail": n % 2 == 0} for n in range(10)])
    poller = run_poller(binding, warm=3)
    sqs = aws.client("sqs")

    def depths() -> tuple[int, int, int]:
        """Visible, in flight and dead-lettered, read now as the live view reads them
        (``read_depth``: a message moved to the dead-letter queue is never counted twice)."""
        depth = read_depth(sqs, binding.url, binding.dlq_url)
        return depth.visible, depth.in_flight, depth.dead_lettered

    def settled() -> bool:
        """Every message done or dead-lettered, the queue empty and no invocation running (a
        failure is counted when its invocation ends)."""
        visible, invisible, dead = depths()
        done = len(poller.done_ids)
        return (
            (visible, invisible) == (0, 0)
            and done + dead >= 10
            and not poller.snapshot()[1].in_flight
        )

    # Two visibility timeouts and a receive: about 11 s; the bound is for a loaded host.
    wait_until(settled, seen=lambda: (poller.snapshot()[1], depths(), len(poller.done_ids)))
    _, counters, _ = poller.snapshot()
    assert len(poller.done_ids) == 5
    assert depths() == (0, 0, 5)
    assert counters.returned >= 10  # each failing message came back at least twice
    dlq = sqs.receive_message(QueueUrl=binding.dlq_url, MaxNumberOfMessages=10)
    assert sorted(json.loads(m["Body"])["n"] for m in dlq["Messages"]) == [0, 2, 4, 6, 8]


def test_invocations_in_flight_reach_the_allowed_level_and_never_exceed_it(
    aws: EmbeddedAws, run_poller: StartPoller
) -> None:
    # Above the first 5 pollers: reached through the ramp, while receives run ahead.
    binding = make_queue(aws, "busy", max_concurrency=7, batch_size=2, visibility_timeout_s=30)
    send(aws, binding, [{"n": n} for n in range(240)])
    poller = run_poller(binding)
    seen: list[int] = []

    def all_done() -> bool:
        seen.append(poller.snapshot()[1].in_flight)
        return len(poller.done_ids) == 240

    wait_until(all_done)
    _, counters, _ = poller.snapshot()
    assert counters.peak_in_flight == 7
    assert max(seen) <= 7
    assert (counters.received, counters.deleted, counters.returned) == (240, 240, 0)
    assert counters.invocations == 120


def test_a_failed_message_is_not_deleted_and_comes_back(
    aws: EmbeddedAws, run_poller: StartPoller
) -> None:
    binding = make_queue(aws, "retried", max_concurrency=2, batch_size=3, visibility_timeout_s=5)
    send(aws, binding, [{"n": 0, "fail_first": True}, {"n": 1}, {"n": 2}])
    # Warm: a cold start outlasting the 5 s visibility timeout delivers the batch twice, and
    # the counts below would see the duplicate invocation still running.
    poller = run_poller(binding, warm=2)
    # Done only once received again (ApproximateReceiveCount 2) after its visibility timeout.
    wait_until(lambda: len(poller.done_ids) == 3)
    _, counters, _ = poller.snapshot()
    assert counters.returned >= 1
    assert counters.received == counters.deleted + counters.returned
    assert counters.in_flight == 0


def test_stop_is_bounded_and_nothing_waits_invisible_beyond_one_batch_ready(
    aws: EmbeddedAws, run_poller: StartPoller
) -> None:
    binding = make_queue(aws, "stuck", max_concurrency=2, batch_size=2, visibility_timeout_s=60)
    send(aws, binding, [{"n": n, "sleep": 120} for n in range(10)])
    poller = run_poller(binding)
    ready = 2 * (2 + READY_BATCHES)  # messages: a batch per invocation, and those ready
    wait_until(
        lambda: poller.snapshot()[1].in_flight == 2 and poller.snapshot()[1].received == ready
    )
    # Time for the receiver to take more, were it to: a refresh of the mapping wakes it too.
    time.sleep(2 * MAPPING_REFRESH_S)
    poller.request_stop()
    poller.stop()  # the invocations outlive it
    _, counters, _ = poller.snapshot()
    # The two invocations hold 2 messages each, one batch waited ready for the next slot and
    # was made visible again on stop, and nothing more was received.
    assert (counters.received, counters.returned, counters.in_flight) == (ready, ready - 4, 2)
    attributes = aws.client("sqs").get_queue_attributes(
        QueueUrl=binding.url, AttributeNames=["All"]
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "6"
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "4"
    # The fixture then stops the containers (ending the invocations) and checks that no
    # thread is left.


def test_paused_mapping_is_not_polled(aws: EmbeddedAws, run_poller: StartPoller) -> None:
    binding = make_queue(aws, "paused", max_concurrency=2, batch_size=2)
    aws.client("lambda").update_event_source_mapping(UUID=binding.esm_uuid, Enabled=False)
    send(aws, binding, [{"n": 1}])
    poller = run_poller(binding)
    mapping, counters, _ = poller.snapshot()
    assert (mapping.enabled, mapping.allowed, counters.received) == (False, 0, 0)
    aws.client("lambda").update_event_source_mapping(UUID=binding.esm_uuid, Enabled=True)
    wait_until(lambda: len(poller.done_ids) == 1)


def test_sqs_event_has_lambdas_shape() -> None:
    message = {
        "MessageId": "m1",
        "ReceiptHandle": "r1",
        "Body": "{}",
        "MD5OfBody": "x",
        "Attributes": {"ApproximateReceiveCount": "1"},
    }
    (record,) = sqs_event([message], "arn:aws:sqs:us-east-1:123456789012:q", "us-east-1")["Records"]
    assert record["eventSource"] == "aws:sqs"
    assert record["eventSourceARN"] == "arn:aws:sqs:us-east-1:123456789012:q"
    assert record["attributes"]["ApproximateReceiveCount"] == "1"
    assert (record["messageId"], record["receiptHandle"], record["body"]) == ("m1", "r1", "{}")


def test_partial_batch_response_rules() -> None:
    ids = {"a", "b", "c"}
    assert failed_item_ids({"batchItemFailures": []}, ids) == set()
    assert failed_item_ids({"batchItemFailures": [{"itemIdentifier": "b"}]}, ids) == {"b"}
    assert failed_item_ids({"batchItemFailures": [{"itemIdentifier": "zz"}]}, ids) == ids
    assert failed_item_ids({"batchItemFailures": [{"itemIdentifier": ""}]}, ids) == ids
    assert failed_item_ids(None, ids) == set()


def test_kinesis_retry_position_compares_sequence_numbers_as_numbers() -> None:
    records = [{"SequenceNumber": str(n)} for n in (9, 10, 11)]
    assert first_failure({"batchItemFailures": [{"itemIdentifier": "10"}]}, records) == 1
    assert first_failure({"batchItemFailures": []}, records) is None
    assert first_failure({"batchItemFailures": [{"itemIdentifier": "x"}]}, records) == 0


def test_rate_expressions() -> None:
    assert rate_seconds("rate(1 minute)") == 60
    assert rate_seconds("rate(5 minutes)") == 300
    assert rate_seconds("cron(0 12 * * ? *)") is None


def test_schedule_runner_finds_rules_targeting_its_functions(aws: EmbeddedAws) -> None:
    events = aws.client("events")
    events.put_rule(Name="wake", ScheduleExpression="rate(1 minute)", State="ENABLED")
    events.put_targets(
        Rule="wake",
        Targets=[
            {
                "Id": "controller",
                "Arn": "arn:aws:lambda:us-east-1:123456789012:function:ctl",
                "Input": '{"source": "queuemesh.wakeup"}',
            },
            {"Id": "other", "Arn": "arn:aws:lambda:us-east-1:123456789012:function:other"},
        ],
    )
    spec = FunctionSpec("ctl", "x.handler", {}, 3, 128, LOG_GROUP)
    runner = ScheduleRunner(
        aws, {"ctl": ContainerPool(spec)}, {"ctl": LogShipper(aws.client("logs"), LOG_GROUP)}
    )
    assert runner.schedules == [("wake", 60.0, "ctl", {"source": "queuemesh.wakeup"})]


def fake_worker_spec(name: str) -> FunctionSpec:
    """A function running ``fake_worker`` in its own containers."""
    return FunctionSpec(
        name=name,
        handler="tests.e2e.test_runtime.fake_worker",
        environment={},
        timeout_s=10.0,
        memory_mb=128,
        log_group=LOG_GROUP,
    )


def test_a_prewarmed_pool_serves_its_first_invocations_without_cold_starts() -> None:
    pool = ContainerPool(fake_worker_spec("warm-fn"))
    try:
        pool.prewarm(2)
        assert pool.cold_starts == 2
        event = {"Records": [{"messageId": "m1", "body": json.dumps({})}]}
        results: list[Any] = []

        def invoke() -> None:
            with pool.container() as container:
                results.append(container.invoke(event))

        threads = [threading.Thread(target=invoke) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert [result.error for result in results] == [None, None]
        assert pool.cold_starts == 2  # both served by the warm containers
    finally:
        pool.close()


def test_an_invocation_ending_after_the_pool_closed_hands_its_container_back_quietly() -> None:
    pool = ContainerPool(fake_worker_spec("closing-fn"))
    with pool.container() as container:
        container.wait_ready()
        pool.close()  # the runtime stops while this invocation is still running
    assert not container.alive
    with pytest.raises(InvocationFailed, match="stopping"), pool.container():
        pass
