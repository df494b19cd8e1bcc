"""The one-minute tick reads only the due states (a sparse index), never the audit history;
a cold container's first tick also sweeps for paused queues stored without a wake-up."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal
from typing import Any

import boto3
import pytest

from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.book import Count
from controller.ledger import (
    DEFAULT_RETENTION_S,
    DynamoLedger,
    InMemoryLedger,
    create_ledger_table,
    encode_audit,
    encode_state,
)
from controller.loop import WAKE_UP_SWEEP_INTERVAL_S, ControlLoop
from controller.model import AuditEntry, AuditEvent, Mode, QueueState, QueueStateName
from controller.policy import ALGORITHMS, memory_type
from controller.policy.adaptive import AdaptiveMemory
from controller.ports import LedgerError, WakeUpSweep
from controller.registration import register_queue
from controller.settings import PolicyParams
from stack.ops.fleet import FleetOps
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


def tick(
    ledger: DynamoLedger | InMemoryLedger,
    actuator: InMemoryActuator,
    groups: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A cold container's tick, every queue registered (in the CONFIG ``groups`` named)."""
    groups = groups or {}
    for index in range(QUEUES):
        queue = f"q{index:02d}"
        ledger.put_config(replace(config(queue), group=groups.get(queue)))
    cold = ControllerApp(
        ControlLoop(ledger, actuator, PolicyParams(), algorithm=ALGORITHMS["adaptive"]()),
        clock=lambda: NOW,
    )
    return cold.handle(SCHEDULED, None)


def dynamodb_client(endpoint: str) -> Any:
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
def counted_ledger(moto_endpoint: str) -> tuple[DynamoLedger, Counter[str]]:
    client = dynamodb_client(moto_endpoint)
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
    # The cold container's wake-up sweep finds no paused item lacking its WakeUp.
    assert read["Scan"] == 0
    assert read["Query"] == len(DUE)
    # Besides the due states, the tick reads only those queues' configs (BatchGetItem).
    assert read["BatchGetItem"] == len(DUE)


def test_the_tick_decides_a_due_queue_with_the_members_of_its_config_group(
    counted_ledger: tuple[DynamoLedger, Counter[str]],
) -> None:
    """The paused due queue's CONFIG group names two queues that are not due: the cold
    container lists them from the sparse Groups index (a Query, no scan) and decides them with
    it, reading their configs and states by key."""
    ledger, read = counted_ledger
    billing = {"q00": "billing", "q10": "billing", "q11": "billing"}
    assert tick(ledger, actuator_for_fleet(), billing) == {"due": len(DUE), "decided": 5}
    assert read["Scan"] == 0
    assert read["Query"] == len(DUE) + len(billing)
    # The due queues' configs, then the two members' configs and states.
    assert read["BatchGetItem"] == len(DUE) + 2 + 2


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


# -- paused queues stored without WakeUp (before the index, or in the old flat layout) -------

LAYOUTS = ("flat", "flat_without_wake_time", "current_without_wake_up")


def unindexed_paused_item(queue: str, wake_at: float, layout: str) -> dict[str, Any]:
    """A paused queue's STATE item as an older controller stored it: no ``WakeUp``."""
    paused = state_of("q00").evolve(queue=queue, esm_uuid=f"esm-{queue}", wake_at=wake_at)
    item = encode_state(paused.evolve(memory=AdaptiveMemory(paused_until=wake_at, pause_s=15.0)))
    item.pop("WakeUp", None)
    # Written before PausedSince too (any item the index missed was).
    del item["PausedSince"]
    if layout == "current_without_wake_up":
        return item
    for attribute in ("LastChangeAt", "HoldUntil", "Enabled", "WakeAt"):
        del item[attribute]
    item["Memory"] = {
        "last_change_at": Decimal(str(NOW - 600.0)),
        "hold_until": Decimal(0),
        "enabled": False,
        "paused_until": Decimal(str(wake_at)),
        "pause_s": Decimal(15),
    }
    if layout == "flat":
        item["Memory"]["wake_at"] = Decimal(str(wake_at))
    return item


@pytest.fixture(params=["dynamodb", "twin"])
def empty_ledger(request: pytest.FixtureRequest) -> DynamoLedger | InMemoryLedger:
    if request.param == "twin":
        return InMemoryLedger(memory_types=memory_type)
    client = dynamodb_client(request.getfixturevalue("moto_endpoint"))
    table = create_ledger_table(client, f"ledger-unindexed-{next(_tables)}")
    return DynamoLedger(table, client, memory_types=memory_type)


def store(ledger: DynamoLedger | InMemoryLedger, item: dict[str, Any]) -> None:
    if isinstance(ledger, InMemoryLedger):
        ledger.put_item(item)
    else:
        ledger._call("put", "put_item", TableName=ledger.table_name, Item=ledger._wire(item))


def ticks_until_resumed(
    ledger: DynamoLedger | InMemoryLedger, actuator: InMemoryActuator, until: float
) -> float | None:
    """Drive one container's one-minute ticks from NOW (its first tick is a cold start); the
    time of the tick that resumed the mapping, ``None`` if none did by ``until``."""
    clock = [NOW]
    app = ControllerApp(
        ControlLoop(ledger, actuator, PolicyParams(), algorithm=ALGORITHMS["adaptive"]()),
        clock=lambda: clock[0],
    )
    while clock[0] <= until:
        app.handle(SCHEDULED, None)
        if actuator.read("esm-legacy", 0).enabled:
            return clock[0]
        clock[0] += 60.0
    return None


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("wake_in_s", [-300.0, 150.0])
def test_a_paused_queue_stored_without_wake_up_is_resumed_by_the_tick(
    empty_ledger: DynamoLedger | InMemoryLedger, layout: str, wake_in_s: float
) -> None:
    wake_at = NOW + wake_in_s
    store(empty_ledger, unindexed_paused_item("legacy", wake_at, layout))
    empty_ledger.put_config(config("legacy"))
    assert empty_ledger.due_states(NOW + 3600.0) == []  # the index cannot show it
    actuator = InMemoryActuator()
    actuator.add_mapping("esm-legacy", 2, enabled=False)

    resumed_at = ticks_until_resumed(empty_ledger, actuator, until=NOW + 900.0)

    # Without a wake-up time the sweep wakes it at once; the pause still ends at its time.
    due = max(wake_at, NOW)
    assert resumed_at is not None and due <= resumed_at <= due + 120.0
    # The repaired item is in the index from now on: every container's tick would find it.
    [resumed] = empty_ledger.get_states(["legacy"]).values()
    assert resumed.enabled and resumed.version == 2


def test_the_sweep_writes_the_wake_up_once_and_leaves_layouts_alone(
    empty_ledger: DynamoLedger | InMemoryLedger,
) -> None:
    store(empty_ledger, unindexed_paused_item("legacy", NOW + 60.0, "flat"))
    store(empty_ledger, unindexed_paused_item("fresh", 0.0, "flat_without_wake_time"))
    running = encode_state(state_of("q01").evolve(wake_at=0.0))  # enabled: telemetry wakes it
    store(empty_ledger, running)

    sweep = empty_ledger.sweep_wake_ups(NOW)

    assert sweep.resume is None
    assert sorted((s.queue, s.wake_at, s.version) for s in sweep.woken) == [
        ("fresh", NOW, 1),
        ("legacy", NOW + 60.0, 1),
    ]
    assert {s.queue for s in empty_ledger.due_states(NOW + 60.0)} == {"fresh", "legacy"}
    legacy = empty_ledger.get_states(["legacy"])["legacy"]
    assert (legacy.enabled, legacy.wake_at) == (False, NOW + 60.0)
    assert empty_ledger.get_states(["fresh"])["fresh"].wake_at == NOW
    assert empty_ledger.get_states(["q01"])["q01"].wake_at == 0.0
    assert empty_ledger.sweep_wake_ups(NOW).woken == []


def test_a_warm_container_sweeps_again_only_after_the_interval() -> None:
    ledger = InMemoryLedger(memory_types=memory_type)
    sweeps: list[float] = []
    sweep = ledger.sweep_wake_ups

    def counted(now: float, resume: object | None = None) -> WakeUpSweep:
        sweeps.append(now)
        return sweep(now, resume)

    ledger.sweep_wake_ups = counted  # type: ignore[method-assign]
    loop = ControlLoop(ledger, InMemoryActuator(), PolicyParams())
    for minute in range(62):
        assert loop.tick(NOW + 60.0 * minute).fault is None
    assert sweeps == [NOW, NOW + WAKE_UP_SWEEP_INTERVAL_S]


def test_a_failed_sweep_is_counted_and_the_tick_goes_on() -> None:
    twin = InMemoryLedger(memory_types=memory_type)
    for item in fleet_items():
        twin.put_item(item)
    for queue in DUE:
        twin.put_config(config(queue))

    def broken(now: float, resume: object | None = None) -> WakeUpSweep:
        raise LedgerError("sweep for missing wake-ups: throttled")

    twin.sweep_wake_ups = broken  # type: ignore[method-assign]
    actuator = actuator_for_fleet()
    loop = ControlLoop(twin, actuator, PolicyParams(), algorithm=ALGORITHMS["adaptive"]())
    result = loop.tick(NOW)
    assert result.fault is None and result.due == len(DUE)
    assert loop.counters[Count.WAKE_UP_SWEEP_FAILURES] == 1
    assert actuator.read("esm-q00", 0).enabled


def test_each_repair_is_counted_and_said_once() -> None:
    twin = InMemoryLedger(memory_types=memory_type)
    twin.put_item(unindexed_paused_item("legacy", NOW + 600.0, "flat"))
    loop = ControlLoop(twin, InMemoryActuator(), PolicyParams())
    loop.tick(NOW)
    [notice] = loop.take_notices()
    assert (notice.queue, notice.counter) == ("legacy", Count.WAKE_UPS_REPAIRED)
    assert "had no WakeUp" in notice.message
    loop.tick(NOW + WAKE_UP_SWEEP_INTERVAL_S)
    assert loop.take_notices() == []
    assert loop.counters[Count.WAKE_UPS_REPAIRED] == 1


# -- fresh registrations are not read by every tick --------------------------------------
MAPPING = "14e0db71-2b8c-4d2a-9e7f-0123456789ab"


def tick_at(
    ledger: DynamoLedger | InMemoryLedger, actuator: InMemoryActuator, now: float
) -> dict[str, Any]:
    app = ControllerApp(
        ControlLoop(ledger, actuator, PolicyParams(), algorithm=ALGORITHMS["adaptive"]()),
        clock=lambda: now,
    )
    return app.handle(SCHEDULED, None)


@pytest.mark.parametrize("enabled", [True, False])
def test_a_registration_adds_no_wake_up(
    empty_ledger: DynamoLedger | InMemoryLedger, enabled: bool
) -> None:
    actuator = InMemoryActuator()
    actuator.add_mapping(MAPPING, 100, enabled, event_source_arn="arn:aws:sqs:us-east-1:1:orders")
    register_queue(
        empty_ledger,
        actuator,
        "orders",
        MAPPING,
        {},
        Mode.ACTIVE,
        clock=lambda: NOW,
        deadline=lambda: 0,
    )
    [stored] = empty_ledger.get_states(["orders"]).values()
    assert (stored.enabled, stored.wake_at) == (enabled, 0.0)
    # Its telemetry decides it: no tick reads it, now or later.
    assert empty_ledger.due_states(NOW + 86_400.0) == []
    assert tick_at(empty_ledger, actuator, NOW + 60.0) == {"due": 0, "decided": 0}


def test_a_registration_left_in_the_index_leaves_it_once_decided(
    empty_ledger: DynamoLedger | InMemoryLedger,
) -> None:
    """A state an earlier ``register`` wrote with a wake-up at its registration time: the
    tick that decides it writes the hold that ends the wake-up, once."""
    config_of = config("orders")
    empty_ledger.put_config(config_of)
    registered = QueueState(
        queue="orders",
        esm_uuid=config_of.esm_uuid,
        state=QueueStateName.HEALTHY,
        concurrency=100,
        previous_concurrency=100,
        last_evaluated_at=NOW - 120.0,
        version=1,
        wake_at=NOW - 120.0,
    )
    store(empty_ledger, encode_state(registered))
    actuator = InMemoryActuator()
    actuator.add_mapping(config_of.esm_uuid, 100)
    assert tick_at(empty_ledger, actuator, NOW) == {"due": 1, "decided": 1}
    assert empty_ledger.due_states(NOW + 86_400.0) == []
    [stored] = empty_ledger.get_states(["orders"]).values()
    assert (stored.version, stored.wake_at, stored.concurrency) == (2, 0.0, 100)
    assert tick_at(empty_ledger, actuator, NOW + 60.0) == {"due": 0, "decided": 0}


def test_an_operator_change_keeps_a_pauses_wake_up_and_a_pin_ends_it(
    empty_ledger: DynamoLedger | InMemoryLedger,
) -> None:
    empty_ledger.put_config(config("orders"))
    paused = state_of("q00").evolve(
        queue="orders", esm_uuid="esm-orders", wake_at=NOW + 600.0, paused_since=NOW - 60.0
    )
    store(empty_ledger, encode_state(paused))
    actuator = InMemoryActuator()
    actuator.add_mapping("esm-orders", 2, enabled=False)
    operator = FleetOps(empty_ledger, actuator, clock=lambda: NOW)

    operator.set_mode("orders", Mode.DRY_RUN)
    [stored] = empty_ledger.get_states(["orders"]).values()
    # The pause's own next test stays; the operator adds no wake-up.
    assert (stored.wake_at, stored.paused_since) == (NOW + 600.0, NOW - 60.0)

    operator.pin("orders", 10)
    [stored] = empty_ledger.get_states(["orders"]).values()
    assert (stored.enabled, stored.wake_at, stored.paused_since) == (True, 0.0, 0.0)
    assert empty_ledger.due_states(NOW + 86_400.0) == []
