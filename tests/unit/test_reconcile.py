"""A claim the mapping never got is repaired and audited as such (issue 11, item 3), once its
end has passed: until then its claimant may still be updating the mapping."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.book import Count
from controller.ledger import InMemoryLedger
from controller.model import AuditEntry, AuditEvent, Mode, QueueState
from controller.policy import memory_type
from controller.ports import ActuationError, LedgerError, MappingView
from load.clock import HandClock
from tests.factories import (
    Context,
    aimd_container,
    config,
    mapped,
    registered,
    storm_event,
)

# Each invocation has a minute: a claim's end is that minute after the claim, and a margin.
INVOCATION = Context(60.0)


class FaultyCommits(InMemoryLedger):
    """``refuse`` commits fail outright; ``lose`` commits land but answer with an error."""

    refuse = 0
    lose = 0

    def commit(self, state: QueueState, audit: AuditEntry) -> QueueState:
        if self.refuse:
            self.refuse -= 1
            raise LedgerError("InternalServerError")
        committed = super().commit(state, audit)
        if self.lose:
            self.lose -= 1
            raise LedgerError("read timeout: the answer was lost")
        return committed


class FailingUpdates(InMemoryActuator):
    """Reads answer; ``apply`` fails while ``down`` is set (a control plane failing for good)."""

    down = False

    def apply(self, uuid: str, max_concurrency: int, enabled: bool, deadline: float) -> MappingView:
        if self.down:
            raise ActuationError("ServiceException")
        return super().apply(uuid, max_concurrency, enabled, deadline)


@pytest.fixture
def ledger() -> FaultyCommits:
    return registered(FaultyCommits(memory_types=memory_type))


@pytest.fixture
def actuator() -> FailingUpdates:
    return mapped(FailingUpdates())


@pytest.fixture
def time() -> HandClock:
    return HandClock(110.0)


def events(ledger: InMemoryLedger) -> list[AuditEvent]:
    return [entry.event_type for entry in ledger.audit_trail("orders")]


def stored_concurrency(ledger: InMemoryLedger) -> int:
    return ledger.get_states(["orders"])["orders"].concurrency


def claim_end(ledger: InMemoryLedger) -> float:
    return ledger.get_states(["orders"])["orders"].apply_by


def claim_stranded_by_a_failed_revert(
    ledger: FaultyCommits, actuator: FailingUpdates, time: HandClock
) -> ControllerApp:
    """The claim lands (100 -> 50), the update fails for good, the revert fails too."""
    app = aimd_container(ledger, actuator, time)
    actuator.down = True
    original_commit = ledger.commit

    def commit_then_go_down(state: QueueState, audit: AuditEntry) -> QueueState:
        committed = original_commit(state, audit)
        ledger.refuse = 1
        return committed

    ledger.commit = commit_then_go_down  # type: ignore[method-assign]
    assert app.handle(storm_event(), INVOCATION)["batchItemFailures"]
    del ledger.commit
    actuator.down = False
    assert (stored_concurrency(ledger), actuator.read("esm-orders", 0).max_concurrency) == (50, 100)
    return app


def claim_with_its_answer_lost(
    ledger: FaultyCommits, actuator: FailingUpdates, time: HandClock
) -> ControllerApp:
    """The claim lands (100 -> 50) but its commit answers with an error: the mapping is never
    updated. Returns the claimant's container."""
    app = aimd_container(ledger, actuator, time)
    ledger.lose = 1
    assert app.handle(storm_event(), INVOCATION)["batchItemFailures"]
    assert (stored_concurrency(ledger), actuator.read("esm-orders", 0).max_concurrency) == (50, 100)
    return app


def test_the_claimant_s_own_container_reconciles_its_stranded_claim_at_once(
    ledger: FaultyCommits, actuator: FailingUpdates, time: HandClock
) -> None:
    """It gave up on the claim: nobody is still at it, whatever its end says."""
    app = claim_stranded_by_a_failed_revert(ledger, actuator, time)
    assert time.now < claim_end(ledger)
    app.handle(storm_event(), INVOCATION)
    assert stored_concurrency(ledger) == actuator.read("esm-orders", 0).max_concurrency
    assert events(ledger)[-1] is AuditEvent.ACTUATION_RECONCILED
    assert AuditEvent.DRIFT_DETECTED not in events(ledger)
    assert app.loop.counters[Count.CLAIMS_IN_FLIGHT] == 0
    assert claim_end(ledger) == 0.0


def test_a_lost_commit_answer_is_reconciled_not_reported_as_drift(
    ledger: FaultyCommits, actuator: FailingUpdates, time: HandClock
) -> None:
    app = claim_with_its_answer_lost(ledger, actuator, time)
    # Redeliveries: the first meets the claim as a version conflict; the second, before the
    # claim's end, repairs it: this container knows it never sent the claim's update.
    app.handle(storm_event(), INVOCATION)
    assert stored_concurrency(ledger) == 50
    assert time.now < claim_end(ledger)
    app.handle(storm_event(), INVOCATION)
    assert stored_concurrency(ledger) == actuator.read("esm-orders", 0).max_concurrency
    assert events(ledger)[:2] == [AuditEvent.TRANSITION, AuditEvent.ACTUATION_RECONCILED]
    assert AuditEvent.DRIFT_DETECTED not in events(ledger)
    assert app.loop.counters[Count.CLAIMS_IN_FLIGHT] == 0


@pytest.mark.parametrize(
    "strand",
    [claim_stranded_by_a_failed_revert, claim_with_its_answer_lost],
    ids=["failed revert", "lost answer"],
)
def test_a_claim_stranded_in_another_container_is_reconciled_once_its_end_has_passed(
    ledger: FaultyCommits,
    actuator: FailingUpdates,
    time: HandClock,
    strand: Callable[[FaultyCommits, FailingUpdates, HandClock], ControllerApp],
) -> None:
    """Another container (a recycled one, another shard's) cannot tell a claim given up from
    an update waiting for its pace."""
    strand(ledger, actuator, time)
    # The redeliveries, the ledger healthy again, in another container.
    other = aimd_container(ledger, actuator, time)
    # Before the claim's end, as far as this container can tell, its claimant is still at it.
    other.handle(storm_event(), INVOCATION)
    assert (stored_concurrency(ledger), actuator.read("esm-orders", 0).max_concurrency) == (50, 100)
    assert other.loop.counters[Count.CLAIMS_IN_FLIGHT] == 1
    assert AuditEvent.ACTUATION_RECONCILED not in events(ledger)

    time.now = claim_end(ledger)
    other.handle(storm_event(), INVOCATION)
    assert stored_concurrency(ledger) == actuator.read("esm-orders", 0).max_concurrency
    assert AuditEvent.ACTUATION_RECONCILED in events(ledger)
    assert AuditEvent.DRIFT_DETECTED not in events(ledger)
    assert claim_end(ledger) == 0.0


def test_a_steady_queue_after_reconciliation_costs_no_writes(
    ledger: FaultyCommits, actuator: FailingUpdates, time: HandClock
) -> None:
    app = claim_with_its_answer_lost(ledger, actuator, time)
    for _ in range(2):  # a version conflict, then the reconciliation
        app.handle(storm_event(), INVOCATION)
    assert AuditEvent.ACTUATION_RECONCILED in events(ledger)
    written = len(ledger.audit_trail("orders"))
    for _ in range(3):  # the same evidence again: nothing new to decide or write
        assert app.handle(storm_event(), INVOCATION) == {"batchItemFailures": []}
    assert len(ledger.audit_trail("orders")) == written


def test_an_operators_value_after_a_claim_is_still_drift(
    ledger: FaultyCommits, actuator: FailingUpdates
) -> None:
    """Only a mapping left at the claim's starting value is an unfinished claim."""
    assert aimd_container(ledger, actuator).handle(storm_event(), None) == {"batchItemFailures": []}
    actuator.apply("esm-orders", 70, True, 0)  # the operator's hand
    aimd_container(ledger, actuator).handle(storm_event(), None)
    assert stored_concurrency(ledger) == 70
    assert events(ledger) == [AuditEvent.TRANSITION, AuditEvent.DRIFT_DETECTED]


def test_a_dry_run_queue_is_never_reconciled_to_its_mapping(actuator: FailingUpdates) -> None:
    ledger = FaultyCommits(memory_types=memory_type)
    ledger.put_config(config("orders", mode=Mode.DRY_RUN))
    for _ in range(2):  # a cold container each time: the claim is only ever recorded
        aimd_container(ledger, actuator).handle(storm_event(), None)
    assert actuator.calls == []
    assert AuditEvent.ACTUATION_RECONCILED not in events(ledger)
