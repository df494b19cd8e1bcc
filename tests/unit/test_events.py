"""The controller's events: which transitions become which detail-type, the detail as the ledger
encodes the audit item, and publication that never changes what a batch did."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.events import (
    DetailType,
    EventBridgePublisher,
    InMemoryEventBus,
    bus_event,
    detail_type_of,
    event_detail,
)
from controller.ledger import decode_audit, queue_key
from controller.model import Action, AuditEntry, AuditEvent
from controller.ports import BusEvent
from controller.schema import HealthMetric
from tests.factories import health_count, storm_with_events

NOW = 992.0


def audit(event: AuditEvent, action: Action, previous: int, new: int) -> AuditEntry:
    return AuditEntry("orders", NOW, event, previous, new, action.value, "why")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            audit(AuditEvent.TRANSITION, Action.MULTIPLICATIVE_DECREASE, 100, 50),
            DetailType.CONCURRENCY_CHANGED,
        ),
        (
            audit(AuditEvent.MANUAL_EVALUATION, Action.ADDITIVE_INCREASE, 5, 6),
            DetailType.CONCURRENCY_CHANGED,
        ),
        (audit(AuditEvent.TRANSITION, Action.PAUSE, 2, 2), DetailType.QUEUE_PAUSED),
        (audit(AuditEvent.TRANSITION, Action.RESUME, 2, 2), DetailType.QUEUE_RESUMED),
        (audit(AuditEvent.DRIFT_DETECTED, Action.HOLD, 10, 40), DetailType.DRIFT_ADOPTED),
        (audit(AuditEvent.ACTUATION_RECONCILED, Action.HOLD, 10, 20), DetailType.DRIFT_ADOPTED),
        (audit(AuditEvent.ACTUATION_FAILED, Action.HOLD, 50, 100), DetailType.ACTUATION_FAILED),
        (audit(AuditEvent.TRANSITION, Action.HOLD, 10, 10), None),
        (audit(AuditEvent.MAPPING_MISSING, Action.HOLD, 10, 10), None),
    ],
)
def test_each_kind_of_transition_has_its_detail_type(
    entry: AuditEntry, expected: DetailType | None
) -> None:
    assert detail_type_of(entry) == expected
    event = bus_event(entry)
    assert (event is None) == (expected is None)


audits = st.builds(
    AuditEntry,
    queue=st.from_regex(r"[A-Za-z0-9_-]{1,80}", fullmatch=True),
    timestamp=st.floats(0, 4e9).map(lambda t: round(t, 3)),
    event_type=st.sampled_from(AuditEvent),
    previous_value=st.integers(0, 10_000),
    new_value=st.integers(0, 10_000),
    action=st.sampled_from(Action).map(str),
    reason=st.text(max_size=200),
    error_rate=st.floats(0, 1),
    success_rate=st.floats(0, 1),
    control_loop_latency_ms=st.floats(0, 1e6),
)


@given(audits)
def test_the_detail_is_the_audit_item_and_decodes_back(entry: AuditEntry) -> None:
    detail = json.loads(json.dumps(event_detail(entry)))
    assert detail["Queue"] == entry.queue
    assert not {"PK", "SK", "ExpiresAt"} & set(detail)
    decoded = decode_audit({**detail, "PK": queue_key(entry.queue)})
    assert decoded.timestamp == pytest.approx(entry.timestamp, abs=1e-6)
    assert (decoded.event_type, decoded.previous_value, decoded.new_value) == (
        entry.event_type,
        entry.previous_value,
        entry.new_value,
    )
    assert (decoded.action, decoded.reason) == (entry.action, entry.reason)
    assert (decoded.error_rate, decoded.success_rate, decoded.control_loop_latency_ms) == (
        entry.error_rate,
        entry.success_rate,
        entry.control_loop_latency_ms,
    )


def test_a_storm_publishes_the_cut_and_the_pause_with_their_audit_items() -> None:
    bus = InMemoryEventBus()
    run = storm_with_events(bus)
    published = {json.loads(e.detail)["Queue"]: e for e in bus.events}
    assert published["orders"].detail_type == DetailType.CONCURRENCY_CHANGED
    assert published["billing"].detail_type == DetailType.QUEUE_PAUSED
    for queue, event in published.items():
        [committed] = run.trails[queue]
        assert json.loads(event.detail) == event_detail(committed)
    assert health_count(run.documents, HealthMetric.EVENTS_UNPUBLISHED) == 0


def test_a_refusing_bus_changes_nothing_but_the_count(caplog: pytest.LogCaptureFixture) -> None:
    bus = InMemoryEventBus()
    bus.refuse = True
    run, quiet = storm_with_events(bus), storm_with_events(None)
    assert (run.response, run.trails, run.mappings) == (
        quiet.response,
        quiet.trails,
        quiet.mappings,
    )
    assert health_count(run.documents, HealthMetric.EVENTS_UNPUBLISHED) == 2
    assert [r.getMessage() for r in caplog.records].count("events not published") == 1


class PartlyRefusingClient:
    """A PutEvents double that refuses the first entry of every call."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def put_events(self, Entries: list[dict[str, str]]) -> dict[str, Any]:
        self.calls.append(len(Entries))
        refused = {"ErrorCode": "InternalFailure", "ErrorMessage": "try again"}
        return {
            "FailedEntryCount": 1,
            "Entries": [refused] + [{"EventId": "e"}] * (len(Entries) - 1),
        }


def test_the_adapter_puts_ten_entries_a_call_and_counts_refused_entries() -> None:
    client = PartlyRefusingClient()
    events = [BusEvent(DetailType.CONCURRENCY_CHANGED, "{}")] * 23
    answer = EventBridgePublisher(client).publish(events, deadline=math.inf)
    assert client.calls == [10, 10, 3]
    assert answer.count == 3 and "InternalFailure" in answer.reason
