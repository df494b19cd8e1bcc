"""The controller Lambda's application: events in, plan executed, metrics and logs out.

Plain class, no globals: the Lambda handler, the local stack and replay each build one with
the adapters they need.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from controller.engine import Controller
from controller.model import Decision
from controller.ports import ActuationError, LedgerError
from controller.telemetry import DEFAULT_NAMESPACE, decode_kinesis_event

METRICS_NAMESPACE = "QueueMeshController"
# Kept back from the invocation's remaining time: returning the response and its logs.
RESPONSE_MARGIN_S = 0.5


class ManualEventError(ValueError):
    """A manual evaluation event that does not say what to evaluate."""


@dataclass(slots=True)
class BatchOutcome:
    decisions: list[Decision] = field(default_factory=list)
    failed_sequence_numbers: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
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
        controller: Controller,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        namespace: str = DEFAULT_NAMESPACE,
        emit: Callable[[str], None] = print,
        logger: Logger | None = None,
    ) -> None:
        self.controller = controller
        self._clock = clock
        self._monotonic = monotonic
        self._namespace = namespace
        self._emit = emit
        self._logger = logger or Logger(service="queuemesh-controller")
        # Highest sequence number ingested per shard: a retried batch must not count the same
        # telemetry twice in this warm container's windows.
        self._ingested: dict[str, int] = {}

    def handle(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        deadline = self._deadline(context)
        self.controller.ledger.set_deadline(deadline)
        try:
            return self._dispatch(event, deadline)
        finally:
            self._log_notices()

    def _dispatch(self, event: Mapping[str, Any], deadline: float) -> dict[str, Any]:
        if "Records" in event:
            return dict(self.process_kinesis(event, deadline).response())
        if "queue" in event:
            return self.evaluate_manual(event, deadline)
        if event.get("detail-type") == "Scheduled Event":
            outcome = self.tick(deadline)
            return {"due": outcome.due, "decided": len(outcome.decisions)}
        raise ValueError(
            "unrecognised event: expected a Kinesis batch ('Records'), a manual evaluation "
            "('queue', 'error_rate', 'success_rate') or a scheduled tick"
        )

    def tick(self, deadline: float) -> BatchOutcome:
        """The scheduled wake-up: decide queues that asked to be looked at again (paused ones)."""
        now = self._clock()
        outcome = BatchOutcome(due=self.controller.wake_due(now))
        plan = self.controller.plan(now, deadline)
        outcome.decisions = self.controller.execute(plan, deadline)
        self._report(outcome, plan.decisions)
        return outcome

    def process_kinesis(self, event: Mapping[str, Any], deadline: float) -> BatchOutcome:
        records: Sequence[Mapping[str, Any]] = event.get("Records") or []
        fresh = [record for record in records if not self._already_ingested(record)]
        outcome = BatchOutcome(records=len(records), redelivered=len(records) - len(fresh))
        decoded = decode_kinesis_event({"Records": fresh}, namespace=self._namespace)
        outcome.skipped = decoded.skipped
        outcome.samples = len(decoded.samples)
        now = self._clock()
        try:
            self.controller.ingest(decoded.samples, now)
        except LedgerError:
            return self._retry_batch(outcome, fresh)
        for record in fresh:
            self._mark_ingested(record)
        try:
            plan = self.controller.plan(now, deadline)
            outcome.decisions = self.controller.execute(plan, deadline)
        except LedgerError:
            return self._retry_batch(outcome, fresh)
        self._report(outcome, plan.decisions)
        return outcome

    def evaluate_manual(self, event: Mapping[str, Any], deadline: float) -> dict[str, Any]:
        started = self._monotonic()
        try:
            queue, error_rate, success_rate = _manual_request(event)
        except ManualEventError as error:
            return {"statusCode": 400, "error": str(error)}
        try:
            result = self.controller.evaluate(
                queue, error_rate, success_rate, self._clock(), deadline
            )
        except (LedgerError, ActuationError) as error:
            self._logger.exception("manual evaluation failed", extra={"queue": queue})
            return {"statusCode": 503, "queue_id": queue, "error": str(error)}
        if result is None:
            return {
                "statusCode": 404,
                "queue_id": queue,
                "error": f"queue {queue!r} is not registered (no CONFIG item in the ledger)",
            }
        decision, esm_updated = result
        now = self._clock()
        self._report(BatchOutcome(decisions=[decision]), [decision])
        config = self.controller.configs([queue], now)[queue]
        return {
            "statusCode": 200,
            "queue_id": queue,
            "esm_uuid": config.esm_uuid,
            "previous_concurrency": decision.previous,
            "target_concurrency": decision.target,
            "action": decision.action.value,
            "state": decision.state.value,
            "reason": decision.reason,
            "esm_updated": esm_updated,
            "execution_time_ms": round((self._monotonic() - started) * 1000, 3),
        }

    def _retry_batch(
        self, outcome: BatchOutcome, fresh: Sequence[Mapping[str, Any]]
    ) -> BatchOutcome:
        """A transient fault: report the first unprocessed record so Lambda retries from it."""
        self._logger.exception("ledger unavailable; the batch will be retried")
        if fresh:
            outcome.failed_sequence_numbers = [str(fresh[0]["kinesis"]["sequenceNumber"])]
        outcome.skipped["batch_retried"] += 1
        return outcome

    def _report(self, outcome: BatchOutcome, decided: Sequence[Decision]) -> None:
        """Per-queue EMF for the dashboard (one document per queue), and a log line per change."""
        for decision in decided:
            metrics = EphemeralMetrics(namespace=METRICS_NAMESPACE)
            metrics.add_dimension(name="QueueName", value=decision.queue)
            metrics.add_metric(
                name="MaximumConcurrency", unit=MetricUnit.Count, value=decision.target
            )
            metrics.add_metric(
                name="PressureRate", unit=MetricUnit.Percent, value=decision.pressure_rate * 100
            )
            metrics.add_metric(name="Decisions", unit=MetricUnit.Count, value=1)
            metrics.add_metadata(key="action", value=decision.action.value)
            self._emit(json.dumps(metrics.serialize_metric_set(), separators=(",", ":")))
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

    def _log_notices(self) -> None:
        """One warning per thing the operator should hear of (a broken config version, a
        mapping gone); the counters keep counting after it."""
        notices, self.controller.notices = self.controller.notices, []
        for notice in notices:
            self._logger.warning(
                notice.message, extra={"queue": notice.queue, "counter": notice.counter}
            )

    def _deadline(self, context: Any) -> float:
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        if remaining is None:
            return math.inf
        return self._monotonic() + remaining() / 1000.0 - RESPONSE_MARGIN_S

    def _already_ingested(self, record: Mapping[str, Any]) -> bool:
        shard, sequence = _position(record)
        return sequence is not None and sequence <= self._ingested.get(shard, -1)

    def _mark_ingested(self, record: Mapping[str, Any]) -> None:
        shard, sequence = _position(record)
        if sequence is not None and sequence > self._ingested.get(shard, -1):
            self._ingested[shard] = sequence


def _position(record: Mapping[str, Any]) -> tuple[str, int | None]:
    """(shard, sequence number as an integer): sequence numbers are never compared as text."""
    shard = str(record.get("eventID", "")).split(":", 1)[0]
    try:
        return shard, int(record["kinesis"]["sequenceNumber"])
    except (KeyError, TypeError, ValueError):
        return shard, None


def _manual_request(event: Mapping[str, Any]) -> tuple[str, float, float]:
    queue = event.get("queue")
    if not isinstance(queue, str) or not queue:
        raise ManualEventError("'queue' must name a registered queue")
    rates = []
    for key in ("error_rate", "success_rate"):
        value = event.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ManualEventError(f"'{key}' must be a number between 0 and 1, got {value!r}")
        if not 0.0 <= value <= 1.0:
            raise ManualEventError(f"'{key}' must be between 0 and 1, got {value}")
        rates.append(float(value))
    return queue, rates[0], rates[1]
