"""EMF -> CloudWatch metrics on the local stack, and the template's dashboard held against the
metrics the controller and the worker really emit."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Iterator
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
from controller.model import GroupReport, GroupShare
from controller.policy import memory_type
from controller.policy.aimd import Aimd
from controller.ports import ConfigRead, LedgerError
from controller.reducer_app import ReducerApp
from controller.schema import (
    CONTROLLER_GROUP_DIMENSION,
    CONTROLLER_NAMESPACE,
    CONTROLLER_REASON_DIMENSION,
    CONTROLLER_SKIPPED,
    NAMESPACE,
    GroupMetric,
    HealthMetric,
)
from controller.settings import PolicyParams
from controller.stream import InMemorySink
from stack.local.emulator import DEFAULT_TEMPLATE, EmbeddedAws
from stack.local.metrics import EmfMetricsPublisher, InvalidDocument, extract
from stack.local.runtime.service_metrics import (
    InvocationMetrics,
    ServiceMetrics,
    oldest_message_ages,
)
from stack.local.template import load_template
from stack.local.widgets import MetricLine, Search, StackFacts, dashboard_body, parse_widgets
from tests.factories import config, kinesis_event, planning_groups, sample
from tests.paths import EVENTS
from tests.worker_support import (  # noqa: F401 (fixtures)
    downstream,
    instrumentation,
    load_event,
)
from worker import emf, wrapper
from worker.aggregate import Reports
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
def aws() -> Iterator[EmbeddedAws]:
    with EmbeddedAws() as embedded:
        yield embedded


@pytest.fixture(scope="module")
def cloudwatch(aws: EmbeddedAws) -> Any:
    return aws.client("cloudwatch")


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


DASHBOARD_STACK = StackFacts(
    name="queuemesh",
    region="us-east-1",
    physical={
        "ControllerFunction": "controller",
        "ExampleDeadLetterQueue": "https://sqs/123/dlq",
        "ControllerFailureQueue": "https://sqs/123/failures",
    },
)


def dashboard_metrics() -> set[tuple[str, str, frozenset[str]]]:
    """(namespace, metric, dimension names) of every QueueMesh metric the template graphs."""
    graphed = set()
    for widget in parse_widgets(dashboard_body(load_template(DEFAULT_TEMPLATE), DASHBOARD_STACK)):
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


def controller_output(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    emitted: list[str] = []
    # A group the batch decided (built by hand: the group law's own reports aside).
    planning_groups(
        monkeypatch,
        lambda plan: (GroupReport("payments", plan.now, 80.0, (GroupShare("orders", 80.0, 20),)),),
    )
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


class LedgerDown(InMemoryLedger):
    """A ledger whose CONFIG items cannot be read (the reducer's ``ConfigSource``)."""

    def read_configs(self, queues: Iterable[str]) -> ConfigRead:
        raise LedgerError("injected")


def reducer_output() -> list[str]:
    """The reducer's documents for a batch whose queues' CONFIG groups the ledger did not give
    (its own health metric, ``GroupKeysUnread``)."""
    emitted: list[str] = []
    ledger = LedgerDown(memory_types=memory_type)
    app = ReducerApp(InMemorySink(), ledger, clock=lambda: 110.0, emit=emitted.append)
    app.handle(kinesis_event([sample(at=100.9, ok=8, throttled=2)]), None)
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
    wrapper.flush()
    tally = Tally()
    tally.add(200, 5.0, None, "payments.example")
    tally.add(429, 5.0, 3.0, "ledger.example")
    tally.add(503, 5.0, None, "ledger.example")  # zero counts are left out: one of each
    [(queue, report)] = Reports().ended({"orders": tally}, 12.0, ended_at=time.time())
    emf.emit(emf.document(queue, report, namespace=emf.namespace_from_env()))
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
    emitted = (
        emitted_metrics(controller_output(monkeypatch))
        | emitted_metrics(reducer_output())
        | emitted_metrics(worker_output(monkeypatch, capsys, downstream))
    )
    graphed = dashboard_metrics()
    assert {namespace for namespace, _, _ in graphed} == {NAMESPACE, CONTROLLER_NAMESPACE}
    assert graphed <= emitted, graphed - emitted
    # One line per queue: every graphed metric is split by QueueName, but the controller's
    # own health, which is the controller's alone, its skips, one line per reason, and each
    # group's capacity, one line per group.
    health = {(CONTROLLER_NAMESPACE, metric, frozenset()) for metric in HealthMetric}
    skipped = (CONTROLLER_NAMESPACE, CONTROLLER_SKIPPED, frozenset({CONTROLLER_REASON_DIMENSION}))
    capacity = (CONTROLLER_NAMESPACE, GroupMetric.CAPACITY, frozenset({CONTROLLER_GROUP_DIMENSION}))
    assert graphed - health
    assert graphed & health
    assert {skipped, capacity} <= graphed
    assert all("QueueName" in names for _, _, names in graphed - health - {skipped, capacity})


# -- AWS's own metrics of the local stack's services -----------------------------------------
def minute_statistic(
    cloudwatch: Any, namespace: str, metric: str, dimension: tuple[str, str], statistic: str
) -> float:
    """The statistic of the metric over the last two minutes (one datapoint expected)."""
    end = datetime.now(UTC)
    answer = cloudwatch.get_metric_statistics(
        Namespace=namespace,
        MetricName=metric,
        Dimensions=[{"Name": dimension[0], "Value": dimension[1]}],
        StartTime=datetime.fromtimestamp(end.timestamp() // 60 * 60 - 60, UTC),
        EndTime=datetime.fromtimestamp(end.timestamp() // 60 * 60 + 60, UTC),
        Period=120,
        Statistics=[statistic],
    )
    [point] = answer["Datapoints"]
    return float(point[statistic])


def test_sqs_metrics_are_each_queues_state(aws: EmbeddedAws, cloudwatch: Any) -> None:
    sqs = aws.client("sqs")
    url = sqs.create_queue(QueueName="metered")["QueueUrl"]
    for body in "abc":
        sqs.send_message(QueueUrl=url, MessageBody=body)
    sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=60)
    ServiceMetrics(aws, InvocationMetrics()).publish()
    queue = ("QueueName", "metered")
    for metric, expected in (
        ("ApproximateNumberOfMessagesVisible", 2.0),
        ("ApproximateNumberOfMessagesNotVisible", 1.0),
        ("ApproximateNumberOfMessagesDelayed", 0.0),
    ):
        assert minute_statistic(cloudwatch, "AWS/SQS", metric, queue, "Maximum") == expected
    age = minute_statistic(cloudwatch, "AWS/SQS", "ApproximateAgeOfOldestMessage", queue, "Maximum")
    assert 0.0 <= age < 60.0


def test_the_oldest_message_age_skips_a_message_received_three_times(aws: EmbeddedAws) -> None:
    sqs = aws.client("sqs")
    url = sqs.create_queue(QueueName="poisoned")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="poison")
    sent_poison = time.time()
    for _ in range(3):
        [_message] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]
    later = time.time() + 100.0
    assert oldest_message_ages(later)["poisoned"] == pytest.approx(later - sent_poison, abs=1)
    time.sleep(0.05)
    sqs.send_message(QueueUrl=url, MessageBody="fresh")
    sent_fresh = time.time()
    assert oldest_message_ages(later)["poisoned"] == pytest.approx(later - sent_fresh, abs=0.04)
    assert oldest_message_ages(later)["metered"] > 100.0


def test_lambda_metrics_are_what_the_invocations_did(aws: EmbeddedAws, cloudwatch: Any) -> None:
    invocations = InvocationMetrics()
    for failed in (False, False, True):
        invocations.invoked("metered-fn", failed)
    invocations.batch_age("metered-fn", 1500.0)
    invocations.batch_age("metered-fn", 20.0)
    publisher = ServiceMetrics(aws, invocations)
    publisher.publish()
    publisher.publish()  # nothing new: no Lambda data, as for a function not invoked
    function = ("FunctionName", "metered-fn")
    for metric, statistic, expected in (
        ("Invocations", "Sum", 3.0),
        ("Errors", "Sum", 1.0),
        ("Throttles", "Sum", 0.0),
        ("IteratorAge", "Maximum", 1500.0),
        ("IteratorAge", "SampleCount", 2.0),
    ):
        value = minute_statistic(cloudwatch, "AWS/Lambda", metric, function, statistic)
        assert value == expected, metric


def test_every_aws_metric_the_dashboard_and_alarms_read_is_published_locally(
    aws: EmbeddedAws, cloudwatch: Any
) -> None:
    """The local stack publishes each AWS/SQS and AWS/Lambda metric the template reads, under
    the same dimension names: no widget or alarm of the local stack waits for a metric that
    never comes."""
    invocations = InvocationMetrics()
    invocations.invoked("controller", False)
    invocations.batch_age("controller", 10.0)
    ServiceMetrics(aws, invocations).publish()
    read = aws_metrics_read()
    assert {namespace for namespace, _, _ in read} == {"AWS/SQS", "AWS/Lambda"}
    published = {
        (
            metric["Namespace"],
            metric["MetricName"],
            frozenset(d["Name"] for d in metric["Dimensions"]),
        )
        for namespace in ("AWS/SQS", "AWS/Lambda")
        for metric in cloudwatch.list_metrics(Namespace=namespace)["Metrics"]
    }
    assert read <= published, read - published


def aws_metrics_read() -> set[tuple[str, str, frozenset[str]]]:
    """(namespace, metric, dimension names) of every AWS metric the template's dashboard
    graphs or its alarms watch."""
    template = load_template(DEFAULT_TEMPLATE)
    read = set()
    for widget in parse_widgets(dashboard_body(template, DASHBOARD_STACK)):
        for query in widget.queries:
            names = (
                query.dimensions
                if isinstance(query, Search)
                else tuple(name for name, _ in query.dimensions)
            )
            if query.namespace.startswith("AWS/"):
                read.add((query.namespace, query.metric, frozenset(names)))
    alarms = [
        resource["Properties"]
        for resource in template["Resources"].values()
        if isinstance(resource, dict) and resource.get("Type") == "AWS::CloudWatch::Alarm"
    ]
    for alarm in alarms:
        if alarm["Namespace"].startswith("AWS/"):
            names = frozenset(d["Name"] for d in alarm["Dimensions"])
            read.add((alarm["Namespace"], alarm["MetricName"], names))
    return read
