"""The dashboard in a real browser, during a short demo run: what a person would check."""

from __future__ import annotations

import io
import json
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from controller.ledger import DynamoLedger
from controller.policy import memory_type
from controller.schema import CONTROLLER_NAMESPACE, GroupMetric
from load.sim.scenario import load_scenario
from stack.local.dashboard import NO_GROUP_NOTE
from stack.local.demo.run import run_demo
from stack.local.demo.view import LiveView
from stack.local.deployment import Deployment
from stack.local.emulator import DEFAULT_TEMPLATE, EmbeddedAws
from stack.local.template import load_template
from stack.local.widgets import StackFacts, dashboard_body
from tests.chromium import Chromium
from tests.paths import ROOT

REPO_ROOT = ROOT
# A git-ignored place where the last run's screenshot stays for people (and CI) to look at.
SCREENSHOT = REPO_ROOT / "out" / "dashboard-browser-test.png"
CONCURRENCY_WIDGET = "MaximumConcurrency per managed queue"
SKIPS_WIDGET = "Controller skips by reason (telemetry, samples, queues not decided in time)"
# What the run puts on the telemetry stream besides the workers' documents: a record that is
# not CloudWatch Logs' gzip, which the reducer skips (bad_gzip) and reports by reason.
POISON = b"not a CloudWatch Logs subscription payload"
# The demo's one queue is its downstream's only one: these widgets have data only where the
# controller reports such a group (GroupMetric); until then they alone may be empty, and say
# why (the page's NO_GROUP_NOTE where CloudWatch says "No data available").
GROUP_WIDGETS = (
    "Groups: each downstream's capacity estimate and each queue's share (calls/s)",
    "Queues paused to share their group's downstream (1: paused)",
)
# Beside it, SQS's own metrics of the queue (the local runtime publishes them as AWS does).
BACKLOG_WIDGETS = (
    "Backlog (messages visible) per queue",
    "Age of the oldest message (s) per queue",
)
SCENARIO = {
    "name": "dashboard-test",
    "duration_s": 30,
    "seed": 1,
    "telemetry_delay_s": [1, 2],
    "downstreams": [
        {"name": "payments", "capacity_rps": [[0, 100], [6, 25], [18, 100]], "latency_ms": 200}
    ],
    "queues": [
        {
            "name": "orders",
            "downstream": "payments",
            "backlog": 300,
            "arrivals_rps": [[0, 30], [26, 0]],
            "batch_size": 10,
            "visibility_timeout_s": 10,
            "max_receive_count": 5,
            "max_concurrency": 12,
            "min_concurrency": 2,
        }
    ],
}
PAGE_LINES = """JSON.stringify([...document.querySelectorAll('.widget')].map(w => ({
  title: w.dataset.title,
  lines: [...w.querySelectorAll('polyline.series')].map(p => ({
    label: p.dataset.label, namespace: p.dataset.namespace, metric: p.dataset.metric,
    stat: p.dataset.stat, period: Number(p.dataset.period),
    dimensions: JSON.parse(p.dataset.dimensions),
    timestamps: p.dataset.timestamps ? p.dataset.timestamps.split(',').map(Number) : [],
    values: p.dataset.values ? p.dataset.values.split(',').map(Number) : []})),
  start: Number((w.querySelector('svg') || {dataset: {}}).dataset.start || 0),
  end: Number((w.querySelector('svg') || {dataset: {}}).dataset.end || 0)})))"""
# What each widget says in place of a chart (empty where it draws one).
EMPTY_TEXTS = """JSON.stringify(Object.fromEntries([...document.querySelectorAll('.widget')].map(
  w => [w.dataset.title, (w.querySelector('.empty') || {}).textContent || ""])))"""
LEDGER_ROWS = """JSON.stringify({
  queues: [...document.querySelectorAll('#queues tbody tr')].map(r =>
    [...r.children].map(c => c.textContent)),
  groups: [...document.querySelectorAll('#groups table')].map(t => ({group: t.dataset.group,
    members: [...t.querySelectorAll('tbody tr')].map(r => r.dataset.queue)})),
  transitions: [...document.querySelectorAll('#transitions tbody tr[data-queue]')].map(r =>
    ({queue: r.dataset.queue, change: r.children[1].textContent,
      reason: r.children[2].textContent}))})"""


def client_at(service: str, endpoint: str) -> Any:
    """A client of the embedded AWS."""
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def metric_data(endpoint: str, line: dict[str, Any], start: float, end: float) -> list[Any]:
    """GetMetricData for one of the page's lines, asked directly."""
    cloudwatch = client_at("cloudwatch", endpoint)
    answer = cloudwatch.get_metric_data(
        MetricDataQueries=[
            {
                "Id": "direct",
                "MetricStat": {
                    "Metric": {
                        "Namespace": line["namespace"],
                        "MetricName": line["metric"],
                        "Dimensions": [
                            {"Name": k, "Value": v} for k, v in line["dimensions"].items()
                        ],
                    },
                    "Period": line["period"],
                    "Stat": line["stat"],
                },
            }
        ],
        StartTime=datetime.fromtimestamp(start, UTC),
        EndTime=datetime.fromtimestamp(end, UTC),
        ScanBy="TimestampAscending",
    )
    [result] = answer["MetricDataResults"]
    return [
        [stamp.timestamp(), value]
        for stamp, value in zip(result["Timestamps"], result["Values"], strict=True)
    ]


def drawn_values(widget: dict[str, Any]) -> int:
    return sum(len(line["values"]) for line in widget["lines"])


@pytest.mark.timeout(240)
def test_the_demo_dashboard_in_headless_chromium(tmp_path: Path) -> None:
    scenario_file = tmp_path / "scenario.json"
    scenario_file.write_text(json.dumps(SCENARIO))
    view = LiveView(io.StringIO(), live=False)
    finished = threading.Event()
    release = threading.Event()
    results: list[dict[str, Any]] = []
    failures: list[BaseException] = []

    def hold(result: dict[str, Any]) -> None:
        results.append(result)
        finished.set()
        release.wait(timeout=120)

    poisoned: list[str] = []

    def poison(aws: EmbeddedAws, deployment: Deployment) -> None:
        answer = aws.client("kinesis").put_record(
            StreamName=deployment.stream_name, Data=POISON, PartitionKey="poison"
        )
        poisoned.append(answer["SequenceNumber"])

    def demo() -> None:
        try:
            run_demo(
                load_scenario(str(scenario_file)),
                SCENARIO["duration_s"],
                5.0,
                view=view,
                dashboard=True,
                on_result=hold,
                on_running=poison,
            )
        except BaseException as error:
            failures.append(error)
            finished.set()

    runner = threading.Thread(target=demo, name="demo-under-test")
    runner.start()
    browser: Chromium | None = None
    try:
        deadline = time.monotonic() + 90
        while view.dashboard is None and runner.is_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert view.dashboard is not None, failures
        assert view.dashboard.startswith("http://127.0.0.1:")
        browser = Chromium(tmp_path / "chromium-profile", width=1700, height=1400)
        browser.navigate(view.dashboard)
        # The page renders while the demo runs: the template's widgets, the ledger's queue.
        browser.wait_for("Number(document.body.dataset.generated) > 0", 30)
        titles = browser.evaluate(
            "[...document.querySelectorAll('.widget')].map(w => w.dataset.title)"
        )
        assert finished.wait(timeout=150), "the demo did not finish"
        assert not failures, failures
        [result] = results
        queue = result["queue"]
        # Live refresh: a rendering of data read after the run ended.
        browser.wait_for(f"Number(document.body.dataset.generated) > {time.time()}", 30)

        endpoint = result["aws"]
        cloudformation = client_at("cloudformation", endpoint)
        [stack] = cloudformation.describe_stacks()["Stacks"]
        body = dashboard_body(
            load_template(DEFAULT_TEMPLATE), StackFacts.read(cloudformation, stack["StackName"])
        )
        assert titles == [widget["properties"]["title"] for widget in body["widgets"]]

        widgets = {widget["title"]: widget for widget in json.loads(browser.evaluate(PAGE_LINES))}
        concurrency = widgets[CONCURRENCY_WIDGET]["lines"]
        assert [line["label"] for line in concurrency] == [queue]
        assert concurrency[0]["values"], "no MaximumConcurrency drawn"
        empty = [title for title, widget in widgets.items() if not drawn_values(widget)]
        # The poison record put on the telemetry stream during the run is skipped: the skips
        # widget draws it. The group widgets alone may be empty, and only while the
        # controller reported no group at all.
        assert poisoned, "no poison record was put during the run"
        skipped = {line["dimensions"]["Reason"] for line in widgets[SKIPS_WIDGET]["lines"]}
        assert "bad_gzip" in skipped, skipped
        groups = client_at("cloudwatch", endpoint).list_metrics(
            Namespace=CONTROLLER_NAMESPACE, MetricName=GroupMetric.SHARE
        )["Metrics"]
        assert empty == ([] if groups else list(GROUP_WIDGETS)), "widgets without data"
        said = json.loads(browser.evaluate(EMPTY_TEXTS))
        assert {title: said[title] for title in empty} == dict.fromkeys(empty, NO_GROUP_NOTE)
        backlog, oldest = (
            next(line for line in widgets[title]["lines"] if line["label"] == queue)
            for title in BACKLOG_WIDGETS
        )
        assert max(backlog["values"]) > 0, "the demo's backlog never drawn above 0"
        assert max(oldest["values"]) > 0, "the demo's oldest message never drawn aged"
        drawn = 0
        for widget in widgets.values():
            for line in widget["lines"]:
                direct = metric_data(endpoint, line, widget["start"], widget["end"])
                pairs = zip(line["timestamps"], line["values"], strict=True)
                assert [list(pair) for pair in pairs] == direct
                drawn += len(direct)
        assert drawn > len(concurrency[0]["values"])

        ledger = json.loads(browser.evaluate(LEDGER_ROWS))
        assert [row[:3] for row in ledger["queues"]] == [
            [queue, "ACTIVE", result["ledger"]["orders"]["state"]]
        ]
        # Each group's last report, as the ledger holds it (none while no group is reported).
        [table] = [
            o["OutputValue"] for o in stack["Outputs"] if o["OutputKey"] == "LedgerTableName"
        ]
        stored = DynamoLedger(
            table, client_at("dynamodb", endpoint), memory_types=memory_type
        ).group_reports()
        assert ledger["groups"] == [
            {"group": report.group, "members": [m.queue for m in report.members]}
            for report in stored
        ]
        transitions = result["transitions"]
        assert transitions, "the demo made no transition"
        assert (
            ledger["transitions"]
            == [
                {
                    "queue": queue,
                    "change": f"{entry['previous']} → {entry['target']}",
                    "reason": entry["reason"],
                }
                for entry in reversed(transitions)
            ][:30]
        )

        assert browser.console_errors() == []
        shot = browser.screenshot(SCREENSHOT)
        assert shot.read_bytes().startswith(b"\x89PNG")
    finally:
        if browser is not None:
            browser.close()
        release.set()
        runner.join(timeout=60)
    assert not runner.is_alive()
