"""Limits that AWS imposes, and the bounds the controller keeps its own memory and inputs
within, spelled once for the controller, the CLI, the simulator and replay."""

from __future__ import annotations

import re
from typing import Final, TypeGuard

# An SQS event source mapping's MaximumConcurrency: AWS accepts 2..1000.
MIN_CONCURRENCY: Final = 2
MAX_CONCURRENCY: Final = 1000

# A queue's standing among the queues that share one downstream (CONFIG ``Weight`` and
# ``Priority``, docs/ledger.md): its weight in the group's max-min fair share, and its
# priority when the group must time-share (the higher runs first).
DEFAULT_WEIGHT: Final = 1.0
MIN_WEIGHT: Final = 0.01
MAX_WEIGHT: Final = 100.0
DEFAULT_PRIORITY: Final = 0
MAX_PRIORITY: Final = 9

# An SQS queue name: 1..80 characters of [A-Za-z0-9_-], a FIFO queue's ending in ".fifo" (the
# suffix counted in the 80). Telemetry naming anything else is not a queue: it never becomes a
# ledger key (DynamoDB keys are bounded too, at 2,048 bytes).
MAX_QUEUE_NAME_LENGTH: Final = 80
_QUEUE_NAME: Final = re.compile(r"[A-Za-z0-9_-]+(?:\.fifo)?")


def is_queue_name(name: object) -> TypeGuard[str]:
    """Whether ``name`` could name an SQS queue."""
    return (
        type(name) is str
        and len(name) <= MAX_QUEUE_NAME_LENGTH
        and _QUEUE_NAME.fullmatch(name) is not None
    )


# How far ahead of the controller's clock a document's event time may be. Lambda hosts keep
# time to milliseconds; this allows for a worker elsewhere with a poor clock. A document
# stamped later would become its window's newest time and make real evidence look too old.
MAX_CLOCK_SKEW_S: Final = 30.0

# How long a warm controller keeps a queue's one-second buckets of evidence. The policy's
# time parameters (window, settle margin, staleness) are bounded by it: a window longer than
# what is kept would silently be this one.
WINDOW_RETENTION_S: Final = 600.0
# Queues whose downstream announced its quota within this long share that quota: each is
# sized from its share (docs/algorithms.md, "Announced limits").
QUOTA_SHARED_FOR_S: Final = 60.0
# The seconds of a queue's newest invocation starts its use of a shared quota is measured on:
# what it leaves of the quota goes to the queues that want more (max-min fair by demand).
QUOTA_USE_S: Final = 10.0

# What a warm controller container remembers, at most. Past these sizes the least recently
# used entries are forgotten and re-read (configs, states) or re-learned (windows) when needed.
# Queues: configs (registered or not), states and windows, each (a window holds at most its
# retention's one-second buckets, about 100 KB when every second has telemetry), and the queue
# names the decoder has checked.
CACHED_QUEUES: Final = 2000
# How long a CONFIG item read from the ledger is trusted (the controller's configs, the
# reducer's groups): an operator's change reaches every warm container within it.
CONFIG_TTL_S: Final = 60.0
# Kinesis partitions (shard and partition key: Lambda keeps order per partition key, even with
# a parallelization factor) whose last ingested sequence number is remembered (redelivery).
CACHED_PARTITIONS: Final = 2000
# CloudWatch Logs log events (by id) already reduced: a re-sent one is not counted twice; and
# reduced records (by id) already windowed, for the same reason. Ids older than the window
# retention are forgotten sooner (their evidence would be too old).
CACHED_LOG_EVENTS: Final = 100_000
CACHED_RECORD_IDS: Final = 100_000
# Shards of the reduced stream whose reading a container remembers: below which sequence number
# it has windowed every record of the shard (``controller.evidence``, the catch-up).
CACHED_SHARDS: Final = 1000
# A controller container handed a batch of a shard it has not read continuously first reads the
# shard back (docs/architecture.md, "Scaling out the controller"): from where it left off, or,
# when that is older than this or unknown, this long before now. It covers the spans the
# default law reads (its window 30 s, load and staleness 60 s) with room to spare.
CATCH_UP_SPAN_S: Final = 120.0
# The bounds of one catch-up: GetRecords calls (a shard serves five a second, shared with the
# event source mapping's own reads), records per call, and seconds of the invocation (no call
# starts that could not end within them: an attempt's worst case is ATTEMPT_TIMEOUT_S).
CATCH_UP_MAX_CALLS: Final = 4
CATCH_UP_RECORDS_PER_CALL: Final = 10_000
CATCH_UP_BUDGET_S: Final = 5.0

# Lambda's control plane (Get/List/UpdateEventSourceMapping among others) answers 15 requests
# a second per account, shared with everything else in the account, and the quota cannot be
# raised. The controller's actuator keeps to 12 in any one-second window, leaving three for
# deployments and people.
CONTROL_PLANE_QUOTA_PER_S: Final = 15
CONTROL_PLANE_CALLS_PER_S: Final = 12
# Several controller invocations may run at once, each in its own container: one per lane of
# the reduced stream (its shards times the mapping's parallelization factor), and the
# scheduled tick beside them. Each paces its share, so that together they keep to
# CONTROL_PLANE_CALLS_PER_S: the tick this many a second (it resumes paused queues), the lanes
# the rest, split evenly (``controller.actuator.lane_pace``). With a wake-up queue the tick
# also runs in its invocations: they and the scheduled one share these (``tick_pace``).
TICK_CALLS_PER_S: Final = 2
# The actuator's window is a second and this much: the time from a call's slot to its request
# leaving (serialization, signing, a busy scheduler), so that the requests, not only the slots,
# stay at 12 in any second.
CONTROL_PLANE_WINDOW_MARGIN_S: Final = 0.01

# A wake-up (``controller.ports.WakeUpScheduler``) is a message on an SQS queue whose
# DelaySeconds, a whole number of seconds from 0 to 900 (an SQS limit), holds it until due; a
# wake-up further off is left to the scheduled tick, whose lateness is small beside it.
WAKE_UP_MAX_DELAY_S: Final = 900
# The wake-up queue's event source mapping runs at most this many controller invocations at
# once (its ScalingConfig MaximumConcurrency in template.yaml: the least an SQS mapping
# accepts). Each runs the tick, so each paces a share of the tick's calls (``tick_pace``).
WAKE_UP_CONCURRENCY: Final = 2

# One AWS call attempt's worst case: connecting, then waiting for the answer. Short, so a
# hanging call is cut off well inside a Lambda invocation; no attempt starts that could not end
# before the invocation's deadline (controller/aws.py).
CONNECT_TIMEOUT_S: Final = 1.0
READ_TIMEOUT_S: Final = 2.0
ATTEMPT_TIMEOUT_S: Final = CONNECT_TIMEOUT_S + READ_TIMEOUT_S
# Each of the reducer's reads of the CONFIG items it keys by (a BatchGetItem of up to 100),
# retries included: one attempt's worst case, and a second for quick retries (a throttle, a
# 500). A ledger that does not answer delays the reduced stream by about this much a batch (the
# first read that fails ends the lookup; its queues are keyed without their group).
CONFIG_READ_TIMEOUT_S: Final = ATTEMPT_TIMEOUT_S + 1.0
