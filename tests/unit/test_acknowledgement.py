"""A batch is acknowledged only once its evidence is safe in the ledger (issue 11, item 5)."""

from __future__ import annotations

import pytest

from controller.actuator import InMemoryActuator
from controller.ledger import InMemoryLedger
from controller.model import AuditEntry, AuditEvent, QueueState
from controller.policy import memory_type
from controller.ports import LedgerError
from tests.factories import (
    aimd_container,
    mapped,
    registered,
    storm_event,
)

# One storm batch alone cuts the mapping from 100 to this (tests/test_app.py).
CUT_ONCE = 50


class CommitDownLedger(InMemoryLedger):
    """Reads answer; commits fail while ``down`` is set (a throttled or unreachable table)."""

    down = False

    def commit(self, state: QueueState, audit: AuditEntry) -> QueueState:
        if self.down:
            raise LedgerError("ProvisionedThroughputExceededException")
        return super().commit(state, audit)


@pytest.fixture
def ledger() -> CommitDownLedger:
    return registered(CommitDownLedger(memory_types=memory_type))


@pytest.fixture
def actuator() -> InMemoryActuator:
    return mapped(InMemoryActuator())


def transitions(ledger: InMemoryLedger) -> list[AuditEntry]:
    return [e for e in ledger.audit_trail("orders") if e.event_type is AuditEvent.TRANSITION]


def test_a_retry_while_the_ledger_is_still_down_fails_again(
    ledger: CommitDownLedger, actuator: InMemoryActuator
) -> None:
    app = aimd_container(ledger, actuator)
    failed = {"batchItemFailures": [{"itemIdentifier": "7"}]}
    ledger.down = True
    assert app.handle(storm_event(), None) == failed
    # The redelivery is already windowed here, but its decision is still not in the ledger.
    assert app.handle(storm_event(), None) == failed
    assert actuator.read("esm-orders", 0).max_concurrency == 100
    ledger.down = False
    assert app.handle(storm_event(), None) == {"batchItemFailures": []}
    # Counted once however many deliveries: the same cut as a single delivery, one transition.
    assert actuator.read("esm-orders", 0).max_concurrency == CUT_ONCE
    assert len(transitions(ledger)) == 1


def test_a_recycled_container_decides_the_retried_batch_from_its_records(
    ledger: CommitDownLedger, actuator: InMemoryActuator
) -> None:
    ledger.down = True
    for _ in range(2):
        assert aimd_container(ledger, actuator).handle(storm_event(), None)["batchItemFailures"]
    ledger.down = False
    # The warm container's windows are gone: only the redelivered records carry the evidence.
    assert aimd_container(ledger, actuator).handle(storm_event(), None) == {"batchItemFailures": []}
    assert actuator.read("esm-orders", 0).max_concurrency == CUT_ONCE
    assert len(transitions(ledger)) == 1
