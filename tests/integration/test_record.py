"""`queuemesh record`: arrival-order merging, polling limits, clean stops, and a real stream."""

from __future__ import annotations

import base64
import io
import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st

from load.record import (
    MAX_CONSECUTIVE_THROTTLES,
    ArrivalMerger,
    Recorder,
    RecordError,
    arrival_order,
)
from load.recording import RecordedLine
from stack.cli import main

CONTRACT_KEYS = {"arrival", "shard", "sequence", "partition_key", "data"}


def _record(shard: str, sequence: int, arrival: float) -> RecordedLine:
    return RecordedLine(arrival, shard, str(sequence), "key", f"{shard}/{sequence}".encode())


@st.composite
def shard_feeds(draw: st.DrawFn) -> list[tuple[str, list[float]]]:
    """A few shards, each with non-decreasing arrival times."""
    shards = []
    for index in range(draw(st.integers(1, 4))):
        gaps = draw(st.lists(st.floats(0, 5, allow_nan=False), max_size=12))
        arrivals, now = [], draw(st.floats(0, 10, allow_nan=False))
        for gap in gaps:
            now += gap
            arrivals.append(now)
        shards.append((f"shardId-{index:012d}", arrivals))
    return shards


@settings(max_examples=60)
@given(feeds=shard_feeds(), seed=st.integers(0, 2**16))
def test_merger_releases_every_record_once_in_arrival_order(
    feeds: list[tuple[str, list[float]]], seed: int
) -> None:
    rng = random.Random(seed)
    merger = ArrivalMerger()
    pending = {shard: [_record(shard, i + 1, t) for i, t in enumerate(ts)] for shard, ts in feeds}
    for shard in pending:
        merger.open_shard(shard)
    out: list[RecordedLine] = []
    # Shards deliver in chunks, interleaved at random, as polls return.
    while any(pending.values()):
        shard = rng.choice([name for name, left in pending.items() if left])
        take = rng.randint(1, 3)
        chunk, pending[shard] = pending[shard][:take], pending[shard][take:]
        merger.add(shard, chunk)
        if not pending[shard]:
            merger.close_shard(shard)
        out.extend(merger.release())
    out.extend(merger.drain())
    everything = [_record(shard, i + 1, t) for shard, ts in feeds for i, t in enumerate(ts)]
    assert out == sorted(everything, key=arrival_order)


def test_merger_holds_records_until_every_open_shard_has_passed_them() -> None:
    merger = ArrivalMerger()
    merger.open_shard("a")
    merger.open_shard("b")
    merger.add("a", [_record("a", 1, 10.0), _record("a", 2, 12.0)])
    assert merger.release() == []  # shard b could still deliver something at 11
    merger.advance("b", 11.0)
    assert [r.sequence for r in merger.release()] == ["1"]
    merger.add("b", [_record("b", 1, 11.5)])
    # Shard b could still deliver another record at 11.5 itself: only earlier ones are final.
    assert merger.release() == []
    assert merger.drain() == [_record("b", 1, 11.5), _record("a", 2, 12.0)]


def test_sequence_numbers_order_as_integers_not_strings() -> None:
    merger = ArrivalMerger()
    merger.open_shard("a")
    merger.add("a", [_record("a", 10, 1.0), _record("a", 9, 1.0)])
    assert [r.sequence for r in merger.drain()] == ["9", "10"]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


def _throttled() -> ClientError:
    return ClientError(
        {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}},
        "GetRecords",
    )


class FakeKinesis:
    """One shard; ``script`` says what each GetRecords call does (records, or an error)."""

    def __init__(self, clock: FakeClock, script: list[Any]) -> None:
        self.clock = clock
        self.script = script
        self.calls: list[float] = []

    def list_shards(self, **_: Any) -> dict[str, Any]:
        return {"Shards": [{"ShardId": "shardId-000000000000"}]}

    def get_shard_iterator(self, **params: Any) -> dict[str, Any]:
        return {"ShardIterator": f"it-{params['ShardIteratorType']}"}

    def get_records(self, **_: Any) -> dict[str, Any]:
        self.calls.append(self.clock.now)
        step = self.script.pop(0) if self.script else []
        if isinstance(step, Exception):
            raise step
        records = [
            {
                "SequenceNumber": str(seq),
                "PartitionKey": "k",
                "Data": b"payload-%d" % seq,
                "ApproximateArrivalTimestamp": datetime.fromtimestamp(seq, UTC),
            }
            for seq in step
        ]
        return {"Records": records, "NextShardIterator": "it-next", "MillisBehindLatest": 0}


def test_throttled_reads_back_off_and_recover_without_losing_records() -> None:
    clock = FakeClock()
    kinesis = FakeKinesis(clock, [[1, 2], _throttled(), _throttled(), _throttled(), [3]])
    out = io.StringIO()
    recorder = Recorder(
        kinesis, "s", out, duration_s=30, clock=clock, wall_clock=clock, sleep=clock.sleep
    )
    totals = recorder.run()
    assert [json.loads(line)["sequence"] for line in out.getvalue().splitlines()] == [
        "1",
        "2",
        "3",
    ]
    assert totals.records == 3
    gaps = [
        later - earlier for earlier, later in zip(kinesis.calls, kinesis.calls[1:], strict=False)
    ]
    # Backoff grows after each consecutive throttle, and no shard is polled faster than 5/s.
    assert gaps[1] < gaps[2] < gaps[3]
    assert min(gaps) >= 0.2


def test_a_large_read_waits_out_the_shards_read_rate() -> None:
    clock = FakeClock()

    class BulkyKinesis(FakeKinesis):
        def get_records(self, **params: Any) -> dict[str, Any]:
            response = super().get_records(**params)
            for record in response["Records"]:
                record["Data"] = b"x" * (1024 * 1024)  # 1 MiB each
            return response

    kinesis = BulkyKinesis(clock, [[1, 2, 3, 4], [5]])
    timing: dict[str, Any] = {"clock": clock, "wall_clock": clock, "sleep": clock.sleep}
    Recorder(kinesis, "s", io.StringIO(), duration_s=10, **timing).run()
    # 4 MiB read: the next read of that shard comes no sooner than 2 s later.
    assert kinesis.calls[1] - kinesis.calls[0] >= 2.0


def test_a_shard_throttled_without_end_stops_with_one_error_and_keeps_the_file() -> None:
    clock = FakeClock()
    script: list[Any] = [[1]] + [_throttled() for _ in range(MAX_CONSECUTIVE_THROTTLES + 1)]
    out = io.StringIO()
    recorder = Recorder(
        FakeKinesis(clock, script), "s", out, clock=clock, wall_clock=clock, sleep=clock.sleep
    )
    with pytest.raises(RecordError, match="throttled"):
        recorder.run()
    assert len(out.getvalue().splitlines()) == 1


def test_ctrl_c_keeps_what_was_read() -> None:
    clock = FakeClock()
    kinesis = FakeKinesis(clock, [[1, 2, 3]])
    out = io.StringIO()

    def interrupted_sleep(seconds: float) -> None:
        raise KeyboardInterrupt

    recorder = Recorder(kinesis, "s", out, clock=clock, wall_clock=clock, sleep=interrupted_sleep)
    totals = recorder.run()
    assert totals.stopped_by == "interrupted"
    assert len(out.getvalue().splitlines()) == 3


def test_idle_shards_are_polled_at_most_once_a_second() -> None:
    clock = FakeClock()
    kinesis = FakeKinesis(clock, [])
    Recorder(
        kinesis, "s", io.StringIO(), duration_s=10, clock=clock, wall_clock=clock, sleep=clock.sleep
    ).run()
    assert 9 <= len(kinesis.calls) <= 11


def test_a_closed_shard_read_to_its_end_stops_the_recording() -> None:
    clock = FakeClock()

    class ClosingKinesis(FakeKinesis):
        def get_records(self, **params: Any) -> dict[str, Any]:
            response = super().get_records(**params)
            if not self.script:
                response["NextShardIterator"] = None  # merged away by a reshard
            return response

    out = io.StringIO()
    kinesis = ClosingKinesis(clock, [[1, 2], [3]])
    totals = Recorder(kinesis, "s", out, clock=clock, wall_clock=clock, sleep=clock.sleep).run()
    assert totals.stopped_by == "every shard is closed"
    assert totals.records == 3


def test_progress_reports_records_bytes_and_shards() -> None:
    clock = FakeClock()
    heard: list[tuple[int, int, str]] = []
    kinesis = FakeKinesis(clock, [[1, 2, 3]])
    recorder = Recorder(
        kinesis,
        "s",
        io.StringIO(),
        duration_s=25,
        progress=lambda *step: heard.append(step),
        clock=clock,
        sleep=clock.sleep,
    )
    recorder.run()
    # No record limit, so no total; the detail names the bytes and every shard.
    assert heard[-1] == (3, 0, "records, 27 B [shardId-000000000000: 3 rec / 27 B]")
    assert [done for done, _, _ in heard] == sorted(done for done, _, _ in heard)


# --- against the local emulator -------------------------------------------------------------


@pytest.fixture
def moto_url() -> Iterator[str]:
    from stack.local.emulator import EmbeddedAws

    with EmbeddedAws() as aws:
        yield aws.endpoint


def _kinesis(url: str) -> Any:
    return boto3.client(
        "kinesis",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def test_record_command_writes_the_contract_format(moto_url: str, tmp_path: Path) -> None:
    kinesis = _kinesis(moto_url)
    kinesis.create_stream(StreamName="telemetry", ShardCount=2)
    sent = {}
    for index in range(12):
        data = bytes([index, 0, 255]) + b"record-%d" % index
        response = kinesis.put_record(StreamName="telemetry", Data=data, PartitionKey=f"pk{index}")
        sent[(response["ShardId"], response["SequenceNumber"])] = (f"pk{index}", data)
    out = tmp_path / "telemetry.jsonl"

    code = main(
        [
            "record",
            "--stream",
            "telemetry",
            "--out",
            str(out),
            "--from-start",
            "--max-records",
            "12",
            "--duration",
            "20",
            "--quiet",
            "--endpoint-url",
            moto_url,
        ]
    )

    assert code == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert all(set(line) == CONTRACT_KEYS for line in lines)
    got = {
        (line["shard"], line["sequence"]): (line["partition_key"], base64.b64decode(line["data"]))
        for line in lines
    }
    assert got == sent
    assert {line["shard"] for line in lines} == {"shardId-000000000000", "shardId-000000000001"}
    arrivals = [line["arrival"] for line in lines]
    assert all(isinstance(value, float) for value in arrivals)
    assert arrivals == sorted(arrivals)


def test_record_of_a_missing_stream_is_one_line(
    moto_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "never.jsonl"
    code = main(["record", "--stream", "nope", "--out", str(out), "--endpoint-url", moto_url])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "stream 'nope' not found" in err
    assert "Traceback" not in err
    assert not out.exists()


def test_record_with_an_unreachable_endpoint_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unreachable = "http://127.0.0.1:9"
    code = main(
        [
            "record",
            "--stream",
            "s",
            "--out",
            str(tmp_path / "x.jsonl"),
            "--endpoint-url",
            unreachable,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "cannot reach http://127.0.0.1:9" in err


def test_a_recorded_stream_replays_through_the_controller(
    moto_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gzip
    import time

    from controller.model import Sample
    from tests.factories import emf_line

    kinesis = _kinesis(moto_url)
    kinesis.create_stream(StreamName="worker-logs", ShardCount=1)
    now = time.time()
    for batch in range(3):
        samples = [
            Sample("orders", now - 12 + batch * 4 + i * 0.4, 10, 6, 4, invocation_ms=300.0)
            for i in range(10)
        ]
        payload = {
            "messageType": "DATA_MESSAGE",
            "logGroup": "/aws/lambda/orders-worker",
            "logEvents": [
                {"id": str(i), "timestamp": int(s.event_time * 1000), "message": emf_line(s)}
                for i, s in enumerate(samples)
            ],
        }
        data = gzip.compress(json.dumps(payload).encode())
        kinesis.put_record(StreamName="worker-logs", Data=data, PartitionKey="orders")
    out = tmp_path / "incident.jsonl"
    source = ["--stream", "worker-logs", "--from-start", "--endpoint-url", moto_url]
    limits = ["--max-records", "3", "--duration", "20", "--quiet"]
    recorded = main(["record", *source, "--out", str(out), *limits])
    assert recorded == 0

    assert main(["replay", str(out), "--json", "--algorithm", "aimd"]) == 0
    decisions = json.loads(capsys.readouterr().out)
    cuts = [d for d in decisions if d["action"] == "MULTIPLICATIVE_DECREASE"]
    assert cuts and cuts[0]["queue"] == "orders"
    assert (cuts[0]["previous"], cuts[0]["target"]) == (100, 50)
