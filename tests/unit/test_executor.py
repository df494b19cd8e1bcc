"""Executing plans: on AWS (time near the deadline injected into the real actuator) and the
display-only dry run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from controller.actuator import ActuationGaveUp, InMemoryActuator, LambdaActuator
from controller.book import Count
from controller.constants import CONNECT_TIMEOUT_S, READ_TIMEOUT_S
from controller.executor import DisplayExecutor
from controller.ledger import InMemoryLedger
from controller.loop import BatchResult, ControlLoop
from controller.model import Action, AuditEntry, AuditEvent, Sample
from controller.policy import memory_type
from controller.policy.aimd import Aimd
from controller.settings import PolicyParams
from load.clock import HandClock
from tests.factories import aimd_container, config, mapped, registered, sample, state

UUID = "a1b2c3d4-0000-4000-8000-000000000001"


def storm(start: float) -> list[Sample]:
    return [sample(at=start + s + 0.9, ok=8, throttled=2, invocation_ms=500) for s in range(10)]


def mapping(concurrency: int) -> dict[str, Any]:
    return {
        "UUID": UUID,
        "State": "Enabled",
        "EventSourceArn": "arn:aws:sqs:us-east-1:123456789012:orders",
        "BatchSize": 10,
        "ScalingConfig": {"MaximumConcurrency": concurrency},
    }


def controller_on_lambda(time: HandClock) -> tuple[ControlLoop, InMemoryLedger, Stubber]:
    """The loop on the real ``LambdaActuator`` (a stubbed client with the controller's attempt
    timeouts), both on ``time``; ``orders`` known at 100."""
    client = boto3.client(
        "lambda",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=READ_TIMEOUT_S,
            retries={"mode": "standard", "total_max_attempts": 1},
        ),
    )
    actuator = LambdaActuator(client, clock=time, sleep=time.sleep)
    ledger = InMemoryLedger(memory_types=memory_type)
    ledger.put_config(replace(config("orders"), esm_uuid=UUID))
    first = state().evolve(esm_uuid=UUID)
    ledger.commit(first, AuditEntry("orders", 90.0, AuditEvent.OPERATOR, 100, 100, "X", "x"))
    loop = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd(), monotonic=time)
    return loop, ledger, Stubber(client)


@pytest.mark.parametrize("left_s", [3.5, 5.0, 6.5, 8.9])
def test_a_step_whose_update_could_not_be_attempted_is_not_claimed(left_s: float) -> None:
    """Issue 32.7: with too little time for claim, update and revert, the step waits."""
    time = HandClock(1000.0)
    loop, ledger, stubber = controller_on_lambda(time)
    stubber.add_response("get_event_source_mapping", mapping(100), {"UUID": UUID})
    with stubber:
        result = loop.run_batch(storm(100), 110.0, deadline=time.now + left_s)
    stubber.assert_no_pending_responses()

    assert result.done == []
    assert [entry.event_type for entry in ledger.audit_trail("orders")] == [AuditEvent.OPERATOR]
    assert loop.counters[Count.STEPS_DEFERRED] == 1
    assert loop.counters[Count.ACTUATION_FAILURES] == 0
    # The next batch, with time in hand, carries it out.
    stubber.add_response("get_event_source_mapping", mapping(100), {"UUID": UUID})
    update = {"UUID": UUID, "ScalingConfig": {"MaximumConcurrency": 50}, "Enabled": True}
    stubber.add_response("update_event_source_mapping", mapping(50), update)
    with stubber:
        [cut] = loop.run_batch([], 111.0, deadline=time.now + 60).done
    assert (cut.previous, cut.target) == (100, 50)
    events = [entry.event_type for entry in ledger.audit_trail("orders")]
    assert events == [AuditEvent.OPERATOR, AuditEvent.TRANSITION]


def test_with_time_for_claim_update_and_revert_the_step_is_carried_out() -> None:
    time = HandClock(1000.0)
    loop, _, stubber = controller_on_lambda(time)
    stubber.add_response("get_event_source_mapping", mapping(100), {"UUID": UUID})
    update = {"UUID": UUID, "ScalingConfig": {"MaximumConcurrency": 50}, "Enabled": True}
    stubber.add_response("update_event_source_mapping", mapping(50), update)
    with stubber:
        [cut] = loop.run_batch(storm(100), 110.0, deadline=time.now + 9.5).done
    assert cut.target == 50
    assert loop.counters[Count.STEPS_DEFERRED] == 0


def test_the_display_executor_shows_the_plan_and_carries_nothing_out() -> None:
    ledger, actuator = (
        registered(InMemoryLedger(memory_types=memory_type)),
        mapped(InMemoryActuator()),
    )
    shown: list[str] = []
    loop = ControlLoop(
        ledger, actuator, PolicyParams(), algorithm=Aimd(), executor=DisplayExecutor(shown.append)
    )

    [decision] = loop.run_batch(storm(100), 110.0).done

    assert shown == [
        "update orders (esm-orders): 100 -> 50 [MULTIPLICATIVE_DECREASE] HTTP 429 breach: "
        "Error rate 20.0% >= T1 (5.0%). Applied factor Beta=0.5. Scaled from 100 -> 50."
    ]
    assert decision.target == 50
    assert actuator.calls == []
    assert ledger.audit_trail("orders") == []
    assert ledger.get_states(["orders"]) == {}
    # The book remembers the step as done: the storm's lagging tail is judged from 50.
    [held] = loop.run_batch(storm(111)[:3], 114.0).done
    assert held.previous == 50


def too_many_requests() -> dict[str, Any]:
    """What Lambda answers a call over the account's control-plane quota."""
    return {
        "service_error_code": "TooManyRequestsException",
        "service_message": "Rate exceeded",
        "http_status_code": 429,
        "service_error_meta": {"Reason": "CallerRateLimitExceeded"},
    }


def test_a_cut_lambda_keeps_refusing_is_put_back_before_the_deadline() -> None:
    """Issue 31.3, with the real boto3 client: TooManyRequestsException on every attempt.
    The actuator retries within the deadline, gives up, the ledger is put back to the mapping's
    value, the invocation returns in time and the next batch plans the cut again."""
    time = HandClock(1000.0)
    loop, ledger, stubber = controller_on_lambda(time)
    stubber.add_response("get_event_source_mapping", mapping(100), {"UUID": UUID})
    for _ in range(8):  # the actuator's attempts at most
        stubber.add_client_error("update_event_source_mapping", **too_many_requests())
    deadline = time.now + 20.0
    with stubber:
        result = loop.run_batch(storm(100), 110.0, deadline=deadline)

    assert time.now < deadline
    assert result.done == [] and [d.target for d in result.planned] == [50]
    [stored] = ledger.get_states(["orders"]).values()
    assert stored.concurrency == 100  # the mapping's value: ledger and mapping agree
    events = [entry.event_type for entry in ledger.audit_trail("orders")]
    assert events == [AuditEvent.OPERATOR, AuditEvent.TRANSITION, AuditEvent.ACTUATION_FAILED]
    assert loop.counters[Count.ACTUATION_FAILURES] == 1
    assert loop.counters[Count.ESM_UPDATES] == 0

    stubber = Stubber(stubber.client)  # a fresh queue: the refusals left over are dropped
    stubber.add_response("get_event_source_mapping", mapping(100), {"UUID": UUID})
    update = {"UUID": UUID, "ScalingConfig": {"MaximumConcurrency": 50}, "Enabled": True}
    stubber.add_response("update_event_source_mapping", mapping(50), update)
    with stubber:
        [cut] = loop.run_batch([], 111.0, deadline=time.now + 20.0).done
    assert (cut.previous, cut.target) == (100, 50)
    assert ledger.get_states(["orders"])["orders"].concurrency == 50
    assert loop.counters[Count.ESM_UPDATES] == 1
    assert loop.counters[Count.SAMPLES_WINDOWED] == 10


class RefusingActuator(InMemoryActuator):
    """The twin, refusing every update while ``refusing`` (as the actuator reports Lambda's
    TooManyRequestsException once its retries are spent)."""

    refusing = True

    def apply(self, uuid: str, max_concurrency: int, enabled: bool, deadline: float) -> Any:
        if self.refusing:
            raise ActuationGaveUp(
                f"mapping {uuid}: TooManyRequestsException",
                operation="update_event_source_mapping",
                attempts=8,
            )
        return super().apply(uuid, max_concurrency, enabled, deadline)


def test_while_a_cut_waits_no_raise_spends_the_control_plane_and_both_come_back() -> None:
    ledger, actuator = InMemoryLedger(memory_types=memory_type), RefusingActuator()
    for queue, level in (("cut", 100), ("raise", 50)):
        ledger.put_config(config(queue))
        ledger.commit(
            state(level, queue=queue),
            AuditEntry(queue, 90.0, AuditEvent.OPERATOR, level, level, "X", "x"),
        )
        actuator.add_mapping(f"esm-{queue}", level)
    loop = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())
    samples = [
        sample(queue, at=100.0 + s + 0.9, ok=10 - throttled, throttled=throttled)
        for s in range(10)
        for queue, throttled in (("cut", 3), ("raise", 0))
    ]

    first = loop.run_batch(samples, 110.0)

    assert [d.queue for d in first.planned] == ["cut", "raise"]
    assert first.done == [] and actuator.calls == []
    assert loop.counters[Count.STEPS_DEFERRED] == 1  # the raise, never claimed
    assert [e.event_type for e in ledger.audit_trail("raise")] == [AuditEvent.OPERATOR]
    assert {q: s.concurrency for q, s in ledger.get_states(["cut", "raise"]).items()} == {
        "cut": 100,
        "raise": 50,
    }

    actuator.refusing = False
    second = loop.run_batch([], 111.0)  # no new telemetry: the evidence is still windowed

    assert [(d.queue, d.previous, d.target) for d in second.done] == [
        ("cut", 100, 50),
        ("raise", 50, 55),
    ]
    assert [(call.uuid, call.value) for call in actuator.calls] == [
        ("esm-cut", 50),
        ("esm-raise", 55),
    ]
    assert loop.counters[Count.ESM_UPDATES] == 2
    assert loop.counters[Count.SAMPLES_WINDOWED] == 20
    assert loop.counters[Count.STEPS_DEFERRED] == 1


class PacedUpdates(InMemoryActuator):
    """The twin, whose next update first waits for its pace: ``meanwhile`` (what another
    invocation does while it waits) runs before it lands."""

    meanwhile: Callable[[], None] | None = None

    def apply(self, uuid: str, max_concurrency: int, enabled: bool, deadline: float) -> Any:
        meanwhile, self.meanwhile = self.meanwhile, None
        if meanwhile is not None:
            meanwhile()
        return super().apply(uuid, max_concurrency, enabled, deadline)


def test_a_claim_whose_update_waits_for_its_pace_is_left_to_its_claimant() -> None:
    """Two invocations (a lane's batch, and a tick or another lane) decide one queue: the
    first claims its cut, and while its update waits for its pace the second finds the
    mapping still at the claim's starting value. It leaves the claim to its claimant: no
    reconciliation, no write; once the update landed, no drift either."""
    time = HandClock(110.0)
    ledger, actuator = InMemoryLedger(memory_types=memory_type), PacedUpdates()
    ledger.put_config(config("orders"))
    ledger.commit(state(), AuditEntry("orders", 90.0, AuditEvent.OPERATOR, 100, 100, "X", "x"))
    actuator.add_mapping("esm-orders", 100)
    lane = aimd_container(ledger, actuator, time).loop
    other = aimd_container(ledger, actuator, time).loop
    meanwhile: list[BatchResult] = []
    actuator.meanwhile = lambda: meanwhile.append(other.run_batch(storm(100), 110.5, time.now + 60))

    [cut] = lane.run_batch(storm(100), 110.0, deadline=time.now + 60).done

    [decided] = meanwhile
    assert decided.done == [] and [d.queue for d in decided.planned] == ["orders"]
    assert other.counters[Count.CLAIMS_IN_FLIGHT] == 1
    assert other.counters[Count.ACTUATIONS_RECONCILED] == 0
    assert (cut.previous, cut.target) == (100, 50)
    assert actuator.read("esm-orders", 0).max_concurrency == 50
    # The other invocation's next batch decides the queue again: ledger and mapping agree.
    time.now = 111.0
    [held] = other.run_batch([], 111.0, deadline=time.now + 60).done
    assert held.previous == 50
    events = [entry.event_type for entry in ledger.audit_trail("orders")]
    assert events == [AuditEvent.OPERATOR, AuditEvent.TRANSITION]
    assert ledger.get_states(["orders"])["orders"].concurrency == 50
    assert other.counters[Count.DRIFT_DETECTED] == 0


def claimed_cut(ledger: InMemoryLedger, apply_by: float) -> InMemoryLedger:
    """``ledger`` holding the claim of a cut of ``orders`` from 100 to 50, ending at
    ``apply_by``, that asked to be woken at 110 s (the tick decides it then)."""
    ledger.put_config(config("orders"))
    claim = state(50).evolve(
        previous_concurrency=100,
        last_action=Action.MULTIPLICATIVE_DECREASE,
        apply_by=apply_by,
        wake_at=110.0,
    )
    ledger.commit(claim, AuditEntry("orders", 100.0, AuditEvent.TRANSITION, 100, 50, "X", "x"))
    return ledger


@pytest.mark.parametrize(
    ("apply_by", "reconciled"),
    [(110.5, False), (110.0, True), (0.0, True)],
    ids=["in-flight", "ended", "an-older-controller's"],
)
def test_a_claim_is_reconciled_once_its_end_has_passed(apply_by: float, reconciled: bool) -> None:
    """A mapping still at the claim's starting value: before the claim's end its claimant may
    still be updating it; from the end on (or for a claim stored without one) it is a claim
    never carried out, reconciled as ever."""
    time = HandClock(110.0)
    ledger = claimed_cut(InMemoryLedger(memory_types=memory_type), apply_by)
    loop = aimd_container(ledger, mapped(InMemoryActuator()), time).loop

    loop.tick(110.0, deadline=time.now + 60, woken=["orders"])

    events = [entry.event_type for entry in ledger.audit_trail("orders")]
    assert (AuditEvent.ACTUATION_RECONCILED in events) is reconciled
    assert loop.counters[Count.CLAIMS_IN_FLIGHT] == (not reconciled)
    stored = ledger.get_states(["orders"])["orders"]
    assert (stored.concurrency, stored.apply_by) == ((100, 0.0) if reconciled else (50, apply_by))


def test_another_value_is_drift_while_a_claim_is_in_flight() -> None:
    """Only the claim's starting value waits for its claimant: an operator's other one is
    adopted at once."""
    time = HandClock(110.0)
    ledger = claimed_cut(InMemoryLedger(memory_types=memory_type), 170.0)
    loop = aimd_container(ledger, mapped(InMemoryActuator(), concurrency=70), time).loop

    loop.tick(110.0, deadline=time.now + 60, woken=["orders"])

    events = [entry.event_type for entry in ledger.audit_trail("orders")]
    assert events == [AuditEvent.TRANSITION, AuditEvent.DRIFT_DETECTED]
    assert ledger.get_states(["orders"])["orders"].concurrency == 70
    assert loop.counters[Count.CLAIMS_IN_FLIGHT] == 0
