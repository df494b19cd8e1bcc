"""Reliability fixes on the in-memory twins (issue 11): each case once failed the fleet."""

from __future__ import annotations

from decimal import Decimal

import pytest

from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.ledger import InMemoryLedger, encode_config, queue_key
from controller.loop import ControlLoop
from controller.model import AuditEvent
from controller.policy import memory_type
from controller.policy.aimd import Aimd
from controller.ports import MappingNotFound
from controller.settings import PolicyParams
from tests.factories import config, kinesis_event, sample

HEALTHY_QUEUES = ("a", "b", "c")


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def storm_samples(queues: tuple[str, ...], start: float = 100.0) -> list:  # type: ignore[type-arg]
    return [
        sample(queue, at=start + s + 0.9, ok=8, throttled=2) for s in range(10) for queue in queues
    ]


def fleet(*queues: str) -> tuple[InMemoryLedger, InMemoryActuator]:
    ledger, actuator = InMemoryLedger(memory_types=memory_type), InMemoryActuator()
    for queue in queues:
        ledger.put_config(config(queue))
        actuator.add_mapping(f"esm-{queue}", 100)
    return ledger, actuator


def app_on(
    ledger: InMemoryLedger, actuator: InMemoryActuator, params: PolicyParams | None = None
) -> ControllerApp:
    controller = ControlLoop(ledger, actuator, params or PolicyParams(), algorithm=Aimd())
    return ControllerApp(controller, clock=Clock(115.0), emit=lambda line: None)


BROKEN_CONFIGS = {
    "unknown override": {"Overrides": {"tl": Decimal("0.1")}},
    "override out of range": {"Overrides": {"cmin": Decimal(60)}},
    "override not a number (a DynamoDB BOOL)": {"Overrides": {"t1": True}},
    "unknown mode": {"Mode": "PAUSED"},
    "not a mapping id": {"EsmUuid": "arn:aws:lambda:../../x"},
    "empty mapping id": {"EsmUuid": ""},
    "no mapping id": {"EsmUuid": None},
    "empty group": {"Group": ""},
    "weight out of range": {"Weight": Decimal(0)},
    "priority not an integer": {"Priority": Decimal("1.5")},
    "priority out of range": {"Priority": Decimal(10)},
}


@pytest.mark.parametrize("breakage", BROKEN_CONFIGS.values(), ids=BROKEN_CONFIGS.keys())
def test_a_bad_config_isolates_its_own_queue(breakage: dict[str, object]) -> None:
    ledger, actuator = fleet("bad", *HEALTHY_QUEUES)
    item = {**encode_config(config("bad")), **breakage}
    ledger.put_item({key: value for key, value in item.items() if value is not None})
    app = app_on(ledger, actuator, PolicyParams(cmax=50) if "Overrides" in breakage else None)
    event = kinesis_event(storm_samples(("bad", *HEALTHY_QUEUES)))

    response = app.handle(event, None)

    assert response == {"batchItemFailures": []}
    assert {call.uuid for call in actuator.calls} == {f"esm-{q}" for q in HEALTHY_QUEUES}
    assert ledger.get_states(["bad"]) == {}
    assert app.loop.counters["configs_invalid"] == 1
    assert app.loop.counters["samples_config_invalid"] == 10
    assert queue_key("bad") not in {str(item["PK"]) for item in ledger.audit_items("bad")}


def test_a_bad_config_is_reported_once_per_version(caplog: pytest.LogCaptureFixture) -> None:
    ledger, actuator = fleet("bad")
    ledger.put_item({**encode_config(config("bad")), "Mode": "PAUSED"})
    clock = Clock(115.0)
    controller = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd(), config_ttl_s=0)
    app = ControllerApp(controller, clock=clock, emit=lambda line: None)
    for first in (1, 11, 21):
        clock.now += 1  # every batch re-reads the config
        # New log events each batch (a re-sent one would be skipped as a duplicate).
        samples = storm_samples(("bad",), start=100.0 + first)
        app.handle(kinesis_event(samples, first_sequence=first), None)
    ledger.put_item({**encode_config(config("bad")), "Mode": "FROZEN"})
    clock.now += 1
    app.handle(kinesis_event(storm_samples(("bad",), start=131.0), first_sequence=31), None)

    warnings = [r for r in caplog.records if "CONFIG of bad is invalid" in r.getMessage()]
    assert len(warnings) == 2
    assert controller.counters["configs_invalid"] == 4
    # Fixed: the queue is controlled again.
    ledger.put_config(config("bad"))
    clock.now = 215.0
    app.handle(kinesis_event(storm_samples(("bad",), start=200.0), first_sequence=41), None)
    assert [call.uuid for call in actuator.calls] == ["esm-bad"]
    assert [e.event_type for e in ledger.audit_trail("bad")] == [AuditEvent.TRANSITION]


class CountingActuator(InMemoryActuator):
    """Counts every control-plane call, failed ones included."""

    attempts = 0

    def read(self, uuid: str, deadline: float):  # type: ignore[no-untyped-def]
        self.attempts += 1
        return super().read(uuid, deadline)

    def apply(self, uuid: str, max_concurrency: int, enabled: bool, deadline: float):  # type: ignore[no-untyped-def]
        self.attempts += 1
        return super().apply(uuid, max_concurrency, enabled, deadline)


def test_a_deleted_mapping_is_set_aside_and_rechecked_rarely(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gone = tuple(f"gone{n}" for n in range(30))
    ledger, _ = fleet(*gone, "a")
    actuator = CountingActuator()
    actuator.add_mapping("esm-a", 100)
    clock = Clock(115.0)
    controller = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())
    app = ControllerApp(controller, clock=clock, emit=lambda line: None)

    app.handle(kinesis_event(storm_samples((*gone, "a"))), None)
    first_batch = actuator.attempts
    for batch in range(1, 6):
        clock.now = 115.0 + 60 * batch
        start = clock.now - 15
        app.handle(kinesis_event(storm_samples(gone, start), first_sequence=1000 * batch), None)
        app.handle({"Records": []}, None)

    # One read each; the healthy queue: its first read, the read before the update, the update.
    assert first_batch == 30 + 3
    assert actuator.attempts == first_batch
    assert controller.counters["mappings_missing"] == 30
    lines = [
        r for r in caplog.records if "does not exist; the queue is set aside" in r.getMessage()
    ]
    assert len(lines) == 30
    # Past the re-check time, one read finds it still gone: no new audit, no new line.
    clock.now = 115.0 + 1000
    app.handle(kinesis_event(storm_samples(gone[:1], clock.now - 15), first_sequence=9000), None)
    assert actuator.attempts == first_batch + 1
    assert controller.counters["mappings_missing"] == 30


def test_a_mapping_deleted_under_a_known_state_is_audited_once() -> None:
    ledger, _ = fleet("orders")
    actuator = CountingActuator()
    actuator.add_mapping("esm-orders", 100)
    controller = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())
    app = ControllerApp(controller, clock=Clock(115.0), emit=lambda line: None)
    app.handle(kinesis_event(storm_samples(("orders",))), None)
    before = actuator.attempts
    actuator.fail_next(MappingNotFound("ResourceNotFoundException"))  # the mapping is gone
    for batch in range(1, 4):
        start = 115.0 + 30 * batch
        controller.run_batch(storm_samples(("orders",), start), start + 15)

    events = [entry.event_type for entry in ledger.audit_trail("orders")]
    assert events == [AuditEvent.TRANSITION, AuditEvent.MAPPING_MISSING]
    assert actuator.attempts == before + 1
