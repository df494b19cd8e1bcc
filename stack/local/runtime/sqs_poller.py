"""Lambda's poller for an SQS event source mapping.

It re-reads the mapping every second (``MaximumConcurrency``, ``Enabled``, ``BatchSize``) and
keeps up to that many invocations running (ramping from 5 by 5 per second while messages are
found, like Lambda's scaler). As Lambda's pollers do, it works around the invocations, not
inside them: one receiver thread receives for the free invocation slots, and keeps one batch
ready for the next slot to free (``READY_BATCHES``), never more, so that a message waits
invisible at most one invocation before its own; each slot only runs the function, and two
handoff threads, off the slots, ship each invocation's log lines and delete what succeeded per
the partial batch response. Failures are left to return after the visibility timeout; the
emulated SQS moves a message to the dead-letter queue once its receive count exceeds the
redrive policy.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from stack.local.deployment import QueueBinding
from stack.local.emulator import EmbeddedAws
from stack.local.runtime.containers import (
    STOP_JOIN_S,
    ContainerPool,
    InvocationFailed,
    InvocationResult,
)
from stack.local.runtime.handoff import Handoff
from stack.local.runtime.logs import LogShipper
from stack.local.runtime.sqs_event import failed_item_ids, sqs_event

INITIAL_POLLERS = 5
POLLERS_ADDED_PER_SECOND = 5
MAPPING_REFRESH_S = 1.0
EMPTY_RECEIVE_PAUSE_S = 0.25
# Batches received ahead for the next invocation slot to free, while the allowed ones all hold
# one: the embedded SQS answers a receive in 12 ms idle and several times that beside 16
# invocations' traffic, and without one ready each slot sat idle that long between invocations
# (2-4% of the slots' time in the demo) where AWS's pollers lose a few milliseconds.
READY_BATCHES = 1
# SQS's limit per ReceiveMessage, DeleteMessageBatch and ChangeMessageVisibilityBatch call.
MAX_MESSAGES_PER_CALL = 10
# Log shipping is two calls per invocation (PutLogEvents, PutMetricData), more than one thread
# keeps up with at 16 invocations a second on a loaded machine.
SHIPPING_THREADS = 2


@dataclass(slots=True)
class QueueCounters:
    """Per mapping: ``received`` messages end ``deleted`` (done) or ``returned`` (left to come
    back: failed, in a failed invocation, or released unused); ``in_flight`` counts invocations
    running, never more than the mapping allows."""

    invocations: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    received: int = 0
    deleted: int = 0
    returned: int = 0
    errors: int = 0


@dataclass(frozen=True, slots=True)
class MappingSnapshot:
    max_concurrency: int
    enabled: bool
    batch_size: int
    allowed: int


@dataclass(slots=True)
class QueueDepth:
    visible: int = 0
    in_flight: int = 0
    dead_lettered: int = 0


def read_depth(sqs: Any, url: str, dlq_url: str | None) -> QueueDepth:
    """A queue's depth as one frame: its dead-letter queue read first, then the queue.

    SQS moves a message to the dead-letter queue as a receive finds its receive count spent,
    from the queue, never back. Read the other way round, a message moved between the two
    reads was counted in both (visible 5 and dead-lettered 5 of 5 failing messages); in this
    order it is in one read or, for one frame, in neither, never in two."""
    dead = 0
    if dlq_url is not None:
        dead = int(
            sqs.get_queue_attributes(
                QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
            )["Attributes"]["ApproximateNumberOfMessages"]
        )
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return QueueDepth(
        visible=int(attributes["ApproximateNumberOfMessages"]),
        in_flight=int(attributes["ApproximateNumberOfMessagesNotVisible"]),
        dead_lettered=dead,
    )


class QueuePoller:
    """Lambda's poller for one SQS event source mapping."""

    def __init__(
        self,
        aws: EmbeddedAws,
        binding: QueueBinding,
        pool: ContainerPool,
        shipper: LogShipper,
        *,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.binding = binding
        self._pool = pool
        self._shipper = shipper
        self._sqs = aws.client("sqs", max_pool_connections=50)
        self._lambda = aws.client("lambda")
        self._region = aws.region
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # Slots wait for a batch and a free invocation; the receiver waits for a free slot.
        self._batch_ready = threading.Condition(self._lock)
        self._room = threading.Condition(self._lock)
        self._batches: deque[list[dict[str, Any]]] = deque()
        self._slots: list[threading.Thread] = []
        # moto's ReceiveMessage is not safe against itself on one queue (two receivers can
        # move the same message to the dead-letter queue and fail): this one thread is the
        # queue's only receiver.
        self._receiver = threading.Thread(
            target=self._feed_slots, name=f"receiver-{binding.name}", daemon=True
        )
        self._watcher = threading.Thread(
            target=self._watch, name=f"esm-{binding.name}", daemon=True
        )
        self._level = INITIAL_POLLERS
        self._found_messages = False
        self._on_error = on_error or (lambda message: None)
        self._shipping: Handoff[InvocationResult] = Handoff(
            f"log-shipping-{binding.name}", self._ship, self._on_error, threads=SHIPPING_THREADS
        )
        # Deletes of several invocations share a DeleteMessageBatch call.
        self._deleting: Handoff[list[dict[str, Any]]] = Handoff(
            f"deleting-{binding.name}", self._delete, self._on_error, batch=MAX_MESSAGES_PER_CALL
        )
        self.counters = QueueCounters()
        self.done_ids: set[str] = set()
        self.mapping = self._read_mapping()
        self.depth = self._read_depth()

    def start(self) -> QueuePoller:
        self._shipping.start()
        self._deleting.start()
        self._watcher.start()
        self._receiver.start()
        self._ensure_slots()
        return self

    def request_stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._batch_ready.notify_all()
            self._room.notify_all()

    def stop(self) -> None:
        """Stop receiving, let the invocations in progress end (within ``STOP_JOIN_S`` in
        all), release the batches no invocation took, then ship and delete what the invocations
        left before the handoff threads end (within ``STOP_JOIN_S`` more)."""
        self.request_stop()
        deadline = time.monotonic() + STOP_JOIN_S
        for thread in [self._watcher, self._receiver, *self._slots]:
            if thread.ident is not None:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._release_waiting_batches()
        self._shipping.close()
        self._deleting.close()
        deadline = time.monotonic() + STOP_JOIN_S
        for handoff in (self._shipping, self._deleting):
            handoff.join(deadline)

    def snapshot(self) -> tuple[MappingSnapshot, QueueCounters, QueueDepth]:
        with self._lock:
            counters = QueueCounters(**{name: getattr(self.counters, name) for name in _FIELDS})
            depth = QueueDepth(self.depth.visible, self.depth.in_flight, self.depth.dead_lettered)
            return self.mapping, counters, depth

    # -- the mapping, re-read every second, paced -----------------------------------------

    def _read_mapping(self) -> MappingSnapshot:
        raw = self._lambda.get_event_source_mapping(UUID=self.binding.esm_uuid)
        max_concurrency = int(raw.get("ScalingConfig", {}).get("MaximumConcurrency", 1000))
        # moto reports Enabled through State only.
        enabled = raw.get("State", "Enabled") in ("Enabled", "Enabling", "Updating")
        batch_size = min(int(raw.get("BatchSize", 10)), MAX_MESSAGES_PER_CALL)
        with self._lock:
            self._level = min(self._level, max_concurrency)
            allowed = min(self._level, max_concurrency) if enabled else 0
        return MappingSnapshot(max_concurrency, enabled, batch_size, allowed)

    def _watch(self) -> None:
        while not self._stop.wait(MAPPING_REFRESH_S):
            try:
                with self._lock:
                    if self._found_messages:
                        self._level += POLLERS_ADDED_PER_SECOND
                    self._found_messages = False
                mapping = self._read_mapping()
                depth = self._read_depth()
                with self._lock:
                    self.mapping = mapping
                    self.depth = depth
                    self._batch_ready.notify_all()
                    self._room.notify_all()
                if not mapping.enabled:
                    self._release_waiting_batches()
                self._ensure_slots()
            except Exception as error:
                self._on_error(f"mapping {self.binding.esm_uuid}: {error}")

    def _read_depth(self) -> QueueDepth:
        return read_depth(self._sqs, self.binding.url, self.binding.dlq_url)

    def _ensure_slots(self) -> None:
        while len(self._slots) < self.mapping.allowed and not self._stop.is_set():
            thread = threading.Thread(
                target=self._slot, name=f"poller-{self.binding.name}-{len(self._slots)}"
            )
            self._slots.append(thread)
            thread.start()

    # -- receiving for the slots -----------------------------------------------------------

    def _feed_slots(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                wanted = self._batches_wanted()
                if wanted == 0:
                    self._room.wait(MAPPING_REFRESH_S)
                    continue
            try:
                if not self._receive(wanted):
                    self._stop.wait(EMPTY_RECEIVE_PAUSE_S)
            except Exception as error:
                self._on_error(f"{self.binding.name} poller: {error}")
                self._stop.wait(EMPTY_RECEIVE_PAUSE_S)

    def _batches_wanted(self) -> int:
        """Batches to receive now (called with the lock held): one per allowed invocation
        that neither runs nor has a batch waiting, and ``READY_BATCHES`` more for the next
        slot to free, so that no message is held invisible beyond that."""
        if self._stop.is_set() or self.mapping.allowed == 0:
            return 0
        held = self.counters.in_flight + len(self._batches)
        return max(0, self.mapping.allowed + READY_BATCHES - held)

    def _receive(self, wanted_batches: int) -> bool:
        batch_size = self.mapping.batch_size
        # Whole batches, up to SQS's 10 a call (Lambda's pollers receive up to 10 too).
        count = min(MAX_MESSAGES_PER_CALL, wanted_batches * batch_size) // batch_size * batch_size
        messages = self._sqs.receive_message(
            QueueUrl=self.binding.url,
            MaxNumberOfMessages=count,
            MessageSystemAttributeNames=["All"],
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            return False
        with self._lock:
            self._found_messages = True
            self.counters.received += len(messages)
            for start in range(0, len(messages), batch_size):
                self._batches.append(messages[start : start + batch_size])
                self._batch_ready.notify()
        return True

    def _release_waiting_batches(self) -> None:
        """Make the batches no invocation will take visible again (the mapping was disabled,
        or the poller stops): counted as returned, as Lambda's pollers return them."""
        with self._lock:
            messages = [message for batch in self._batches for message in batch]
            self._batches.clear()
            self.counters.returned += len(messages)
        for chunk in _sqs_batch_calls(messages):
            try:
                self._sqs.change_message_visibility_batch(
                    QueueUrl=self.binding.url,
                    Entries=[
                        {
                            "Id": str(number),
                            "ReceiptHandle": message["ReceiptHandle"],
                            "VisibilityTimeout": 0,
                        }
                        for number, message in enumerate(chunk)
                    ],
                )
            except Exception as error:
                # They come back after their visibility timeout instead.
                self._on_error(f"{self.binding.name} release: {error}")

    # -- one concurrent invocation slot ---------------------------------------------------

    def _slot(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                if not self._batches or self.counters.in_flight >= self.mapping.allowed:
                    self._batch_ready.wait(MAPPING_REFRESH_S)
                    continue
                if self._stop.is_set():
                    return
                messages = self._batches.popleft()
                self.counters.in_flight += 1
                self.counters.peak_in_flight = max(
                    self.counters.peak_in_flight, self.counters.in_flight
                )
                self.counters.invocations += 1
                self._room.notify()
            try:
                self._run(messages)
            except InvocationFailed as error:
                if not self._stop.is_set():
                    self._on_error(str(error))
            except Exception as error:
                self._on_error(f"{self.binding.name} poller: {error}")
                self._stop.wait(EMPTY_RECEIVE_PAUSE_S)

    def _run(self, messages: list[dict[str, Any]]) -> None:
        """One invocation; its log lines and deletes are handed off, so that the slot is free
        as soon as the function returns."""
        every_id = {message["MessageId"] for message in messages}
        failed = every_id  # an invocation that could not run leaves them all
        try:
            result = self._invoke(messages)
            failed = self._failed_ids(result, every_id)
        finally:
            with self._lock:
                self.counters.in_flight -= 1
                self.counters.returned += len(failed)
                self._batch_ready.notify()
                self._room.notify()
        self._shipping.put(result)
        done = [message for message in messages if message["MessageId"] not in failed]
        if done:
            self._deleting.put(done)

    def _invoke(self, messages: list[dict[str, Any]]) -> InvocationResult:
        with self._pool.container() as container:
            return container.invoke(sqs_event(messages, self.binding.arn, self._region))

    def _failed_ids(self, result: InvocationResult, every_id: set[str]) -> set[str]:
        """The ids to leave in the queue: all of them if the invocation failed or its response
        is not a valid partial batch response, as Lambda treats it."""
        if result.error is not None:
            with self._lock:
                self.counters.errors += 1
            return every_id
        return failed_item_ids(result.response, every_id)

    # -- off the slots: log shipping and deletes ------------------------------------------

    def _ship(self, results: list[InvocationResult]) -> None:
        for result in results:
            try:
                self._shipper.ship(result.log_stream, result.log_lines)
            except Exception as error:
                self._on_error(f"log shipping for {self.binding.name}: {error}")

    def _delete(self, batches: list[list[dict[str, Any]]]) -> None:
        messages = [message for batch in batches for message in batch]
        for chunk in _sqs_batch_calls(messages):
            try:
                self._sqs.delete_message_batch(
                    QueueUrl=self.binding.url,
                    Entries=[
                        {"Id": str(number), "ReceiptHandle": message["ReceiptHandle"]}
                        for number, message in enumerate(chunk)
                    ],
                )
            except Exception as error:
                # Not deleted: they come back after their visibility timeout.
                self._on_error(f"deleting from {self.binding.name}: {error}")
                continue
            with self._lock:
                # SQS delivers at least once: a message seen again after its visibility
                # timeout (a slow cold start) may be done twice; done_ids counts each once.
                self.done_ids.update(message["MessageId"] for message in chunk)
                self.counters.deleted += len(chunk)


_FIELDS = tuple(QueueCounters.__dataclass_fields__)


def _sqs_batch_calls(messages: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """``messages`` in chunks of at most what one SQS batch call takes."""
    for start in range(0, len(messages), MAX_MESSAGES_PER_CALL):
        yield messages[start : start + MAX_MESSAGES_PER_CALL]
