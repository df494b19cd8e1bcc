"""The template's alarms on the controller's own health, held against what the controller
really emits: each alarm's namespace, metric and dimensions are a metric of the controller's
health document, named by the controller's code (not by literals here)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller.actuator import InMemoryActuator
from controller.app import HEALTH_COUNTERS, ControllerApp
from controller.book import Count
from controller.ledger import InMemoryLedger, encode_state
from controller.loop import ControlLoop
from controller.model import QueueStateName
from controller.policy import algorithm_named, memory_type
from controller.policy.adaptive import AdaptiveMemory
from controller.schema import CONTROLLER_NAMESPACE, HealthMetric
from controller.settings import PolicyParams
from stack.local.template import load_template
from tests.factories import config, health_count, state
from tests.integration.test_metrics import controller_output, emitted_metrics
from tests.integration.test_wakeups import SCHEDULED
from tests.paths import ROOT

TEMPLATE = ROOT / "template.yaml"
RUNBOOK = ROOT / "docs" / "operations.md"


def metric_of(counter: Count) -> str:
    """The health metric that reports the loop's count ``counter``."""
    [metric] = [metric for metric, counted in HEALTH_COUNTERS.items() if counter in counted]
    return metric


# What an on-call engineer is paged for: telemetry the controller could not read, mapping
# updates it gave up on, CONFIG items it cannot use, transitions that did not reach the event
# bus, backlogs it cannot read, groups' reports and memories the ledger does not take or
# give, wake-ups the wake-up queue does not take (pauses end late), and a queue paused longer
# than a threshold.
PAGED = {
    HealthMetric.TELEMETRY_UNREADABLE,
    metric_of(Count.ACTUATION_FAILURES),
    metric_of(Count.CONFIGS_INVALID),
    HealthMetric.EVENTS_UNPUBLISHED,
    metric_of(Count.BACKLOG_READ_FAILURES),
    metric_of(Count.GROUP_REPORTS_UNWRITTEN),
    metric_of(Count.GROUP_MEMORIES_UNSTORED),
    metric_of(Count.WAKE_UPS_UNSCHEDULED),
    HealthMetric.LONGEST_PAUSE,
}
# The alarm on a gauge, not a count: the longest pause reported in five minutes.
GAUGES = {HealthMetric.LONGEST_PAUSE}
NOW = 1_790_000_000.0


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template(TEMPLATE)


def alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every alarm's properties by logical id (``Fn::ForEach`` entries are lists: skipped)."""
    return {
        logical: spec["Properties"]
        for logical, spec in template["Resources"].items()
        if isinstance(spec, dict) and spec.get("Type") == "AWS::CloudWatch::Alarm"
    }


def controller_alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        logical: alarm
        for logical, alarm in alarms(template).items()
        if alarm["Namespace"] == CONTROLLER_NAMESPACE
    }


def test_each_paged_health_metric_has_one_alarm(template: dict[str, Any]) -> None:
    watched = sorted(a["MetricName"] for a in controller_alarms(template).values())
    assert watched == sorted(PAGED)


def test_every_alarm_watches_a_metric_the_controller_emits_with_its_dimensions(
    template: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    emitted = emitted_metrics(controller_output(monkeypatch))
    for logical, alarm in controller_alarms(template).items():
        dimensions = frozenset(d["Name"] for d in alarm["Dimensions"])
        watched = (alarm["Namespace"], alarm["MetricName"], dimensions)
        assert watched in emitted, (logical, watched)


def test_alarms_count_over_five_minutes_and_treat_no_document_as_zero(
    template: dict[str, Any],
) -> None:
    parameters = template["Parameters"]
    for alarm in controller_alarms(template).values():
        # The health document is emitted only when something was counted.
        assert alarm["TreatMissingData"] == "notBreaching"
        statistic = "Maximum" if alarm["MetricName"] in GAUGES else "Sum"
        assert (alarm["Statistic"], alarm["Period"]) == (statistic, 300)
        assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        threshold = alarm["Threshold"]
        if isinstance(threshold, dict):
            parameter = parameters[threshold["Ref"]]
            assert parameter["Type"] == "Number" and parameter["MinValue"] >= 1
            assert parameter["Default"] >= parameter["MinValue"]
        else:
            assert threshold >= 1
        operators_or_own = {
            "Fn::If": ["HasAlarmTopicArn", {"Ref": "AlarmTopicArn"}, {"Ref": "AlertTopic"}]
        }
        topic = {"Fn::If": ["HasAlarmTopic", [operators_or_own], {"Ref": "AWS::NoValue"}]}
        assert alarm["AlarmActions"] == alarm["OKActions"] == topic


def test_a_count_alarm_past_its_first_occurrence_fires_at_the_operators_threshold(
    template: dict[str, Any],
) -> None:
    # An alarm at 1 fires on any occurrence; a higher threshold is a judgement about noise,
    # so it is a parameter the operator can move, shown in the Alarms group with its default
    # in the runbook.
    interface = template["Metadata"]["AWS::CloudFormation::Interface"]
    [group] = [g for g in interface["ParameterGroups"] if g["Label"]["default"] == "Alarms"]
    runbook = RUNBOOK.read_text(encoding="utf-8")
    parameters = template["Parameters"]
    tunable = {}
    for logical, alarm in controller_alarms(template).items():
        threshold = alarm["Threshold"]
        if not isinstance(threshold, dict):
            assert threshold == 1, (logical, threshold)
            continue
        name = threshold["Ref"]
        tunable[alarm["MetricName"]] = parameters[name]["Default"]
        assert name in group["Parameters"], name
        assert f"`{name}` (default {parameters[name]['Default']})" in runbook, name
    assert tunable == {
        HealthMetric.TELEMETRY_UNREADABLE: 10,
        metric_of(Count.ACTUATION_FAILURES): 3,
        metric_of(Count.BACKLOG_READ_FAILURES): 5,
        metric_of(Count.GROUP_REPORTS_UNWRITTEN): 3,
        metric_of(Count.GROUP_MEMORIES_UNSTORED): 5,
        metric_of(Count.WAKE_UPS_UNSCHEDULED): 5,
        HealthMetric.LONGEST_PAUSE: 1800,
    }


def test_every_alarm_has_a_runbook_entry(template: dict[str, Any]) -> None:
    runbook = RUNBOOK.read_text(encoding="utf-8").split("## Alarms: the runbook", 1)[1]
    assert len(alarms(template)) == 13
    for logical in alarms(template):
        assert f"| `{logical}` |" in runbook, logical
    for metric in PAGED:
        assert f"`{metric}`" in runbook


def paused_queue_app(paused_since: float, emitted: list[str]) -> ControllerApp:
    """A controller whose ledger holds ``orders`` paused since ``paused_since``, its wake-up
    due now."""
    actuator = InMemoryActuator()
    actuator.add_mapping("esm-orders", 2, enabled=False)
    ledger = InMemoryLedger(memory_types=memory_type)
    ledger.put_config(config("orders"))
    paused = state(2, QueueStateName.CRITICAL_BACKOFF).evolve(
        previous_concurrency=4,
        last_evaluated_at=NOW - 60.0,
        enabled=False,
        wake_at=NOW - 1.0,
        paused_since=paused_since,
        algorithm="adaptive",
        memory=AdaptiveMemory(paused_until=NOW - 1.0, pause_s=60.0),
    )
    ledger.put_item(encode_state(paused))
    loop = ControlLoop(ledger, actuator, PolicyParams(), algorithm=algorithm_named("adaptive"))
    return ControllerApp(loop, clock=lambda: NOW, emit=emitted.append)


def longest_pause(emitted: list[str]) -> float:
    documents = [json.loads(line) for line in emitted]
    return max(health_count([d], HealthMetric.LONGEST_PAUSE) for d in documents)


def test_a_queue_paused_past_the_default_threshold_trips_its_alarm(
    template: dict[str, Any],
) -> None:
    [alarm] = [
        a
        for a in controller_alarms(template).values()
        if a["MetricName"] == HealthMetric.LONGEST_PAUSE
    ]
    threshold = float(template["Parameters"][alarm["Threshold"]["Ref"]]["Default"])
    # Its wake-up tests the floor (the mapping enabled for a pulse): still the same pause.
    emitted: list[str] = []
    paused_queue_app(NOW - threshold - 30.0, emitted).handle(SCHEDULED, None)
    assert longest_pause(emitted) == threshold + 30.0
    emitted.clear()
    paused_queue_app(NOW - threshold + 120.0, emitted).handle(SCHEDULED, None)
    assert longest_pause(emitted) == threshold - 120.0 < threshold
