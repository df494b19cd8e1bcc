"""The controller Lambda's application: events in, plan executed, metrics and logs out.

Plain class, no globals: the Lambda handler, the local stack and replay each build one with
the adapters they need.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from controller.book import Count
from controller.constants import is_queue_name
from controller.events import EventOutbox
from controller.evidence import EvidenceReader, position
from controller.group_reports import group_documents
from controller.health import health_document, serialized, skip_documents
from controller.loop import ControlLoop
from controller.model import Decision, GroupReport
from controller.ports import ActuationError, LedgerError, StreamHistory
from controller.schema import (
    CONTROLLER_NAMESPACE,
    QUEUE_DIMENSION,
    DecisionMetric,
    HealthMetric,
)
from controller.telemetry import (
    DEFAULT_NAMESPACE,
    ORDINARY_SKIPS,
    SkipReason,
    TelemetryDecoder,
)
from controller.wakeups import WAKE_UP_UNREADABLE, is_wake_up_batch, read_wake_up

# The controller's own health, one document per invocation without dimensions (the reasons
# behind each are in its log lines): metric -> the loop's counts whose growth it reports. The
# other health metrics the application counts from its batches.
HEALTH_COUNTERS: Final[dict[HealthMetric, tuple[Count, ...]]] = {
    HealthMetric.SAMPLES_WINDOWED: (Count.SAMPLES_WINDOWED,),
    HealthMetric.MAPPING_UPDATES: (Count.ESM_UPDATES,),
    HealthMetric.ACTUATION_FAILURES: (Count.ACTUATION_FAILURES,),
    HealthMetric.CONFIGS_INVALID: (Count.CONFIGS_INVALID,),
    HealthMetric.MAPPINGS_MISSING: (Count.MAPPINGS_MISSING,),
    HealthMetric.DRIFT_ADOPTED: (Count.DRIFT_DETECTED,),
    HealthMetric.CLAIMS_RECONCILED: (Count.ACTUATIONS_RECONCILED,),
    HealthMetric.VERSION_CONFLICTS: (Count.VERSION_CONFLICTS,),
    HealthMetric.BACKLOG_READ_FAILURES: (Count.BACKLOG_READ_FAILURES,),
    HealthMetric.GROUP_REPORTS_UNWRITTEN: (Count.GROUP_REPORTS_UNWRITTEN,),
    HealthMetric.WAKE_UPS_UNSCHEDULED: (Count.WAKE_UPS_UNSCHEDULED,),
    # A conflict is two lanes deciding one group at once, resolved by the ledger: not a fault
    # (nor a downstream's record a transition made needless). A downstream not recorded is a
    # group's member the Groups index does not list under it.
    HealthMetric.GROUP_MEMORY_FAILURES: (
        Count.GROUP_MEMORIES_UNREAD,
        Count.GROUP_MEMORIES_UNSTORED,
        Count.GROUP_MEMORIES_UNREADABLE,
        Count.GROUP_MEMBERS_UNREAD,
        Count.DOWNSTREAMS_UNRECORDED,
    ),
}
# The loop's counts of what it skipped, reported by reason (``CONTROLLER_SKIPPED``) with the
# decoder's skips: samples not windowed, queues not decided this time.
SKIP_COUNTERS: Final = (
    Count.SAMPLES_FROM_FUTURE,
    Count.SAMPLES_TOO_OLD,
    Count.SAMPLES_UNREGISTERED,
    Count.SAMPLES_CONFIG_INVALID,
    Count.MAPPINGS_UNREADABLE,
    Count.STATES_DEFERRED,
    Count.STEPS_DEFERRED,
    Count.CLAIMS_IN_FLIGHT,
)
# Counted with a batch's skips: the batch was failed for Lambda to retry (a ledger fault).
BATCH_RETRIED = "batch_retried"
# Kept back from the invocation's remaining time: returning the response and its logs.
RESPONSE_MARGIN_S = 0.5


class ManualEventError(ValueError):
    """A manual evaluation event that does not say what to evaluate."""


@dataclass(slots=True)
class BatchOutcome:
    decisions: list[Decision] = field(default_factory=list)
    failed_sequence_numbers: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    # Decoded samples the controller did not window, by reason (unregistered, too old, ...).
    dropped: Counter[Count] = field(default_factory=Counter)
    samples: int = 0
    records: int = 0
    redelivered: int = 0
    due: int = 0

    def response(self) -> dict[str, list[dict[str, str]]]:
        return {
            "batchItemFailures": [
                {"itemIdentifier": sequence} for sequence in self.failed_sequence_numbers
            ]
        }


class ControllerApp:
    def __init__(
        self,
        loop: ControlLoop,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        namespace: str = DEFAULT_NAMESPACE,
        emit: Callable[[str], None] = print,
        logger: Logger | None = None,
        events: EventOutbox | None = None,
        history: StreamHistory | None = None,
    ) -> None:
        """``history``: the reduced stream read back, where several containers share its
        shards (``controller.evidence``); without it one container reads every batch."""
        self.loop = loop
        # The transitions to publish after each invocation's work (none: no events); the
        # loop's executor records into it.
        self._events = events
        self._clock = clock
        self._monotonic = monotonic
        # Learns as it decodes (declarations, valid queue names) and remembers what it read
        # (a retried batch, a re-sent log event must not count twice): kept for the container.
        self._evidence = EvidenceReader(TelemetryDecoder(namespace), loop.retention_s, history)
        self._emit = emit
        self._logger = logger or Logger(service="queuemesh-controller")
        # The health counts not yet emitted: the loop's counters as last emitted, and the
        # batches' own counts since.
        self._counters_emitted: Counter[Count] = Counter()
        self._batch_health: Counter[str] = Counter()
        # The decoder's skips by reason, and the longest pause among the queues decided, since
        # the last health document.
        self._skipped: Counter[str] = Counter()
        self._longest_pause_s = 0.0

    def handle(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        deadline = self._deadline(context)
        self.loop.ledger.set_deadline(deadline)
        try:
            return self._dispatch(event, deadline)
        finally:
            self._publish_events(deadline)
            self._log_notices()
            self._emit_health()

    def _dispatch(self, event: object, deadline: float) -> dict[str, Any]:
        if isinstance(event, Mapping):
            if is_wake_up_batch(event):
                return self.wake_up(event, deadline)
            if "Records" in event:
                return dict(self.process_kinesis(event, deadline).response())
            if "queue" in event:
                return self.evaluate_manual(event, deadline)
            if event.get("detail-type") == "Scheduled Event":
                outcome = self.tick(deadline)
                return {"due": outcome.due, "decided": len(outcome.decisions)}
        raise ValueError(
            "unrecognised event: expected a Kinesis batch ('Records'), a batch of the wake-up "
            "queue, a manual evaluation ('queue', 'error_rate', 'success_rate') or a "
            "scheduled tick"
        )

    def tick(self, deadline: float, woken: Collection[str] = ()) -> BatchOutcome:
        """The scheduled wake-up: decide queues that asked to be looked at again (paused ones);
        ``woken``: those whose wake-up messages run it (``ControlLoop.tick``)."""
        result = self.loop.tick(self._clock(), deadline, woken)
        if result.fault is not None:
            raise result.fault
        outcome = BatchOutcome(decisions=result.done, due=result.due)
        self._report(outcome, result.planned, result.groups)
        return outcome

    def wake_up(self, event: Mapping[str, Any], deadline: float) -> dict[str, Any]:
        """A batch of the wake-up queue: the tick, run when the earliest of its queues is due
        rather than at the next scheduled one (it decides every queue due by now, whichever
        asked). A message that is not a wake-up is skipped, counted and logged; the batch never
        fails for it (the scheduled tick wakes what it might have meant). A ledger fault fails
        the invocation as the scheduled tick's does: SQS delivers the batch again."""
        woken: set[str] = set()
        wake_ups, unreadable = 0, 0
        for record in event["Records"]:
            try:
                woken.add(read_wake_up(record).queue)
            except ValueError as error:
                unreadable += 1
                self._logger.warning(
                    "wake-up skipped",
                    extra={"reason": str(error), "message_id": _message_id(record)},
                )
                continue
            wake_ups += 1
        if unreadable:
            self._skipped[WAKE_UP_UNREADABLE] += unreadable
        if not wake_ups:
            return {"wake_ups": 0, "skipped": unreadable, "due": 0, "decided": 0}
        outcome = self.tick(deadline, woken)
        return {
            "wake_ups": wake_ups,
            "skipped": unreadable,
            "due": outcome.due,
            "decided": len(outcome.decisions),
        }

    def process_kinesis(self, event: Mapping[str, Any], deadline: float) -> BatchOutcome:
        """Decode, window and decide one Kinesis batch. Whatever its shape, nothing in it
        raises: what cannot be read is skipped and counted."""
        outcome = self._process_kinesis(event, deadline)
        self._batch_health[HealthMetric.BATCHES_RETRIED] += outcome.skipped[BATCH_RETRIED]
        self._batch_health[HealthMetric.SAMPLES_NOT_WINDOWED] += sum(outcome.dropped.values())
        skipped = Counter(
            {reason: count for reason, count in outcome.skipped.items() if reason != BATCH_RETRIED}
        )
        self._skipped.update(skipped)
        self._batch_health[HealthMetric.TELEMETRY_UNREADABLE] += sum(
            count for reason, count in skipped.items() if reason not in ORDINARY_SKIPS
        )
        return outcome

    def _process_kinesis(self, event: Mapping[str, Any], deadline: float) -> BatchOutcome:
        records = event.get("Records")
        if not isinstance(records, list):
            unreadable = BatchOutcome()
            unreadable.skipped[SkipReason.BAD_RECORD] += 1
            self._report(unreadable, [])
            return unreadable
        now = self._clock()
        reading = self._evidence.read(records, now, deadline)
        outcome = BatchOutcome(
            records=len(records),
            redelivered=reading.redelivered,
            skipped=reading.skipped,
            samples=reading.documents,
        )
        self.loop.counters.update(reading.dropped)
        result = self.loop.run_batch(
            reading.evidence, now, deadline, history=reading.history, restarted=reading.restarted
        )
        outcome.dropped = result.dropped + reading.dropped
        if result.windowed:
            self._evidence.windowed(reading, now)
        if result.fault is not None:
            # Windowed evidence lives only in this container until its decision is in the
            # ledger: fail from the batch's first record, a redelivery included (its records
            # are skipped here as already windowed, re-read by a recycled container).
            return self._retry_batch(outcome, records, result.fault)
        outcome.decisions = result.done
        self._report(outcome, result.planned, result.groups)
        return outcome

    def evaluate_manual(self, event: Mapping[str, Any], deadline: float) -> dict[str, Any]:
        started = self._monotonic()
        try:
            queue, error_rate, success_rate = _manual_request(event)
        except ManualEventError as error:
            return {"statusCode": 400, "error": str(error)}
        try:
            result = self.loop.evaluate(queue, error_rate, success_rate, self._clock(), deadline)
        except (LedgerError, ActuationError) as error:
            self._logger.exception("manual evaluation failed", extra={"queue": queue})
            return {"statusCode": 503, "queue_id": queue, "error": str(error)}
        if result is None:
            return {
                "statusCode": 404,
                "queue_id": queue,
                "error": f"queue {queue!r} is not registered (no CONFIG item in the ledger)",
            }
        decision = result.decision
        self._report(BatchOutcome(decisions=[decision]), [decision])
        return {
            "statusCode": 200,
            "queue_id": queue,
            "esm_uuid": result.config.esm_uuid,
            "previous_concurrency": decision.previous,
            "target_concurrency": decision.target,
            "action": decision.action.value,
            "state": decision.state.value,
            "reason": decision.reason,
            "esm_updated": result.esm_updated,
            "execution_time_ms": round((self._monotonic() - started) * 1000, 3),
        }

    def _retry_batch(
        self, outcome: BatchOutcome, records: Sequence[Any], fault: LedgerError
    ) -> BatchOutcome:
        """A transient fault: report the batch's first record so Lambda retries all of it
        (records this container already windowed are skipped then, never counted twice)."""
        self._logger.error("ledger unavailable; the batch will be retried", exc_info=fault)
        first = next(
            (sequence for _, sequence in map(position, records) if sequence is not None), None
        )
        if first is not None:
            outcome.failed_sequence_numbers = [str(first)]
        outcome.skipped[BATCH_RETRIED] += 1
        return outcome

    def _report(
        self,
        outcome: BatchOutcome,
        decided: Sequence[Decision],
        groups: Sequence[GroupReport] = (),
    ) -> None:
        """Per-queue EMF for the dashboard (one document per queue), the group metrics (one
        document per group and per member), and a log line per change."""
        now = self._clock()
        for decision in decided:
            paused_since = decision.new_state.paused_since
            if paused_since > 0:
                self._longest_pause_s = max(self._longest_pause_s, now - paused_since)
            metrics = EphemeralMetrics(namespace=CONTROLLER_NAMESPACE)
            metrics.add_dimension(name=QUEUE_DIMENSION, value=decision.queue)
            metrics.add_metric(
                name=DecisionMetric.MAXIMUM_CONCURRENCY,
                unit=MetricUnit.Count,
                value=decision.target,
            )
            metrics.add_metric(
                name=DecisionMetric.PRESSURE_RATE,
                unit=MetricUnit.Percent,
                value=decision.pressure_rate * 100,
            )
            metrics.add_metric(name=DecisionMetric.DECISIONS, unit=MetricUnit.Count, value=1)
            metrics.add_metadata(key="action", value=decision.action.value)
            self._emit(serialized(metrics))
        for document in group_documents(groups):
            self._emit(document)
        for decision in outcome.decisions:
            if decision.target != decision.previous:
                self._logger.info(
                    decision.reason,
                    extra={
                        "queue": decision.queue,
                        "action": decision.action.value,
                        "previous": decision.previous,
                        "target": decision.target,
                        "state": decision.state.value,
                    },
                )
        if outcome.skipped:
            self._logger.info("telemetry skipped", extra={"skipped": dict(outcome.skipped)})
        if outcome.dropped:
            self._logger.info("samples not windowed", extra={"dropped": dict(outcome.dropped)})

    def _publish_events(self, deadline: float) -> None:
        """The invocation's transitions to the bus; what does not get there is counted and
        logged once, never raised (the batch's outcome stands either way)."""
        if self._events is None:
            return
        unpublished = self._events.flush(deadline)
        self._batch_health[HealthMetric.EVENTS_UNPUBLISHED] += unpublished.count
        if unpublished.count:
            self._logger.warning(
                "events not published",
                extra={"unpublished": unpublished.count, "reason": unpublished.reason},
            )

    def _emit_health(self) -> None:
        """What this invocation added to the health counts, as one EMF document (none when
        nothing did nor any paused queue was decided), then one document per reason it
        skipped anything for."""
        counters = self.loop.counters
        counts: dict[str, int] = {
            metric: sum(counters[counter] - self._counters_emitted[counter] for counter in counted)
            for metric, counted in HEALTH_COUNTERS.items()
        }
        counts.update(self._batch_health)
        skipped = self._skipped + Counter(
            {
                counter.value: counters[counter] - self._counters_emitted[counter]
                for counter in SKIP_COUNTERS
            }
        )
        longest_pause_s = self._longest_pause_s
        self._counters_emitted = Counter(counters)
        self._batch_health.clear()
        self._skipped.clear()
        self._longest_pause_s = 0.0
        for document in skip_documents(skipped):
            self._emit(document)
        if not any(counts.values()) and not longest_pause_s:
            return
        self._emit(health_document(counts, {HealthMetric.LONGEST_PAUSE: longest_pause_s}))

    def _log_notices(self) -> None:
        """One warning per thing the operator should hear of (a broken config version, a
        mapping gone); the counters keep counting after it."""
        for notice in self.loop.take_notices():
            self._logger.warning(
                notice.message, extra={"queue": notice.queue, "counter": notice.counter}
            )

    def _deadline(self, context: Any) -> float:
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        if remaining is None:
            return math.inf
        return self._monotonic() + remaining() / 1000.0 - RESPONSE_MARGIN_S


def _message_id(record: object) -> object:
    return record.get("messageId") if isinstance(record, Mapping) else None


def _manual_request(event: Mapping[str, Any]) -> tuple[str, float, float]:
    queue = event.get("queue")
    if not is_queue_name(queue):
        raise ManualEventError(
            "'queue' must name a registered queue (an SQS queue name: up to 80 characters "
            "of A-Z, a-z, 0-9, '_' and '-', a FIFO queue's ending in '.fifo')"
        )
    rates = []
    for key in ("error_rate", "success_rate"):
        value = event.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ManualEventError(f"'{key}' must be a number between 0 and 1, got {value!r}")
        if not 0.0 <= value <= 1.0:
            raise ManualEventError(f"'{key}' must be between 0 and 1, got {value}")
        rates.append(float(value))
    return queue, rates[0], rates[1]
