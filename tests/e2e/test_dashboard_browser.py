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
from load.sim.scenario import load_scenario
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
# The two queues call one downstream, so the controller decides them as a group and reports
# it (GroupMetric): these widgets draw it, as every other widget draws its data.
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
        },
        {
            "name": "refunds",
            "downstream": "payments",
            "backlog": 20,
            "arrivals_rps": [[0, 2], [26, 0]],
            "batch_size": 5,
            "visibility_timeout_s": 10,
            "max_receive_count": 5,
            "max_concurrency": 2,
            "min_concurrency": 2,
        },
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
      kind: r.children[1].className, reason: r.children[2].textContent}))})"""


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
        sqs_queues = result["sqs_queues"]
        queue = sqs_queues["orders"]
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
        assert sorted(line["label"] for line in concurrency) == sorted(sqs_queues.values())
        assert all(line["values"] for line in concurrency), "a MaximumConcurrency not drawn"
        # Every widget draws data: the poison record put on the telemetry stream during the
        # run is skipped (the skips widget draws it), and the two queues on one downstream are
        # decided as a group (the group widgets draw each one's share).
        assert poisoned, "no poison record was put during the run"
        skipped = {line["dimensions"]["Reason"] for line in widgets[SKIPS_WIDGET]["lines"]}
        assert "bad_gzip" in skipped, skipped
        empty = [title for title, widget in widgets.items() if not drawn_values(widget)]
        assert empty == [], "widgets without data"
        said = json.loads(browser.evaluate(EMPTY_TEXTS))
        assert [title for title, text in said.items() if text] == []
        for title in GROUP_WIDGETS:
            members = {line["dimensions"].get("QueueName") for line in widgets[title]["lines"]}
            assert set(sqs_queues.values()) <= members, (title, members)
        for title in BACKLOG_WIDGETS:
            lines = {line["label"]: line for line in widgets[title]["lines"]}
            assert max(lines[queue]["values"]) > 0, f"the demo's orders never drawn in {title}"
            assert sqs_queues["refunds"] in lines, f"refunds not drawn in {title}"
        drawn = 0
        for widget in widgets.values():
            for line in widget["lines"]:
                direct = metric_data(endpoint, line, widget["start"], widget["end"])
                pairs = zip(line["timestamps"], line["values"], strict=True)
                assert [list(pair) for pair in pairs] == direct
                drawn += len(direct)
        assert drawn > len(concurrency[0]["values"])

        ledger = json.loads(browser.evaluate(LEDGER_ROWS))
        # A queue the controller has not decided yet (the small one may not be, in 30 s) is
        # listed with no state.
        assert sorted(row[:3] for row in ledger["queues"]) == sorted(
            [sqs_queues[name], "ACTIVE", state["state"] if state else "-"]
            for name, state in result["ledger"].items()
        )
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
        assert ledger["groups"], "no group reported"
        transitions = [entry for entry in result["transitions"] if entry["queue"] == "orders"]
        assert transitions, "the demo made no transition"
        # A cut is drawn as one, a probe's end (lower too) is not.
        kinds = {"MULTIPLICATIVE_DECREASE": "cut", "ADDITIVE_INCREASE": "rise"}
        assert [row for row in ledger["transitions"] if row["queue"] == queue] == [
            {
                "queue": queue,
                "change": f"{entry['previous']} → {entry['target']}",
                "kind": "probe-end"
                if entry["action"] == "PROBE_END"
                else kinds.get(entry["action"], ""),
                "reason": entry["reason"],
            }
            for entry in reversed(transitions)
        ][:30]

        assert browser.console_errors() == []
        shot = browser.screenshot(SCREENSHOT)
        assert shot.read_bytes().startswith(b"\x89PNG")
    finally:
        if browser is not None:
            browser.close()
        release.set()
        runner.join(timeout=60)
    assert not runner.is_alive()
