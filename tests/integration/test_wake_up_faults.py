"""A wake-up the wake-up queue does not take: the real application on moto, time virtual,
faults injected on its own SQS client (botocore hooks, as tests/integration/test_faults.py
does). The batch that paused the queue returns before its deadline with ledger and mapping
agreeing, the wake-up is counted (``WakeUpsUnscheduled``), and the scheduled tick wakes the
queue all the same.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from controller.actuator import LambdaActuator
from controller.app import ControllerApp
from controller.aws import client as aws_client
from controller.backlog import SqsBacklog
from controller.ledger import DynamoLedger
from controller.loop import ControlLoop
from controller.model import QueueState
from controller.policy import algorithm_named, memory_type
from controller.schema import HealthMetric
from controller.settings import PolicyParams
from controller.wake_up_queue import SqsWakeUpScheduler
from load.clock import HandClock
from stack.local.emulator import EmbeddedAws
from tests.e2e.test_end_to_end import TABLE, controller_on, deploy_pipeline
from tests.factories import health_count, kinesis_event
from tests.integration.test_faults import CALL_COST_S, Context, hang, service_error
from tests.integration.test_wake_up_queue import storm_samples
from tests.integration.test_wakeups import SCHEDULED


class Rig:
    """The application with the loop the handler wires (the default law, a wake-up queue), on moto,
    time virtual, faults injected into its clients' calls."""

    def __init__(self, esm: str, wake_up_url: str) -> None:
        self.esm = esm
        self.wake_up_url = wake_up_url
        self.time = HandClock(5000.0)
        self.sqs = aws_client("sqs")
        self.faults: dict[str, list[Callable[[], None]]] = {}
        self.sqs.meta.events.register("before-call", self._before)
        dynamodb, lam = aws_client("dynamodb"), aws_client("lambda")
        ledger = DynamoLedger(
            TABLE, dynamodb, clock=self.time, sleep=self.time.sleep, memory_types=memory_type
        )
        actuator = LambdaActuator(lam, clock=self.time, sleep=self.time.sleep)
        wake_ups = SqsWakeUpScheduler(wake_up_url, self.sqs, clock=self.time, sleep=self.time.sleep)
        controller = ControlLoop(
            ledger,
            actuator,
            PolicyParams(),
            algorithm=algorithm_named("adaptive"),
            monotonic=self.time,
            backlog=SqsBacklog(self.sqs, clock=self.time, sleep=self.time.sleep),
            wake_ups=wake_ups,
        )
        self.ahead_s = 0.0
        self.emitted: list[str] = []
        self.app = ControllerApp(
            controller,
            clock=lambda: time.time() + self.ahead_s,
            monotonic=self.time,
            emit=self.emitted.append,
        )

    def _before(self, model: Any, **_: Any) -> None:
        self.time.now += CALL_COST_S
        queued = self.faults.get(model.name)
        if queued:
            queued.pop(0)()

    def inject(self, operation: str, *faults: Callable[[], None]) -> None:
        self.faults.setdefault(operation, []).extend(faults)

    def storm(self, remaining_s: float) -> tuple[dict[str, Any], float]:
        event = kinesis_event(storm_samples("orders", time.time()))
        started = self.time.now
        response = self.app.handle(event, Context(remaining_s))
        return response, self.time.now - started

    def mapping(self) -> tuple[int, bool]:
        config = boto3.client("lambda").get_event_source_mapping(UUID=self.esm)
        return int(config["ScalingConfig"]["MaximumConcurrency"]), config["State"] == "Enabled"

    def ledger_state(self) -> QueueState:
        return DynamoLedger(TABLE, memory_types=memory_type).get_states(["orders"])["orders"]


@pytest.fixture
def rig(emulated_aws: EmbeddedAws, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    controller_on(emulated_aws, monkeypatch)
    esm, _ = deploy_pipeline()
    boto3.client("lambda").update_event_source_mapping(
        UUID=esm, ScalingConfig={"MaximumConcurrency": 2}
    )
    url = boto3.client("sqs").create_queue(QueueName="wake-ups")["QueueUrl"]
    yield Rig(esm, url)


def delayed(url: str) -> int:
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"],
    )["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"  # none delivered early
    return int(attributes["ApproximateNumberOfMessagesDelayed"])


def test_a_pause_sends_its_wake_up_held_back_until_due(rig: Rig) -> None:
    response, _ = rig.storm(remaining_s=60.0)
    assert response == {"batchItemFailures": []}
    state = rig.ledger_state()
    assert rig.mapping() == (2, False) and (state.concurrency, state.enabled) == (2, False)
    # Held back until the pause's end (delivered then: the deployed stack's test above).
    assert delayed(rig.wake_up_url) == 1
    assert rig.app.loop.counters["wake_ups_unscheduled"] == 0


@pytest.mark.parametrize(
    "fault",
    ["unavailable", "denied", "hanging"],
)
def test_a_wake_up_the_queue_refuses_leaves_the_batch_whole_and_the_tick_wakes_the_queue(
    rig: Rig, fault: str
) -> None:
    faults = {
        "unavailable": [service_error("ServiceUnavailable", 503)] * 10,
        "denied": [service_error("AccessDenied", 403)],
        "hanging": [hang(rig.time)] * 10,
    }[fault]
    rig.inject("SendMessageBatch", *faults)

    remaining_s = 20.0
    response, took = rig.storm(remaining_s)

    assert response == {"batchItemFailures": []}
    assert took < remaining_s
    state = rig.ledger_state()
    assert rig.mapping() == (state.concurrency, state.enabled) == (2, False)
    assert delayed(rig.wake_up_url) == 0
    assert rig.app.loop.counters["wake_ups_unscheduled"] == 1
    documents = [json.loads(line) for line in rig.emitted]
    assert health_count(documents, HealthMetric.WAKE_UPS_UNSCHEDULED) == 1
    # The scheduled tick, once the pause is over, wakes the queue all the same.
    rig.ahead_s = state.wake_at - time.time() + 1.0
    answer = rig.app.handle(SCHEDULED, Context(60.0))
    assert answer["due"] == 1
    woken = rig.ledger_state()
    assert rig.mapping() == (woken.concurrency, woken.enabled) == (2, True)
