"""Builders shared by the controller tests."""

from __future__ import annotations

from typing import Any, TypeVar

from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.ledger import InMemoryLedger
from controller.loop import ControlLoop
from controller.model import Mode, QueueConfig, QueueState, QueueStateName, Sample
from controller.policy.aimd import Aimd
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


def storm_event() -> dict[str, object]:
    """Ten seconds of orders under a 20% 429 storm, as one Kinesis batch."""
    samples = [sample(at=100.0 + s + 0.9, ok=8, throttled=2) for s in range(10)]
    return kinesis_event(samples, first_sequence=7)


def aimd_container(ledger: InMemoryLedger, actuator: InMemoryActuator) -> ControllerApp:
    """A warm controller container running the original rule, its clock at 110 s."""
    return ControllerApp(
        ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd()), clock=lambda: 110.0
    )
