"""Fault injection: the real ControllerApp (wired as ``controller.handler`` wires it) against
moto, with faults injected on its own boto3 clients through botocore event hooks.

Time is virtual: the adapters' clocks and sleeps, and every injected delay (a hanging call is
its read timeout passing), move one clock, so "returns before its deadline" is exact and the
suite does not wait. Each case asserts the end state: ledger and mapping agree, one audit item
per transition, the invocation ends before its deadline.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, ReadTimeoutError

from controller.actuator import LambdaActuator
from controller.app import ControllerApp
from controller.aws import client as aws_client
from controller.backlog import SqsBacklog
from controller.constants import READ_TIMEOUT_S
from controller.ledger import DynamoLedger
from controller.loop import ControlLoop
from controller.model import AuditEvent, GroupReport, GroupShare
from controller.planner import Plan
from controller.policy import memory_type
from controller.policy.aimd import Aimd
from controller.settings import PolicyParams
from load.clock import HandClock
from stack.local.emulator import EmbeddedAws
from tests.e2e.test_end_to_end import TABLE, controller_on, deploy_pipeline
from tests.factories import Context, kinesis_event, planning_groups, sample

CALL_COST_S = 0.02  # virtual time one answered call takes


class Rig:
    """The app on virtual time, its two clients, and the faults to inject into them."""

    def __init__(self, esm: str) -> None:
        self.esm = esm
        self.time = HandClock(5000.0)
        self.dynamodb = aws_client("dynamodb")
        self.lam = aws_client("lambda")
        self.sqs = aws_client("sqs")
        self.calls: Counter[str] = Counter()
        self.faults: dict[str, list[Callable[[], None]]] = {}
        for client in (self.dynamodb, self.lam, self.sqs):
            client.meta.events.register("before-call", self._before)
        ledger = DynamoLedger(
            TABLE, self.dynamodb, clock=self.time, sleep=self.time.sleep, memory_types=memory_type
        )
        actuator = LambdaActuator(self.lam, clock=self.time, sleep=self.time.sleep)
        backlog = SqsBacklog(self.sqs, clock=self.time, sleep=self.time.sleep)
        # How far the app's wall clock runs ahead of the real one (a later batch).
        self.ahead_s = 0.0
        controller = ControlLoop(
            ledger,
            actuator,
            PolicyParams(),
            algorithm=Aimd(),
            monotonic=self.time,
            clock=self.wall_clock,
            backlog=backlog,
        )
        self.app = ControllerApp(
            controller, clock=self.wall_clock, monotonic=self.time, emit=lambda line: None
        )
        self._sequence = 1

    def wall_clock(self) -> float:
        return time.time() + self.ahead_s

    def _before(self, model: Any, **_: Any) -> None:
        self.calls[model.name] += 1
        self.time.now += CALL_COST_S
        queued = self.faults.get(model.name)
        if queued:
            queued.pop(0)()

    def inject(self, operation: str, *faults: Callable[[], None]) -> None:
        self.faults.setdefault(operation, []).extend(faults)

    def storm(self, remaining_s: float = 60.0) -> tuple[dict[str, Any], float]:
        """Ten seconds of 429s; returns the response and the virtual time the invocation took."""
        now = time.time()
        samples = [sample(at=now - 12 + s, ok=7, throttled=3, invocation_ms=400) for s in range(10)]
        event = kinesis_event(samples, first_sequence=self._sequence)
        self._sequence += len(samples)
        started = self.time.now
        response = self.app.handle(event, Context(remaining_s))
        return response, self.time.now - started

    def calm_after_the_cut(self) -> dict[str, Any]:
        """Ten seconds of 2xx from invocations that started after a cut made now, decided
        once they are all in: evidence on which the original rule raises."""
        now = time.time() + self.ahead_s
        self.ahead_s += 20.0
        samples = [sample(at=now + 6 + s, ok=10, invocation_ms=400) for s in range(10)]
        event = kinesis_event(samples, first_sequence=self._sequence)
        self._sequence += len(samples)
        return self.app.handle(event, Context(60.0))

    def mapping_value(self) -> int:
        config = boto3.client("lambda").get_event_source_mapping(UUID=self.esm)
        return int(config["ScalingConfig"]["MaximumConcurrency"])

    def ledger_value(self) -> int | None:
        state = DynamoLedger(TABLE, memory_types=memory_type).get_states(["orders"]).get("orders")
        return None if state is None else state.concurrency

    def audit_events(self) -> list[AuditEvent]:
        return [
            entry.event_type
            for entry in DynamoLedger(TABLE, memory_types=memory_type).audit_trail("orders")
        ]


def service_error(code: str, status: int = 400) -> Callable[[], None]:
    def fault() -> None:
        error = {"Error": {"Code": code, "Message": "injected"}}
        raise ClientError({**error, "ResponseMetadata": {"HTTPStatusCode": status}}, "injected")

    return fault


def hang(rig_time: HandClock) -> Callable[[], None]:
    """The server never answers: the client's read timeout passes, then it gives up."""

    def fault() -> None:
        rig_time.now += READ_TIMEOUT_S
        raise ReadTimeoutError(endpoint_url="http://127.0.0.1")

    return fault


@pytest.fixture
def rig(emulated_aws: EmbeddedAws, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    controller_on(emulated_aws, monkeypatch)
    esm, _ = deploy_pipeline()
    yield Rig(esm)


def test_a_healthy_storm_cuts_once_on_moto(rig: Rig) -> None:
    response, _took = rig.storm()
    assert response == {"batchItemFailures": []}
    assert rig.mapping_value() == rig.ledger_value() == 50
    assert rig.audit_events() == [AuditEvent.TRANSITION]


def test_a_failing_ledger_with_5s_left_returns_before_the_deadline(rig: Rig) -> None:
    rig.inject("BatchGetItem", *[service_error("InternalServerError", 500)] * 1000)

    response, took = rig.storm(remaining_s=5.0)

    assert took < 5.0
    assert response["batchItemFailures"] == [{"itemIdentifier": "1"}]
    assert rig.mapping_value() == 100 and rig.ledger_value() is None


def test_a_throttled_ledger_commit_is_retried_within_the_deadline(rig: Rig) -> None:
    throttled = service_error("ProvisionedThroughputExceededException")
    rig.inject("TransactWriteItems", throttled, throttled)

    response, took = rig.storm(remaining_s=10.0)

    assert took < 10.0 and response == {"batchItemFailures": []}
    assert rig.mapping_value() == rig.ledger_value() == 50
    assert rig.audit_events() == [AuditEvent.TRANSITION]


def test_with_6s_left_a_cut_that_could_not_try_its_update_waits_unclaimed(rig: Rig) -> None:
    """Issue 32.7: the update's deadline keeps a revert's attempt back, so with 6 s left it
    could not be tried; the step is not claimed (no TRANSITION, no ACTUATION_FAILED)."""
    response, took = rig.storm(remaining_s=6.0)

    assert took < 6.0
    assert response == {"batchItemFailures": []}
    assert rig.calls["UpdateEventSourceMapping"] == 0
    assert (rig.mapping_value(), rig.ledger_value()) == (100, None)
    assert rig.audit_events() == []
    assert rig.app.loop.counters["steps_deferred"] == 1
    assert rig.app.loop.counters["actuation_failures"] == 0


def test_a_hanging_update_with_12s_left_returns_before_12s(rig: Rig) -> None:
    rig.inject("UpdateEventSourceMapping", *[hang(rig.time)] * 10)

    response, took = rig.storm(remaining_s=12.0)

    assert took < 12.0
    assert response == {"batchItemFailures": []}
    assert rig.calls["UpdateEventSourceMapping"] >= 1
    assert rig.mapping_value() == rig.ledger_value() == 100
    assert rig.audit_events() == [AuditEvent.TRANSITION, AuditEvent.ACTUATION_FAILED]


def test_a_hanging_update_with_time_to_spare_is_tried_again(rig: Rig) -> None:
    rig.inject("UpdateEventSourceMapping", hang(rig.time))

    response, took = rig.storm(remaining_s=30.0)

    assert took < 30.0 and response == {"batchItemFailures": []}
    assert rig.mapping_value() == rig.ledger_value() == 50
    assert rig.audit_events() == [AuditEvent.TRANSITION]


@pytest.mark.parametrize(
    "code", ["TooManyRequestsException", "ResourceInUseException", "ServiceException"]
)
def test_transient_lambda_faults_are_retried(rig: Rig, code: str) -> None:
    fault = service_error(code, 500 if code == "ServiceException" else 429)
    rig.inject("UpdateEventSourceMapping", fault, fault)

    response, took = rig.storm(remaining_s=30.0)

    assert took < 30.0 and response == {"batchItemFailures": []}
    assert rig.calls["UpdateEventSourceMapping"] == 3
    assert rig.mapping_value() == rig.ledger_value() == 50
    assert rig.audit_events() == [AuditEvent.TRANSITION]


def test_lambda_faults_for_good_put_the_ledger_back(rig: Rig) -> None:
    rig.inject("UpdateEventSourceMapping", *[service_error("TooManyRequestsException", 429)] * 50)

    response, took = rig.storm(remaining_s=12.0)

    assert took < 12.0 and response == {"batchItemFailures": []}
    assert rig.mapping_value() == rig.ledger_value() == 100
    assert rig.audit_events() == [AuditEvent.TRANSITION, AuditEvent.ACTUATION_FAILED]


def test_a_deleted_mapping_is_set_aside_without_a_call_per_batch(rig: Rig) -> None:
    rig.storm()  # a known state: 50
    boto3.client("lambda").delete_event_source_mapping(UUID=rig.esm)
    lambda_calls = rig.calls["GetEventSourceMapping"] + rig.calls["UpdateEventSourceMapping"]
    rig.time.now += 100  # past the settle time of the first cut
    for _ in range(5):
        response, _took = rig.storm()
        assert response == {"batchItemFailures": []}

    calls = rig.calls["GetEventSourceMapping"] + rig.calls["UpdateEventSourceMapping"]
    assert calls - lambda_calls <= 1
    assert rig.audit_events().count(AuditEvent.MAPPING_MISSING) <= 1


def test_a_redelivered_batch_is_not_counted_twice(rig: Rig) -> None:
    now = time.time()
    samples = [sample(at=now - 12 + s, ok=7, throttled=3, invocation_ms=400) for s in range(10)]
    event = kinesis_event(samples)
    for _ in range(3):
        assert rig.app.handle(event, Context(60.0)) == {"batchItemFailures": []}
    assert rig.app.loop.counters["samples_windowed"] == 10
    assert rig.mapping_value() == rig.ledger_value() == 50
    assert rig.audit_events() == [AuditEvent.TRANSITION]


def cancelled(*codes: str) -> Callable[[], None]:
    """TransactWriteItems cancelled, with one reason per item (state, audit)."""

    def fault() -> None:
        error = {"Code": "TransactionCanceledException", "Message": "injected"}
        reasons = [{"Code": code} for code in codes]
        raise ClientError(
            {
                "Error": error,
                "CancellationReasons": reasons,
                "ResponseMetadata": {"HTTPStatusCode": 400},
            },
            "TransactWriteItems",
        )

    return fault


def test_a_transaction_cancelled_by_contention_is_tried_again(rig: Rig) -> None:
    rig.inject("TransactWriteItems", cancelled("TransactionConflict", "None"))
    response, took = rig.storm(remaining_s=30.0)

    assert took < 30.0 and response == {"batchItemFailures": []}
    assert rig.calls["TransactWriteItems"] == 2
    assert rig.mapping_value() == rig.ledger_value() == 50
    assert rig.audit_events() == [AuditEvent.TRANSITION]


def test_batches_from_two_shards_out_of_order_cut_once(rig: Rig) -> None:
    """The later seconds arrive first, on one shard; the earlier ones after, on another."""
    now = time.time()
    early = [sample(at=now - 14 + s, ok=7, throttled=3, invocation_ms=400) for s in range(5)]
    late = [sample(at=now - 9 + s, ok=7, throttled=3, invocation_ms=400) for s in range(5)]
    first = kinesis_event(late, first_sequence=1, shard="shardId-000000000001")
    second = kinesis_event(early, first_sequence=1, shard="shardId-000000000000")

    assert rig.app.handle(first, Context(60.0)) == {"batchItemFailures": []}
    assert rig.app.handle(second, Context(60.0)) == {"batchItemFailures": []}
    assert rig.app.loop.counters["samples_windowed"] == 10
    assert rig.mapping_value() == rig.ledger_value() == 50
    assert rig.audit_events() == [AuditEvent.TRANSITION]


def test_two_containers_on_one_storm_cut_the_mapping_once(rig: Rig) -> None:
    """Two warm containers (two shards' invocations) both hold the queue's state when the same
    storm reaches them: one conditional write wins, the other's loses on the version, and
    neither a second cut nor a drift is recorded."""
    other = Rig(rig.esm)
    now = time.time()
    calm = [sample(at=now - 40 + s, ok=10, invocation_ms=400) for s in range(10)]
    calm_event = kinesis_event(calm, shard="shardId-000000000001")
    for container in (rig, other):
        assert container.app.handle(calm_event, Context(60.0)) == {"batchItemFailures": []}
    assert rig.storm()[0] == {"batchItemFailures": []}
    assert other.storm()[0] == {"batchItemFailures": []}

    assert other.app.loop.counters["version_conflicts"] == 1
    assert rig.mapping_value() == rig.ledger_value() == 50
    assert rig.audit_events() == [AuditEvent.TRANSITION]


def test_a_lost_commit_answer_is_reconciled_not_counted_as_drift(rig: Rig) -> None:
    """The claim lands in DynamoDB but its answer is lost: the mapping and the ledger are made
    to agree again by later batches, and the repair is audited as what it is."""
    lost = [True]

    def lose_answer(**_: Any) -> None:
        if lost:
            lost.pop()
            rig.time.now += READ_TIMEOUT_S
            raise ReadTimeoutError(endpoint_url="http://127.0.0.1")

    rig.dynamodb.meta.events.register("after-call.dynamodb.TransactWriteItems", lose_answer)
    # The claim, its answer lost: retried, it meets itself as a version conflict.
    rig.storm()
    assert (rig.mapping_value(), rig.ledger_value()) == (100, 50)
    # Another container finds the claim in flight (its claimant might still be updating the
    # mapping); the claimant's own knows it gave the claim up and repairs it at once.
    other = Rig(rig.esm)
    other.storm()
    assert other.app.loop.counters["claims_in_flight"] == 1
    assert (rig.mapping_value(), rig.ledger_value()) == (100, 50)
    rig.storm()

    assert lost == []  # the answer was lost once
    assert rig.app.loop.counters["claims_in_flight"] == 0
    # The claim (100 -> 50) stood in the ledger while the mapping stayed at 100: put right,
    # audited as a reconciliation, not as an operator's drift.
    assert rig.mapping_value() == rig.ledger_value() == 100
    assert rig.audit_events() == [AuditEvent.TRANSITION, AuditEvent.ACTUATION_RECONCILED]


def test_an_empty_queue_is_not_probed(rig: Rig) -> None:
    rig.storm()
    assert rig.calm_after_the_cut() == {"batchItemFailures": []}
    assert rig.calls["GetQueueAttributes"] == 1
    assert rig.mapping_value() == rig.ledger_value() == 50
    assert rig.app.loop.counters["backlog_read_failures"] == 0


def test_a_queue_with_messages_waiting_is_probed(rig: Rig, emulated_aws: EmbeddedAws) -> None:
    emulated_aws.detach_moto_pollers()  # moto's own poller would consume the message
    url = boto3.client("sqs").get_queue_url(QueueName="orders")["QueueUrl"]
    boto3.client("sqs").send_message(QueueUrl=url, MessageBody="waiting")
    rig.storm()
    assert rig.calm_after_the_cut() == {"batchItemFailures": []}
    assert rig.mapping_value() == rig.ledger_value() > 50


@pytest.mark.parametrize(
    "fault",
    [service_error("InternalError", 500), service_error("AccessDenied", 403)],
    ids=["sqs-down", "no-permission"],
)
def test_a_failed_backlog_read_is_counted_and_the_probe_goes_on(
    rig: Rig, fault: Callable[[], None]
) -> None:
    """The empty queue's read fails: the backlog is unknown, so the controller raises as it
    did before it could read one, and the batch completes."""
    rig.inject("GetQueueAttributes", *[fault] * 10)
    rig.storm()
    assert rig.calm_after_the_cut() == {"batchItemFailures": []}
    assert rig.calls["GetQueueAttributes"] >= 1
    assert rig.mapping_value() == rig.ledger_value() > 50
    assert rig.app.loop.counters["backlog_read_failures"] == 1


def test_group_reports_reach_dynamodb_and_a_failed_write_never_fails_the_batch(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's group report is the GROUP item ``queuemesh status`` reads; DynamoDB refusing
    it (a 500 on every retry) is counted, and the batch, its cut and its claim stand."""
    capacity = [80.0]

    def payments(plan: Plan) -> tuple[GroupReport, ...]:
        share = GroupShare("orders", capacity[0], 20)
        return (GroupReport("payments", plan.now, capacity[0], (share,)),)

    planning_groups(monkeypatch, payments)
    rig.inject("PutItem", *[service_error("InternalServerError", 500)] * 1000)
    response, _took = rig.storm()
    assert response == {"batchItemFailures": []}
    assert rig.mapping_value() == rig.ledger_value() == 50
    assert rig.app.loop.counters["group_reports_unwritten"] == 1
    ledger = DynamoLedger(TABLE, memory_types=memory_type)
    assert ledger.group_reports() == []

    rig.faults.clear()
    capacity[0] = 40.0
    rig.calm_after_the_cut()
    [report] = ledger.group_reports()
    assert (report.group, report.capacity_rps, report.members[0].share_rps) == (
        "payments",
        40.0,
        40.0,
    )
    writes = rig.calls["PutItem"]
    rig.calm_after_the_cut()  # the same report again: no write
    assert rig.calls["PutItem"] == writes
