"""Builders shared by the controller tests."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

import pytest

from controller import loop as control_loop
from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.backlog import InMemoryBacklog
from controller.events import EventOutbox
from controller.executor import AwsExecutor
from controller.ledger import InMemoryLedger
from controller.loop import ControlLoop
from controller.model import (
    AuditEntry,
    Backlog,
    GroupReport,
    Mode,
    QueueConfig,
    QueueState,
    QueueStateName,
    Sample,
)
from controller.planner import Plan
from controller.policy import ALGORITHMS, LimitAlgorithm, memory_type
from controller.policy.aimd import Aimd
from controller.policy.base import NoMemory
from controller.ports import EventPublisher, MappingView
from controller.settings import PolicyParams
from load import recording
from load.recording import RecordedLine, emf_line, log_group_of, subscription_payload

LedgerT = TypeVar("LedgerT", bound=InMemoryLedger)
ActuatorT = TypeVar("ActuatorT", bound=InMemoryActuator)


def sample(
    queue: str = "orders",
    at: float = 1000.0,
    ok: int = 10,
    throttled: int = 0,
    server_errors: int = 0,
    invocation_ms: float | None = 500.0,
    retry_after_s: float = 0.0,
) -> Sample:
    """One invocation's document, emitted at ``at`` (so it started ``invocation_ms`` earlier)."""
    return Sample(
        queue=queue,
        event_time=at,
        requests=ok + throttled + server_errors,
        ok=ok,
        throttled=throttled,
        server_errors=server_errors,
        retry_after_s=retry_after_s,
        invocation_ms=invocation_ms,
    )


def state(
    concurrency: int = 100,
    name: QueueStateName = QueueStateName.HEALTHY,
    queue: str = "orders",
    last_change_at: float = 0.0,
    breaches: int = 0,
    version: int = 0,
) -> QueueState:
    return QueueState(
        queue=queue,
        esm_uuid=f"esm-{queue}",
        state=name,
        concurrency=concurrency,
        previous_concurrency=concurrency,
        consecutive_breaches=breaches,
        last_change_at=last_change_at,
        version=version,
    )


def config(queue: str = "orders", mode: Mode = Mode.ACTIVE, **overrides: float) -> QueueConfig:
    return QueueConfig(queue=queue, esm_uuid=f"esm-{queue}", mode=mode, overrides=overrides)


def waiting(visible: int, visibility_timeout_s: float = 30.0) -> Backlog:
    """A backlog read of ``visible`` messages waiting (SQS's default visibility timeout
    unless told)."""
    return Backlog(visible, visibility_timeout_s)


def kinesis_event(
    samples: list[Sample], first_sequence: int = 1, shard: str = "shardId-000000000000"
) -> dict[str, Any]:
    """A Lambda Kinesis event: one CloudWatch Logs subscription record per sample."""
    lines = [
        RecordedLine(
            arrival=s.event_time,
            shard=shard,
            sequence=str(first_sequence + index),
            partition_key="pk",
            data=subscription_payload(
                [(s.event_time, emf_line(s))], log_group_of(s.queue), "worker", first_id=index
            ),
        )
        for index, s in enumerate(samples)
    ]
    return recording.kinesis_event(lines)


def registered(ledger: LedgerT, queue: str = "orders") -> LedgerT:
    """``ledger`` with ``queue`` registered (a CONFIG item for the mapping ``esm-<queue>``)."""
    ledger.put_config(config(queue))
    return ledger


def mapped(actuator: ActuatorT, queue: str = "orders", concurrency: int = 100) -> ActuatorT:
    """``actuator`` holding ``queue``'s mapping ``esm-<queue>`` at ``concurrency``."""
    actuator.add_mapping(f"esm-{queue}", concurrency)
    return actuator


def backlogged(
    ledger: InMemoryLedger,
    backlog: InMemoryBacklog,
    algorithm: LimitAlgorithm[NoMemory] | None = None,
) -> ControlLoop:
    """A loop over one mapping at 50 reading ``backlog``, deciding with ``algorithm`` (the
    default one: ``None``)."""
    return ControlLoop(
        ledger,
        mapped(InMemoryActuator(), concurrency=50),
        PolicyParams(),
        algorithm=algorithm,
        backlog=backlog,
    )


def storm_event() -> dict[str, object]:
    """Ten seconds of orders under a 20% 429 storm, as one Kinesis batch."""
    samples = [sample(at=100.0 + s + 0.9, ok=8, throttled=2) for s in range(10)]
    return kinesis_event(samples, first_sequence=7)


def aimd_container(
    ledger: InMemoryLedger, actuator: InMemoryActuator, clock: Callable[[], float] = lambda: 110.0
) -> ControllerApp:
    """A warm controller container running the original rule, all its clocks ``clock`` (110 s
    unless told)."""
    loop = ControlLoop(
        ledger, actuator, PolicyParams(), algorithm=Aimd(), monotonic=clock, clock=clock
    )
    return ControllerApp(loop, clock=clock, monotonic=clock)


class Context:
    """A Lambda invocation's context, ``remaining_s`` left of it."""

    def __init__(self, remaining_s: float) -> None:
        self.remaining_ms = int(remaining_s * 1000)

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


# What ``queuemesh simulate --policy all`` runs, in its order: spelled out here (not read from
# load/simulate.py POLICY_NAMES) so that the tests notice when the list changes.
SIMULATED_POLICIES = [
    "static",
    "seed",
    "queuemesh",
    "netflix-aimd",
    "vegas",
    "gradient2",
    "vector-arc",
    "envoy-gradient",
]


# The queues of ``storm_with_events`` and their mappings' starting concurrency: orders is cut,
# billing, at its floor already, is paused.
STORM_QUEUES = {"orders": 100, "billing": 2}


class StormRun(NamedTuple):
    response: dict[str, Any]
    trails: dict[str, list[AuditEntry]]
    mappings: dict[str, MappingView]
    # The EMF documents the container emitted, decoded.
    documents: list[dict[str, Any]]


def storm_with_events(publisher: EventPublisher | None, now: float = 992.0) -> StormRun:
    """One container (adaptive) decides 30 s of an 80% 429 storm on ``STORM_QUEUES``, its
    transitions published through ``publisher`` (None: nothing published)."""
    ledger, actuator = InMemoryLedger(memory_types=memory_type), InMemoryActuator()
    for queue, concurrency in STORM_QUEUES.items():
        registered(ledger, queue)
        mapped(actuator, queue, concurrency)
    outbox = None if publisher is None else EventOutbox(publisher)
    executor = AwsExecutor(ledger, actuator, on_commit=None if outbox is None else outbox.record)
    loop = ControlLoop(
        ledger, actuator, PolicyParams(), algorithm=ALGORITHMS["adaptive"](), executor=executor
    )
    emitted: list[str] = []
    app = ControllerApp(loop, clock=lambda: now, emit=emitted.append, events=outbox)
    samples = [
        sample(queue, at=now - 32 + s, ok=2, throttled=8)
        for s in range(30)
        for queue in STORM_QUEUES
    ]
    response = app.handle(kinesis_event(samples), None)
    return StormRun(
        response,
        {queue: ledger.audit_trail(queue) for queue in STORM_QUEUES},
        {queue: actuator.read(f"esm-{queue}", 0) for queue in STORM_QUEUES},
        [json.loads(line) for line in emitted],
    )


def health_count(documents: list[dict[str, Any]], metric: str) -> float:
    """What the health documents (those without a queue) counted of ``metric``."""
    return sum(sum(d.get(metric, [])) for d in documents if "QueueName" not in d)


def planning_groups(
    monkeypatch: pytest.MonkeyPatch, groups: Callable[[Plan], tuple[GroupReport, ...]]
) -> None:
    """Every plan the control loop makes carries ``groups(plan)``: group reports built by hand,
    what the group law decides (``Plan.groups``) left aside."""
    planner = control_loop.plan

    def grouped(*args: Any, **kwargs: Any) -> Plan:
        made = planner(*args, **kwargs)
        return dataclasses.replace(made, groups=groups(made))

    monkeypatch.setattr(control_loop, "plan", grouped)
