"""`queuemesh doctor`'s checks on hand-made facts: one test per finding, and a healthy stack
that has none (the same findings against the local stack: tests/integration/test_doctor.py)."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.ledger import InMemoryLedger, encode_state
from controller.model import Mode, QueueConfig, QueueState, QueueStateName
from controller.policy import memory_type
from controller.settings import PolicyParams
from stack.doctor import (
    FunctionFacts,
    LogGroupFacts,
    MappingFacts,
    QueueFacts,
    RegisteredQueue,
    Severity,
    StackReport,
    StateItemFacts,
    Subscription,
    WakeUpQueueFacts,
    diagnose,
    has_problems,
    missing_wake_ups,
    with_wake_ups,
)
from stack.doctor_aws import (
    policy_problem,
    state_facts,
    template_filter_pattern,
    template_log_group,
)
from stack.errors import CliError
from stack.local.widgets import StackFacts

STREAM = "arn:aws:kinesis:us-east-1:123456789012:stream/telemetry"
PATTERN = '{ $._aws.CloudWatchMetrics[0].Namespace = "QueueMesh" }'
UUID = "14e0db71-2b8c-4d2a-9e7f-0123456789ab"


def healthy_queue(**changes: Any) -> RegisteredQueue:
    queue = RegisteredQueue(
        config=QueueConfig(queue="orders", esm_uuid=UUID),
        cmax=100,
        paused=False,
        mapping=MappingFacts(
            uuid=UUID, state="Enabled", max_concurrency=40, function_name="orders-worker"
        ),
        function=FunctionFacts(
            name="orders-worker", timeout_s=30, reserved_concurrency=None, log_group="/w"
        ),
        queue=QueueFacts(name="orders", visibility_timeout_s=180, has_dead_letter_queue=True),
    )
    return dataclasses.replace(queue, **changes)


def mapping(**changes: Any) -> MappingFacts:
    assert healthy_queue().mapping is not None
    return dataclasses.replace(healthy_queue().mapping, **changes)  # type: ignore[arg-type]


def healthy(**changes: Any) -> StackReport:
    report = StackReport(
        stack="queuemesh",
        table="ledger",
        stream_name="telemetry",
        stream_arn=STREAM,
        filter_pattern=PATTERN,
        queues=(healthy_queue(),),
        log_groups=(LogGroupFacts("/w", True, (Subscription(STREAM, PATTERN),)),),
        states=(state(),),
        controller="queuemesh-controller",
        wake_up_queue=WakeUpQueueFacts("wake-ups", exists=True, mapping_states=("Enabled",)),
    )
    return dataclasses.replace(report, **changes)


def state(**changes: Any) -> StateItemFacts:
    facts = StateItemFacts(queue="orders", paused=False, needs_wake_up=False)
    return dataclasses.replace(facts, **changes)


def problems(report: StackReport) -> list[str]:
    return [f.problem for f in diagnose(report) if f.severity is Severity.PROBLEM]


def only_problem(report: StackReport) -> str:
    found = problems(report)
    assert len(found) == 1, found
    assert has_problems(diagnose(report))
    return found[0]


def test_a_healthy_stack_has_no_findings() -> None:
    assert diagnose(healthy()) == []


def test_a_mapping_that_does_not_exist() -> None:
    assert "does not exist" in only_problem(healthy(queues=(healthy_queue(mapping=None),)))


def test_a_mapping_disabled_outside_queuemesh_but_not_one_the_controller_paused() -> None:
    disabled = healthy_queue(mapping=mapping(state="Disabled"))
    assert "Disabled, and not by QueueMesh" in only_problem(healthy(queues=(disabled,)))
    paused = dataclasses.replace(disabled, paused=True)
    assert diagnose(healthy(queues=(paused,))) == []


def test_a_mapping_without_maximum_concurrency() -> None:
    uncapped = healthy_queue(mapping=mapping(max_concurrency=None))
    assert "no MaximumConcurrency" in only_problem(healthy(queues=(uncapped,)))


def test_a_mapping_in_provisioned_mode_is_named_once() -> None:
    provisioned = healthy_queue(mapping=mapping(provisioned_pollers=True, max_concurrency=None))
    assert "provisioned mode" in only_problem(healthy(queues=(provisioned,)))


def test_report_batch_item_failures_is_a_note_that_does_not_fail() -> None:
    reporting = healthy_queue(mapping=mapping(report_batch_item_failures=True))
    [finding] = diagnose(healthy(queues=(reporting,)))
    assert finding.severity is Severity.NOTE and "only brake" in finding.problem
    assert not has_problems([finding])
    assert finding.line().startswith("note: queue orders: ")


def test_an_undecodable_config_item() -> None:
    report = healthy(invalid_configs=(("billing", "KeyError: 'EsmUuid'"),))
    assert "does not decode" in only_problem(report)


def test_reserved_concurrency_below_the_cap_and_the_pinned_value_as_cap() -> None:
    function = FunctionFacts("orders-worker", 30, reserved_concurrency=50, log_group="/w")
    assert "below the queue's cap 100" in only_problem(
        healthy(queues=(healthy_queue(function=function),))
    )
    pinned = healthy_queue(
        function=function,
        config=QueueConfig("orders", UUID, mode=Mode.PINNED, pinned_concurrency=50),
    )
    assert diagnose(healthy(queues=(pinned,))) == []


def test_visibility_timeout_under_six_function_timeouts_plus_the_batching_window() -> None:
    queue = QueueFacts("orders", visibility_timeout_s=185, has_dead_letter_queue=True)
    assert diagnose(healthy(queues=(healthy_queue(queue=queue),))) == []
    windowed = healthy_queue(queue=queue, mapping=mapping(batching_window_s=10))
    assert "at least 190 s" in diagnose(healthy(queues=(windowed,)))[0].fix


def test_a_queue_without_a_dead_letter_queue() -> None:
    queue = QueueFacts("orders", visibility_timeout_s=180, has_dead_letter_queue=False)
    assert "no dead-letter queue" in only_problem(healthy(queues=(healthy_queue(queue=queue),)))


def test_a_mapping_reading_a_queue_that_is_gone_is_named_alone() -> None:
    gone = QueueFacts("orders", visibility_timeout_s=0, has_dead_letter_queue=False, exists=False)
    assert "which does not exist" in only_problem(healthy(queues=(healthy_queue(queue=gone),)))


def test_log_groups_missing_unsubscribed_or_with_another_pattern() -> None:
    for group, expected in [
        (LogGroupFacts("/w", exists=False), "does not exist"),
        (LogGroupFacts("/w", True, (Subscription("arn:other", PATTERN),)), "not subscribed"),
        (LogGroupFacts("/w", True, (Subscription(STREAM, ""),)), "pattern ''"),
    ]:
        assert expected in only_problem(healthy(log_groups=(group,)))


def test_a_stream_that_refused_writes() -> None:
    assert "refused 2 writes" in only_problem(healthy(throttled_writes=2.0))


def test_a_paused_state_without_wake_up_and_its_repair() -> None:
    stuck = state(paused=True, needs_wake_up=True)
    report = healthy(states=(stuck,))
    assert "no WakeUp" in only_problem(report)
    assert missing_wake_ups(report) == [stuck]
    assert diagnose(with_wake_ups(report, ["orders"])) == []
    # Paused with its WakeUp, or running without one: nothing to fix.
    assert diagnose(healthy(states=(state(paused=True),))) == []


def test_a_controller_without_a_wake_up_queue_is_a_note() -> None:
    [finding] = diagnose(healthy(wake_up_queue=None))
    assert finding.severity is Severity.NOTE
    assert finding.subject == "controller queuemesh-controller"
    assert "QUEUEMESH_WAKE_UP_QUEUE" in finding.problem and "WakeUpQueue" in finding.fix
    assert not has_problems([finding])


def test_a_wake_up_queue_that_is_gone_or_that_nothing_delivers() -> None:
    gone = WakeUpQueueFacts("wake-ups", exists=False)
    assert "queue wake-ups, which does not exist" in only_problem(healthy(wake_up_queue=gone))
    for states, named in [((), "mappings: none"), (("Disabled",), "mappings: Disabled")]:
        undelivered = WakeUpQueueFacts("wake-ups", exists=True, mapping_states=states)
        problem = only_problem(healthy(wake_up_queue=undelivered))
        assert "no enabled event source mapping delivers" in problem and named in problem
    # One mapping polling is enough, whatever the others' states.
    both = WakeUpQueueFacts("wake-ups", exists=True, mapping_states=("Disabled", "Enabling"))
    assert diagnose(healthy(wake_up_queue=both)) == []


def test_an_override_out_of_its_range() -> None:
    config = QueueConfig(queue="orders", esm_uuid=UUID, overrides={"min_samples": 1e6})
    problem = policy_problem(PolicyParams(), config)
    assert "min_samples must be in" in problem
    # The controller's defaults when its environment cannot be read.
    assert policy_problem(None, config) == problem
    assert policy_problem(PolicyParams(), QueueConfig(queue="orders", esm_uuid=UUID)) == ""
    report = healthy(queues=(healthy_queue(config=config, policy_problem=problem),))
    [finding] = [f for f in diagnose(report) if f.severity is Severity.PROBLEM]
    assert problem in finding.problem and "ConfigsInvalid" in finding.problem
    assert f"queuemesh register orders --esm {UUID}" in finding.fix


def paused_state(**changes: Any) -> QueueState:
    base = QueueState(
        queue="orders",
        esm_uuid=UUID,
        state=QueueStateName.CRITICAL_BACKOFF,
        concurrency=2,
        previous_concurrency=4,
        enabled=False,
        wake_at=1500.0,
        version=4,
        last_evaluated_at=1000.0,
    )
    return dataclasses.replace(base, **changes)


def stored_item(enabled: bool, wake_at: float, layout: str) -> dict[str, Any]:
    """A STATE item as one controller version or another stored it: ``current`` (with
    ``PausedSince``), ``indexed`` (before it), ``flat`` (guards inside Memory, no index)."""
    item = encode_state(paused_state(enabled=enabled, wake_at=wake_at))
    if layout == "current":
        return item
    del item["PausedSince"]
    if layout == "indexed":
        return item
    guards = {
        name: item.pop(attr) for name, attr in [("enabled", "Enabled"), ("wake_at", "WakeAt")]
    }
    for attribute in ("LastChangeAt", "HoldUntil"):
        del item[attribute]
    item.pop("WakeUp", None)
    item["Memory"] = {"last_change_at": Decimal(900), "hold_until": Decimal(0), **guards}
    return item


@given(
    enabled=st.booleans(),
    wake_at=st.sampled_from([0.0, 500.0, 1500.0]),
    layout=st.sampled_from(["current", "indexed", "flat"]),
    without_wake_up=st.booleans(),
)
def test_the_doctor_flags_exactly_what_the_ledgers_sweep_repairs(
    enabled: bool, wake_at: float, layout: str, without_wake_up: bool
) -> None:
    item = stored_item(enabled, wake_at, layout)
    if without_wake_up:
        item.pop("WakeUp", None)
    facts = state_facts(item, now=1000.0)
    assert facts.paused is not enabled
    ledger = InMemoryLedger(memory_types=memory_type)
    ledger.put_item(item)
    repaired = [state.queue for state in ledger.sweep_wake_ups(1000.0).woken]
    assert facts.needs_wake_up == (repaired == ["orders"])
    # Only an item from before PausedSince, paused and without WakeUp, is repaired.
    stuck = layout != "current" and not enabled and "WakeUp" not in item
    assert facts.needs_wake_up == stuck


def test_the_filter_pattern_is_the_templates_one_including_for_each() -> None:
    def filter_resource(pattern: str) -> dict[str, Any]:
        return {"Type": "AWS::Logs::SubscriptionFilter", "Properties": {"FilterPattern": pattern}}

    template = {
        "Resources": {
            "A": filter_resource(PATTERN),
            "Fn::ForEach::Groups": ["G", ["x"], {"B&{G}": filter_resource(PATTERN)}],
        }
    }
    assert template_filter_pattern(template) == PATTERN
    template["Resources"]["C"] = filter_resource("")
    with pytest.raises(CliError, match="share one FilterPattern"):
        template_filter_pattern(template)


def test_a_stack_functions_log_group_comes_from_its_template() -> None:
    template = {
        "Resources": {
            "Worker": {"Properties": {"LoggingConfig": {"LogGroup": {"Ref": "WorkerLogs"}}}},
            "Other": {"Properties": {}},
        }
    }
    stack = StackFacts(
        name="s", region="us-east-1", physical={"Worker": "fn-1", "WorkerLogs": "/g/1"}
    )
    assert template_log_group(template, stack, "fn-1") == "/g/1"
    assert template_log_group(template, stack, "fn-elsewhere") is None
