"""Builders shared by the controller tests."""

from __future__ import annotations

from typing import Any

from controller.model import Mode, QueueConfig, QueueState, QueueStateName, Sample
from load import recording
from load.recording import RecordedLine, emf_line, log_group_of, subscription_payload


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
