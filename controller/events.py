"""The events an on-call engineer wires up: every transition the ledger records, on EventBridge.

The vocabulary (source, detail-types) is here and nowhere else; docs/operations.md shows it
and template.yaml's rule routes it. An ``EventOutbox`` collects the audit items an execution
committed and publishes them once the invocation's work is done: publishing never blocks nor
fails a batch, it only counts what did not get through (docs/architecture.md, "Events").
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from decimal import Decimal
from enum import StrEnum
from typing import Any, Final

from botocore.exceptions import BotoCoreError

from controller.aws import CallAbandoned, brief_caller
from controller.constants import ATTEMPT_TIMEOUT_S
from controller.ledger import encode_audit
from controller.model import Action, AuditEntry, AuditEvent
from controller.ports import BusEvent, EventPublisher, Unpublished

SOURCE: Final = "queuemesh"
# PutEvents takes at most ten entries a call.
MAX_ENTRIES_PER_CALL: Final = 10
# The most an invocation spends publishing, inside whatever time it has left: an attempt's
# worst case and a retry's.
PUBLISH_BUDGET_S: Final = 2 * ATTEMPT_TIMEOUT_S
# The ledger's keys and expiry say where an item is stored, not what happened.
_STORAGE_ATTRIBUTES: Final = frozenset({"PK", "SK", "ExpiresAt"})
_RETRYABLE_CODES: Final = frozenset({"ThrottlingException", "InternalException"})


class DetailType(StrEnum):
    """One detail-type per kind of transition an operator routes."""

    CONCURRENCY_CHANGED = "QueueMesh Concurrency Changed"
    QUEUE_PAUSED = "QueueMesh Queue Paused"
    QUEUE_RESUMED = "QueueMesh Queue Resumed"
    DRIFT_ADOPTED = "QueueMesh Drift Adopted"
    ACTUATION_FAILED = "QueueMesh Actuation Failed"


def detail_type_of(audit: AuditEntry) -> DetailType | None:
    """The kind of transition ``audit`` records; ``None`` for one that changed nothing an
    operator routes (a hold, a mapping found missing)."""
    if audit.event_type in (AuditEvent.DRIFT_DETECTED, AuditEvent.ACTUATION_RECONCILED):
        return DetailType.DRIFT_ADOPTED
    if audit.event_type is AuditEvent.ACTUATION_FAILED:
        return DetailType.ACTUATION_FAILED
    if audit.action == Action.PAUSE:
        return DetailType.QUEUE_PAUSED
    if audit.action == Action.RESUME:
        return DetailType.QUEUE_RESUMED
    if audit.new_value != audit.previous_value:
        return DetailType.CONCURRENCY_CHANGED
    return None


def event_detail(audit: AuditEntry) -> dict[str, Any]:
    """The audit item as the ledger's codec encodes it, JSON-safe, with ``Queue`` for its key."""
    item = encode_audit(audit, suffix="", retention_s=0)
    detail = {
        name: _plain(value) for name, value in item.items() if name not in _STORAGE_ATTRIBUTES
    }
    return {"Queue": audit.queue, **detail}


def bus_event(audit: AuditEntry) -> BusEvent | None:
    """The event ``audit`` publishes, if its kind is one an operator routes."""
    detail_type = detail_type_of(audit)
    if detail_type is None:
        return None
    return BusEvent(detail_type, json.dumps(event_detail(audit), separators=(",", ":")))


def _plain(value: object) -> object:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


class EventOutbox:
    """The audit items committed since the last ``flush``, for ``publisher``.

    ``record`` is the executor's commit hook (``AwsExecutor(on_commit=outbox.record)``)."""

    def __init__(
        self, publisher: EventPublisher, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.publisher = publisher
        self._monotonic = monotonic
        self._pending: list[BusEvent] = []

    def record(self, audit: AuditEntry) -> None:
        event = bus_event(audit)
        if event is not None:
            self._pending.append(event)

    def flush(self, deadline: float) -> Unpublished:
        """Publish what was recorded, by ``deadline`` or within ``PUBLISH_BUDGET_S``, whichever
        comes first; what could not be published is dropped and counted."""
        events, self._pending = self._pending, []
        if not events:
            return Unpublished()
        return self.publisher.publish(events, min(deadline, self._monotonic() + PUBLISH_BUDGET_S))


class EventBridgePublisher:
    """``PutEvents`` on the account's default bus, ten entries a call, retried only while the
    deadline allows."""

    def __init__(
        self,
        client: Any = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._caller = brief_caller(
            "events", client, _RETRYABLE_CODES, cap_s=0.5, max_attempts=3, clock=clock, sleep=sleep
        )

    def publish(self, events: Sequence[BusEvent], deadline: float) -> Unpublished:
        unpublished, reason = 0, ""
        for start in range(0, len(events), MAX_ENTRIES_PER_CALL):
            chunk = events[start : start + MAX_ENTRIES_PER_CALL]
            entries = [
                {"Source": SOURCE, "DetailType": event.detail_type, "Detail": event.detail}
                for event in chunk
            ]
            try:
                answer = self._caller.call("put_events", deadline, Entries=entries)
            except (CallAbandoned, BotoCoreError) as error:
                unpublished, reason = unpublished + len(chunk), reason or str(error)
                continue
            failed = int(answer.get("FailedEntryCount") or 0)
            if failed:
                codes = {e.get("ErrorCode", "") for e in answer.get("Entries", [])} - {""}
                unpublished += failed
                reason = reason or f"PutEvents refused {failed} entries ({', '.join(codes)})"
        return Unpublished(unpublished, reason)


class InMemoryEventBus:
    """The twin: keeps every event published; ``refuse`` makes it refuse them all (counted)."""

    def __init__(self) -> None:
        self.events: list[BusEvent] = []
        self.refuse = False

    def publish(self, events: Sequence[BusEvent], deadline: float) -> Unpublished:
        if self.refuse:
            return Unpublished(len(events), "the bus refuses events")
        self.events.extend(events)
        return Unpublished()
