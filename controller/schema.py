"""The telemetry schema (worker -> controller), as the controller reads it.

The controller ships as its own Lambda package and may not import ``worker/``, so it keeps this
copy of ``worker/schema.py``'s vocabulary; ``tests/unit/test_schema.py`` pins the two equal.
"""

from __future__ import annotations

from typing import Final, NamedTuple

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
)
