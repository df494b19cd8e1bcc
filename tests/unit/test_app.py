"""The controller application: Kinesis batches and manual evaluations, end to end on twins."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterable
from typing import Any

import pytest

from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.backlog import InMemoryBacklog
from controller.ledger import InMemoryLedger, encode_state
from controller.loop import ControlLoop
from controller.model import (
    Action,
    AuditEntry,
    AuditEvent,
    QueueConfig,
    QueueState,
)
from controller.policy import ALGORITHMS, memory_type
from controller.policy.adaptive import AdaptiveMemory
from controller.policy.aimd import Aimd
from controller.ports import BacklogUnavailable, ConfigRead, LedgerError, VersionConflict
from controller.settings import PolicyParams
from load.recording import emf_line
from tests.factories import (
    backlogged,
    config,
    kinesis_event,
    mapped,
    registered,
    sample,
    state,
)


class FlakyLedger(InMemoryLedger):
    """Fails config reads while ``down`` is set, like a throttled or unreachable table."""

    down = False

    def get_configs(self, queues: Iterable[str]) -> dict[str, QueueConfig]:
        if self.down:
            raise LedgerError("ProvisionedThroughputExceededException")
        return super().get_configs(queues)

    def read_configs(self, queues: Iterable[str]) -> ConfigRead:
        if self.down:
            raise LedgerError("ProvisionedThroughputExceededException")
        return super().read_configs(queues)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ledger() -> FlakyLedger:
    return registered(FlakyLedger(memory_types=memory_type))


@pytest.fixture
def actuator() -> InMemoryActuator:
    return mapped(InMemoryActuator())


@pytest.fixture
def emitted() -> list[str]:
    return []


@pytest.fixture
def clock() -> Clock:
    return Clock(110.0)


@pytest.fixture
def app(
    ledger: FlakyLedger, actuator: InMemoryActuator, emitted: list[str], clock: Clock
) -> ControllerApp:
    controller = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())
    return ControllerApp(controller, clock=clock, emit=emitted.append)


def storm_event(start: float = 100.0, first_sequence: int = 1) -> dict[str, object]:
    samples = [sample(at=start + s + 0.9, ok=8, throttled=2) for s in range(10)]
    return kinesis_event(samples, first_sequence=first_sequence)


def test_manual_evaluation_gives_the_original_outcomes(
    app: ControllerApp, actuator: InMemoryActuator
) -> None:
    outcomes = [
        app.handle({"queue": "orders", "error_rate": e, "success_rate": s}, None)
        for e, s in [(0.20, 0.80), (0.20, 0.80), (0.01, 0.99)]
    ]
    assert [
        (o["previous_concurrency"], o["target_concurrency"], o["state"], o["action"])
        for o in outcomes
    ] == [
        (100, 50, "THROTTLED", "MULTIPLICATIVE_DECREASE"),
        (50, 25, "CRITICAL_BACKOFF", "MULTIPLICATIVE_DECREASE"),
        (25, 30, "RECOVERING", "ADDITIVE_INCREASE"),
    ]
    first = outcomes[0]
    assert first["statusCode"] == 200
    assert (first["queue_id"], first["esm_uuid"], first["esm_updated"]) == (
        "orders",
        "esm-orders",
        True,
    )
    assert first["reason"] == (
        "HTTP 429 breach: Error rate 20.0% >= T1 (5.0%). Applied factor Beta=0.5. "
        "Scaled from 100 -> 50."
    )
    assert first["execution_time_ms"] >= 0
    assert actuator.read("esm-orders", 0).max_concurrency == 30


@pytest.mark.parametrize(
    ("event", "status"),
    [
        ({"queue": "orders", "error_rate": "lots", "success_rate": 0.5}, 400),
        ({"queue": "orders", "error_rate": 1.5, "success_rate": 0.5}, 400),
        ({"queue": "", "error_rate": 0.1, "success_rate": 0.5}, 400),
        ({"queue": "nobody", "error_rate": 0.1, "success_rate": 0.5}, 404),
    ],
)
def test_bad_manual_events_are_refused_clearly(
    app: ControllerApp, actuator: InMemoryActuator, event: dict[str, object], status: int
) -> None:
    response = app.handle(event, None)
    assert response["statusCode"] == status
    assert response["error"]
    assert actuator.calls == []


def test_a_kinesis_batch_moves_the_mapping_and_emits_dashboard_metrics(
    app: ControllerApp, actuator: InMemoryActuator, emitted: list[str]
) -> None:
    assert app.handle(storm_event(), None) == {"batchItemFailures": []}
    assert actuator.read("esm-orders", 0).max_concurrency == 50
    [document] = [doc for doc in map(json.loads, emitted) if "QueueName" in doc]
    directive = document["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "QueueMeshController"
    assert directive["Dimensions"] == [["QueueName"]]
    assert (document["QueueName"], document["MaximumConcurrency"]) == ("orders", [50.0])
    assert document["PressureRate"] == pytest.approx([20.0])


def health(emitted: list[str]) -> list[dict[str, Any]]:
    """The controller's health documents (no dimensions), each as metric -> count."""
    documents = [json.loads(line) for line in emitted]
    healthy = [
        doc for doc in documents if doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [[]]
    ]
    return [
        {m["Name"]: doc[m["Name"]][0] for m in doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
        for doc in healthy
    ]


def test_each_invocation_emits_what_it_added_to_the_health_counts(
    app: ControllerApp, emitted: list[str]
) -> None:
    event = storm_event()
    records = event["Records"]
    assert isinstance(records, list)
    records.insert(3, {**records[0], "kinesis": {**records[0]["kinesis"], "data": "!!not-b64"}})
    app.handle(event, None)
    [first] = health(emitted)
    assert first["SamplesWindowed"] == 10
    assert first["MappingUpdates"] == 1
    assert first["TelemetryUnreadable"] == 1
    assert first["ActuationFailures"] == first["BatchesRetried"] == 0
    # The same batch redelivered: nothing is windowed or skipped again, so nothing is emitted.
    emitted.clear()
    app.handle(event, None)
    assert health(emitted) == []


def skipped(emitted: list[str]) -> dict[str, float]:
    """The controller's skips, reason -> count (one document per reason)."""
    documents = [json.loads(line) for line in emitted]
    by_reason = [doc for doc in documents if "Reason" in doc]
    for doc in by_reason:
        assert doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Reason"]]
    return {doc["Reason"]: doc["Skipped"][0] for doc in by_reason}


def test_skips_are_emitted_by_reason(app: ControllerApp, emitted: list[str]) -> None:
    event = storm_event()
    records = event["Records"]
    assert isinstance(records, list)
    records.insert(3, {**records[0], "kinesis": {**records[0]["kinesis"], "data": "!!not-b64"}})
    extra = kinesis_event(
        [sample("billing", at=105.0), sample(at=110.0 + 3600), sample(at=110.0 + 3601)],
        first_sequence=100,
    )["Records"]
    assert isinstance(extra, list)
    app.handle({"Records": [*records, *extra]}, None)
    assert skipped(emitted) == {
        "bad_base64": 1,
        "samples_unregistered": 1,
        "samples_from_future": 2,
    }
    [document] = health(emitted)
    assert (document["TelemetryUnreadable"], document["SamplesNotWindowed"]) == (1, 3)
    emitted.clear()
    app.handle({"detail-type": "Scheduled Event"}, None)
    assert skipped(emitted) == {}


def with_state(ledger: InMemoryLedger, **fields: Any) -> InMemoryLedger:
    """``ledger`` holding a committed state of ``orders`` (at 100 unless told)."""
    ledger.put_item(encode_state(state(version=3).evolve(**fields)))
    return ledger


def test_drift_adopted_is_in_the_health_document(ledger: FlakyLedger, emitted: list[str]) -> None:
    # The operator set the mapping to 60 while the ledger says 100.
    actuator = mapped(InMemoryActuator(), concurrency=60)
    app = ControllerApp(
        ControlLoop(with_state(ledger), actuator, PolicyParams(), algorithm=Aimd()),
        clock=Clock(110.0),
        emit=emitted.append,
    )
    app.handle(storm_event(), None)
    [document] = health(emitted)
    assert (document["DriftAdopted"], document["ClaimsReconciled"]) == (1, 0)
    assert [e.event_type for e in ledger.audit_trail("orders")] == [AuditEvent.DRIFT_DETECTED]


def test_a_claim_reconciled_is_in_the_health_document(
    ledger: FlakyLedger, emitted: list[str]
) -> None:
    # The ledger claimed a cut from 100 to 50 that the mapping never took.
    stranded = with_state(
        ledger,
        concurrency=50,
        previous_concurrency=100,
        last_action=Action.MULTIPLICATIVE_DECREASE,
    )
    app = ControllerApp(
        ControlLoop(stranded, mapped(InMemoryActuator()), PolicyParams(), algorithm=Aimd()),
        clock=Clock(110.0),
        emit=emitted.append,
    )
    app.handle(storm_event(), None)
    [document] = health(emitted)
    assert (document["ClaimsReconciled"], document["DriftAdopted"]) == (1, 0)


class RacedLedger(InMemoryLedger):
    """Another writer commits first, once."""

    raced = False

    def commit(self, state: QueueState, audit: AuditEntry) -> QueueState:
        if not self.raced:
            self.raced = True
            raise VersionConflict("ConditionalCheckFailed")
        return super().commit(state, audit)


def test_a_version_conflict_is_in_the_health_document(
    actuator: InMemoryActuator, emitted: list[str]
) -> None:
    ledger = registered(RacedLedger(memory_types=memory_type))
    app = ControllerApp(
        ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd()),
        clock=Clock(110.0),
        emit=emitted.append,
    )
    app.handle(storm_event(), None)
    [document] = health(emitted)
    assert document["VersionConflicts"] == 1
    assert document["MappingUpdates"] == 0


def test_a_failed_backlog_read_is_in_the_health_document(
    ledger: FlakyLedger, emitted: list[str]
) -> None:
    # A calm queue at 50: the raise reads its backlog first, and SQS does not answer.
    backlog = InMemoryBacklog(orders=0)
    backlog.fail_next(BacklogUnavailable("throttled"))
    app = ControllerApp(
        backlogged(ledger, backlog, Aimd()), clock=Clock(110.0), emit=emitted.append
    )
    calm = [sample(at=100.0 + s + 0.9, ok=10, invocation_ms=500) for s in range(10)]
    app.handle(kinesis_event(calm), None)
    [document] = health(emitted)
    assert document["BacklogReadFailures"] == 1


def test_a_retried_batch_is_in_the_health_counts(
    app: ControllerApp, ledger: FlakyLedger, emitted: list[str]
) -> None:
    ledger.down = True
    app.handle(storm_event(first_sequence=7), None)
    [document] = health(emitted)
    assert document["BatchesRetried"] == 1
    assert document["SamplesWindowed"] == 0


def test_an_invocation_that_counted_nothing_emits_no_health_document(
    app: ControllerApp, emitted: list[str]
) -> None:
    app.handle({"detail-type": "Scheduled Event"}, None)
    assert health(emitted) == []


def test_a_poison_record_is_skipped_and_never_blocks_the_shard(
    app: ControllerApp, actuator: InMemoryActuator
) -> None:
    event = storm_event()
    records = event["Records"]
    assert isinstance(records, list)
    records.insert(3, {**records[0], "kinesis": {**records[0]["kinesis"], "data": "!!not-b64"}})
    records.insert(
        5,
        {
            **records[0],
            "kinesis": {
                **records[0]["kinesis"],
                "data": base64.b64encode(b"\x1f\x8b broken").decode(),
            },
        },
    )
    outcome = app.process_kinesis(event, deadline=1e12)
    assert outcome.failed_sequence_numbers == []
    assert sum(outcome.skipped.values()) >= 2
    assert actuator.read("esm-orders", 0).max_concurrency == 50


def test_a_ledger_fault_retries_the_batch_without_counting_it_twice(
    app: ControllerApp, ledger: FlakyLedger, actuator: InMemoryActuator, clock: Clock
) -> None:
    ledger.down = True
    first = storm_event(first_sequence=7)
    assert app.handle(first, None) == {"batchItemFailures": [{"itemIdentifier": "7"}]}
    assert actuator.calls == []
    ledger.down = False
    assert app.handle(first, None) == {"batchItemFailures": []}
    assert actuator.read("esm-orders", 0).max_concurrency == 50
    # Redelivered again (at-least-once): the warm windows already hold it, nothing moves.
    clock.now = 140.0
    outcome = app.process_kinesis(first, deadline=1e12)
    assert outcome.redelivered == 10
    assert outcome.samples == 0
    assert actuator.read("esm-orders", 0).max_concurrency == 50


def test_an_unknown_event_is_a_clear_error(app: ControllerApp) -> None:
    with pytest.raises(ValueError, match="expected a Kinesis batch"):
        app.handle({"hello": "world"}, None)


def test_a_scheduled_tick_wakes_due_queues_in_a_cold_container(
    ledger: FlakyLedger, actuator: InMemoryActuator, clock: Clock
) -> None:
    """A paused mapping sends no telemetry: only the tick can bring it back."""
    adaptive = ALGORITHMS["adaptive"]
    stored = ControlLoop(ledger, actuator, PolicyParams()).states([config("orders")], 100.0)
    ledger.commit(
        stored["orders"].evolve(
            concurrency=2,
            enabled=False,
            wake_at=105.0,
            algorithm="adaptive",
            memory=AdaptiveMemory(paused_until=105.0, pause_s=15.0),
        ),
        AuditEntry("orders", 100.0, AuditEvent.TRANSITION, 100, 2, "PAUSE", "paused"),
    )
    actuator.apply("esm-orders", 2, False, 0)
    cold = ControllerApp(
        ControlLoop(ledger, actuator, PolicyParams(), algorithm=adaptive()), clock=clock
    )
    scheduled = {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}
    assert cold.handle(scheduled, None) == {"due": 1, "decided": 1}
    assert actuator.read("esm-orders", 0).enabled


# --- inputs that must not hurt: shapes, clocks, names, redelivered log events ---------------


def test_a_document_stamped_in_the_future_does_not_blind_its_queue(
    app: ControllerApp, actuator: InMemoryActuator
) -> None:
    """One clock an hour (or a year) ahead must not make every real sample look too old."""
    ahead = [sample(at=110.0 + 3600.0), sample(at=110.0 + 365 * 86400.0)]
    outcome = app.process_kinesis(kinesis_event(ahead, first_sequence=1), deadline=1e12)
    assert outcome.dropped == {"samples_from_future": 2}
    app.process_kinesis(storm_event(first_sequence=3), deadline=1e12)
    assert actuator.read("esm-orders", 0).max_concurrency == 50


def test_event_times_within_the_skew_allowance_count_and_older_than_retention_do_not(
    app: ControllerApp, clock: Clock
) -> None:
    clock.now = 10_000.0
    near = [sample(at=10_000.0 + 29.0), sample(at=10_000.0 - 560.0)]
    far = [sample(at=10_000.0 - 601.0), sample(at=10_000.0 + 31.0)]
    outcome = app.process_kinesis(kinesis_event(near + far), deadline=1e12)
    assert outcome.dropped == {"samples_too_old": 1, "samples_from_future": 1}
    assert app.loop.counters["samples_windowed"] == 2


def test_log_events_resent_under_new_sequence_numbers_count_once(
    app: ControllerApp, actuator: InMemoryActuator
) -> None:
    """CloudWatch Logs delivers at least once: the same log events in new Kinesis records."""
    samples = [sample(at=100.0 + s + 0.9, ok=8, throttled=2) for s in range(10)]
    first = app.process_kinesis(kinesis_event(samples[:2], first_sequence=1), deadline=1e12)
    assert first.samples == 2
    again = app.process_kinesis(kinesis_event(samples[:2], first_sequence=3), deadline=1e12)
    assert (again.redelivered, again.samples) == (0, 0)
    assert again.skipped["duplicate_log_event"] == 2
    # Twice within one batch too, under two sequence numbers.
    doubled = kinesis_event(samples[2:3], first_sequence=5)
    records = doubled["Records"]
    assert isinstance(records, list)
    records.append({**records[0], "kinesis": {**records[0]["kinesis"], "sequenceNumber": "6"}})
    outcome = app.process_kinesis(doubled, deadline=1e12)
    assert (outcome.samples, outcome.skipped["duplicate_log_event"]) == (1, 1)
    assert app.loop.counters["samples_windowed"] == 3


def test_log_event_ids_may_be_integers_as_in_moto(app: ControllerApp) -> None:
    line = emf_line(sample(at=105.0))
    payload = {
        "messageType": "DATA_MESSAGE",
        "logGroup": "/aws/lambda/orders-worker",
        "logStream": "s",
        "logEvents": [{"id": 7, "timestamp": 105_000, "message": line}],
    }
    data = base64.b64encode(gzip.compress(json.dumps(payload).encode())).decode()
    records = [{"kinesis": {"sequenceNumber": str(n), "data": data}} for n in (1, 2)]
    outcome = app.process_kinesis({"Records": records}, deadline=1e12)
    assert (outcome.samples, outcome.skipped["duplicate_log_event"]) == (1, 1)


def test_a_failed_batch_is_not_remembered_as_windowed(
    app: ControllerApp, ledger: FlakyLedger, actuator: InMemoryActuator
) -> None:
    """Log events are remembered only once windowed: a retry after a ledger fault counts."""
    ledger.down = True
    app.process_kinesis(storm_event(first_sequence=1), deadline=1e12)
    ledger.down = False
    outcome = app.process_kinesis(storm_event(first_sequence=1), deadline=1e12)
    assert outcome.samples == 10
    assert actuator.read("esm-orders", 0).max_concurrency == 50


MALFORMED_BATCHES: list[Any] = [
    "Records",
    {"kinesis": {}},
    1,
    None,
    [1],
    [None],
    ["record"],
    [[]],
    [{}],
    [{"kinesis": None}],
    [{"kinesis": "data"}],
    [{"kinesis": {}}],
    [{"kinesis": {"data": 5, "sequenceNumber": "1"}}],
    [{"kinesis": {"data": "!!", "sequenceNumber": {"n": 1}}, "eventID": ["x"]}],
    [{"kinesis": {"data": None, "sequenceNumber": None}, "eventID": None}],
    [{"kinesis": {"data": "", "sequenceNumber": float("inf")}}],
    [{"kinesis": {"data": "", "sequenceNumber": "9" * 5000}}],
    [{"kinesis": {"data": "", "sequenceNumber": "²"}}],
]


@pytest.mark.parametrize("records", MALFORMED_BATCHES, ids=repr)
def test_malformed_event_shapes_are_skipped_never_raised(
    app: ControllerApp, ledger: FlakyLedger, actuator: InMemoryActuator, records: Any
) -> None:
    assert app.handle({"Records": records}, None) == {"batchItemFailures": []}
    ledger.down = True  # the retry path reads the same records
    storm = storm_event()["Records"]
    assert isinstance(storm, list)
    assert "batchItemFailures" in app.handle({"Records": [records, *storm]}, None)
    ledger.down = False
    assert actuator.calls == []


@pytest.mark.parametrize("event", [[1], "Records", None, 7])
def test_an_event_that_is_not_an_object_is_a_clear_error(app: ControllerApp, event: Any) -> None:
    with pytest.raises(ValueError, match="expected a Kinesis batch"):
        app.handle(event, None)


@pytest.mark.parametrize("queue", ["q" * 81, "orders queue", "", "x" * 5000])
def test_a_manual_evaluation_of_a_name_no_queue_can_have_is_refused(
    app: ControllerApp, actuator: InMemoryActuator, queue: str
) -> None:
    response = app.handle({"queue": queue, "error_rate": 0.2, "success_rate": 0.8}, None)
    assert response["statusCode"] == 400
    assert "80 characters" in response["error"]
    assert actuator.calls == []
