"""One EMF document per queue per second of invocation starts, in the telemetry contract's
vocabulary (docs/telemetry.md; the aggregated form when it sums several invocations)."""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any

from worker import schema
from worker.aggregate import Report

NAMESPACE_ENV = "QUEUEMESH_NAMESPACE"
# Plain properties rather than metrics: what the controller needs to place and weigh the
# document's invocations and to wait for a downstream, no series worth graphing (a declaration
# costs some 40 bytes a document).
_UNDECLARED = (schema.INVOCATIONS, schema.INVOCATION_START, schema.RETRY_AFTER)


def namespace_from_env() -> str:
    return os.environ.get(NAMESPACE_ENV) or schema.NAMESPACE


def document(
    queue: str,
    report: Report,
    *,
    namespace: str,
    notes: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The EMF document for one queue's invocations that started in one second.

    A count of zero is left out (the contract reads it as 0), but ``Downstream503`` beside
    any 5xx: it tells the controller that this worker breaks them out; and
    ``DownstreamRequests`` when it is the answers' sum (calls without an answer make it more).
    A document for one invocation is the per-invocation form (its start is its timestamp
    minus its duration); for several, it names how many and the second they started in (and
    for one too, in the rare case rounding would move its start into another second).
    """
    calls = report.calls
    answered = (
        calls.ok + calls.throttled + calls.server_errors + calls.client_errors + calls.timed_out
    )
    members: list[tuple[schema.Metric, Any]] = [
        (metric, value)
        for metric, value in (
            (schema.REQUESTS, 0 if calls.requests == answered else calls.requests),
            (schema.OK, calls.ok),
            (schema.THROTTLED, calls.throttled),
            (schema.SERVER_ERRORS, calls.server_errors),
            (schema.CLIENT_ERRORS, calls.client_errors),
            (schema.TIMED_OUT, calls.timed_out),
        )
        if value
    ]
    if calls.server_errors:
        members.append((schema.OVERLOADED, calls.overloaded))
    if calls.latency_count:
        members.append((schema.LATENCY_SUM, round(calls.latency_ms_sum, 3)))
        members.append((schema.LATENCY_COUNT, calls.latency_count))
    if calls.retry_after_s > 0:
        members.append((schema.RETRY_AFTER, calls.retry_after_s))
    busy_ms = round(report.busy_ms, 3)
    members.append((schema.INVOCATION_DURATION, busy_ms))
    # Never before the end: the start it implies (minus the duration) is never too late.
    timestamp_ms = math.ceil(report.ended_at * 1000)
    # The start as the controller reads it from one invocation's document, rounded as sent:
    # where it would fall in another second than the report's, the second is written too.
    implied_start = timestamp_ms / 1000.0 - busy_ms / 1000.0
    if report.invocations > 1 or math.floor(implied_start) != report.second:
        members.append((schema.INVOCATIONS, report.invocations))
        members.append((schema.INVOCATION_START, report.second))
    members.extend(_announced(report, timestamp_ms / 1000.0))
    document_ = schema.emf_document(
        queue,
        members,
        timestamp_ms=timestamp_ms,
        namespace=namespace,
        dimensions=(
            {schema.DOWNSTREAM_DIMENSION: next(iter(calls.downstreams))}
            if len(calls.downstreams) == 1
            else None
        ),
        undeclared=_UNDECLARED,
    )
    document_.update(notes or {})
    return document_


def _announced(report: Report, stamped_s: float) -> list[tuple[schema.Metric, float]]:
    """The announced-limit members the report has (docs/telemetry.md, "Announced limits"):
    none when no answer announced a limit or named the kind of a 429. The reset counts from
    the document's timestamp, ``stamped_s``."""
    members: list[tuple[schema.Metric, float]] = []
    limit = report.limit
    if limit is not None:
        members.append((schema.RATE_LIMIT_REMAINING, limit.remaining))
        if limit.quota is not None:
            members.append((schema.RATE_LIMIT_QUOTA, limit.quota))
        if limit.window_s is not None:
            members.append((schema.RATE_LIMIT_WINDOW, limit.window_s))
        if limit.reset_at is not None:
            members.append((schema.RATE_LIMIT_RESET, max(0.0, limit.reset_at - stamped_s)))
    calls = report.calls
    if calls.throttled_concurrency:
        members.append((schema.THROTTLED_CONCURRENCY, calls.throttled_concurrency))
    if calls.throttled_rate:
        members.append((schema.THROTTLED_RATE, calls.throttled_rate))
    return members


def emit(document_: dict[str, Any]) -> None:
    """Print the document as one log line.

    Printed directly: QueueMesh's telemetry is a control signal, so POWERTOOLS_METRICS_DISABLED
    / POWERTOOLS_DEV (meant for the application's own metrics) do not silence it, nor does
    POWERTOOLS_SERVICE_NAME add a dimension to it.
    """
    sys.stdout.write(json.dumps(document_, separators=(",", ":")) + "\n")
    sys.stdout.flush()
