"""Recordings: samples -> EMF -> CloudWatch Logs payload -> Kinesis record, and back through
the controller's own decoder; the JSON Lines format written and read."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import Sample
from controller.telemetry import decode_kinesis_event, decode_record_data
from load.recording import (
    RecordedLine,
    RecordingError,
    emf_document,
    kinesis_event,
    read_recording,
    record_deliveries,
    write_recording,
)
from load.sim.engine import SIM_EPOCH, simulate
from load.sim.policies import QueueMeshPolicy
from load.sim.scenario import load_scenario
from tests.strategies import announced_fields

counts = st.integers(0, 50)


@st.composite
def samples(draw: st.DrawFn) -> Sample:
    ok, throttled, errors, overloaded = draw(counts), draw(counts), draw(counts), draw(counts)
    calls = ok + throttled + errors + overloaded
    latency = draw(st.sampled_from([20.0, 80.0, 100.0]))
    return Sample(
        queue=draw(st.sampled_from(["orders", "q-1", "exports"])),
        event_time=SIM_EPOCH + draw(st.integers(0, 10_000_000)) / 1000.0,
        requests=calls,
        ok=ok,
        throttled=throttled,
        server_errors=errors + overloaded,
        overloaded=overloaded,
        latency_ms_sum=latency * calls,
        latency_count=calls,
        invocation_ms=draw(st.one_of(st.none(), st.integers(1, 900_000).map(float))),
        downstream=draw(st.one_of(st.none(), st.just("payments"))),
        **draw(announced_fields(throttled)),
    )


@settings(max_examples=60)
@given(st.lists(samples(), min_size=1, max_size=5))
def test_the_controller_decodes_exactly_what_was_encoded(batch: list[Sample]) -> None:
    lines = record_deliveries((sample.event_time + 2.0, sample) for sample in batch)
    decoded = decode_kinesis_event(kinesis_event(lines))
    assert sum(decoded.skipped.values()) == 0
    assert sorted(decoded.samples, key=repr) == sorted(batch, key=repr)


def test_an_emf_document_follows_the_telemetry_contract() -> None:
    sample = Sample(
        queue="orders",
        event_time=SIM_EPOCH + 1.5,
        requests=10,
        ok=7,
        throttled=2,
        server_errors=1,
        overloaded=0,
        latency_ms_sum=800.0,
        latency_count=10,
        invocation_ms=800.0,
        downstream="payments",
    )
    document = emf_document(sample)
    directive = document["_aws"]["CloudWatchMetrics"][0]
    assert document["_aws"]["Timestamp"] == round((SIM_EPOCH + 1.5) * 1000)
    assert directive["Namespace"] == "QueueMesh"
    assert directive["Dimensions"] == [["QueueName", "Downstream"]]
    assert (document["Downstream2xx"], document["Downstream429"], document["Downstream5xx"]) == (
        7,
        2,
        1,
    )
    assert document["InvocationDurationMs"] == 800.0
    assert {metric["Name"] for metric in directive["Metrics"]} >= {
        "DownstreamRequests",
        "Downstream429",
        "InvocationDurationMs",
    }


def test_records_are_in_arrival_order_with_growing_sequence_numbers() -> None:
    first = Sample(queue="a", event_time=SIM_EPOCH + 5, requests=1, ok=1)
    second = Sample(queue="b", event_time=SIM_EPOCH + 1, requests=1, ok=1)
    lines = record_deliveries([(SIM_EPOCH + 9, first), (SIM_EPOCH + 3, second)])
    assert [line.arrival for line in lines] == [SIM_EPOCH + 3, SIM_EPOCH + 9]
    assert int(lines[0].sequence) < int(lines[1].sequence)
    assert decode_record_data(lines[0].data).samples == [second]


def test_written_recordings_read_back(tmp_path: Path) -> None:
    sample = Sample(queue="orders", event_time=SIM_EPOCH, requests=3, ok=3)
    lines = record_deliveries([(SIM_EPOCH + 1.25, sample)] * 3)
    path = tmp_path / "r.jsonl"
    assert write_recording(lines, path) == 3
    assert read_recording(path).records == lines
    raw = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    assert set(raw) == {"arrival", "shard", "sequence", "partition_key", "data"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "line 2: not JSON"),
        ("[]", "line 2: must be a JSON object"),
        ('{"arrival": "soon"}', "line 2: arrival must be epoch seconds"),
        (
            '{"arrival": 1.8e9, "shard": "s", "sequence": "12a", "partition_key": "k", "data": ""}',
            "line 2: sequence must be 1..129 decimal digits",
        ),
        (
            '{"arrival": 1.8e9, "shard": "s", "sequence": "1", "partition_key": "k", "data": "@@"}',
            "line 2: data is not base64",
        ),
    ],
)
def test_a_bad_line_is_named(text: str, message: str) -> None:
    good = RecordedLine(1.8e9, "shardId-0", "1", "k", b"x").to_json()
    with pytest.raises(RecordingError, match=message):
        read_recording(io.StringIO(f"{good}\n{text}\n"))


def test_a_simulated_run_records_every_invocation() -> None:
    result = simulate(load_scenario("capacity-drop"), QueueMeshPolicy())
    lines = record_deliveries(
        (SIM_EPOCH + delivery.arrival, delivery.sample) for delivery in result.telemetry
    )
    decoded = decode_kinesis_event(kinesis_event(lines))
    assert sum(sample.requests for sample in decoded.samples) == result.queues["orders"].calls_total
