"""Builders shared by the controller tests."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

from controller.model import Mode, QueueConfig, QueueState, QueueStateName, Sample


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


def emf_line(s: Sample) -> str:
    """The EMF document a worker would print for ``s``."""
    members = {
        "DownstreamRequests": s.requests,
        "Downstream2xx": s.ok,
        "Downstream429": s.throttled,
        "Downstream5xx": s.server_errors,
        "RetryAfterSeconds": s.retry_after_s,
    }
    if s.invocation_ms is not None:
        members["InvocationDurationMs"] = s.invocation_ms
    return json.dumps(
        {
            "_aws": {
                "Timestamp": int(s.event_time * 1000),
                "CloudWatchMetrics": [
                    {
                        "Namespace": "QueueMesh",
                        "Dimensions": [["QueueName"]],
                        "Metrics": [{"Name": name} for name in members],
                    }
                ],
            },
            "QueueName": s.queue,
            **members,
        }
    )


def kinesis_event(
    samples: list[Sample], first_sequence: int = 1, shard: str = "shardId-000000000000"
) -> dict[str, Any]:
    """A Lambda Kinesis event: one CloudWatch Logs subscription record per sample."""
    records = []
    for index, s in enumerate(samples):
        payload = {
            "messageType": "DATA_MESSAGE",
            "owner": "123456789012",
            "logGroup": "/aws/lambda/worker",
            "logStream": "2026/11/29/[$LATEST]abc",
            "subscriptionFilters": ["queuemesh"],
            "logEvents": [
                {"id": str(index), "timestamp": int(s.event_time * 1000), "message": emf_line(s)}
            ],
        }
        sequence = str(first_sequence + index)
        records.append(
            {
                "eventSource": "aws:kinesis",
                "eventID": f"{shard}:{sequence}",
                "kinesis": {
                    "sequenceNumber": sequence,
                    "partitionKey": "pk",
                    "data": base64.b64encode(gzip.compress(json.dumps(payload).encode())).decode(),
                },
            }
        )
    return {"Records": records}
