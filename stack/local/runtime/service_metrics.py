"""The metrics AWS publishes of its own services, published for the local stack.

In AWS, SQS publishes every queue's ``AWS/SQS`` metrics to CloudWatch each minute, and Lambda
each function's ``AWS/Lambda`` metrics as it invokes it; the template's dashboard and alarms
read them. The emulated services publish none, so ``ServiceMetrics`` does, every
``PUBLISH_PERIOD_S``, from the emulator's real state:

- ``AWS/SQS``, per queue (``QueueName``): ``ApproximateNumberOfMessagesVisible``,
  ``ApproximateNumberOfMessagesNotVisible`` and ``ApproximateNumberOfMessagesDelayed`` from
  the queue's attributes (ListQueues and GetQueueAttributes through the emulated SQS), and
  ``ApproximateAgeOfOldestMessage`` from the emulator's messages (SQS has no attribute for
  it), by AWS's rule: the oldest message not yet received three times, else the oldest.
- ``AWS/Lambda``, per function invoked since the last publication (``FunctionName``):
  ``Invocations``, ``Errors`` (the function raised, timed out or its container died: a partial
  batch response is no error, as in AWS), ``Throttles`` (0: the local runtime never refuses
  an invocation) and, for the stream's function, ``IteratorAge``: each batch's last record's
  age when the poller invoked the function.

docs/architecture.md says where this differs from AWS (the period above all).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from stack.local.emulator import EmbeddedAws
from stack.local.metrics import MAX_DATA_PER_CALL, MAX_VALUES_PER_DATUM

# AWS publishes SQS metrics each minute; locally a demo of two minutes needs them sooner. The
# dashboard's one-minute periods aggregate these (Maximum, Sum) as they do AWS's.
PUBLISH_PERIOD_S = 5.0
# SQS's ApproximateAgeOfOldestMessage skips a message received this many times (it is moved
# to the back of the queue), so one poison message does not hold the metric.
RECEIVES_BEFORE_SKIPPED = 3
SQS_ATTRIBUTES = {
    "ApproximateNumberOfMessages": "ApproximateNumberOfMessagesVisible",
    "ApproximateNumberOfMessagesNotVisible": "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed": "ApproximateNumberOfMessagesDelayed",
}
OLDEST_AGE = "ApproximateAgeOfOldestMessage"


@dataclass(slots=True)
class _FunctionCounts:
    invocations: int = 0
    errors: int = 0
    iterator_ages_ms: list[float] = field(default_factory=list)


class InvocationMetrics:
    """What the runtime's invocations did, per function, since it was last taken
    (thread-safe: every poller and slot reports here)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, _FunctionCounts] = {}

    def invoked(self, function: str, failed: bool) -> None:
        with self._lock:
            counts = self._counts.setdefault(function, _FunctionCounts())
            counts.invocations += 1
            counts.errors += failed

    def batch_age(self, function: str, age_ms: float) -> None:
        """The age of a stream batch's last record as the function is invoked with it."""
        with self._lock:
            counts = self._counts.setdefault(function, _FunctionCounts())
            counts.iterator_ages_ms.append(max(0.0, age_ms))

    def take(self) -> dict[str, _FunctionCounts]:
        with self._lock:
            taken, self._counts = self._counts, {}
        return taken


def oldest_message_ages(now: float) -> dict[str, float]:
    """``ApproximateAgeOfOldestMessage`` (seconds) of every emulated queue, by its URL's name.

    Read from moto's backend, in this process: SQS answers no such attribute."""
    from moto.backends import get_backend

    ages: dict[str, float] = {}
    for account in get_backend("sqs").values():
        for backend in account.values():
            for name, queue in backend.queues.items():
                # moto declares a message's sent_timestamp None until sent.
                messages: tuple[Any, ...] = tuple(queue._messages)
                counted = [
                    m for m in messages if m.approximate_receive_count < RECEIVES_BEFORE_SKIPPED
                ]
                sent = [m.sent_timestamp for m in counted or messages if m.sent_timestamp]
                ages[name] = max(0.0, now - min(sent) / 1000.0) if sent else 0.0
    return ages


class ServiceMetrics:
    """Publishes ``AWS/SQS`` and ``AWS/Lambda`` every ``period_s`` on a thread; ``stop``
    publishes a last time, so what the runtime did in its last seconds is on the dashboard."""

    def __init__(
        self,
        aws: EmbeddedAws,
        invocations: InvocationMetrics,
        *,
        period_s: float = PUBLISH_PERIOD_S,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self._sqs = aws.client("sqs")
        self._cloudwatch = aws.client("cloudwatch")
        self._invocations = invocations
        self._period_s = period_s
        self._on_error = on_error or (lambda message: None)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="service-metrics", daemon=True)
        self.publications = 0

    def start(self) -> ServiceMetrics:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._period_s + 10)
        self._publish_safely()

    def _run(self) -> None:
        while True:
            self._publish_safely()
            if self._stop.wait(self._period_s):
                return

    def _publish_safely(self) -> None:
        try:
            self.publish()
        except Exception as error:  # a missed publication must not stop the next ones
            self._on_error(f"service metrics: {error}")

    def publish(self) -> None:
        """One publication: every queue's SQS metrics, every invoked function's Lambda ones."""
        now = time.time()
        stamp = datetime.fromtimestamp(now, UTC)
        queues = self._queue_data(now, stamp)
        if queues:
            self._put("AWS/SQS", queues)
        functions = self._function_data(stamp)
        if functions:
            self._put("AWS/Lambda", functions)
        self.publications += 1

    def _queue_data(self, now: float, stamp: datetime) -> list[dict[str, Any]]:
        ages = oldest_message_ages(now)
        data = []
        for url in self._sqs.list_queues().get("QueueUrls", []):
            name = url.rstrip("/").rsplit("/", 1)[-1]
            attributes = self._sqs.get_queue_attributes(
                QueueUrl=url, AttributeNames=list(SQS_ATTRIBUTES)
            )["Attributes"]
            values = {metric: float(attributes[key]) for key, metric in SQS_ATTRIBUTES.items()}
            values[OLDEST_AGE] = ages.get(name, 0.0)
            units = {OLDEST_AGE: "Seconds"}
            data += [
                _datum(metric, "QueueName", name, stamp, [value], units.get(metric, "Count"))
                for metric, value in values.items()
            ]
        return data

    def _function_data(self, stamp: datetime) -> list[dict[str, Any]]:
        data = []
        for function, counts in self._invocations.take().items():
            totals = {"Invocations": counts.invocations, "Errors": counts.errors, "Throttles": 0}
            data += [
                _datum(metric, "FunctionName", function, stamp, [float(value)], "Count")
                for metric, value in totals.items()
            ]
            if counts.iterator_ages_ms:
                ages = counts.iterator_ages_ms
                data.append(
                    _datum("IteratorAge", "FunctionName", function, stamp, ages, "Milliseconds")
                )
        return data

    def _put(self, namespace: str, data: list[dict[str, Any]]) -> None:
        for start in range(0, len(data), MAX_DATA_PER_CALL):
            chunk = data[start : start + MAX_DATA_PER_CALL]
            self._cloudwatch.put_metric_data(Namespace=namespace, MetricData=chunk)


def _datum(
    metric: str, dimension: str, value: str, stamp: datetime, values: list[float], unit: str
) -> dict[str, Any]:
    return {
        "MetricName": metric,
        "Dimensions": [{"Name": dimension, "Value": value}],
        "Timestamp": stamp,
        "Values": values[:MAX_VALUES_PER_DATUM],
        "Unit": unit,
    }
