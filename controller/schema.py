"""The telemetry schema (worker -> controller), as the controller reads it, and the names of
the controller's own metrics.

The controller ships as its own Lambda package and may not import ``worker/``, so it keeps this
copy of ``worker/schema.py``'s vocabulary; ``tests/unit/test_schema.py`` pins the two equal
(all but the ``CONTROLLER_`` vocabulary at the end, which is the controller's alone).
"""

from __future__ import annotations

from enum import StrEnum
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


# --- The controller's own metrics (controller -> CloudWatch), the CONTROLLER_ vocabulary: not
# telemetry, so not in the worker's schema. template.yaml's dashboard graphs them
# (tests/integration/test_template.py holds it to these names).
CONTROLLER_NAMESPACE: Final = "QueueMeshController"


class DecisionMetric(StrEnum):
    """One document per queue decided, under the dimension ``QueueName`` alone: the
    dashboard's SEARCH schema is exactly ``{QueueMeshController,QueueName}``."""

    MAXIMUM_CONCURRENCY = "MaximumConcurrency"
    PRESSURE_RATE = "PressureRate"
    DECISIONS = "Decisions"


class HealthMetric(StrEnum):
    """The controller's health: one document per invocation, without dimensions. Counts,
    but ``LONGEST_PAUSE``, a gauge in seconds."""

    SAMPLES_WINDOWED = "SamplesWindowed"
    MAPPING_UPDATES = "MappingUpdates"
    ACTUATION_FAILURES = "ActuationFailures"
    CONFIGS_INVALID = "ConfigsInvalid"
    MAPPINGS_MISSING = "MappingsMissing"
    TELEMETRY_UNREADABLE = "TelemetryUnreadable"
    SAMPLES_NOT_WINDOWED = "SamplesNotWindowed"
    BATCHES_RETRIED = "BatchesRetried"
    # Transitions that did not reach the event bus (controller.events): dropped, not retried.
    EVENTS_UNPUBLISHED = "EventsUnpublished"
    # An operator's change to a mapping taken into the ledger (DRIFT_DETECTED audit items).
    DRIFT_ADOPTED = "DriftAdopted"
    # Claims whose mapping update never happened, repaired (ACTUATION_RECONCILED audit items).
    CLAIMS_RECONCILED = "ClaimsReconciled"
    # Another writer moved a queue first: it is read again and decided afresh.
    VERSION_CONFLICTS = "VersionConflicts"
    # Backlogs (SQS) that could not be read before a raise: the raise went on without one.
    BACKLOG_READ_FAILURES = "BacklogReadFailures"
    # Groups' reports (the ledger's GROUP items) that could not be written: ``queuemesh
    # status`` shows the last one written until a later one is.
    GROUP_REPORTS_UNWRITTEN = "GroupReportsUnwritten"
    # Wake-ups (a pause's or a test pulse's end) the wake-up queue did not take: the scheduled
    # tick wakes those queues instead, up to a minute late.
    WAKE_UPS_UNSCHEDULED = "WakeUpsUnscheduled"
    # Groups' memories (the ledger's GROUP MEMORY items) not read back, not stored, or not
    # decodable, and CONFIG groups whose members the ledger did not list (the Groups index):
    # while they fail, containers deciding one group may decide it differently.
    GROUP_MEMORY_FAILURES = "GroupMemoryFailures"
    # Queues the reducer keyed without reading their CONFIG ``Group`` (the ledger did not
    # answer): their records went by the group last read for them, else by the downstream they
    # name, else by queue, so a CONFIG-only group may have spanned lanes for that batch.
    GROUP_KEYS_UNREAD = "GroupKeysUnread"
    # The longest any queue decided in the invocation had been paused (its mapping disabled by
    # the controller, test pulses included), in seconds; 0 when none was.
    LONGEST_PAUSE = "LongestPauseSeconds"


# What a batch decided for each group of queues sharing one downstream (``GroupReport``): one
# document per group, under the dimension ``Group`` alone, and one per member, under ``Group``
# and ``QueueName``.
CONTROLLER_GROUP_DIMENSION: Final = "Group"


class GroupMetric(StrEnum):
    """The group metrics: ``CAPACITY`` (calls a second the group's pooled evidence says its
    downstream accepts; absent while not known) per group, ``SHARE`` (the calls a second a
    member may send) and ``PAUSED_TO_SHARE`` (1 while the member is paused so that the
    group's running set fits, else 0) per member."""

    CAPACITY = "GroupCapacity"
    SHARE = "GroupShare"
    PAUSED_TO_SHARE = "PausedToShare"


# What an invocation skipped, by why: one document per reason it skipped anything for, under
# the dimension ``Reason`` alone. The reasons are the decoder's (``SkipReason``: records and
# log events), a sample's not windowed, and a queue's not decided this time (its mapping
# unreadable, no time left before the deadline): the names of the ``skipped`` and ``dropped``
# log lines and of the loop's counters (docs/operations.md).
CONTROLLER_SKIPPED: Final = "Skipped"
CONTROLLER_REASON_DIMENSION: Final = "Reason"
