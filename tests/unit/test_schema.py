"""One telemetry schema: the controller's copy is the worker's, every encoder speaks it, and the
template and the AWS bounds agree with the code."""

from __future__ import annotations

import dataclasses
import json
from types import ModuleType
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from controller import constants
from controller import schema as controller_schema
from controller.model import Sample
from controller.telemetry import samples_from_log_message
from load.recording import emf_document
from stack.local.template import load_template
from tests.paths import ROOT
from worker import emf
from worker import schema as worker_schema
from worker.aggregate import Reports
from worker.tally import Tally

TEMPLATE = ROOT / "template.yaml"


def vocabulary(module: ModuleType) -> dict[str, Any]:
    """The module's public constants of the telemetry schema (namespace, dimensions, metrics),
    by name: the controller's ``CONTROLLER_`` vocabulary of its own metrics is not part of it."""
    return {
        name: value
        for name, value in vars(module).items()
        if name.isupper() and not name.startswith("CONTROLLER_")
    }


def test_the_controller_copy_is_the_worker_schema() -> None:
    assert vocabulary(controller_schema) == vocabulary(worker_schema)
    assert len(vocabulary(worker_schema)) > len(worker_schema.METRICS)


def test_every_metric_is_listed_once_with_a_cloudwatch_unit() -> None:
    declared = [v for v in vocabulary(worker_schema).values() if type(v) is worker_schema.Metric]
    assert sorted(declared) == sorted(worker_schema.METRICS)
    assert len({metric.name for metric in declared}) == len(declared)
    assert {metric.unit for metric in declared} == {"Count", "Milliseconds", "Seconds"}


def test_the_worker_declares_every_member_with_the_schema_unit() -> None:
    tally = Tally()
    for status in (200, 429, 503, 404):
        tally.add(status, 10.0, 4.0, "api.example.com")
    tally.add(None, 20.0, None, "api.example.com", timed_out=True)
    tally.add(None, None, None, "api.example.com")  # no answer: only DownstreamRequests has it
    reports = Reports()
    # The first after an idle environment is written at once; the next two, back to back,
    # are held together until their second is over.
    for ended_at in (1_767_225_599.9, 1_767_225_600.3, 1_767_225_600.5):
        reports.ended({"orders": tally}, 120.0, ended_at=ended_at)
    [(queue, report)] = reports.drain()
    document = emf.document(queue, report, namespace=worker_schema.NAMESPACE)
    [directive] = document["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == worker_schema.NAMESPACE
    assert directive["Dimensions"] == [
        [worker_schema.QUEUE_DIMENSION, worker_schema.DOWNSTREAM_DIMENSION]
    ]
    # The announced members are written only when an answer carried rate-limit headers; the
    # aggregated form's invocations and start, and Retry-After, are plain properties.
    undeclared = {
        worker_schema.INVOCATIONS,
        worker_schema.INVOCATION_START,
        worker_schema.RETRY_AFTER,
    }
    expected = (
        set(worker_schema.METRICS)
        - set(worker_schema.ANNOUNCED)
        - undeclared
        - {worker_schema.LATENCY}
    )
    assert {(m["Name"], m["Unit"]) for m in directive["Metrics"]} == expected
    assert {metric.name for metric in undeclared} <= set(document)


@given(
    st.builds(
        Sample,
        queue=st.sampled_from(["orders", "billing"]),
        event_time=st.integers(1_700_000_000_000, 1_800_000_000_000).map(lambda ms: ms / 1000),
        requests=st.integers(0, 50),
        ok=st.integers(0, 50),
        throttled=st.integers(0, 50),
        server_errors=st.integers(0, 50),
        overloaded=st.none() | st.integers(0, 0),
        client_errors=st.integers(0, 50),
        latency_ms_sum=st.just(0.0),
        latency_count=st.just(0),
        retry_after_s=st.sampled_from([0.0, 2.0, 30.0]),
        invocation_ms=st.none() | st.floats(0, 900_000),
        downstream=st.none() | st.just("api.example.com"),
    )
)
def test_the_recording_encoder_declares_schema_units_and_decodes_back(sample: Sample) -> None:
    document = emf_document(sample)
    [directive] = document["_aws"]["CloudWatchMetrics"]
    units = dict(worker_schema.METRICS)
    assert all(units[m["Name"]] == m["Unit"] for m in directive["Metrics"])
    [decoded] = samples_from_log_message(json.dumps(document), None)
    counted = sample.ok + sample.throttled + sample.server_errors + sample.client_errors
    assert decoded == dataclasses.replace(sample, requests=max(sample.requests, counted))


def test_the_template_names_the_schema_namespace() -> None:
    template = load_template(TEMPLATE)
    text = TEMPLATE.read_text(encoding="utf-8")
    worker_env = template["Resources"]["ExampleWorkerFunction"]["Properties"]["Environment"]
    assert worker_env["Variables"]["QUEUEMESH_NAMESPACE"] == worker_schema.NAMESPACE
    filters = [line for line in text.splitlines() if "FilterPattern" in line]
    assert filters
    assert all(f'Namespace = "{worker_schema.NAMESPACE}"' in line for line in filters)


def test_every_concurrency_parameter_of_the_template_spans_the_aws_bounds() -> None:
    parameters = load_template(TEMPLATE)["Parameters"]
    for name in ("PolicyCmin", "PolicyCmax", "ExampleMaxConcurrency"):
        spec = parameters[name]
        assert (spec["MinValue"], spec["MaxValue"]) == (
            constants.MIN_CONCURRENCY,
            constants.MAX_CONCURRENCY,
        ), name
