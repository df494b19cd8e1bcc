"""A wake-up's message (``controller.ports.WakeUpScheduler``): its body, how a batch of them is
told from a Kinesis batch and read back, and when it is delivered, the one rule the SQS
scheduler (``controller.wake_up_queue``) and its simulated twin share."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from controller.constants import WAKE_UP_MAX_DELAY_S, is_queue_name
from controller.ports import WakeUpRequest

# What an SQS record says of its source (Lambda's SQS event); a Kinesis record says
# "aws:kinesis".
SQS_EVENT_SOURCE: Final = "aws:sqs"
# The reason a message of the wake-up queue that is not a wake-up is skipped (the controller's
# ``Skipped`` metric).
WAKE_UP_UNREADABLE: Final = "wake_up_unreadable"


def wake_up_body(request: WakeUpRequest) -> str:
    """The message body of ``request``: ``{"queue": ..., "wake_at": ...}`` (epoch s)."""
    return json.dumps({"queue": request.queue, "wake_at": request.wake_at}, separators=(",", ":"))


def read_wake_up(record: object) -> WakeUpRequest:
    """The wake-up an SQS record of Lambda's event carries; ``ValueError`` if it carries none
    (a body that is not ``wake_up_body``'s)."""
    body = record.get("body") if isinstance(record, Mapping) else None
    try:
        fields = json.loads(body) if isinstance(body, str) else None
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error}") from error
    if not isinstance(fields, dict):
        raise ValueError("not a JSON object with 'queue' and 'wake_at'")
    queue, wake_at = fields.get("queue"), fields.get("wake_at")
    if not is_queue_name(queue):
        raise ValueError(f"'queue' is not a queue name: {queue!r}")
    if isinstance(wake_at, bool) or not isinstance(wake_at, int | float):
        raise ValueError(f"'wake_at' is not a time: {wake_at!r}")
    if not math.isfinite(wake_at):
        raise ValueError(f"'wake_at' is not a time: {wake_at!r}")
    return WakeUpRequest(queue, float(wake_at))


def is_wake_up_batch(event: Mapping[str, Any]) -> bool:
    """Whether ``event`` is a batch of an SQS event source mapping (the wake-up queue's: the
    controller reads no other queue), not a Kinesis batch."""
    records = event.get("Records")
    return (
        isinstance(records, list)
        and bool(records)
        and isinstance(records[0], Mapping)
        and records[0].get("eventSource") == SQS_EVENT_SOURCE
    )


def delay_s(wake_at: float, now: float) -> int | None:
    """The whole seconds a wake-up for ``wake_at`` waits from ``now`` (epoch s): never early,
    so the run it causes finds the queue due. ``None`` past ``WAKE_UP_MAX_DELAY_S``: left to the
    scheduled tick."""
    wait = max(0, math.ceil(wake_at - now))
    return None if wait > WAKE_UP_MAX_DELAY_S else wait


def held_back(requests: Sequence[WakeUpRequest], now: float) -> list[tuple[WakeUpRequest, int]]:
    """The wake-ups of ``requests`` to send from ``now``, each with its ``delay_s``; one further
    off than SQS can hold a message back is not sent, and not a failure: the scheduled tick
    wakes its queue."""
    return [
        (request, delay)
        for request in requests
        if (delay := delay_s(request.wake_at, now)) is not None
    ]
