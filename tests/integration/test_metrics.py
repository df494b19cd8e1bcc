"""EMF -> CloudWatch metrics on the local stack, and the template's dashboard held against the
metrics the controller and the worker really emit."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.events import EventOutbox, InMemoryEventBus
from controller.executor import AwsExecutor
from controller.ledger import InMemoryLedger
from controller.loop import ControlLoop
from controller.policy import memory_type
from controller.policy.aimd import Aimd
from controller.schema import (
    CONTROLLER_NAMESPACE,
    CONTROLLER_REASON_DIMENSION,
    CONTROLLER_SKIPPED,
    NAMESPACE,
    HealthMetric,
)
from controller.settings import PolicyParams
from stack.local.emulator import DEFAULT_TEMPLATE, EmbeddedAws
from stack.local.metrics import EmfMetricsPublisher, InvalidDocument, extract
from stack.local.template import load_template
from stack.local.widgets import MetricLine, Search, StackFacts, dashboard_body, parse_widgets
from tests.factories import config, kinesis_event, sample
from tests.paths import EVENTS
from tests.worker_support import (  # noqa: F401 (fixtures)
    downstream,
    instrumentation,
    load_event,
)
from worker import emf, wrapper
from worker.tally import Tally

STAMP_MS = 1_764_428_400_123


def document(**members: Any) -> str:
    return json.dumps(
        {
            "_aws": {
                "Timestamp": STAMP_MS,
                "CloudWatchMetrics": [
                    {
                        "Namespace": "QueueMesh",
                        "Dimensions": [["QueueName"], []],
                        "Metrics": [{"Name": "Downstream2xx", "Unit": "Count"}],
                    }
                ],
            },
            **members,
        }
    )


# -- extraction, as CloudWatch does it ------------------------------------------------------


def test_every_dimension_set_of_every_directive_becomes_a_metric() -> None:
    [case] = [
        c
        for c in json.loads((EVENTS / "emf_hand_written.json").read_text())["valid"]
        if c["name"].startswith("arrays and several directives")
    ]
    found = {(m.namespace, m.name, m.dimensions): m for m in extract(case["message"])}
    assert set(found) == {
        ("QueueMesh", "Downstream2xx", (("QueueName", "orders"),)),
        ("QueueMesh", "Downstream429", (("QueueName", "orders"),)),
        ("QueueMesh", "DownstreamLatency", (("QueueName", "orders"), ("Downstream", "payments"))),
        ("Billing", "Invoices", (("Tenant", "acme"),)),
    }
    latency = found[
        ("QueueMesh", "DownstreamLatency", (("QueueName", "orders"), ("Downstream", "payments")))
    ]
    assert latency.values == (10.0, 20.5, 30.0)
    assert (latency.unit, latency.storage_resolution) == ("Milliseconds", 1)
    assert latency.timestamp_ms == STAMP_MS
    assert found[("Billing", "Invoices", (("Tenant", "acme"),))].unit == "None"


@pytest.mark.parametrize(
    "message",
    [
        "START RequestId: 8f5a3e1c Version: $LATEST",
        '{"level": "INFO", "message": "hello"}',
        "[1, 2]",
        '{"_aws": {"Timestamp": 1',
    ],
)
def test_a_plain_log_line_is_no_document(message: str) -> None:
    assert extract(message) == []


@pytest.mark.parametrize(
    "message",
    [
        document(Downstream2xx=1),  # QueueName is missing
        document(QueueName=7, Downstream2xx=1),  # a dimension must be a string
        json.dumps({"_aws": {"Timestamp": "2025-11-29T15:00:00Z", "CloudWatchMetrics": []}}),
        json.dumps({"_aws": {"Timestamp": STAMP_MS}}),
        json.dumps({"_aws": {"Timestamp": STAMP_MS, "CloudWatchMetrics": ["QueueMesh"]}}),
        json.dumps({"_aws": "QueueMesh"}),
    ],
)
def test_a_document_breaking_the_specification_yields_nothing(message: str) -> None:
    with pytest.raises(InvalidDocument):
        extract(message)


@pytest.mark.parametrize("value", ["3", None, [1, "2"], True, {"v": 1}])
def test_a_metric_whose_member_is_not_numeric_is_left_out(value: Any) -> None:
    assert extract(document(QueueName="orders", Downstream2xx=value)) == []


@given(
    values=st.one_of(
        st.integers(-(10**6), 10**6),
        st.lists(st.integers(0, 5) | st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=100),
    ),
    queue=st.text(min_size=1, max_size=20),
)
def test_datum_samples_are_the_documents_values(values: Any, queue: str) -> None:
    metrics = extract(document(QueueName=queue, Downstream2xx=values))
    expected = Counter(values if isinstance(values, list) else [values])
    assert [m.dimensions for m in metrics] == [(("QueueName", queue),), ()]
    for metric in metrics:
        datum = metric.datum()
        assert Counter(dict(zip(datum["Values"], datum["Counts"], strict=True))) == expected
        assert datum["Timestamp"] == datetime.fromtimestamp(STAMP_MS / 1000, UTC)


# -- publishing to the local stack's CloudWatch ---------------------------------------------


@pytest.fixture(scope="module")
def cloudwatch() -> Iterator[Any]:
    with EmbeddedAws() as aws:
        yield aws.client("cloudwatch")


def test_published_metrics_read_back_with_their_statistics(cloudwatch: Any) -> None:
    publisher = EmfMetricsPublisher(cloudwatch)
    lines = [
        "plain text",
        document(QueueName="billing", Downstream2xx=[4, 4, 10]),
        document(Downstream2xx=1),
        document(QueueName="billing", Downstream2xx=2),
    ]
    assert publisher.publish(lines) == 4
    assert (publisher.published, publisher.invalid_documents) == (4, 1)
    listed = cloudwatch.list_metrics(Namespace="QueueMesh", MetricName="Downstream2xx")["Metrics"]
    assert {json.dumps(m["Dimensions"]) for m in listed} == {
        json.dumps([{"Name": "QueueName", "Value": "billing"}]),
        "[]",
    }
    start = datetime.fromtimestamp(STAMP_MS // 60_000 * 60, UTC)
    answer = cloudwatch.get_metric_statistics(
        Namespace="QueueMesh",
        MetricName="Downstream2xx",
        Dimensions=[{"Name": "QueueName", "Value": "billing"}],
        StartTime=start,
        EndTime=datetime.fromtimestamp(start.timestamp() + 60, UTC),
        Period=60,
        Statistics=["Sum", "SampleCount", "Maximum"],
    )
    [point] = answer["Datapoints"]
    assert (point["Sum"], point["SampleCount"], point["Maximum"]) == (20.0, 4.0, 10.0)


# -- the template's dashboard against the real emitters -------------------------------------


def dashboard_metrics() -> set[tuple[str, str, frozenset[str]]]:
    """(namespace, metric, dimension names) of every QueueMesh metric the template graphs."""
    stack = StackFacts(
        name="queuemesh",
        region="us-east-1",
        physical={
            "ControllerFunction": "controller",
            "ExampleDeadLetterQueue": "https://sqs/123/dlq",
            "ControllerFailureQueue": "https://sqs/123/failures",
        },
    )
    graphed = set()
    for widget in parse_widgets(dashboard_body(load_template(DEFAULT_TEMPLATE), stack)):
        for query in widget.queries:
            names = (
                query.dimensions
                if isinstance(query, Search)
                else tuple(name for name, _ in query.dimensions)
            )
            assert isinstance(query, Search | MetricLine)
            if query.namespace.startswith("QueueMesh"):
                graphed.add((query.namespace, query.metric, frozenset(names)))
    return graphed


def emitted_metrics(lines: list[str]) -> set[tuple[str, str, frozenset[str]]]:
    return {
        (m.namespace, m.name, frozenset(name for name, _ in m.dimensions))
        for line in lines
        for m in extract(line)
    }


def controller_output() -> list[str]:
    emitted: list[str] = []
    actuator = InMemoryActuator()
    actuator.add_mapping("esm-orders", 100)
    ledger = InMemoryLedger(memory_types=memory_type)
    ledger.put_config(config("orders"))
    # Wired as the handler wires it: its transitions published (to the twin).
    events = EventOutbox(InMemoryEventBus())
    executor = AwsExecutor(ledger, actuator, on_commit=events.record)
    app = ControllerApp(
        ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd(), executor=executor),
        clock=lambda: 110.0,
        emit=emitted.append,
        events=events,
    )
    storm = [sample(at=100.0 + s + 0.9, ok=8, throttled=2) for s in range(10)]
    # A queue nobody registered: skipped, by reason.
    app.handle(kinesis_event([*storm, sample("unregistered", at=105.0)]), None)
    return emitted


def worker_output(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    downstream: str,  # noqa: F811
) -> list[str]:
    """The wrapper around the example application (one downstream), then the emitter's
    document for an invocation that called two downstreams (no Downstream dimension)."""
    monkeypatch.setenv("QUEUEMESH_HANDLER", "worker.example.app.handler")
    monkeypatch.setenv("DOWNSTREAM_URL", f"{downstream}/orders")
    monkeypatch.setattr(wrapper, "_app_handler", None)
    wrapper.handler(load_event("sqs_mixed_answers.json"), None)
    tally = Tally()
    tally.add(200, 5.0, None, "payments.example")
    tally.add(429, 5.0, 3.0, "ledger.example")
    emf.emit(emf.document("orders", tally, 12.0, namespace=emf.namespace_from_env()))
    return capsys.readouterr().out.splitlines()


@pytest.mark.usefixtures("instrumentation")
def test_every_dashboard_metric_is_what_the_controller_and_worker_emit(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    downstream: str,  # noqa: F811
) -> None:
    # The template's environment: no service dimension from powertools on the controller.
    monkeypatch.delenv("POWERTOOLS_SERVICE_NAME", raising=False)
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", CONTROLLER_NAMESPACE)
    emitted = emitted_metrics(controller_output()) | emitted_metrics(
        worker_output(monkeypatch, capsys, downstream)
    )
    graphed = dashboard_metrics()
    assert {namespace for namespace, _, _ in graphed} == {NAMESPACE, CONTROLLER_NAMESPACE}
    assert graphed <= emitted, graphed - emitted
    # One line per queue: every graphed metric is split by QueueName, but the controller's
    # own health, which is the controller's alone, and its skips, one line per reason.
    health = {(CONTROLLER_NAMESPACE, metric, frozenset()) for metric in HealthMetric}
    skipped = (CONTROLLER_NAMESPACE, CONTROLLER_SKIPPED, frozenset({CONTROLLER_REASON_DIMENSION}))
    assert graphed - health
    assert graphed & health
    assert skipped in graphed
    assert all("QueueName" in names for _, _, names in graphed - health - {skipped})
