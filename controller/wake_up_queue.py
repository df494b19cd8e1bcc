"""The wake-up queue: each wake-up a message on an SQS queue, held back by its ``DelaySeconds``
until due, whose delivery runs the controller's tick (docs/architecture.md, "Wake-ups").

``SqsWakeUpScheduler`` is the ``WakeUpScheduler`` the Lambda handler wires when
``WAKE_UP_QUEUE_VARIABLE`` names the queue; the message it sends, and its delay, are
``controller.wakeups``'s.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any, Final

from botocore.exceptions import BotoCoreError

from controller.aws import CallAbandoned, Clock, Sleep
from controller.backlog import sqs_caller
from controller.constants import ATTEMPT_TIMEOUT_S
from controller.ports import WakeUpRequest
from controller.wakeups import held_back, wake_up_body

# The controller's environment variable holding the wake-up queue's URL (template.yaml sets
# it); without it no wake-up is scheduled and the scheduled tick wakes every queue.
WAKE_UP_QUEUE_VARIABLE: Final = "QUEUEMESH_WAKE_UP_QUEUE"
# SendMessageBatch takes at most ten entries a call.
MAX_ENTRIES_PER_CALL: Final = 10
# The most a batch spends scheduling its wake-ups, inside whatever time it has left: an
# attempt's worst case and a retry's. A wake-up not sent by then is the scheduled tick's.
SCHEDULE_BUDGET_S: Final = 2 * ATTEMPT_TIMEOUT_S


class SqsWakeUpScheduler:
    """``SendMessageBatch`` to the wake-up queue at ``queue_url``, ten wake-ups a call, each
    held back ``delay_s`` (``DelaySeconds``, SQS's 0..900 s). A wake-up further off is not
    sent (the scheduled tick wakes it, a minute late at most, after a quarter of an hour);
    one that SQS reports ``Failed``, or whose call fails for good or runs out of time, is
    counted as not taken. Retries are few and short, within ``SCHEDULE_BUDGET_S``."""

    def __init__(
        self,
        queue_url: str,
        client: Any = None,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        rng: random.Random | None = None,
        max_attempts: int = 2,
    ) -> None:
        self.queue_url = queue_url
        self._clock = clock
        self._caller = sqs_caller(
            client, clock=clock, sleep=sleep, rng=rng, max_attempts=max_attempts
        )

    def schedule(self, requests: Sequence[WakeUpRequest], now: float, deadline: float) -> int:
        held = held_back(requests, now)
        deadline = min(deadline, self._clock() + SCHEDULE_BUDGET_S)
        unscheduled = 0
        for start in range(0, len(held), MAX_ENTRIES_PER_CALL):
            chunk = held[start : start + MAX_ENTRIES_PER_CALL]
            entries = [
                {"Id": str(number), "MessageBody": wake_up_body(request), "DelaySeconds": delay}
                for number, (request, delay) in enumerate(chunk)
            ]
            try:
                answer = self._caller.call(
                    "send_message_batch", deadline, QueueUrl=self.queue_url, Entries=entries
                )
            except (CallAbandoned, BotoCoreError):
                unscheduled += len(chunk)
                continue
            unscheduled += len(answer.get("Failed") or ())
        return unscheduled
