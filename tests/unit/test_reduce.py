"""The reducing stage: per-(queue, second) totals, the reduced record, the reducer Lambda, and
a queue's evidence split over shards decided whole."""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.ledger import InMemoryLedger
from controller.loop import ControlLoop
from controller.model import Sample
from controller.policy import memory_type
from controller.reduce import Reducer, reduce_samples
from controller.reducer_app import ReducerApp
from controller.schema import (
    CONTROLLER_NAMESPACE,
    CONTROLLER_REASON_DIMENSION,
    CONTROLLER_SKIPPED,
    HealthMetric,
)
from controller.settings import PolicyParams
from controller.stream import InMemorySink
from controller.telemetry import DecodeResult, reduced
from controller.window import QueueSecond, QueueWindow, Quota
from load.recording import RecordedLine
from load.recording import kinesis_event as recorded_event
from tests.factories import kinesis_event, mapped, registered, sample

SHARD = "shardId-000000000000"

samples_strategy = st.lists(
    st.builds(
        Sample,
        queue=st.sampled_from(["orders", "invoices"]),
        event_time=st.floats(1000.0, 1030.0),
        requests=st.integers(0, 50),
        ok=st.integers(0, 50),
        throttled=st.integers(0, 50),
        server_errors=st.integers(0, 5),
        overloaded=st.none() | st.integers(0, 5),
        latency_ms_sum=st.floats(0, 1e5),
        latency_count=st.integers(0, 50),
        retry_after_s=st.floats(0, 60),
        invocation_ms=st.none() | st.floats(0, 5000),
        timed_out=st.integers(0, 3),
        quota_remaining=st.none() | st.integers(0, 100).map(float),
        quota_limit=st.none() | st.just(100.0),
        quota_reset_s=st.none() | st.floats(0, 1),
        downstream=st.none() | st.sampled_from(["api", "db"]),
        throttled_rate=st.integers(0, 3),
        throttled_concurrency=st.integers(0, 3),
    ),
    max_size=30,
)


@given(samples_strategy)
def test_a_window_of_reduced_seconds_holds_what_a_window_of_the_samples_holds(
    samples: list[Sample],
) -> None:
    by_sample, by_second = QueueWindow(), QueueWindow()
    for queue_second in reduce_samples(samples):
        if queue_second.queue == "orders":
            assert by_second.add(queue_second)
    for one in samples:
        if one.queue == "orders":
            assert by_sample.add(one)
    whole, summed = by_sample.stats(990.0, 1040.0), by_second.stats(990.0, 1040.0)
    counts = ("samples", "requests", "ok", "pressure", "throttled", "timed_samples")
    for name in (*counts, "throttled_rate", "throttled_concurrency"):
        assert getattr(whole, name) == getattr(summed, name)
    for name in ("latency_ms_sum", "busy_ms", "retry_after_s"):
        assert math.isclose(getattr(whole, name), getattr(summed, name), abs_tol=1e-6)
    assert whole.newest_event_time == summed.newest_event_time
    announcing = [one.event_time for one in samples if one.queue == "orders"]
    if len(set(announcing)) == len(announcing):  # a tie's winner is the order of arrival
        assert by_second.quota == by_sample.quota
    if len({one.downstream for one in samples if one.queue == "orders"} - {None}) <= 1:
        # The group law reads the queue's downstream: the same behind the reducing stage.
        assert by_second.downstream == by_sample.downstream


@given(samples_strategy)
def test_reduced_records_read_back_as_written(samples: list[Sample]) -> None:
    seconds = reduce_samples(samples)
    records = reduced.encode(seconds, f"{SHARD}:1-9")
    assert {record.queue for record in records} == {s.queue for s in seconds}
    for record in records:
        # Kinesis takes keys of 1-256 characters; a queue naming no downstream keeps its own.
        assert 1 <= len(record.partition_key) <= 256
        named = [s for s in seconds if s.queue == record.queue and s.downstream is not None]
        newest = max(named, key=lambda s: s.event_time).downstream if named else None
        assert record.partition_key == reduced.partition_key(record.queue, newest)
    skipped: Counter[str] = Counter()
    decoded = [reduced.decode(record.data, skipped) for record in records]
    assert not skipped
    assert [s for record in decoded if record is not None for s in record.seconds] == seconds
    assert len({record.record_id for record in decoded if record is not None}) == len(records)


def test_the_newest_quota_is_kept_as_a_window_keeps_it_and_named_429s_summed() -> None:
    older = Sample(
        "orders", 1000.5, throttled=2, throttled_rate=2, quota_remaining=3.0, quota_limit=100.0
    )
    newer = Sample(
        "orders",
        1000.6,
        quota_remaining=40.0,
        quota_limit=100.0,
        quota_reset_s=0.4,
        downstream="api",
    )
    [second] = reduce_samples([newer, older])
    assert second.quota == Quota("api", 1000.6, 40.0, 100.0, None, 1001.0)
    assert (second.totals.throttled, second.totals.throttled_rate) == (2, 2)
    whole, reduced_whole = QueueWindow(), QueueWindow()
    for raw in (newer, older):
        whole.add(raw)
    reduced_whole.add(second)
    assert reduced_whole.quota == whole.quota
    [plain] = reduce_samples([Sample("orders", 1000.5, ok=1)])
    assert plain.quota is None


def test_more_seconds_than_a_record_holds_go_in_several_records() -> None:
    samples = [sample(at=1000.0 + s, invocation_ms=None) for s in range(700)]
    records = reduced.encode(reduce_samples(samples), "s:1-2")
    assert [len(json.loads(record.data)["seconds"]) for record in records] == [600, 100]


def _record(**changes: Any) -> bytes:
    [record] = reduced.encode(reduce_samples([sample(at=1000.9)]), "s:1-1")
    document = json.loads(record.data)
    seconds = document["seconds"][0]
    for key, value in changes.items():
        if key in document:
            document[key] = value
        else:
            seconds[key] = value
    return json.dumps(document).encode()


def test_a_record_with_anything_wrong_is_skipped_whole_and_counted() -> None:
    cases = {
        b"{not json": "bad_payload",
        _record(reduced=2): "bad_payload",
        _record(id=""): "bad_payload",
        _record(queue="no spaces"): "bad_queue_name",
        _record(requests=-1): "bad_value",
        _record(ok=True): "bad_value",
        _record(busy_ms=float("inf")): "bad_value",
        _record(samples=0): "bad_value",
        _record(quota_remaining="3"): "bad_value",
        _record(downstream=7): "bad_dimension",
        _record(second=1.5): "bad_timestamp",
        _record(newest_event_time=10.0): "bad_timestamp",
    }
    for data, reason in cases.items():
        skipped: Counter[str] = Counter()
        assert reduced.decode(data, skipped) is None, data
        assert skipped == {reason: 1}, data


@given(
    st.binary(max_size=200)
    | st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(
                st.sampled_from(["reduced", "id", "queue", "seconds", "second", "samples"]),
                children,
                max_size=4,
            )
        ),
        max_leaves=12,
    ).map(lambda value: json.dumps(value).encode())
)
def test_the_decoder_never_raises_and_skips_with_one_reason(data: bytes) -> None:
    skipped: Counter[str] = Counter()
    decoded = reduced.decode(b"{" + data, skipped)
    assert (decoded is None) == (sum(skipped.values()) == 1)


def test_a_re_sent_log_event_is_summed_once_after_it_was_forwarded() -> None:
    reducer = Reducer()
    event = kinesis_event([sample(at=1000.9), sample(at=1001.9)])
    decoded = _decoded(event)
    first = reducer.reduce(decoded, now=1010.0)
    assert sum(s.totals.samples for s in first.seconds) == 2
    # Not forwarded yet (the put failed): the retry sums it again.
    assert sum(s.totals.samples for s in reducer.reduce(_decoded(event), 1010.0).seconds) == 2
    reducer.forwarded(first.log_events["orders"], now=1010.0)
    again = _decoded(event)
    assert reducer.reduce(again, 1010.0).seconds == []
    assert again.skipped["duplicate_log_event"] == 2


def _decoded(event: dict[str, Any]) -> DecodeResult:
    from controller.telemetry import decode_kinesis_event

    return decode_kinesis_event(event)


def test_queues_naming_one_downstream_share_one_partition_key() -> None:
    """A group (the queues sharing a downstream) is decided whole by the one controller lane
    its partition key lands on; a queue naming none keeps its own key."""
    long_name = "https://" + "a" * 1000
    samples = [
        replace(sample("orders", 1000.9), downstream="payments"),
        replace(sample("refunds", 1001.9), downstream="payments"),
        replace(sample("reports", 1000.9), downstream=long_name),
        sample("invoices", 1000.9),
    ]
    keys = {r.queue: r.partition_key for r in reduced.encode(reduce_samples(samples), "s:1-4")}
    assert keys["orders"] == keys["refunds"] and keys["orders"] not in ("orders", "refunds")
    assert keys["invoices"] == "invoices"
    assert keys["reports"] not in (keys["orders"], "reports") and len(keys["reports"]) <= 256


def test_a_queue_is_keyed_by_the_newest_downstream_it_named() -> None:
    """One key for all of a queue's records from one batch: the newest downstream named (a
    second naming none does not move it back to the queue's own key)."""
    samples = [
        replace(sample("orders", 1000.9), downstream="old-api"),
        replace(sample("orders", 1002.9), downstream="new-api"),
        sample("orders", 1003.9),
    ]
    [record] = reduced.encode(reduce_samples(samples), "s:1-3")
    assert record.partition_key == reduced.partition_key("orders", "new-api")


def test_a_batch_whose_totals_were_not_all_put_is_retried_for_those_alone() -> None:
    sink = InMemorySink()
    app = ReducerApp(sink, InMemoryLedger(memory_types=memory_type), clock=lambda: 1010.0)
    event = kinesis_event([sample("orders", 1000.9), sample("invoices", 1000.9)], first_sequence=5)
    sink.refuse = {"invoices"}
    assert app.handle(event, None) == {"batchItemFailures": [{"itemIdentifier": "5"}]}
    assert [record.queue for record in sink.records] == ["orders"]
    sink.refuse = set()
    assert app.handle(event, None) == {"batchItemFailures": []}
    assert [record.queue for record in sink.records] == ["orders", "invoices"]


def test_the_reducer_reports_what_it_could_not_read_as_the_controllers_health() -> None:
    """Telemetry is read in the reducer now: its skips feed the same metrics (and alarms) as
    the controller's own."""
    printed: list[str] = []
    app = ReducerApp(
        InMemorySink(),
        InMemoryLedger(memory_types=memory_type),
        clock=lambda: 1010.0,
        emit=printed.append,
    )
    event = kinesis_event([sample("orders", 1000.9), sample("orders", 5000.0)], first_sequence=5)
    event["Records"].append({"kinesis": {"data": "not base64!", "sequenceNumber": "9"}})
    app.handle(event, None)
    documents = [json.loads(line) for line in printed]
    skips = {
        document[CONTROLLER_REASON_DIMENSION]: document[CONTROLLER_SKIPPED]
        for document in documents
        if CONTROLLER_SKIPPED in document
    }
    assert skips == {"bad_base64": [1.0], "samples_from_future": [1.0]}
    [health] = [document for document in documents if CONTROLLER_SKIPPED not in document]
    assert health["_aws"]["CloudWatchMetrics"][0]["Namespace"] == CONTROLLER_NAMESPACE
    assert health[HealthMetric.TELEMETRY_UNREADABLE] == [1.0]
    assert health[HealthMetric.SAMPLES_NOT_WINDOWED] == [1.0]
    assert health[HealthMetric.BATCHES_RETRIED] == [0.0]
    printed.clear()
    app.handle(kinesis_event([sample("orders", 1001.9)], first_sequence=20), None)
    assert printed == []  # a clean batch prints nothing


# -- one queue's evidence over several shards ---------------------------------------------------
def _storm() -> list[Sample]:
    """Ten seconds of orders at 40 invocations of one second each at once, a fifth throttled."""
    return [
        sample(at=100.0 + s + 0.95, ok=8, throttled=2, invocation_ms=1000.0)
        for s in range(10)
        for _ in range(40)
    ]


def _controller() -> ControllerApp:
    ledger = registered(registered(InMemoryLedger(memory_types=memory_type)), "invoices")
    actuator = mapped(mapped(InMemoryActuator()), "invoices")
    loop = ControlLoop(ledger, actuator, PolicyParams())
    return ControllerApp(loop, clock=lambda: 111.0, emit=lambda _: None)


def _reduced_event(records: list[reduced.ReducedRecord], first: int = 1) -> dict[str, Any]:
    return recorded_event(
        [
            RecordedLine(111.0, SHARD, str(first + n), record.partition_key, record.data)
            for n, record in enumerate(records)
        ]
    )


def test_evidence_split_over_four_shards_is_decided_whole() -> None:
    storm = _storm()
    whole = _controller()
    [expected] = whole.process_kinesis(kinesis_event(storm), 1e12).decisions
    # CloudWatch Logs spreads the documents over four shards; a reducer reads each.
    reduced_records = []
    for shard in range(4):
        sink = InMemorySink()
        share = kinesis_event(storm[shard::4], shard=f"shardId-00000000000{shard}")
        ReducerApp(sink, InMemoryLedger(memory_types=memory_type), clock=lambda: 111.0).handle(
            share, None
        )
        reduced_records += sink.records
    split = _controller()
    [decision] = split.process_kinesis(_reduced_event(reduced_records), 1e12).decisions
    assert (decision.action, decision.target) == (expected.action, expected.target)
    assert decision.target < 100

    def in_use(app: ControllerApp) -> float | None:
        return app.loop.book.window("orders").stats(99.0, 109.0).in_use(10.0)

    assert in_use(split) == in_use(whole) == 40.0
    # What one shard's invocation alone saw before the reducing stage: a quarter of it.
    alone = _controller()
    alone.process_kinesis(kinesis_event(storm[::4]), 1e12)
    assert in_use(alone) == 10.0


def test_partitions_of_one_shard_read_by_parallel_batches_are_not_taken_for_redeliveries() -> None:
    """With a parallelization factor, one shard's records reach the controller in several
    concurrent batches, each in order only per partition key (queue)."""
    orders = reduced.encode(reduce_samples(_storm()), "a:1-1")
    invoices = reduced.encode(reduce_samples([sample("invoices", 109.0)]), "a:2-2")
    app = _controller()
    later = _reduced_event(orders, first=10)
    earlier = _reduced_event(invoices, first=5)
    assert app.process_kinesis(later, 1e12).redelivered == 0
    outcome = app.process_kinesis(earlier, 1e12)
    assert (outcome.redelivered, outcome.samples) == (0, 1)
    # A retried batch, and the same records put again under new sequence numbers, count once.
    assert app.process_kinesis(later, 1e12).redelivered == 1
    again = app.process_kinesis(_reduced_event(orders, first=20), 1e12)
    assert (again.samples, again.skipped["duplicate_record"]) == (0, 1)
    assert app.loop.counters["samples_windowed"] == 401


def test_reduced_seconds_window_like_the_samples_they_sum() -> None:
    second = QueueSecond("orders", 1000, reduce_samples([sample(at=1000.9)])[0].totals)
    assert (second.started_at, second.event_time, second.documents) == (1000.0, 1000.9, 1)


def test_the_kinesis_sink_retries_the_entries_a_shard_refused() -> None:
    import boto3
    from botocore.stub import Stubber

    from controller.stream import KinesisSink

    client = boto3.client(
        "kinesis", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    records = reduced.encode(
        reduce_samples([sample("orders", 1000.9), sample("invoices", 1000.9)]), "s:1-1"
    )
    sink = KinesisSink("reduced", client, sleep=lambda _: None)
    with Stubber(client) as stub:
        refused = {"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "slow"}
        stub.add_response(
            "put_records",
            {"FailedRecordCount": 1, "Records": [refused, {"SequenceNumber": "1", "ShardId": "a"}]},
        )
        stub.add_response(
            "put_records",
            {"Records": [{"SequenceNumber": "2", "ShardId": "a"}]},
            {
                "StreamName": "reduced",
                "Records": [{"Data": records[0].data, "PartitionKey": "invoices"}],
            },
        )
        assert sink.put(records, deadline=math.inf) == set()
        stub.assert_no_pending_responses()
    with Stubber(client) as stub:
        for _ in range(5):
            stub.add_response("put_records", {"FailedRecordCount": 1, "Records": [refused]})
        assert sink.put(records[:1], deadline=math.inf) == {"invoices"}
