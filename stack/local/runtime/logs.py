"""Log shipping: each invocation's output into its function's log group, from where the
emulator's subscription filter delivers it to Kinesis."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from stack.local.metrics import EmfMetricsPublisher


class LogShipper:
    """PutLogEvents of each invocation's lines into the function's log group (one call per
    invocation: the subscription delivers one Kinesis record per call); the EMF documents among
    them become metrics, as CloudWatch Logs makes them in AWS."""

    def __init__(
        self, logs_client: Any, log_group: str, metrics: EmfMetricsPublisher | None = None
    ) -> None:
        self._logs = logs_client
        self._log_group = log_group
        self._metrics = metrics
        self._streams: set[str] = set()
        self._lock = threading.Lock()
        self.calls = 0

    def ship(self, log_stream: str, lines: list[str]) -> None:
        if not lines:
            return
        with self._lock:
            create = log_stream not in self._streams
            self._streams.add(log_stream)
        if create:
            with contextlib.suppress(self._logs.exceptions.ResourceAlreadyExistsException):
                self._logs.create_log_stream(logGroupName=self._log_group, logStreamName=log_stream)
        now_ms = int(time.time() * 1000)
        self._logs.put_log_events(
            logGroupName=self._log_group,
            logStreamName=log_stream,
            logEvents=[{"timestamp": now_ms, "message": line} for line in lines],
        )
        with self._lock:
            self.calls += 1
        if self._metrics is not None:
            self._metrics.publish(lines)


def ensure_log_group(logs: Any, name: str) -> None:
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=name)
