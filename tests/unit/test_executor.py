"""Executing plans: on AWS (time near the deadline injected into the real actuator) and the
display-only dry run."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from controller.actuator import InMemoryActuator, LambdaActuator
from controller.book import Count
from controller.constants import CONNECT_TIMEOUT_S, READ_TIMEOUT_S
from controller.executor import DisplayExecutor
from controller.ledger import InMemoryLedger
from controller.loop import ControlLoop
from controller.model import AuditEntry, AuditEvent, Sample
from controller.policy import memory_type
from controller.policy.aimd import Aimd
from controller.settings import PolicyParams
from tests.factories import config, mapped, registered, sample, state

UUID = "a1b2c3d4-0000-4000-8000-000000000001"


def storm(start: float) -> list[Sample]:
    return [sample(at=start + s + 0.9, ok=8, throttled=2, invocation_ms=500) for s in range(10)]


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def mapping(concurrency: int) -> dict[str, Any]:
    return {
        "UUID": UUID,
        "State": "Enabled",
        "EventSourceArn": "arn:aws:sqs:us-east-1:123456789012:orders",
        "BatchSize": 10,
        "ScalingConfig": {"MaximumConcurrency": concurrency},
    }


def controller_on_lambda(time: FakeTime) -> tuple[ControlLoop, InMemoryLedger, Stubber]:
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
    time = FakeTime()
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
    time = FakeTime()
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
