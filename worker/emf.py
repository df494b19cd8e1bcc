"""One EMF document per queue per invocation, in the telemetry contract's vocabulary."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from worker.instrument import Tally

DEFAULT_NAMESPACE = "QueueMesh"
NAMESPACE_ENV = "QUEUEMESH_NAMESPACE"
# EMF allows 100 values per metric; powertools publishes a partial document when one reaches it.
MAX_LATENCY_VALUES = 99


def namespace_from_env() -> str:
    return os.environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE


def latency_values(latencies_ms: list[float], limit: int = MAX_LATENCY_VALUES) -> list[float]:
    """The latencies, or past ``limit`` one value per run of them that keeps the mean exact.

    Past the limit the number of values no longer counts calls (``DownstreamRequests`` does):
    each value is its run's sum over the average run length, so their mean is the calls' mean.
    """
    if len(latencies_ms) <= limit:
        return list(latencies_ms)
    size, extra = divmod(len(latencies_ms), limit)
    average_run = len(latencies_ms) / limit
    merged: list[float] = []
    start = 0
    for index in range(limit):
        end = start + size + (1 if index < extra else 0)
        merged.append(sum(latencies_ms[start:end]) / average_run)
        start = end
    return merged


def document(
    queue: str,
    tally: Tally,
    invocation_ms: float,
    *,
    namespace: str,
    notes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The EMF document for one queue's share of an invocation."""
    # service="" keeps POWERTOOLS_SERVICE_NAME from adding a dimension to the control signal.
    metrics = EphemeralMetrics(namespace=namespace, service="")
    metrics.add_dimension(name="QueueName", value=queue)
    if len(tally.downstreams) == 1:
        metrics.add_dimension(name="Downstream", value=next(iter(tally.downstreams)))
    counts = {
        "DownstreamRequests": tally.requests,
        "Downstream2xx": tally.ok,
        "Downstream429": tally.throttled,
        "Downstream5xx": tally.server_errors,
        "Downstream503": tally.overloaded,
        "Downstream4xx": tally.client_errors,
    }
    for name, value in counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
    for latency in latency_values(tally.latencies_ms):
        metrics.add_metric(name="DownstreamLatency", unit=MetricUnit.Milliseconds, value=latency)
    if tally.retry_after_s > 0:
        metrics.add_metric(
            name="RetryAfterSeconds", unit=MetricUnit.Seconds, value=tally.retry_after_s
        )
    metrics.add_metric(
        name="InvocationDurationMs", unit=MetricUnit.Milliseconds, value=invocation_ms
    )
    for key, value in (notes or {}).items():
        metrics.add_metadata(key=key, value=value)
    return dict(metrics.serialize_metric_set())


def emit(document_: dict[str, Any]) -> None:
    """Print the document as one log line.

    Printed directly rather than through ``flush_metrics``: QueueMesh's telemetry is a control
    signal, so POWERTOOLS_METRICS_DISABLED / POWERTOOLS_DEV (meant for the application's own
    metrics) do not silence it.
    """
    sys.stdout.write(json.dumps(document_, separators=(",", ":")) + "\n")
    sys.stdout.flush()
