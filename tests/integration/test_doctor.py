"""`queuemesh doctor` against the template deployed on the embedded AWS: a correct stack is
clean, and each seeded misconfiguration is reported with its fix (exit status 1)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from controller.ledger import DynamoLedger, encode_state
from controller.model import QueueConfig, QueueState, QueueStateName
from controller.policy import memory_type
from stack.cli import main
from stack.local.deployment import Deployment
from stack.local.emulator import EmbeddedAws

PARAMETERS = {"ExampleDownstreamUrl": "http://127.0.0.1:9/downstream"}
MISSING_UUID = "14e0db71-2b8c-4d2a-9e7f-0123456789ab"


@pytest.fixture(scope="module")
def aws() -> Iterator[EmbeddedAws]:
    with EmbeddedAws() as emulator:
        yield emulator


@pytest.fixture
def stack(aws: EmbeddedAws) -> Iterator[Deployment]:
    """The template deployed, its example queue registered (as its registrar would)."""
    try:
        deployment = aws.deploy(parameters=PARAMETERS)
        aws.register_queue(deployment, deployment.queues[0].name)
        yield deployment
    finally:
        aws.reset()


class Doctor:
    def __init__(self, aws: EmbeddedAws, stack: Deployment, capsys: Any) -> None:
        self.aws, self.stack, self.capsys = aws, stack, capsys

    def __call__(self, *argv: str) -> tuple[int, str, str]:
        target = ["--endpoint-url", self.aws.endpoint, "--stack-name", self.stack.stack_name]
        code = main(["doctor", *target, *argv])
        captured = self.capsys.readouterr()
        return code, captured.out, captured.err

    def problems(self, *argv: str) -> list[str]:
        """The problem lines of a run that found some."""
        code, out, err = self(*argv)
        assert (code, err) == (1, ""), out
        found = [line for line in out.splitlines() if line.startswith("problem: ")]
        assert found and all("; fix: " in line for line in found)
        return found

    def one_problem(self, expected: str) -> str:
        [line] = self.problems()
        assert expected in line, line
        return line


@pytest.fixture
def doctor(aws: EmbeddedAws, stack: Deployment, capsys: pytest.CaptureFixture[str]) -> Doctor:
    return Doctor(aws, stack, capsys)


def test_a_correctly_deployed_stack_is_clean(doctor: Doctor, stack: Deployment) -> None:
    code, out, err = doctor()
    assert (code, err) == (0, "")
    *notes, last = out.splitlines()
    # The example mapping reports batch item failures: worth a note, not a failure.
    assert [note.split(": ")[0] for note in notes] == ["note"]
    assert "reports batch item failures" in notes[0]
    assert last == (
        f"clean: stack {stack.stack_name}, 1 registered queue and 1 worker log group checked"
    )
    document = json.loads(doctor("--json")[1])
    assert document["clean"] is True and document["table"] == stack.table_name
    assert [finding["severity"] for finding in document["findings"]] == ["note"]


def test_a_registered_queue_whose_mapping_is_gone(aws: EmbeddedAws, doctor: Doctor) -> None:
    ledger = DynamoLedger(doctor.stack.table_name, aws.client("dynamodb"), memory_types=memory_type)
    ledger.put_config(QueueConfig(queue="ghost", esm_uuid=MISSING_UUID))
    assert "queue ghost" in doctor.one_problem(f"its mapping {MISSING_UUID} does not exist")


def test_an_override_out_of_its_range(aws: EmbeddedAws, doctor: Doctor) -> None:
    """The CONFIG item decodes, but the controller refuses its policy (ConfigsInvalid)."""
    binding = doctor.stack.queues[0]
    ledger = DynamoLedger(doctor.stack.table_name, aws.client("dynamodb"), memory_types=memory_type)
    ledger.put_config(
        QueueConfig(queue=binding.name, esm_uuid=binding.esm_uuid, overrides={"min_samples": 1e6})
    )
    line = doctor.one_problem("its policy overrides do not validate (min_samples must be in")
    assert f"queue {binding.name}" in line
    assert f"queuemesh register {binding.name} --esm {binding.esm_uuid}" in line


def test_a_mapping_disabled_outside_queuemesh(aws: EmbeddedAws, doctor: Doctor) -> None:
    esm = doctor.stack.queues[0].esm_uuid
    aws.client("lambda").update_event_source_mapping(UUID=esm, Enabled=False)
    assert "--enabled" in doctor.one_problem(f"mapping {esm} is Disabled, and not by QueueMesh")


def test_a_mapping_without_maximum_concurrency(aws: EmbeddedAws, doctor: Doctor) -> None:
    binding = doctor.stack.queues[0]
    sqs = aws.client("sqs")
    url = sqs.create_queue(
        QueueName="uncapped",
        Attributes={
            "VisibilityTimeout": "180",
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": binding.dlq_arn, "maxReceiveCount": 5}
            ),
        },
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    esm = aws.client("lambda").create_event_source_mapping(
        EventSourceArn=arn["QueueArn"], FunctionName=binding.function_name
    )["UUID"]
    DynamoLedger(
        doctor.stack.table_name, aws.client("dynamodb"), memory_types=memory_type
    ).put_config(QueueConfig(queue="uncapped", esm_uuid=esm))
    assert "queuemesh mode uncapped active" in doctor.one_problem("has no MaximumConcurrency")


def test_a_mapping_in_provisioned_mode_is_reported_and_refused_registration(
    aws: EmbeddedAws, doctor: Doctor, capsys: pytest.CaptureFixture[str]
) -> None:
    binding = doctor.stack.queues[0]
    aws.client("lambda").update_event_source_mapping(
        UUID=binding.esm_uuid, ProvisionedPollerConfig={"MinimumPollers": 1, "MaximumPollers": 2}
    )
    doctor.one_problem("is in provisioned mode (ProvisionedPollerConfig)")
    target = ["--table", doctor.stack.table_name, "--endpoint-url", aws.endpoint]
    code = main(["register", binding.name, "--esm", binding.esm_uuid, *target])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "provisioned mode" in err and "remove the ProvisionedPollerConfig" in err


def test_a_worker_log_group_not_subscribed(aws: EmbeddedAws, doctor: Doctor) -> None:
    logs = aws.client("logs")
    group = doctor.stack.worker_log_group
    [subscription] = logs.describe_subscription_filters(logGroupName=group)["subscriptionFilters"]
    logs.delete_subscription_filter(logGroupName=group, filterName=subscription["filterName"])
    doctor.one_problem(f"log group {group}: is not subscribed to the telemetry stream")


def test_a_worker_log_group_subscribed_with_another_pattern(
    aws: EmbeddedAws, doctor: Doctor
) -> None:
    logs = aws.client("logs")
    group = doctor.stack.worker_log_group
    [subscription] = logs.describe_subscription_filters(logGroupName=group)["subscriptionFilters"]
    logs.put_subscription_filter(
        logGroupName=group,
        filterName=subscription["filterName"],
        filterPattern="QueueMesh",
        destinationArn=subscription["destinationArn"],
    )
    doctor.one_problem("is subscribed with the pattern 'QueueMesh', not the template's")


def test_reserved_concurrency_below_the_cap(aws: EmbeddedAws, doctor: Doctor) -> None:
    function = doctor.stack.queues[0].function_name
    aws.client("lambda").put_function_concurrency(
        FunctionName=function, ReservedConcurrentExecutions=10
    )
    # The cap is the controller's Cmax: the stack's PolicyCmax, 100 by default.
    assert "--cmax 10" in doctor.one_problem(
        "reserves 10 concurrent executions, below the queue's cap 100"
    )


def test_a_visibility_timeout_under_six_function_timeouts(aws: EmbeddedAws, doctor: Doctor) -> None:
    aws.client("sqs").set_queue_attributes(
        QueueUrl=doctor.stack.queues[0].url, Attributes={"VisibilityTimeout": "60"}
    )
    assert "at least 180 s" in doctor.one_problem("visibility timeout 60 s is under six times")


def test_a_queue_without_a_dead_letter_queue(aws: EmbeddedAws, doctor: Doctor) -> None:
    aws.client("sqs").set_queue_attributes(
        QueueUrl=doctor.stack.queues[0].url, Attributes={"RedrivePolicy": ""}
    )
    doctor.one_problem("its queue has no dead-letter queue")


def test_a_mapping_whose_queue_was_deleted(aws: EmbeddedAws, doctor: Doctor) -> None:
    binding = doctor.stack.queues[0]
    aws.client("sqs").delete_queue(QueueUrl=binding.url)
    doctor.one_problem(f"its mapping reads queue {binding.name}, which does not exist")


def test_a_disabled_wake_up_mapping(aws: EmbeddedAws, doctor: Doctor) -> None:
    wake_ups = doctor.stack.wake_up_queue
    assert wake_ups is not None
    aws.client("lambda").update_event_source_mapping(UUID=wake_ups.esm_uuid, Enabled=False)
    line = doctor.one_problem("no enabled event source mapping delivers its wake-up queue")
    assert line.startswith(f"problem: controller {doctor.stack.controller_function}: ")
    assert f"{wake_ups.name} to it (mappings: Disabled)" in line


def test_a_wake_up_queue_that_was_deleted(aws: EmbeddedAws, doctor: Doctor) -> None:
    wake_ups = doctor.stack.wake_up_queue
    assert wake_ups is not None
    aws.client("sqs").delete_queue(QueueUrl=wake_ups.url)
    doctor.one_problem(f"sends its wake-ups to queue {wake_ups.name}, which does not exist")


def test_a_telemetry_stream_that_throttles_writes(aws: EmbeddedAws, doctor: Doctor) -> None:
    aws.client("cloudwatch").put_metric_data(
        Namespace="AWS/Kinesis",
        MetricData=[
            {
                "MetricName": "WriteProvisionedThroughputExceeded",
                "Dimensions": [{"Name": "StreamName", "Value": doctor.stack.stream_name}],
                "Value": 3,
            }
        ],
    )
    assert "add shards" in doctor.one_problem("refused 3 writes in the last hour")


def legacy_paused_item(queue: str, esm_uuid: str, wake_at: float) -> dict[str, Any]:
    """A paused STATE item in the old flat layout (guards inside Memory, no WakeUp)."""
    item = encode_state(
        QueueState(
            queue=queue,
            esm_uuid=esm_uuid,
            state=QueueStateName.CRITICAL_BACKOFF,
            concurrency=2,
            previous_concurrency=4,
            enabled=False,
            wake_at=wake_at,
            version=7,
            last_evaluated_at=wake_at - 60,
        )
    )
    guards = {"last_change_at": item.pop("LastChangeAt"), "hold_until": item.pop("HoldUntil")}
    guards.update(enabled=item.pop("Enabled"), wake_at=item.pop("WakeAt"))
    del item["WakeUp"], item["PausedSince"]
    item["Memory"] = guards
    return item


def test_a_paused_state_without_wake_up_is_backfilled_by_fix(
    aws: EmbeddedAws, doctor: Doctor
) -> None:
    from boto3.dynamodb.types import TypeSerializer

    binding, table = doctor.stack.queues[0], doctor.stack.table_name
    wake_at = time.time() - 120
    item = legacy_paused_item(binding.name, binding.esm_uuid, wake_at)
    serializer = TypeSerializer()
    dynamodb = aws.client("dynamodb")
    dynamodb.put_item(
        TableName=table, Item={key: serializer.serialize(value) for key, value in item.items()}
    )
    ledger = DynamoLedger(table, dynamodb, memory_types=memory_type)
    assert ledger.due_states(time.time()) == []  # the tick cannot see it
    assert "doctor --fix" in doctor.one_problem("paused, but its STATE item has no WakeUp")

    code, out, err = doctor("--fix")
    assert (code, err) == (0, ""), out
    assert (
        out.splitlines()[0] == f"fixed: queue {binding.name}: WakeUp set, the next tick decides it"
    )
    [due] = ledger.due_states(time.time())
    assert (due.queue, due.enabled, due.wake_at, due.version) == (binding.name, False, wake_at, 7)
    stored = dynamodb.get_item(
        TableName=table, Key={"PK": {"S": item["PK"]}, "SK": {"S": item["SK"]}}
    )["Item"]
    assert (
        stored["WakeUp"] == {"S": "DUE"}
        and Decimal(stored["WakeAt"]["N"]) == item["Memory"]["wake_at"]
    )
    assert doctor()[0] == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stack-name", "nope"], "stack 'nope' not found"),
        (["--table", "nope"], "ledger table 'nope' not found"),
        (["--template", "no-such-template.yaml"], "cannot read the template"),
    ],
)
def test_bad_arguments_are_one_line(doctor: Doctor, argv: list[str], message: str) -> None:
    code, out, err = doctor(*argv)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
