"""moto's SQS, made usable at the demo's depth and under concurrent requests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def patch_moto_sqs() -> Callable[[], None]:
    """Make moto's SQS usable at demo depth and under concurrent requests; returns the undo.

    moto's SQS reads the clock through datetime arithmetic for every message of a queue on
    every send and receive, and checks retention by recomputing all queue attributes per
    message: a receive on a 1,500-message queue took seconds. The same values, from
    ``time.time()`` and the queue's own retention attribute, keep it linear and cheap.
    """
    from moto.sqs import models

    original_unix_time = models.unix_time
    original_unix_time_millis = models.unix_time_millis
    original_retention_check = models.SQSBackend.is_message_valid_based_on_retention_period

    def unix_time(dt: Any = None) -> float:
        return time.time() if dt is None else original_unix_time(dt)

    def unix_time_millis(dt: Any = None) -> float:
        return time.time() * 1000.0 if dt is None else original_unix_time_millis(dt)

    def is_message_valid_based_on_retention_period(
        backend: Any, queue_name: str, message: Any
    ) -> bool:
        retention_s = int(backend.get_queue(queue_name).message_retention_period)
        return bool(retention_s + message.sent_timestamp / 1000 > time.time())

    # The queue's counts scan every message, asking the clock once per message and property;
    # SendMessage computes all of them for each message sent (it reads one attribute). One
    # clock reading per scan, same comparisons as ``Message.visible`` and ``Message.delayed``.
    def messages(queue: Any) -> list[Any]:
        now = time.time() * 1000.0
        return [m for m in queue._messages if now > m.visible_at and now >= m.delayed_until]

    def delayed(queue: Any) -> int:
        now = time.time() * 1000.0
        return sum(1 for m in queue._messages if now < m.delayed_until)

    def not_visible(queue: Any) -> int:
        now = time.time() * 1000.0
        return sum(1 for m in queue._messages if now <= m.visible_at)

    # ReceiveMessage iterates the queue's set of pending messages while a delete on another
    # server thread removes from it ("Set changed size during iteration", a 500 and a
    # traceback); a tuple of the set is taken in one step under the GIL.
    def pending_message_groups(queue: Any) -> set[str]:
        pending = tuple(queue._pending_messages)
        return {message.group_id for message in pending if message.group_id is not None}

    queue_properties = {
        "messages": property(messages),
        "approximate_number_of_messages": property(lambda queue: len(messages(queue))),
        "approximate_number_of_messages_delayed": property(delayed),
        "approximate_number_of_messages_not_visible": property(not_visible),
        "pending_message_groups": property(pending_message_groups),
    }
    original_properties = {name: models.Queue.__dict__[name] for name in queue_properties}

    models.unix_time = unix_time
    models.unix_time_millis = unix_time_millis
    retention_check = "is_message_valid_based_on_retention_period"
    setattr(models.SQSBackend, retention_check, is_message_valid_based_on_retention_period)
    for name, replacement in queue_properties.items():
        setattr(models.Queue, name, replacement)

    def restore() -> None:
        models.unix_time = original_unix_time
        models.unix_time_millis = original_unix_time_millis
        setattr(models.SQSBackend, retention_check, original_retention_check)
        for name, original in original_properties.items():
            setattr(models.Queue, name, original)

    return restore
