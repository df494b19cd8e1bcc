"""Reading a queue's backlog: SQS's ``GetQueueAttributes``, and an in-memory twin.

The controller reads a backlog only for a queue about to raise its mapping (a probe for
capacity), so a read is one SQS call per such queue, never a Lambda control-plane call (those
are the account's scarce 15 a second), and at most one every ``REREAD_AFTER_S`` while the
backlog holds its probe. A read that fails is the backlog unknown: the caller
decides as it would without one.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from typing import Any

from botocore.exceptions import BotoCoreError

from controller.aws import CallAbandoned, Clock, PacedCaller, Sleep, brief_caller
from controller.cache import LruCache
from controller.constants import CACHED_QUEUES
from controller.model import Backlog
from controller.ports import BacklogUnavailable, QueueBacklog

# The attributes GetQueueAttributes names them by (the CloudWatch metric's name differs).
VISIBLE_ATTRIBUTE = "ApproximateNumberOfMessages"
VISIBILITY_ATTRIBUTE = "VisibilityTimeout"
BACKLOG_ATTRIBUTES = (VISIBLE_ATTRIBUTE, VISIBILITY_ATTRIBUTE)
# SQS's answers worth one more try; any 5xx is retried too (controller.aws).
RETRYABLE_CODES = frozenset({"RequestThrottled", "ThrottlingException", "ServiceUnavailable"})


def sqs_caller(
    client: Any,
    *,
    clock: Clock,
    sleep: Sleep,
    rng: random.Random | None,
    max_attempts: int,
) -> PacedCaller:
    """The controller's SQS calls' caller (a backlog read, a wake-up sent): brief, since a read
    only informs and a wake-up not sent is the scheduled tick's; ``client`` ``None`` for a new
    one."""
    return brief_caller(
        "sqs",
        client,
        RETRYABLE_CODES,
        cap_s=0.5,
        max_attempts=max_attempts,
        clock=clock,
        sleep=sleep,
        rng=rng,
    )


# How long a backlog read answers for its queue where the probe it was read for was held. A
# probe held for its backlog (nothing waiting, or what waits drains before its verdict could
# come) was asked for again at every batch, about once a second, each time one more read
# (throttling seed 7 draw 54: 42 reads in 42 s of a draining backlog). The backlog such a read
# saw only drains until messages arrive, so it holds the probe as long as it is true; read
# again after 5 s, a probe that arrivals make worth it waits at most that long. 5 s is what a
# probe takes to be answered (a pulse of about an invocation, then a wait for its telemetry:
# 1 s and 3 s in the adaptive law), and the law's shortest wait after a failed probe
# (``probe_backoff_s``): no probe is judged sooner than that anyway.
REREAD_AFTER_S = 5.0


class BacklogReadings:
    """Each queue's backlog as last read before a probe that it held, for ``REREAD_AFTER_S``
    (one warm container's memory, for ``CACHED_QUEUES`` queues).

    A reading that lets a probe go, in the plan carried out (after the group's law, which may
    hold a raise its member's algorithm wanted), is forgotten (``forget``): the next probe (a
    passed pulse's next, about 4 s on) is read for again.
    """

    def __init__(self, backlog: QueueBacklog, capacity: int = CACHED_QUEUES) -> None:
        self._backlog = backlog
        self._kept: LruCache[str, tuple[float, Backlog]] = LruCache(capacity)

    def read(self, queues: list[str], now: float, read_by: float) -> tuple[dict[str, Backlog], int]:
        """The backlog of each of ``queues`` (those about to raise): the reading
        kept from less than ``REREAD_AFTER_S`` ago, else one read; and how many reads failed
        (a queue whose read fails is left out: its backlog unknown, decided as without it)."""
        known, failed = {}, 0
        for queue in queues:
            kept = self._kept.get(queue)
            if kept is not None and now - kept[0] < REREAD_AFTER_S:
                known[queue] = kept[1]
                continue
            try:
                known[queue] = self._backlog.read(queue, read_by)
            except BacklogUnavailable:
                failed += 1
                continue
            self._kept[queue] = (now, known[queue])
        return known, failed

    def forget(self, queues: list[str]) -> None:
        """Drop the readings of ``queues``, whose probes go ahead."""
        for queue in queues:
            self._kept.pop(queue)


class SqsBacklog:
    """``GetQueueAttributes`` (``BACKLOG_ATTRIBUTES``) of the queue named in the CONFIG.

    The queue's URL is looked up once per warm container (``GetQueueUrl``: a queue's URL never
    changes) and remembered for ``CACHED_QUEUES`` queues. Retries are few and short: the read
    only informs a raise, and an unknown backlog leaves the decision as it was without it.
    """

    def __init__(
        self,
        client: Any = None,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        rng: random.Random | None = None,
        max_attempts: int = 2,
    ) -> None:
        self._caller = sqs_caller(
            client, clock=clock, sleep=sleep, rng=rng, max_attempts=max_attempts
        )
        self._urls: LruCache[str, str] = LruCache(CACHED_QUEUES)

    def read(self, queue: str, deadline: float) -> Backlog:
        try:
            url = self._urls.get(queue)
            if url is None:
                url = str(self._caller.call("get_queue_url", deadline, QueueName=queue)["QueueUrl"])
                self._urls[queue] = url
            answer = self._caller.call(
                "get_queue_attributes",
                deadline,
                QueueUrl=url,
                AttributeNames=list(BACKLOG_ATTRIBUTES),
            )
            attributes = answer["Attributes"]
            return Backlog(
                visible=int(attributes[VISIBLE_ATTRIBUTE]),
                visibility_timeout_s=float(attributes[VISIBILITY_ATTRIBUTE]),
            )
        except (CallAbandoned, BotoCoreError, KeyError, TypeError, ValueError) as error:
            raise BacklogUnavailable(f"backlog of {queue}: {error}") from error


# SQS's default VisibilityTimeout: what the twin's queues given as a count read with.
TWIN_VISIBILITY_TIMEOUT_S = 30.0


class InMemoryBacklog:
    """The twin: backlogs given by the test (a count of visible messages, or a whole
    ``Backlog``), every read recorded, faults injectable.

    A count reads with ``TWIN_VISIBILITY_TIMEOUT_S``, SQS's default visibility timeout. A
    queue not given reads as unavailable. ``reads`` lists the queues read, in order;
    ``fail_next`` queues exceptions raised by the next reads.
    """

    def __init__(self, **backlogs: int | Backlog) -> None:
        self._lock = threading.Lock()
        self._backlogs = {
            queue: Backlog(given, TWIN_VISIBILITY_TIMEOUT_S) if isinstance(given, int) else given
            for queue, given in backlogs.items()
        }
        self._faults: deque[Exception] = deque()
        self.reads: list[str] = []

    def fail_next(self, *errors: Exception) -> None:
        with self._lock:
            self._faults.extend(errors)

    def read(self, queue: str, deadline: float) -> Backlog:
        with self._lock:
            self.reads.append(queue)
            if self._faults:
                raise self._faults.popleft()
            if queue not in self._backlogs:
                raise BacklogUnavailable(f"backlog of {queue}: no such queue")
            return self._backlogs[queue]
