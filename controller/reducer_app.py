"""The reducer Lambda's application: a telemetry batch in, per-(queue, second) totals out on
the reduced stream, partitioned by each queue's group: its CONFIG ``Group`` (read from the
ledger, cached), else the downstream it names, else the queue (docs/architecture.md,
"Shards").

It reads any shard of the telemetry stream at any parallelization factor; what it forwards
needs no order but per queue, which the reduced stream's partition key keeps. A batch whose
records cannot all be put is failed from its first record for Lambda to retry: the log events
already forwarded are remembered (``Reducer.forwarded``) and not summed again by this
container, and a record put again under the same id is recognised by the controller.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools import Logger

from controller.book import Count
from controller.evidence import position
from controller.health import health_document, skip_documents
from controller.ports import ConfigSource, ReducedSink
from controller.reduce import ConfiguredGroups, Reducer
from controller.schema import HealthMetric
from controller.telemetry import (
    DEFAULT_NAMESPACE,
    ORDINARY_SKIPS,
    SkipReason,
    TelemetryDecoder,
    reduced,
)

# Kept back from the invocation's remaining time: returning the response and its logs.
RESPONSE_MARGIN_S = 0.5


class ReducerApp:
    """One warm reducer container: a decoder, a ``Reducer``, the queues' CONFIG groups read
    from ``ledger`` and the sink it puts to."""

    def __init__(
        self,
        sink: ReducedSink,
        ledger: ConfigSource,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        namespace: str = DEFAULT_NAMESPACE,
        logger: Logger | None = None,
        emit: Callable[[str], None] = print,
    ) -> None:
        self.sink = sink
        self._emit = emit
        self.reducer = Reducer()
        self.groups = ConfiguredGroups(ledger)
        self._decoder = TelemetryDecoder(namespace)
        self._clock = clock
        self._monotonic = monotonic
        self._logger = logger or Logger(service="queuemesh-reducer")

    def handle(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        """Reduce one Kinesis batch; ``batchItemFailures`` names its first record when some
        of its totals could not be put (never for what cannot be read: that is counted)."""
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        deadline = (
            math.inf
            if remaining is None
            else self._monotonic() + remaining() / 1000.0 - RESPONSE_MARGIN_S
        )
        records = event.get("Records") if isinstance(event, Mapping) else None
        if not isinstance(records, list):
            self._logger.info("telemetry skipped", extra={"skipped": {SkipReason.BAD_RECORD: 1}})
            self._report_health(
                Counter({SkipReason.BAD_RECORD: 1}), Counter(), retried=False, unread_groups=0
            )
            return {"batchItemFailures": []}
        now = self._clock()
        decoded = self._decoder.decode_kinesis_event({"Records": records})
        reduction = self.reducer.reduce(decoded, now)
        read = self.groups.read({second.queue for second in reduction.seconds}, now, deadline)
        if read.unread:
            self._logger.warning(
                "CONFIG items not read: those queues keyed by the group last read for them, "
                "else by the downstream they name, else by queue, this batch",
                extra={
                    "queues": list(read.unread[:20]),
                    "unread": len(read.unread),
                    "fault": read.fault,
                },
            )
        records_out = reduced.encode(reduction.seconds, batch_source(records), read.groups)
        unsent = self.sink.put(records_out, deadline)
        for queue, log_events in reduction.log_events.items():
            if queue not in unsent:
                self.reducer.forwarded(log_events, now)
        if decoded.skipped or reduction.dropped:
            self._logger.info(
                "telemetry skipped",
                extra={"skipped": dict(decoded.skipped), "dropped": dict(reduction.dropped)},
            )
        self._report_health(
            decoded.skipped, reduction.dropped, retried=bool(unsent), unread_groups=len(read.unread)
        )
        if not unsent:
            return {"batchItemFailures": []}
        self._logger.error(
            "reduced records not put; the batch will be retried",
            extra={"queues": sorted(unsent)[:20], "unsent": len(unsent)},
        )
        first = next((seq for _, seq in map(position, records) if seq is not None), None)
        failures = [] if first is None else [{"itemIdentifier": str(first)}]
        return {"batchItemFailures": failures}

    def _report_health(
        self,
        skipped: Counter[str],
        dropped: Counter[Count],
        *,
        retried: bool,
        unread_groups: int,
    ) -> None:
        """This batch's share of the controller's health, from where telemetry is read now:
        what could not be read or was too far from now to window, by reason, and the counts
        the alarms watch (``TelemetryUnreadable``, ``SamplesNotWindowed``,
        ``BatchesRetried``), and the queues keyed without their CONFIG group
        (``GroupKeysUnread``)."""
        for document in skip_documents({**skipped, **{str(k): v for k, v in dropped.items()}}):
            self._emit(document)
        counts: dict[str, int] = {
            HealthMetric.TELEMETRY_UNREADABLE: sum(
                count for reason, count in skipped.items() if reason not in ORDINARY_SKIPS
            ),
            HealthMetric.SAMPLES_NOT_WINDOWED: sum(dropped.values()),
            HealthMetric.BATCHES_RETRIED: int(retried),
            HealthMetric.GROUP_KEYS_UNREAD: unread_groups,
        }
        if any(counts.values()):
            self._emit(health_document(counts))


def batch_source(records: list[Any]) -> str:
    """What a batch is, as reduced records' ids say it: its shard and its first and last
    sequence numbers (the same batch retried reduces to the same ids)."""
    positions = [(partition[0], seq) for partition, seq in map(position, records)]
    sequences = [seq for _, seq in positions if seq is not None]
    shard = next((shard for shard, _ in positions if shard), "")
    if not sequences:
        return f"{shard}:-"
    return f"{shard}:{min(sequences)}-{max(sequences)}"
