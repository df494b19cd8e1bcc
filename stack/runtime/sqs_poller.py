"""Lambda's poller for an SQS event source mapping.

It re-reads the mapping every second (``MaximumConcurrency``, ``Enabled``, ``BatchSize``), runs
at most that many concurrent invocations (ramping from 5 by 5 per second while messages are
found, like Lambda's scaler), sends real-shaped SQS events, deletes what succeeded per the
partial batch response, and leaves failures to return after the visibility timeout; the
emulated SQS moves a message to the dead-letter queue once its receive count exceeds the
redrive policy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stack.emulator import EmbeddedAws, QueueBinding
from stack.runtime.containers import STOP_JOIN_S, ContainerPool, InvocationFailed
from stack.runtime.logs import LogShipper

INITIAL_POLLERS = 5
POLLERS_ADDED_PER_SECOND = 5
MAPPING_REFRESH_S = 1.0
EMPTY_RECEIVE_PAUSE_S = 0.25


@dataclass(slots=True)
class QueueCounters:
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
        # moto's ReceiveMessage is not safe against itself on one queue (two receivers can
        # move the same message to the dead-letter queue and fail); one receive at a time.
        self._receive_lock = threading.Lock()
        self._slots: list[threading.Thread] = []
        self._watcher: threading.Thread | None = None
        self._level = INITIAL_POLLERS
        self._found_messages = False
        self._on_error = on_error or (lambda message: None)
        self.counters = QueueCounters()
        self.done_ids: set[str] = set()
        self.mapping = self._read_mapping()
        self.depth = self._read_depth()

    def start(self) -> QueuePoller:
        self._watcher = threading.Thread(
            target=self._watch, name=f"esm-{self.binding.name}", daemon=True
        )
        self._watcher.start()
        self._ensure_slots()
        return self

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        for thread in [self._watcher, *self._slots]:
            if thread is not None:
                thread.join(timeout=STOP_JOIN_S)

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
        batch_size = min(int(raw.get("BatchSize", 10)), 10)
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
                self._ensure_slots()
            except Exception as error:
                self._on_error(f"mapping {self.binding.esm_uuid}: {error}")

    def _read_depth(self) -> QueueDepth:
        attributes = self._sqs.get_queue_attributes(
            QueueUrl=self.binding.url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        dead = 0
        if self.binding.dlq_url is not None:
            dead = int(
                self._sqs.get_queue_attributes(
                    QueueUrl=self.binding.dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
                )["Attributes"]["ApproximateNumberOfMessages"]
            )
        return QueueDepth(
            visible=int(attributes["ApproximateNumberOfMessages"]),
            in_flight=int(attributes["ApproximateNumberOfMessagesNotVisible"]),
            dead_lettered=dead,
        )

    def _ensure_slots(self) -> None:
        while len(self._slots) < self.mapping.allowed and not self._stop.is_set():
            index = len(self._slots)
            thread = threading.Thread(
                target=self._slot, args=(index,), name=f"poller-{self.binding.name}-{index}"
            )
            self._slots.append(thread)
            thread.start()

    # -- one concurrent invocation slot ---------------------------------------------------

    def _slot(self, index: int) -> None:
        while not self._stop.is_set():
            if index >= self.mapping.allowed:
                self._stop.wait(0.1)
                continue
            try:
                if not self._poll_once():
                    self._stop.wait(EMPTY_RECEIVE_PAUSE_S)
            except InvocationFailed as error:
                if not self._stop.is_set():
                    self._on_error(str(error))
            except Exception as error:
                self._on_error(f"{self.binding.name} poller: {error}")
                self._stop.wait(EMPTY_RECEIVE_PAUSE_S)

    def _poll_once(self) -> bool:
        with self._receive_lock:
            messages = self._sqs.receive_message(
                QueueUrl=self.binding.url,
                MaxNumberOfMessages=self.mapping.batch_size,
                MessageSystemAttributeNames=["All"],
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
        if not messages:
            return False
        with self._lock:
            self._found_messages = True
            self.counters.received += len(messages)
            self.counters.in_flight += 1
            self.counters.peak_in_flight = max(
                self.counters.peak_in_flight, self.counters.in_flight
            )
            self.counters.invocations += 1
        try:
            failed = self._invoke(messages)
        finally:
            with self._lock:
                self.counters.in_flight -= 1
        done = [message for message in messages if message["MessageId"] not in failed]
        self._delete(done)
        with self._lock:
            # SQS delivers at least once: a message seen again after its visibility timeout
            # (a slow cold start) may be done twice; done_ids counts each message once.
            self.done_ids.update(message["MessageId"] for message in done)
            self.counters.deleted += len(done)
            self.counters.returned += len(messages) - len(done)
        return True

    def _invoke(self, messages: list[dict[str, Any]]) -> set[str]:
        """Run the batch; the ids to leave in the queue (all of them if the invocation failed
        or its response is not a valid partial batch response, as Lambda treats it)."""
        every_id = {message["MessageId"] for message in messages}
        with self._pool.container() as container:
            result = container.invoke(sqs_event(messages, self.binding.arn, self._region))
        try:
            self._shipper.ship(result.log_stream, result.log_lines)
        except Exception as error:
            self._on_error(f"log shipping for {self.binding.name}: {error}")
        if result.error is not None:
            with self._lock:
                self.counters.errors += 1
            return every_id
        return failed_item_ids(result.response, every_id)

    def _delete(self, messages: list[dict[str, Any]]) -> None:
        for start in range(0, len(messages), 10):
            chunk = messages[start : start + 10]
            self._sqs.delete_message_batch(
                QueueUrl=self.binding.url,
                Entries=[
                    {"Id": str(number), "ReceiptHandle": message["ReceiptHandle"]}
                    for number, message in enumerate(chunk)
                ],
            )


_FIELDS = tuple(QueueCounters.__dataclass_fields__)


def sqs_event(messages: list[dict[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    """The event Lambda passes for an SQS batch, from ReceiveMessage's answer."""
    return {
        "Records": [
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "attributes": dict(message.get("Attributes", {})),
                "messageAttributes": {
                    name: {
                        "stringValue": value.get("StringValue"),
                        "binaryValue": value.get("BinaryValue"),
                        "stringListValues": [],
                        "binaryListValues": [],
                        "dataType": value["DataType"],
                    }
                    for name, value in message.get("MessageAttributes", {}).items()
                },
                "md5OfBody": message.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
            for message in messages
        ]
    }


def failed_item_ids(response: Any, every_id: set[str]) -> set[str]:
    """The partial batch response's failures. Lambda fails the whole batch on a malformed one
    (an identifier that is empty or not in the batch)."""
    if response is None:
        return set()
    if not isinstance(response, Mapping):
        return set()
    failures = response.get("batchItemFailures")
    if failures is None:
        return set()
    if not isinstance(failures, list):
        return set(every_id)
    failed: set[str] = set()
    for item in failures:
        identifier = item.get("itemIdentifier") if isinstance(item, Mapping) else None
        if not identifier or identifier not in every_id:
            return set(every_id)
        failed.add(identifier)
    return failed
