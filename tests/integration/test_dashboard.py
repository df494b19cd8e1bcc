"""`queuemesh dashboard`: the template's body for a stack, SEARCH evaluation, the command."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from controller.ledger import DynamoLedger
from controller.model import GroupReport, GroupShare
from controller.policy import memory_type
from controller.schema import CONTROLLER_SKIPPED, GroupMetric
from stack.cli import main
from stack.local.dashboard import NO_GROUP_NOTE, NOTHING_SKIPPED_NOTE, empty_note
from stack.local.deployment import Deployment
from stack.local.emulator import DEFAULT_TEMPLATE, EmbeddedAws
from stack.local.metrics import EmfMetricsPublisher
from stack.local.template import load_template
from stack.local.widgets import (
    DashboardError,
    MetricLine,
    MetricsReader,
    Search,
    StackFacts,
    dashboard_body,
    dashboard_name,
    parse_search,
    parse_widgets,
    valid_period,
)
from tests.paths import ROOT

REPO_ROOT = ROOT
STACK = StackFacts(
    name="prod",
    region="eu-west-1",
    account_id="111122223333",
    physical={
        "ControllerFunction": "prod-ControllerFunction-ABC",
        "ExampleDeadLetterQueue": "https://sqs.eu-west-1.amazonaws.com/111122223333/prod-dlq",
        "ControllerFailureQueue": "https://sqs.eu-west-1.amazonaws.com/111122223333/prod-fail",
    },
)


# -- the body, for one stack -----------------------------------------------------------------


def test_the_body_is_the_templates_with_the_stacks_names() -> None:
    template = load_template(DEFAULT_TEMPLATE)
    body = dashboard_body(template, STACK)
    widgets = parse_widgets(body)
    assert dashboard_name(template, STACK) == "prod-queuemesh"
    assert {widget["properties"]["region"] for widget in body["widgets"]} == {"eu-west-1"}
    lines = [q for w in widgets for q in w.queries if isinstance(q, MetricLine)]
    assert (
        MetricLine(
            "AWS/Lambda", "Errors", (("FunctionName", "prod-ControllerFunction-ABC"),), "Sum", 60
        )
        in lines
    )
    dead_letters = {q.dimensions for q in lines if q.metric.startswith("Approximate")}
    assert dead_letters == {(("QueueName", "prod-dlq"),), (("QueueName", "prod-fail"),)}
    [concurrency] = [w for w in widgets if w.title.startswith("MaximumConcurrency")]
    assert concurrency.queries == (
        Search("QueueMeshController", ("QueueName",), "MaximumConcurrency", "Maximum", 60),
    )


def test_empty_widgets_say_why_where_emptiness_has_one_meaning() -> None:
    widgets = parse_widgets(dashboard_body(load_template(DEFAULT_TEMPLATE), STACK))
    alone = {w.title: empty_note(w, groups_reported=False) for w in widgets}
    grouped = {w.title: empty_note(w, groups_reported=True) for w in widgets}
    # The group widgets (every group metric among them, no other metric) while no group is
    # reported, and the skips widget; every other widget says "No data available." instead.
    explained = [w for w in widgets if alone[w.title] == NO_GROUP_NOTE]
    assert len(explained) == 2
    assert {query.metric for w in explained for query in w.queries} == set(GroupMetric)
    [skips] = [w for w in widgets if alone[w.title] == NOTHING_SKIPPED_NOTE]
    assert {query.metric for query in skips.queries} == {CONTROLLER_SKIPPED}
    assert sorted(note for note in alone.values() if note) == sorted(
        [NO_GROUP_NOTE, NO_GROUP_NOTE, NOTHING_SKIPPED_NOTE]
    )
    assert [note for note in grouped.values() if note] == [NOTHING_SKIPPED_NOTE]


def test_sub_variables_the_stack_lacks_are_named() -> None:
    template = load_template(DEFAULT_TEMPLATE)
    with pytest.raises(DashboardError, match="ControllerFunction"):
        dashboard_body(template, StackFacts(name="prod", region="eu-west-1"))
    with pytest.raises(DashboardError, match="one AWS::CloudWatch::Dashboard"):
        dashboard_body({"Resources": {}}, STACK)


def test_the_search_subset() -> None:
    assert parse_search(
        """SEARCH('{QueueMesh,QueueName,Downstream} MetricName="Downstream429"', 'Sum', 60)"""
    ) == Search("QueueMesh", ("QueueName", "Downstream"), "Downstream429", "Sum", 60)
    assert parse_search("""SEARCH('{"AWS/Lambda"} MetricName="Errors"', 'p99', 300)""") == (
        Search("AWS/Lambda", (), "Errors", "p99", 300)
    )
    for unsupported in (
        "SEARCH('Namespace=\"QueueMesh\" Downstream429', 'Sum', 60)",
        "SEARCH('{QueueMesh,QueueName} MetricName=\"X\"', 'Sum')",
        "SUM(METRICS())",
        "SEARCH('{,QueueName} MetricName=\"X\"', 'Sum', 60)",
    ):
        with pytest.raises(DashboardError, match=r"unsupported|empty name"):
            parse_search(unsupported)


def test_getmetricdata_periods() -> None:
    assert [p for p in range(1, 200) if valid_period(p)] == [1, 5, 10, 30, 60, 120, 180]


# -- SEARCH evaluated against CloudWatch (the local stack's) ----------------------------------


@pytest.fixture(scope="module")
def aws() -> Iterator[EmbeddedAws]:
    with EmbeddedAws() as emulator:
        yield emulator


def emf(namespace: str, stamp_s: float, dimensions: dict[str, str], **values: Any) -> str:
    return json.dumps(
        {
            "_aws": {
                "Timestamp": int(stamp_s * 1000),
                "CloudWatchMetrics": [
                    {
                        "Namespace": namespace,
                        "Dimensions": [list(dimensions)],
                        "Metrics": [{"Name": name} for name in values],
                    }
                ],
            },
            **dimensions,
            **values,
        }
    )


def test_search_finds_exactly_its_schema_one_line_per_queue(aws: EmbeddedAws) -> None:
    now = time.time() // 60 * 60 - 600
    EmfMetricsPublisher(aws.client("cloudwatch")).publish(
        [
            emf("SearchTest", now + 1, {"QueueName": "orders"}, Depth=10),
            emf("SearchTest", now + 2, {"QueueName": "orders"}, Depth=30),
            emf("SearchTest", now + 61, {"QueueName": "orders"}, Depth=5),
            emf("SearchTest", now + 3, {"QueueName": "billing"}, Depth=7),
            # Another schema: a SEARCH for {SearchTest,QueueName} does not match it.
            emf("SearchTest", now + 4, {"QueueName": "orders", "Host": "a"}, Depth=99),
            emf("SearchTest", now + 5, {"QueueName": "orders"}, Other=1),
        ]
    )
    search = parse_search("""SEARCH('{SearchTest,QueueName} MetricName="Depth"', 'Maximum', 60)""")
    reader = MetricsReader(aws.client("cloudwatch"))
    assert reader.found(search) == [(("QueueName", "billing"),), (("QueueName", "orders"),)]
    widgets = parse_widgets(
        {
            "widgets": [
                {
                    "type": "metric",
                    "properties": {
                        "title": "depth",
                        "metrics": [
                            [{"expression": search_expression(search)}],
                            [
                                "SearchTest",
                                "Depth",
                                "QueueName",
                                "orders",
                                "Host",
                                "a",
                                {"label": "host a"},
                            ],
                        ],
                    },
                }
            ]
        }
    )
    [lines] = reader.series(widgets, now, now + 180, period_override=None)
    assert [(line.label, line.timestamps, line.values) for line in lines] == [
        ("billing", [now], [7.0]),
        ("orders", [now, now + 60], [30.0, 5.0]),
        ("host a", [now], [99.0]),
    ]
    [overridden] = reader.series(widgets, now, now + 180, period_override=120)
    assert overridden[1].values == [30.0]


def search_expression(search: Search) -> str:
    schema = ",".join([search.namespace, *search.dimensions])
    return (
        f"SEARCH('{{{schema}}} MetricName=\"{search.metric}\"', '{search.stat}', {search.period_s})"
    )


# -- the command ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deployment(aws: EmbeddedAws) -> Deployment:
    return aws.deploy(parameters={"ExampleDownstreamUrl": "http://127.0.0.1:9/"})


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--port", "http"], "--port must be 0..65535"),
        (["--period", "7"], "--period must be 1, 5, 10, 30 or a multiple of 60"),
        (["--refresh", "0"], "--refresh must be 1..3600"),
        (["--since", "soon"], "--since 'soon' is neither ISO-8601"),
        (["--stack-name", "nope"], "stack 'nope' not found at http://127.0.0.1:"),
        (["--template", "missing.yaml"], "cannot read the dashboard of missing.yaml"),
    ],
)
def test_bad_input_is_one_line_and_status_2(
    aws: EmbeddedAws,
    deployment: Deployment,
    capsys: pytest.CaptureFixture[str],
    arguments: list[str],
    message: str,
) -> None:
    base = ["dashboard", "--endpoint-url", aws.endpoint, "--stack-name", deployment.stack_name]
    assert main([*base, *arguments]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("queuemesh dashboard: error: ")
    assert message in line


def test_the_url_comes_first_and_the_page_shows_the_stack(
    aws: EmbeddedAws, deployment: Deployment
) -> None:
    queue = deployment.queues[0].name
    aws.register_queue(deployment, queue)
    ledger = DynamoLedger(deployment.table_name, aws.client("dynamodb"), memory_types=memory_type)
    members = (GroupShare(queue, 12.5, 3), GroupShare("elsewhere", 0.0, 2, paused=True))
    ledger.put_group_report(GroupReport("payments", 1_790_000_000.0, None, members))
    EmfMetricsPublisher(aws.client("cloudwatch")).publish(
        [
            emf(
                "QueueMeshController",
                time.time() - 30,
                {"QueueName": deployment.queues[0].name},
                MaximumConcurrency=40,
            )
        ]
    )
    environment = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    environment.pop("QUEUEMESH_TABLE", None)
    command = [sys.executable, "-m", "stack.cli", "dashboard", "--endpoint-url", aws.endpoint]
    command += ["--stack-name", deployment.stack_name, "--port", "0", "--since", "10m"]
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=environment, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/")
        with urllib.request.urlopen(url, timeout=10) as answer:
            page = answer.read().decode()
        # Nothing loaded from elsewhere: the machine may have no network.
        assert re.findall(r"(?:src|href)=\"([^\"]*)\"", page) == ["data:,"]
        with urllib.request.urlopen(f"{url}api/dashboard", timeout=30) as answer:
            data: dict[str, Any] = json.load(answer)
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 0
    assert data["name"] == f"{deployment.stack_name}-queuemesh"
    assert data["ledger"]["table"] == deployment.table_name  # the stack's output
    assert [q["queue"] for q in data["ledger"]["queues"]] == [queue]
    # The group the queue is in, as its last report has it.
    assert data["ledger"]["groups"] == [
        {
            "group": "payments",
            "capacity_rps": None,
            "decided_at": "2026-09-21T14:13:20Z",
            "members": [
                {"queue": queue, "share_rps": 12.5, "level": 3, "paused_to_share": False},
                {"queue": "elsewhere", "share_rps": 0.0, "level": 2, "paused_to_share": True},
            ],
        }
    ]
    # A group is reported: its widgets are no longer explained away; nothing was skipped.
    notes = {widget["title"]: widget["empty_note"] for widget in data["widgets"]}
    assert [note for note in notes.values() if note] == [NOTHING_SKIPPED_NOTE]
    [concurrency] = [w for w in data["widgets"] if w["title"].startswith("MaximumConcurrency")]
    [line] = concurrency["series"]
    assert (line["label"], line["values"]) == (deployment.queues[0].name, [40.0])
    assert data["errors"] == []
