"""The one-minute tick reads only the due states (a sparse index), never the audit history."""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import boto3
import pytest

from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.ledger import (
    DEFAULT_RETENTION_S,
    DynamoLedger,
    InMemoryLedger,
    create_ledger_table,
    encode_audit,
    encode_state,
)
from controller.loop import ControlLoop
from controller.model import AuditEntry, AuditEvent, QueueState, QueueStateName
from controller.policy import ALGORITHMS, memory_type
from controller.policy.adaptive import AdaptiveMemory
from controller.settings import PolicyParams
from tests.factories import config

NOW = 1_790_000_000.0
QUEUES = 50
AUDIT_PER_QUEUE = 100
# Queues 0..2 are due (queue 0 is paused); 3..4 want a wake-up later; the rest want none.
DUE = {f"q{index:02d}" for index in range(3)}
LATER = {f"q{index:02d}" for index in range(3, 5)}
_tables = itertools.count()
SCHEDULED = {"detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}


def state_of(queue: str) -> QueueState:
    wake_at = NOW - 30.0 if queue in DUE else NOW + 600.0 if queue in LATER else 0.0
    paused = queue == "q00"
    return QueueState(
        queue=queue,
        esm_uuid=f"esm-{queue}",
        state=QueueStateName.CRITICAL_BACKOFF if paused else QueueStateName.HEALTHY,
        concurrency=2 if paused else 100,
        previous_concurrency=100,
        last_evaluated_at=NOW - 60.0,
        version=1,
        enabled=not paused,
        wake_at=wake_at,
        algorithm="adaptive" if paused else "",
        memory=AdaptiveMemory(paused_until=wake_at, pause_s=15.0) if paused else None,
    )


def history(queue: str) -> list[dict[str, Any]]:
    return [
        encode_audit(
            AuditEntry(queue, NOW - 86400.0 + n, AuditEvent.TRANSITION, 100, 90, "CUT", "storm"),
            f"{n:04d}",
            DEFAULT_RETENTION_S,
        )
        for n in range(AUDIT_PER_QUEUE)
    ]


def fleet_items() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for index in range(QUEUES):
        queue = f"q{index:02d}"
        items.append(encode_state(state_of(queue)))
        items.extend(history(queue))
    return items


def actuator_for_fleet() -> InMemoryActuator:
    actuator = InMemoryActuator()
    for index in range(QUEUES):
        queue = f"q{index:02d}"
        actuator.add_mapping(f"esm-{queue}", 2 if queue == "q00" else 100)
    actuator.apply("esm-q00", 2, False, 0)
    return actuator


def tick(ledger: DynamoLedger | InMemoryLedger, actuator: InMemoryActuator) -> dict[str, Any]:
    for index in range(QUEUES):
        ledger.put_config(config(f"q{index:02d}"))
    cold = ControllerApp(
        ControlLoop(ledger, actuator, PolicyParams(), algorithm=ALGORITHMS["adaptive"]()),
        clock=lambda: NOW,
    )
    return cold.handle(SCHEDULED, None)


@pytest.fixture
def counted_ledger(moto_endpoint: str) -> tuple[DynamoLedger, Counter[str]]:
    client = boto3.client(
        "dynamodb",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    table = create_ledger_table(client, f"ledger-wakeups-{next(_tables)}")
    ledger = DynamoLedger(table, client, memory_types=memory_type)
    items = fleet_items()
    for start in range(0, len(items), 25):
        chunk = items[start : start + 25]
        client.batch_write_item(
            RequestItems={table: [{"PutRequest": {"Item": ledger._wire(i)}} for i in chunk]}
        )
    read: Counter[str] = Counter()

    def count(parsed: dict[str, Any], model: Any, **_: Any) -> None:
        returned = len(parsed.get("Items", []))
        returned += sum(len(found) for found in parsed.get("Responses", {}).values())
        read[model.name] += returned

    client.meta.events.register("after-call.dynamodb", count)
    return ledger, read


def test_the_tick_reads_only_the_due_states_and_wakes_a_paused_queue(
    counted_ledger: tuple[DynamoLedger, Counter[str]],
) -> None:
    ledger, read = counted_ledger
    actuator = actuator_for_fleet()
    assert tick(ledger, actuator) == {"due": len(DUE), "decided": len(DUE)}
    assert actuator.read("esm-q00", 0).enabled
    assert read["Scan"] == 0
    assert read["Query"] == len(DUE)
    # Besides the due states, the tick reads only those queues' configs (BatchGetItem).
    assert read["BatchGetItem"] == len(DUE)


def test_the_status_listing_still_shows_every_state(
    counted_ledger: tuple[DynamoLedger, Counter[str]],
) -> None:
    ledger, _ = counted_ledger
    assert len(ledger.list_states()) == QUEUES


def test_the_twin_answers_the_same_due_states() -> None:
    twin = InMemoryLedger(memory_types=memory_type)
    for item in fleet_items():
        twin.put_item(item)
    assert {state.queue for state in twin.due_states(NOW)} == DUE
    assert {state.queue for state in twin.due_states(NOW + 600.0)} == DUE | LATER
    actuator = actuator_for_fleet()
    assert tick(twin, actuator) == {"due": len(DUE), "decided": len(DUE)}
    assert actuator.read("esm-q00", 0).enabled


def test_a_state_written_without_a_wake_up_leaves_the_index() -> None:
    item = encode_state(state_of("q00").evolve(wake_at=0.0))
    assert "WakeUp" not in item
    assert encode_state(state_of("q00"))["WakeUp"] == "DUE"
