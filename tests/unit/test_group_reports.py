"""What a batch decided per group, told to the operator: the ledger's GROUP item, written only
when it changed and never at the batch's expense, and the group metrics."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.group_reports import (
    REPORT_TOLERANCE,
    GroupReportWriter,
    group_documents,
    same_report,
)
from controller.ledger import InMemoryLedger, decode_group_report, encode_group_report
from controller.loop import ControlLoop
from controller.model import GroupReport, GroupShare
from controller.planner import Plan
from controller.policy import memory_type
from controller.policy.aimd import Aimd
from controller.ports import LedgerError
from controller.schema import (
    CONTROLLER_GROUP_DIMENSION,
    QUEUE_DIMENSION,
    GroupMetric,
    HealthMetric,
)
from controller.settings import PolicyParams
from tests.factories import (
    health_count,
    kinesis_event,
    mapped,
    planning_groups,
    registered,
    sample,
)
from tests.strategies import group_reports


def payments(plan: Plan, capacity: float = 80.0, paused: bool = False) -> tuple[GroupReport, ...]:
    return (
        GroupReport(
            "payments",
            plan.now,
            capacity,
            (GroupShare("orders", 60.0, 12), GroupShare("billing", 20.0, 4, paused)),
        ),
    )


class PutGroupDown(InMemoryLedger):
    """The twin whose GROUP writes fail while ``down`` (each one tried is in ``tried``);
    everything else works."""

    down = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tried: list[str] = []

    def put_group_report(self, report: GroupReport) -> None:
        self.tried.append(report.group)
        if self.down:
            raise LedgerError("injected: put report")
        super().put_group_report(report)


def loop_on(ledger: InMemoryLedger) -> ControlLoop:
    registered(ledger, "orders")
    return ControlLoop(ledger, mapped(InMemoryActuator()), PolicyParams(), algorithm=Aimd())


def calm(start: float) -> list:
    return [sample(at=start + s + 0.9, ok=10, invocation_ms=500) for s in range(10)]


# -- the ledger's item -----------------------------------------------------------------------


@given(group_reports)
def test_a_report_round_trips_through_its_item(report: GroupReport) -> None:
    assert decode_group_report(encode_group_report(report)) == report


@given(group_reports)
def test_the_twin_stores_each_groups_last_report(report: GroupReport) -> None:
    ledger = InMemoryLedger(memory_types=memory_type)
    ledger.put_group_report(dataclasses.replace(report, at=report.at + 1, members=()))
    ledger.put_group_report(report)
    assert ledger.group_reports() == [report]
    assert ledger.list_states() == [] and ledger.list_configs() == []


def test_a_hand_edited_group_item_is_a_ledger_error_naming_it() -> None:
    ledger = InMemoryLedger(memory_types=memory_type)
    ledger.put_item({"PK": "GROUP#payments", "SK": "CURRENT", "Members": "all"})
    with pytest.raises(LedgerError, match="GROUP#payments"):
        ledger.group_reports()


# -- when a report is written ----------------------------------------------------------------


@given(group_reports, st.floats(0, 1e6, allow_nan=False))
def test_a_report_differing_only_in_time_is_the_same(report: GroupReport, later: float) -> None:
    assert same_report(report, dataclasses.replace(report, at=report.at + later))


@given(group_reports.filter(lambda r: r.members))
def test_a_members_level_or_pause_changed_is_a_new_report(report: GroupReport) -> None:
    first, *rest = report.members
    for changed in (
        dataclasses.replace(first, level=first.level + 1),
        dataclasses.replace(first, paused=not first.paused),
    ):
        assert not same_report(report, dataclasses.replace(report, members=(changed, *rest)))
    assert not same_report(report, dataclasses.replace(report, members=tuple(rest)))


def test_capacity_and_shares_change_the_report_beyond_the_tolerance() -> None:
    [report] = payments(Plan(100.0))
    moved = 80.0 * (1 + REPORT_TOLERANCE * 2)
    assert same_report(report, dataclasses.replace(report, capacity_rps=80.0 * 1.001))
    assert not same_report(report, dataclasses.replace(report, capacity_rps=moved))
    assert not same_report(report, dataclasses.replace(report, capacity_rps=None))
    faster = dataclasses.replace(report.members[0], share_rps=60.0 * 1.5)
    assert not same_report(report, dataclasses.replace(report, members=(faster,)))


def test_a_steady_group_is_written_once() -> None:
    ledger = PutGroupDown(memory_types=memory_type)
    ledger.down = False
    writer = GroupReportWriter()
    for now in (100.0, 110.0, 120.0):
        assert writer.write(payments(Plan(now)), ledger) == 0
    assert ledger.tried == ["payments"]
    assert [report.at for report in ledger.group_reports()] == [100.0]
    writer.write(payments(Plan(130.0), paused=True), ledger)
    assert ledger.tried == ["payments"] * 2
    assert [report.at for report in ledger.group_reports()] == [130.0]


def two_groups(now: float) -> tuple[GroupReport, ...]:
    [payments_report] = payments(Plan(now))
    return payments_report, dataclasses.replace(payments_report, group="messaging")


def test_after_a_failed_write_the_other_groups_wait_for_their_next_report() -> None:
    ledger = PutGroupDown(memory_types=memory_type)
    writer = GroupReportWriter()
    assert writer.write(two_groups(100.0), ledger) == 2
    assert ledger.tried == ["payments"]
    ledger.down = False
    assert writer.write(two_groups(110.0), ledger) == 0
    assert [report.group for report in ledger.group_reports()] == ["messaging", "payments"]


def test_no_write_starts_without_the_time_for_it() -> None:
    ledger = InMemoryLedger(memory_types=memory_type)
    writer = GroupReportWriter()
    assert writer.write(two_groups(100.0), ledger, in_time=lambda: False) == 2
    assert ledger.group_reports() == []
    assert writer.write(two_groups(110.0), ledger) == 0
    assert len(ledger.group_reports()) == 2


# -- the control loop ------------------------------------------------------------------------


def test_each_batch_writes_its_groups_reports_when_they_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capacity = [80.0]
    planning_groups(monkeypatch, lambda plan: payments(plan, capacity[0]))
    ledger = InMemoryLedger(memory_types=memory_type)
    loop = loop_on(ledger)
    loop.run_batch(calm(100), now=110.0)
    assert ledger.group_reports() == list(payments(Plan(110.0)))
    loop.run_batch(calm(110), now=120.0)
    assert [r.at for r in ledger.group_reports()] == [110.0]  # steady: not written again
    capacity[0] = 40.0
    loop.run_batch(calm(120), now=130.0)
    assert ledger.group_reports() == list(payments(Plan(130.0), 40.0))


def test_a_failed_group_write_is_counted_and_the_batch_stands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    planning_groups(monkeypatch, payments)
    ledger = PutGroupDown(memory_types=memory_type)
    loop = loop_on(ledger)
    storm = [sample(at=100 + s + 0.9, ok=8, throttled=2, invocation_ms=500) for s in range(10)]
    result = loop.run_batch(storm, now=110.0)
    assert result.fault is None and [d.target for d in result.done] == [50]
    assert loop.counters["group_reports_unwritten"] == 1
    assert ledger.group_reports() == []
    # The same report is tried again with the next batch, once the ledger takes it.
    ledger.down = False
    loop.run_batch(calm(110), now=120.0)
    assert [r.at for r in ledger.group_reports()] == [120.0]
    assert loop.counters["group_reports_unwritten"] == 1


# -- the metrics -----------------------------------------------------------------------------


def test_the_app_emits_each_groups_capacity_and_members_shares(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    planning_groups(monkeypatch, lambda plan: payments(plan, paused=True))
    emitted: list[str] = []
    app = ControllerApp(
        loop_on(PutGroupDown(memory_types=memory_type)), clock=lambda: 110.0, emit=emitted.append
    )
    app.handle(kinesis_event(calm(100)), None)
    documents = [json.loads(line) for line in emitted]
    grouped = [d for d in documents if CONTROLLER_GROUP_DIMENSION in d]
    [capacity] = [d for d in grouped if GroupMetric.CAPACITY in d]
    assert (capacity[CONTROLLER_GROUP_DIMENSION], capacity[GroupMetric.CAPACITY]) == (
        "payments",
        [80.0],
    )
    assert capacity["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Group"]]
    members = {
        d[QUEUE_DIMENSION]: (d[GroupMetric.SHARE], d[GroupMetric.PAUSED_TO_SHARE])
        for d in grouped
        if GroupMetric.SHARE in d
    }
    assert members == {"orders": ([60.0], [0]), "billing": ([20.0], [1])}
    assert all(
        d["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Group", "QueueName"]]
        for d in grouped
        if GroupMetric.SHARE in d
    )
    # The write that failed is in the health document.
    assert health_count(documents, HealthMetric.GROUP_REPORTS_UNWRITTEN) == 1


def test_a_capacity_not_known_yet_is_no_data_point() -> None:
    [report] = payments(Plan(100.0))
    documents = [
        json.loads(d) for d in group_documents([dataclasses.replace(report, capacity_rps=None)])
    ]
    assert not any(GroupMetric.CAPACITY in d for d in documents)
    assert len(documents) == 2


def test_the_group_laws_own_report_reaches_the_ledger() -> None:
    """No hand-built report: two queues whose telemetry names one downstream are decided as
    one group, and what the group law decided is the group's stored report."""
    ledger = registered(registered(InMemoryLedger(memory_types=memory_type)), "billing")
    actuator = mapped(mapped(InMemoryActuator()), "billing")
    loop = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())
    for start in (100, 110, 120):
        storm = [
            dataclasses.replace(
                sample(queue, at=start + s + 0.9, ok=8, throttled=2), downstream="payments"
            )
            for s in range(10)
            for queue in ("orders", "billing")
        ]
        loop.run_batch(storm, now=start + 10.0)

    [report] = ledger.group_reports()
    assert report.group == "payments"
    assert {member.queue for member in report.members} == {"orders", "billing"}
    assert report.capacity_rps is not None and report.capacity_rps > 0
