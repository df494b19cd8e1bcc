"""One EMF document per queue per invocation, in the telemetry contract's vocabulary."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from aws_lambda_powertools.metrics import EphemeralMetrics

from worker import schema
from worker.tally import Tally

NAMESPACE_ENV = "QUEUEMESH_NAMESPACE"
# EMF allows 100 values per metric; powertools publishes a partial document when one reaches it.
MAX_LATENCY_VALUES = 99


def namespace_from_env() -> str:
    return os.environ.get(NAMESPACE_ENV) or schema.NAMESPACE


def latency_values(tally: Tally, limit: int = MAX_LATENCY_VALUES) -> list[float]:
    """The tally's latencies, or past ``limit`` one value per group of them, in the order the
    calls came, that keeps the mean exact.

    Past the limit the number of values no longer counts calls (``DownstreamRequests`` does):
    each value is its group's sum over the average group's calls, so their mean is the calls'
    mean. A tally past ``LATENCIES_HELD`` holds runs of calls, grouped the same way.
    """
    runs = list(tally.latency_runs())
    if len(runs) <= limit and tally.latency_run == 1:
        return [total for total, _ in runs]
    groups = min(len(runs), limit)
    size, extra = divmod(len(runs), groups)
    average_calls = tally.latency_count / groups
    values: list[float] = []
    start = 0
    for index in range(groups):
        end = start + size + (1 if index < extra else 0)
        values.append(sum(total for total, _ in runs[start:end]) / average_calls)
        start = end
    return values


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
    metrics.add_dimension(name=schema.QUEUE_DIMENSION, value=queue)
    if len(tally.downstreams) == 1:
        metrics.add_dimension(name=schema.DOWNSTREAM_DIMENSION, value=next(iter(tally.downstreams)))
    counts = (
        (schema.REQUESTS, tally.requests),
        (schema.OK, tally.ok),
        (schema.THROTTLED, tally.throttled),
        (schema.SERVER_ERRORS, tally.server_errors),
        (schema.OVERLOADED, tally.overloaded),
        (schema.CLIENT_ERRORS, tally.client_errors),
        (schema.TIMED_OUT, tally.timed_out),
    )
    for metric, value in counts:
        _add(metrics, metric, value)
    for latency in latency_values(tally):
        _add(metrics, schema.LATENCY, latency)
    if tally.retry_after_s > 0:
        _add(metrics, schema.RETRY_AFTER, tally.retry_after_s)
    _add(metrics, schema.INVOCATION_DURATION, invocation_ms)
    emitted_ms = int(time.time() * 1000)
    metrics.set_timestamp(emitted_ms)
    for metric, announced in _announced(tally, emitted_ms / 1000.0):
        _add(metrics, metric, announced)
    for key, value in (notes or {}).items():
        metrics.add_metadata(key=key, value=value)
    return dict(metrics.serialize_metric_set())


def _announced(tally: Tally, emitted_s: float) -> list[tuple[schema.Metric, float]]:
    """The announced-limit members the tally has (docs/telemetry.md, "Announced limits"):
    none when no answer announced a limit or named the kind of a 429. The reset counts from
    the document's timestamp, ``emitted_s``."""
    members: list[tuple[schema.Metric, float]] = []
    limit = tally.limit
    if limit is not None:
        members.append((schema.RATE_LIMIT_REMAINING, limit.remaining))
        if limit.quota is not None:
            members.append((schema.RATE_LIMIT_QUOTA, limit.quota))
        if limit.window_s is not None:
            members.append((schema.RATE_LIMIT_WINDOW, limit.window_s))
        if limit.reset_at is not None:
            members.append((schema.RATE_LIMIT_RESET, max(0.0, limit.reset_at - emitted_s)))
    if tally.throttled_concurrency:
        members.append((schema.THROTTLED_CONCURRENCY, tally.throttled_concurrency))
    if tally.throttled_rate:
        members.append((schema.THROTTLED_RATE, tally.throttled_rate))
    return members


def _add(metrics: EphemeralMetrics, metric: schema.Metric, value: float) -> None:
    metrics.add_metric(name=metric.name, unit=metric.unit, value=value)


def emit(document_: dict[str, Any]) -> None:
    """Print the document as one log line.

    Printed directly rather than through ``flush_metrics``: QueueMesh's telemetry is a control
    signal, so POWERTOOLS_METRICS_DISABLED / POWERTOOLS_DEV (meant for the application's own
    metrics) do not silence it.
    """
    sys.stdout.write(json.dumps(document_, separators=(",", ":")) + "\n")
    sys.stdout.flush()
