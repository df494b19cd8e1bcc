"""The telemetry decoder: Kinesis -> CloudWatch Logs subscription -> EMF -> samples."""

from __future__ import annotations

import base64
import dataclasses
import gzip
import hashlib
import json
import math
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.constants import is_queue_name
from controller.model import Sample
from controller.telemetry import (
    MAX_VALUE,
    DecodeResult,
    RecordStatus,
    decode_kinesis_event,
    decode_record_data,
    samples_from_log_message,
)
from tests.paths import EVENTS
from tests.strategies import json_values

LOG_TIME_MS = 1_764_428_400_000


def load_event(name: str) -> Any:
    return json.loads((EVENTS / name).read_text())


def subscription_payload(messages: list[str], *, message_type: str = "DATA_MESSAGE") -> bytes:
    payload = {
        "messageType": message_type,
        "owner": "123456789012",
        "logGroup": "/aws/lambda/worker",
        "logStream": "2025/11/29/[$LATEST]0123456789abcdef",
        "subscriptionFilters": ["queuemesh"],
        "logEvents": [
            {"id": str(index), "timestamp": LOG_TIME_MS + index, "message": message}
            for index, message in enumerate(messages)
        ],
    }
    return gzip.compress(json.dumps(payload).encode())


def kinesis_event(*datas: bytes) -> dict[str, Any]:
    return {
        "Records": [
            {
                "eventSource": "aws:kinesis",
                "kinesis": {
                    "sequenceNumber": str(49_000 + index),
                    "partitionKey": "pk",
                    "data": base64.b64encode(data).decode(),
                },
            }
            for index, data in enumerate(datas)
        ]
    }


def emf(queue: str | None = "orders", namespace: str = "QueueMesh", **members: Any) -> str:
    document: dict[str, Any] = {
        "_aws": {
            "Timestamp": LOG_TIME_MS,
            "CloudWatchMetrics": [
                {
                    "Namespace": namespace,
                    "Dimensions": [["QueueName"]],
                    "Metrics": [{"Name": name} for name in members],
                }
            ],
        },
        **members,
    }
    if queue is not None:
        document["QueueName"] = queue
    return json.dumps(document)


# The announced-limit fields and their values when a document carries none of its members.
NOT_ANNOUNCED = {
    "quota_remaining": None,
    "quota_limit": None,
    "quota_window_s": None,
    "quota_reset_s": None,
    "throttled_concurrency": 0,
    "throttled_rate": 0,
}


# The aggregated form's fields when a document is one invocation's.
NOT_AGGREGATED = {"invocations": 1, "started": None}


def sample_fields(sample: Sample) -> dict[str, Any]:
    """The sample's fields; the announced-limit and the aggregated form's ones only where one
    differs from ``NOT_ANNOUNCED`` or ``NOT_AGGREGATED`` (the expectations written before them
    name none)."""
    fields = dataclasses.asdict(sample)
    for defaults in (NOT_ANNOUNCED, NOT_AGGREGATED):
        if all(fields[name] == value for name, value in defaults.items()):
            for name in defaults:
                del fields[name]
    return fields


# --- real-shaped events -------------------------------------------------------------------


def test_lambda_kinesis_event_with_cloudwatch_logs_payloads() -> None:
    result = decode_kinesis_event(load_event("kinesis_cloudwatch_logs.json"))

    assert [sample_fields(s) for s in result.samples] == [
        {
            "queue": "orders",
            "event_time": 1795976609.708,
            "requests": 10,
            "ok": 7,
            "throttled": 2,
            "server_errors": 1,
            "overloaded": 1,
            "client_errors": 0,
            "latency_ms_sum": 295.5,
            "latency_count": 3,
            "retry_after_s": 4.0,
            "invocation_ms": 1450.0,
            "downstream": "payments.example.com",
            "timed_out": 0,
        },
        {
            "queue": "invoices",
            "event_time": 1795976609.908,
            "requests": 6,
            "ok": 5,
            "throttled": 0,
            "server_errors": 0,
            "overloaded": None,
            "client_errors": 1,
            "latency_ms_sum": 80.0,
            "latency_count": 2,
            "retry_after_s": 0.0,
            "invocation_ms": 640.0,
            "downstream": None,
            "timed_out": 0,
        },
    ]
    # START, a plain application log line, END and REPORT; and the health-check payload.
    assert result.skipped == {"not_emf": 4, "control_message": 1}
    assert (result.records, result.log_events) == (2, 6)
    assert [(o.status, o.samples) for o in result.outcomes] == [
        (RecordStatus.NO_SAMPLES, 0),
        (RecordStatus.DECODED, 2),
    ]
    assert [o.sequence_number for o in result.outcomes] == [
        "49656798632213455391620093153372148239620917438736367618",
        "49656798632213455391620093153373357165440532067911073794",
    ]


def test_control_message_is_counted_and_yields_nothing() -> None:
    data = subscription_payload(
        ["CWL CONTROL MESSAGE: Checking health of destination"], message_type="CONTROL_MESSAGE"
    )
    result = decode_kinesis_event(kinesis_event(data))
    assert result.samples == []
    assert result.skipped == {"control_message": 1}
    assert result.outcomes[0].status is RecordStatus.NO_SAMPLES


# --- real producers -----------------------------------------------------------------------


def test_powertools_metrics_output(capsys: pytest.CaptureFixture[str]) -> None:
    from aws_lambda_powertools import Metrics
    from aws_lambda_powertools.metrics import MetricUnit

    metrics = Metrics(namespace="QueueMesh", service="orders-worker")
    metrics.add_dimension(name="QueueName", value="orders")
    metrics.add_metric(name="Downstream2xx", unit=MetricUnit.Count, value=8)
    metrics.add_metric(name="Downstream429", unit=MetricUnit.Count, value=3)
    metrics.add_metric(name="Downstream503", unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="Downstream5xx", unit=MetricUnit.Count, value=1)
    metrics.add_metric(name="DownstreamLatency", unit=MetricUnit.Milliseconds, value=100)
    metrics.add_metric(name="DownstreamLatency", unit=MetricUnit.Milliseconds, value=50)
    metrics.add_metric(name="InvocationDurationMs", unit=MetricUnit.Milliseconds, value=700)
    metrics.add_metadata(key="RetryAfterSeconds", value=9)
    capsys.readouterr()
    metrics.flush_metrics()
    lines = capsys.readouterr().out.splitlines()

    assert len(lines) == 1
    emitted_ms = json.loads(lines[0])["_aws"]["Timestamp"]
    result = decode_kinesis_event(kinesis_event(subscription_payload(lines)))
    assert [sample_fields(s) for s in result.samples] == [
        {
            "queue": "orders",
            "event_time": emitted_ms / 1000,
            "requests": 12,
            "ok": 8,
            "throttled": 3,
            "server_errors": 1,
            "overloaded": 1,
            "client_errors": 0,
            "latency_ms_sum": 150.0,
            "latency_count": 2,
            "retry_after_s": 9.0,
            "invocation_ms": 700.0,
            "downstream": None,
            "timed_out": 0,
        }
    ]
    assert not result.skipped


def test_embedded_metrics_output() -> None:
    from aws_embedded_metrics.logger.metrics_context import MetricsContext
    from aws_embedded_metrics.serializers.log_serializer import LogSerializer

    context = MetricsContext.empty()
    context.namespace = "QueueMesh"
    context.put_dimensions({"QueueName": "invoices", "Downstream": "tax-api"})
    context.put_metric("Downstream2xx", 4, "Count")
    context.put_metric("Downstream429", 1, "Count")
    context.put_metric("Downstream429", 1, "Count")
    context.put_metric("DownstreamLatency", 20, "Milliseconds")
    context.set_property("RetryAfterSeconds", 2.5)
    lines = LogSerializer.serialize(context)
    emitted_ms = json.loads(lines[0])["_aws"]["Timestamp"]

    samples = [s for line in lines for s in samples_from_log_message(line, None)]
    assert [sample_fields(s) for s in samples] == [
        {
            "queue": "invoices",
            "event_time": emitted_ms / 1000,
            "requests": 6,
            "ok": 4,
            "throttled": 2,
            "server_errors": 0,
            "overloaded": None,
            "client_errors": 0,
            "latency_ms_sum": 20.0,
            "latency_count": 1,
            "retry_after_s": 2.5,
            "invocation_ms": None,
            "downstream": "tax-api",
            "timed_out": 0,
        }
    ]


@pytest.mark.parametrize("fixture", ["emf_powertools.json", "emf_embedded_metrics.json"])
def test_captured_library_output_decodes(fixture: str) -> None:
    line = load_event(fixture)["line"]
    skipped: Counter[str] = Counter()
    samples = samples_from_log_message(line, None, skipped=skipped)
    document = json.loads(line)
    assert len(samples) == 1, skipped
    assert samples[0].queue == document["QueueName"]
    assert samples[0].event_time == document["_aws"]["Timestamp"] / 1000


# --- hand-written documents and what is skipped ------------------------------------------

VALID = load_event("emf_hand_written.json")["valid"]
INVALID = load_event("emf_invalid.json")["invalid"]


@pytest.mark.parametrize("case", VALID, ids=[case["name"] for case in VALID])
def test_hand_written_documents(case: dict[str, Any]) -> None:
    skipped: Counter[str] = Counter()
    samples = samples_from_log_message(case["message"], case["timestamp_ms"], skipped=skipped)
    assert [sample_fields(s) for s in samples] == [case["expected"]]
    assert not skipped


@pytest.mark.parametrize("case", INVALID, ids=[f"{c['reason']}-{i}" for i, c in enumerate(INVALID)])
def test_invalid_documents_are_skipped_by_reason(case: dict[str, Any]) -> None:
    skipped: Counter[str] = Counter()
    assert samples_from_log_message(case["message"], LOG_TIME_MS, skipped=skipped) == []
    assert skipped == {case["reason"]: 1}


def test_namespace_is_a_parameter() -> None:
    message = emf(namespace="Payments", Downstream2xx=3)
    assert samples_from_log_message(message, None) == []
    [sample] = samples_from_log_message(message, None, namespace="Payments")
    assert (sample.queue, sample.ok, sample.requests) == ("orders", 3, 3)


def test_no_timestamp_anywhere_is_skipped() -> None:
    message = json.dumps(
        {
            "_aws": {"CloudWatchMetrics": [{"Namespace": "QueueMesh", "Metrics": []}]},
            "QueueName": "orders",
            "Downstream2xx": 1,
        }
    )
    skipped: Counter[str] = Counter()
    assert samples_from_log_message(message, None, skipped=skipped) == []
    assert skipped == {"bad_timestamp": 1}


def test_non_string_message_is_a_bad_log_event() -> None:
    skipped: Counter[str] = Counter()
    assert samples_from_log_message(b"{}", None, skipped=skipped) == []  # type: ignore[arg-type]
    assert skipped == {"bad_log_event": 1}


# --- broken records and payloads ----------------------------------------------------------


def gzip_bytes(obj: Any) -> bytes:
    return gzip.compress(json.dumps(obj).encode())


BROKEN_RECORDS: list[tuple[str, bytes, str]] = [
    ("not gzip", b'{"messageType": "DATA_MESSAGE"}', "bad_gzip"),
    ("truncated gzip", subscription_payload([emf(Downstream2xx=1)])[:-9], "bad_gzip"),
    ("empty", b"", "bad_gzip"),
    ("gzip of non-JSON", gzip.compress(b"hello world"), "bad_payload"),
    ("gzip of a JSON list", gzip_bytes([1, 2]), "bad_payload"),
    ("deeply nested JSON", gzip.compress(b"[" * 100_000), "bad_payload"),
    (
        "logEvents not a list",
        gzip_bytes({"messageType": "DATA_MESSAGE", "logEvents": {}}),
        "bad_payload",
    ),
    (
        "unknown message type",
        gzip_bytes({"messageType": "OTHER", "logEvents": []}),
        "unknown_message_type",
    ),
    ("decompression bomb", gzip.compress(b" " * (9 * 1024 * 1024)), "payload_too_large"),
]


@pytest.mark.parametrize(
    ("data", "reason"),
    [(d, r) for _, d, r in BROKEN_RECORDS],
    ids=[n for n, _, _ in BROKEN_RECORDS],
)
def test_broken_record_is_skipped_not_fatal(data: bytes, reason: str) -> None:
    good = subscription_payload([emf(Downstream2xx=2)])
    result = decode_kinesis_event(kinesis_event(data, good))
    assert [s.ok for s in result.samples] == [2]
    assert result.skipped == {reason: 1}
    assert [o.status for o in result.outcomes] == [RecordStatus.SKIPPED, RecordStatus.DECODED]


def test_bad_log_events_are_skipped_one_by_one() -> None:
    payload = {
        "messageType": "DATA_MESSAGE",
        "logEvents": [
            "not an object",
            {"id": "1", "timestamp": LOG_TIME_MS},
            {"id": "2", "timestamp": "yesterday", "message": emf(Downstream429=1)},
            {"id": "3", "timestamp": LOG_TIME_MS, "message": emf(Downstream2xx=5)},
        ],
    }
    result = decode_kinesis_event(kinesis_event(gzip_bytes(payload)))
    # A bad log event timestamp does not matter while the document carries its own.
    assert [(s.ok, s.throttled) for s in result.samples] == [(0, 1), (5, 0)]
    assert result.skipped == {"bad_log_event": 2}
    assert result.log_events == 4


@pytest.mark.parametrize(
    "event",
    [
        {},
        {"Records": "nope"},
        [],
    ],
)
def test_event_without_records_list(event: Any) -> None:
    result = decode_kinesis_event(event)
    assert (result.samples, result.records) == ([], 0)
    assert result.skipped == {"bad_record": 1}


def test_malformed_kinesis_records() -> None:
    event = {
        "Records": [
            "nope",
            {"eventSource": "aws:kinesis"},
            {"kinesis": {"sequenceNumber": "7", "data": 12}},
            {"kinesis": {"sequenceNumber": "8", "data": "***not base64***"}},
            {"kinesis": {"sequenceNumber": "9", "data": "é"}},
        ]
    }
    result = decode_kinesis_event(event)
    assert result.samples == []
    assert result.skipped == {"bad_record": 3, "bad_base64": 2}
    assert [o.sequence_number for o in result.outcomes] == [None, None, "7", "8", "9"]
    assert {o.status for o in result.outcomes} == {RecordStatus.SKIPPED}


def test_decode_record_data_accumulates_for_replay() -> None:
    result = DecodeResult()
    decode_record_data(
        subscription_payload([emf(Downstream2xx=1)]), sequence_number="1", into=result
    )
    decode_record_data(b"garbage", sequence_number="2", into=result)
    decode_record_data(subscription_payload([emf(queue="b", Downstream429=4)]), into=result)
    assert [(s.queue, s.requests) for s in result.samples] == [("orders", 1), ("b", 4)]
    assert result.records == 3
    assert result.skipped == {"bad_gzip": 1}
    assert [(o.sequence_number, o.status) for o in result.outcomes] == [
        ("1", RecordStatus.DECODED),
        ("2", RecordStatus.SKIPPED),
        (None, RecordStatus.DECODED),
    ]


# --- KPL aggregation ----------------------------------------------------------------------


def kpl_aggregate(*user_datas: bytes) -> bytes:
    from aws_kinesis_agg.aggregator import RecordAggregator

    aggregator = RecordAggregator()
    for index, data in enumerate(user_datas):
        assert aggregator.add_user_record(f"pk-{index}", data) is None
    record = aggregator.clear_and_get()
    assert record is not None
    _, _, aggregated = record.get_contents()
    return bytes(aggregated)


def test_kpl_aggregated_record_is_deaggregated() -> None:
    aggregated = kpl_aggregate(
        subscription_payload([emf(queue="a", Downstream2xx=1)]),
        subscription_payload(["START RequestId: x", emf(queue="b", Downstream429=2)]),
        subscription_payload(["x"], message_type="CONTROL_MESSAGE"),
    )
    assert aggregated[:4] == b"\xf3\x89\x9a\xc2"
    plain = subscription_payload([emf(queue="c", Downstream5xx=3)])
    result = decode_kinesis_event(kinesis_event(aggregated, plain))
    assert [(s.queue, s.requests) for s in result.samples] == [("a", 1), ("b", 2), ("c", 3)]
    assert result.records == 2
    assert result.log_events == 4
    assert result.skipped == {"not_emf": 1, "control_message": 1}
    assert [(o.sequence_number, o.samples) for o in result.outcomes] == [("49000", 2), ("49001", 1)]


def test_corrupt_kpl_record_is_skipped() -> None:
    aggregated = bytearray(kpl_aggregate(subscription_payload([emf(Downstream2xx=1)])))
    aggregated[10] ^= 0xFF  # the MD5 digest no longer matches
    result = decode_kinesis_event(kinesis_event(bytes(aggregated)))
    assert result.samples == []
    assert result.skipped == {"bad_aggregate": 1}
    assert result.outcomes[0].status is RecordStatus.SKIPPED


def test_kpl_record_with_garbage_protobuf_is_skipped() -> None:
    body = b"\xff\xff\xff\xff garbage protobuf"
    forged = b"\xf3\x89\x9a\xc2" + body + hashlib.md5(body).digest()
    result = decode_kinesis_event(kinesis_event(forged))
    assert result.samples == []
    assert result.skipped == {"bad_aggregate": 1}


# --- properties ---------------------------------------------------------------------------

FAST = settings(max_examples=60)


@FAST
@given(st.binary(max_size=300))
def test_garbage_bytes_never_raise_nor_yield(data: bytes) -> None:
    result = decode_record_data(data)
    assert result.samples == []
    assert sum(result.skipped.values()) >= 1
    assert gzip_garbage_yields_nothing(data)


def gzip_garbage_yields_nothing(data: bytes) -> bool:
    result = decode_record_data(gzip.compress(data))
    return result.samples == [] and sum(result.skipped.values()) >= 1


@FAST
@given(json_values)
def test_garbage_payloads_never_raise_nor_yield(payload: Any) -> None:
    result = decode_kinesis_event(kinesis_event(gzip_bytes(payload)))
    assert result.samples == []


@FAST
@given(st.lists(st.text(max_size=60) | json_values.map(json.dumps), max_size=5))
def test_garbage_log_lines_never_raise_nor_yield(messages: list[str]) -> None:
    result = decode_kinesis_event(kinesis_event(subscription_payload(messages)))
    assert result.samples == []
    assert sum(result.skipped.values()) == len(messages)


@FAST
@given(st.text(max_size=200), st.one_of(st.none(), st.floats(), st.integers()))
def test_garbage_messages_never_raise_nor_yield(message: str, timestamp: Any) -> None:
    assert samples_from_log_message(message, timestamp) == []


MEMBERS = (
    "DownstreamRequests",
    "Downstream2xx",
    "Downstream429",
    "Downstream5xx",
    "Downstream503",
    "Downstream4xx",
    "DownstreamLatency",
    "RetryAfterSeconds",
    "InvocationDurationMs",
)


def assert_sane(sample: Sample) -> None:
    for name in ("requests", "ok", "throttled", "server_errors", "client_errors", "latency_count"):
        value = getattr(sample, name)
        assert type(value) is int
        assert 0 <= value <= MAX_VALUE
    if sample.overloaded is not None:
        assert 0 <= sample.overloaded <= sample.server_errors
    for number in (sample.latency_ms_sum, sample.retry_after_s, sample.invocation_ms or 0.0):
        assert math.isfinite(number)
        assert number >= 0
    assert sample.requests >= sample.ok + sample.throttled + sample.server_errors
    assert math.isfinite(sample.event_time)


@FAST
@given(
    st.dictionaries(st.sampled_from(MEMBERS), json_values, min_size=1),
    st.dictionaries(st.sampled_from(MEMBERS), st.integers(0, 1000), min_size=1),
)
def test_counts_are_never_negative_nor_nan(wild: dict[str, Any], sane: dict[str, int]) -> None:
    skipped: Counter[str] = Counter()
    samples = samples_from_log_message(emf(**{**sane, **wild}), None, skipped=skipped)
    for sample in samples:
        assert_sane(sample)
    assert len(samples) + sum(skipped.values()) == 1


count_values = st.integers(0, 2000)


@st.composite
def count_encodings(draw: st.DrawFn, total: int) -> Any:
    """One count as an EMF producer may write it: int, float, or an array summing to it."""
    shape = draw(st.sampled_from(["int", "float", "array"]))
    if shape == "int":
        return total
    if shape == "float":
        return float(total)
    cut = draw(st.integers(0, total))
    return [float(cut), total - cut] if draw(st.booleans()) else [cut, total - cut]


@st.composite
def emf_documents(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    counts = {
        name: draw(count_values)
        for name in ("Downstream2xx", "Downstream429", "Downstream5xx", "Downstream4xx")
        if draw(st.booleans())
    }
    if not counts:
        counts["Downstream2xx"] = draw(count_values)
    members: dict[str, Any] = {name: draw(count_encodings(v)) for name, v in counts.items()}
    overloaded = None
    if "Downstream5xx" in counts and draw(st.booleans()):
        overloaded = draw(st.integers(0, counts["Downstream5xx"]))
        members["Downstream503"] = draw(count_encodings(overloaded))
    counted = sum(counts.values())
    requests = counted
    if draw(st.booleans()):
        requests = counted + draw(st.integers(0, 50))
        members["DownstreamRequests"] = requests
    latencies = draw(st.lists(st.floats(0, 60_000), max_size=5))
    if latencies:
        members["DownstreamLatency"] = latencies if len(latencies) > 1 else latencies[0]
    retry_after = draw(st.lists(st.integers(0, 600), max_size=3))
    if retry_after:
        members["RetryAfterSeconds"] = retry_after if draw(st.booleans()) else max(retry_after)
    duration = draw(st.none() | st.integers(1, 900_000))
    if duration is not None:
        members["InvocationDurationMs"] = duration
    queue = draw(st.from_regex(r"[A-Za-z0-9_-]{1,80}(\.fifo)?", fullmatch=True))
    downstream = draw(st.none() | st.text(min_size=1, max_size=30))
    timestamp_ms = draw(st.integers(1_500_000_000_000, 2_000_000_000_000))
    names = list(members)
    split = draw(st.integers(0, len(names)))
    directives = [
        {"Namespace": "QueueMesh", "Dimensions": [["QueueName"]], "Metrics": [{"Name": n}]}
        for n in names[:split]
    ] + [
        {
            "Namespace": "QueueMesh",
            "Dimensions": [["QueueName", "Downstream"]] if downstream else [["QueueName"]],
            "Metrics": [{"Name": n, "Unit": "Count"} for n in names[split:]],
        },
        {"Namespace": "SomethingElse", "Dimensions": [], "Metrics": [{"Name": "Other"}]},
    ]
    document: dict[str, Any] = {
        "_aws": {"Timestamp": timestamp_ms, "CloudWatchMetrics": draw(st.permutations(directives))},
        "QueueName": queue,
        "Other": 1,
        **members,
    }
    if downstream is not None:
        document["Downstream"] = downstream
    ordered = dict(draw(st.permutations(list(document.items()))))
    expected = {
        "queue": queue,
        "event_time": timestamp_ms / 1000,
        "requests": requests,
        "ok": counts.get("Downstream2xx", 0),
        "throttled": counts.get("Downstream429", 0),
        "server_errors": counts.get("Downstream5xx", 0),
        "overloaded": overloaded,
        "client_errors": counts.get("Downstream4xx", 0),
        "latency_count": len(latencies),
        "retry_after_s": float(max(retry_after, default=0)),
        "invocation_ms": None if duration is None else float(duration),
        "downstream": downstream,
        "timed_out": 0,
    }
    text = json.dumps(ordered, ensure_ascii=draw(st.booleans()))
    return text, {**expected, "latency_ms_sum": sum(latencies)}


@FAST
@given(st.lists(emf_documents(), min_size=1, max_size=4), st.integers(0, 3))
def test_valid_emf_round_trips(documents: list[tuple[str, dict[str, Any]]], noise: int) -> None:
    lines = [text for text, _ in documents]
    lines[len(lines) // 2 : len(lines) // 2] = ["END RequestId: abc"] * noise
    result = decode_kinesis_event(kinesis_event(subscription_payload(lines)))
    assert result.skipped == ({"not_emf": noise} if noise else {})
    assert len(result.samples) == len(documents)
    for sample, (_, expected) in zip(result.samples, documents, strict=True):
        got = sample_fields(sample)
        assert got.pop("latency_ms_sum") == pytest.approx(expected.pop("latency_ms_sum"))
        expected.pop("latency_ms_sum", None)
        assert got == expected
        assert_sane(sample)


# --- edges --------------------------------------------------------------------------------


def test_null_member_reads_as_absent_but_null_inside_an_array_is_bad() -> None:
    [sample] = samples_from_log_message(emf(Downstream2xx=3, Downstream503=None), None)
    assert (sample.ok, sample.overloaded) == (3, None)
    skipped: Counter[str] = Counter()
    assert samples_from_log_message(emf(Downstream2xx=[None]), None, skipped=skipped) == []
    assert skipped == {"bad_value": 1}


def test_leading_whitespace_and_trailing_newline_are_tolerated() -> None:
    [sample] = samples_from_log_message("  " + emf(Downstream429=2) + "\r\n", None)
    assert sample.throttled == 2


def test_decoder_bug_is_counted_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    from controller.telemetry import EmfReader

    def broken(*_args: object) -> None:
        raise KeyError("bug")

    monkeypatch.setattr(EmfReader, "sample_from_document", broken)
    result = decode_kinesis_event(kinesis_event(subscription_payload([emf(Downstream2xx=1)])))
    assert result.samples == []
    assert result.skipped == {"internal_error": 1}
    skipped: Counter[str] = Counter()
    assert samples_from_log_message(emf(Downstream2xx=1), None, skipped=skipped) == []
    assert skipped == {"internal_error": 1}


def test_decode_record_data_rejects_non_bytes() -> None:
    result = decode_record_data("not bytes")  # type: ignore[arg-type]
    assert (result.samples, result.records) == ([], 1)
    assert result.skipped == {"bad_record": 1}


# --- the benchmark command ----------------------------------------------------------------


def test_bench_decode_reports_its_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    from stack.cli import main

    assert main(["bench", "decode", "--records", "12", "--repeat", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["records"] == 12
    assert 24 <= report["log_events"] <= 48  # 2 to 4 documents per record
    for key in ("mb_per_s", "records_per_s", "floor_ratio", "scanner_floor_ratio"):
        assert report[key] > 0
    assert isinstance(report["meets_targets"], bool)


def test_bench_decode_rejects_a_bad_count(capsys: pytest.CaptureFixture[str]) -> None:
    from stack.cli import main

    assert main(["bench", "decode", "--records", "0"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "--records must be at least 1" in error


@pytest.mark.parametrize(
    ("members", "timed_out", "requests", "pressure"),
    [
        ({"DownstreamTimeout": [3.0], "Downstream2xx": [7.0]}, 3, 10, 3),
        ({"DownstreamTimeout": 2, "Downstream429": 1, "DownstreamRequests": 20}, 2, 20, 3),
        ({"DownstreamTimeout": [1, 1]}, 2, 2, 2),
        ({"Downstream2xx": 5}, 0, 5, 0),
    ],
)
def test_timeouts_are_read_counted_as_calls_and_are_pressure(
    members: dict[str, Any], timed_out: int, requests: int, pressure: int
) -> None:
    document = {
        "_aws": {
            "Timestamp": 1_795_976_609_000,
            "CloudWatchMetrics": [{"Namespace": "QueueMesh", "Metrics": []}],
        },
        "QueueName": "orders",
        **members,
    }
    [sample] = samples_from_log_message(json.dumps(document), None)
    assert (sample.timed_out, sample.requests, sample.pressure) == (timed_out, requests, pressure)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", [1, None], True])
def test_a_bad_timeout_count_skips_the_document(bad: object) -> None:
    document = {
        "_aws": {"Timestamp": 1, "CloudWatchMetrics": [{"Namespace": "QueueMesh", "Metrics": []}]},
        "QueueName": "orders",
        "Downstream2xx": 1,
        "DownstreamTimeout": bad,
    }
    skipped: Counter[str] = Counter()
    assert samples_from_log_message(json.dumps(document), None, skipped=skipped) == []
    assert skipped == {"bad_value": 1}


@FAST
@given(st.text(max_size=90) | st.from_regex(r"[A-Za-z0-9_-]{1,82}(\.fifo)?", fullmatch=True))
def test_a_queue_name_is_judged_alike_before_and_after_it_is_remembered(name: str) -> None:
    message = emf(queue=name, Downstream2xx=1)
    verdicts = []
    for _ in range(2):  # the second sighting takes the remembered-names path
        skipped: Counter[str] = Counter()
        samples = samples_from_log_message(message, None, skipped=skipped)
        verdicts.append(([sample.queue for sample in samples], dict(skipped)))
    assert verdicts[0] == verdicts[1]
    if is_queue_name(name):
        assert verdicts[0] == ([name], {})
    else:
        assert verdicts[0][0] == []
