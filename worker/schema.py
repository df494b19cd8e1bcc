"""The telemetry schema (worker -> controller) and the one EMF builder made from it.

Namespace, dimensions and every metric with its unit are spelled here once. The controller
ships as its own Lambda package and keeps an identical copy (``controller/schema.py``), pinned
equal to this one by ``tests/unit/test_schema.py``. Every encoder builds from this module: the
worker's emission (through aws-lambda-powertools), and ``emf_document`` for recordings and
benchmarks.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final, NamedTuple

NAMESPACE: Final = "QueueMesh"
QUEUE_DIMENSION: Final = "QueueName"
DOWNSTREAM_DIMENSION: Final = "Downstream"


class Metric(NamedTuple):
    """One EMF metric member: its name and its CloudWatch unit."""

    name: str
    unit: str


REQUESTS: Final = Metric("DownstreamRequests", "Count")
OK: Final = Metric("Downstream2xx", "Count")
THROTTLED: Final = Metric("Downstream429", "Count")
SERVER_ERRORS: Final = Metric("Downstream5xx", "Count")
# The 503s among the 5xx: the overload signal broken out (the project's addition).
OVERLOADED: Final = Metric("Downstream503", "Count")
CLIENT_ERRORS: Final = Metric("Downstream4xx", "Count")
# Calls that timed out on the client side (connect or read): overload that shows as latency.
TIMED_OUT: Final = Metric("DownstreamTimeout", "Count")
LATENCY: Final = Metric("DownstreamLatency", "Milliseconds")
RETRY_AFTER: Final = Metric("RetryAfterSeconds", "Seconds")
INVOCATION_DURATION: Final = Metric("InvocationDurationMs", "Milliseconds")
# What a downstream announces of its rate limit (issue 30; docs/telemetry.md "Announced limits").
# Optional: a worker writes them only when an answer carried rate-limit headers.
# The smallest remaining quota among the invocation's answers, with that answer's quota, window
# and the seconds from the document's timestamp until the quota resets.
RATE_LIMIT_REMAINING: Final = Metric("RateLimitRemaining", "Count")
RATE_LIMIT_QUOTA: Final = Metric("RateLimitQuota", "Count")
RATE_LIMIT_WINDOW: Final = Metric("RateLimitWindowSeconds", "Seconds")
RATE_LIMIT_RESET: Final = Metric("RateLimitResetSeconds", "Seconds")
# The 429s among Downstream429 whose answer named the kind of limit hit (Stripe's
# Stripe-Rate-Limited-Reason): a concurrency limit wants another cut than a rate limit.
THROTTLED_CONCURRENCY: Final = Metric("Downstream429Concurrency", "Count")
THROTTLED_RATE: Final = Metric("Downstream429Rate", "Count")
ANNOUNCED: Final = (
    RATE_LIMIT_REMAINING,
    RATE_LIMIT_QUOTA,
    RATE_LIMIT_WINDOW,
    RATE_LIMIT_RESET,
    THROTTLED_CONCURRENCY,
    THROTTLED_RATE,
)
# The aggregated form (issue 31; docs/telemetry.md "Aggregated documents"): one document for
# several invocations of one execution environment, all started in one second, latency as a sum
# and a count rather than one value per call. ``Invocations`` is how many (absent: one), and
# ``InvocationStartSecond`` (epoch seconds, whole; a plain property, not a metric) the second
# they all started in.
LATENCY_SUM: Final = Metric("DownstreamLatencySum", "Milliseconds")
LATENCY_COUNT: Final = Metric("DownstreamLatencyCount", "Count")
INVOCATIONS: Final = Metric("Invocations", "Count")
INVOCATION_START: Final = Metric("InvocationStartSecond", "Seconds")
AGGREGATED: Final = (LATENCY_SUM, LATENCY_COUNT, INVOCATIONS, INVOCATION_START)

METRICS: Final = (
    REQUESTS,
    OK,
    THROTTLED,
    SERVER_ERRORS,
    OVERLOADED,
    CLIENT_ERRORS,
    TIMED_OUT,
    LATENCY,
    RETRY_AFTER,
    INVOCATION_DURATION,
    *ANNOUNCED,
    *AGGREGATED,
)


def emf_document(
    queue: str,
    members: Iterable[tuple[Metric, Any]],
    *,
    timestamp_ms: int,
    namespace: str = NAMESPACE,
    dimensions: Mapping[str, str] | None = None,
    undeclared: Collection[Metric] = (),
) -> dict[str, Any]:
    """One EMF document for one queue.

    ``members`` are written in the order given; each is declared in the metric directive with
    its unit, except those in ``undeclared``, which stay plain properties (the contract reads
    ``RetryAfterSeconds`` either way). ``dimensions`` are further dimensions after the queue
    (``Downstream``, a service name), written after the members.
    """
    document: dict[str, Any] = {QUEUE_DIMENSION: queue}
    declared: list[dict[str, str]] = []
    for metric, value in members:
        document[metric.name] = value
        if metric not in undeclared:
            declared.append({"Name": metric.name, "Unit": metric.unit})
    dimension_set = [QUEUE_DIMENSION]
    for name, value in (dimensions or {}).items():
        document[name] = value
        dimension_set.append(name)
    document["_aws"] = {
        "Timestamp": timestamp_ms,
        "CloudWatchMetrics": [
            {"Namespace": namespace, "Dimensions": [dimension_set], "Metrics": declared}
        ],
    }
    return document
