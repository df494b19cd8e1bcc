"""Controllers that scale out by queue: a container handed a batch of a reduced shard it has not
read continuously reads the shard back first, so a queue's evidence split over containers is
decided as one container would decide it (docs/architecture.md, "Scaling out the controller")."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from hypothesis import given
from hypothesis import strategies as st

from controller.actuator import InMemoryActuator, LambdaActuator, lane_pace
from controller.app import ControllerApp
from controller.constants import CONTROL_PLANE_CALLS_PER_S, CONTROL_PLANE_WINDOW_MARGIN_S
from controller.handler import invocation_pace, lanes
from controller.ledger import InMemoryLedger
from controller.loop import ControlLoop
from controller.model import Decision
from controller.policy import memory_type
from controller.ports import StreamStart
from controller.reduce import reduce_samples
from controller.settings import PolicyParams
from controller.stream import InMemoryHistory, KinesisHistory
from controller.telemetry import reduced
from load.clock import HandClock
from load.recording import RecordedLine
from load.recording import kinesis_event as recorded_event
from load.sim.control_plane import SimControlPlane
from tests.factories import mapped, registered, sample

SHARD = "shardId-000000000001"
START = 1000.0


def _batches(seconds: int = 40) -> list[tuple[float, dict[str, Any]]]:
    """One reduced record a second of orders: 20 invocations of a second each, at ease for 10 s,
    then a fifth of their calls throttled; each record a batch, in the shard's order."""
    batches = []
    for second in range(seconds):
        at = START + second
        throttled = 2 if second >= 10 else 0
        samples = [
            sample(at=at + 0.95, ok=10 - throttled, throttled=throttled, invocation_ms=1000.0)
            for _ in range(20)
        ]
        [record] = reduced.encode(reduce_samples(samples), f"telemetry:{second}")
        line = RecordedLine(at + 2.0, SHARD, str(100 + 7 * second), "orders", record.data)
        batches.append((at + 2.0, recorded_event([line])))
    return batches


def _container(
    ledger: InMemoryLedger, actuator: InMemoryActuator, clock: HandClock, **wiring: Any
) -> ControllerApp:
    loop = ControlLoop(ledger, actuator, PolicyParams())
    return ControllerApp(loop, clock=clock, emit=lambda _: None, **wiring)


def _run(containers: int, history: InMemoryHistory | None) -> list[tuple[float, str, int]]:
    """The batches handed in turn to ``containers`` containers sharing one ledger and one
    mapping; each decision as (time, action, target)."""
    ledger = registered(InMemoryLedger(memory_types=memory_type))
    actuator = mapped(InMemoryActuator())
    clock = HandClock(START)
    wiring = {} if history is None else {"history": history}
    apps = [_container(ledger, actuator, clock, **wiring) for _ in range(containers)]
    decisions: list[Decision] = []
    for number, (at, event) in enumerate(_batches()):
        clock.now = at
        if history is not None:
            history.deliver(event)
        decisions += apps[number % containers].process_kinesis(event, 1e12).decisions
    return [(d.new_state.last_evaluated_at, d.action.value, d.target) for d in decisions]


def test_a_queues_evidence_split_across_two_containers_decides_as_one_would() -> None:
    one = _run(1, None)
    assert any(target < 100 for _, _, target in one), one
    history = InMemoryHistory()
    assert _run(2, history) == one
    # Each container read back only what it had not read: after its first, one read a batch.
    assert history.reads == 40
    # Without reading back, each container decides on every other second.
    assert _run(2, None) != one


def test_a_shard_that_cannot_be_read_back_starts_its_queues_afresh() -> None:
    ledger = registered(InMemoryLedger(memory_types=memory_type))
    actuator = mapped(InMemoryActuator())
    clock, history = HandClock(START), InMemoryHistory()
    first, second = (_container(ledger, actuator, clock, history=history) for _ in range(2))
    batches = _batches(6)
    for at, event in batches[:5]:
        clock.now = at
        history.deliver(event)
        first.process_kinesis(event, 1e12)
    history.unreadable = True
    clock.now, event = batches[5]
    second.process_kinesis(event, 1e12)
    # It holds its own batch alone, not a window with the other container's seconds missing.
    window = second.loop.book.window("orders")
    assert len(window) == 1
    assert second.loop.counters["windows_restarted"] == 1
    # A batch retried in the same container needs no reading back.
    history.unreadable = False
    reads = history.reads
    first.process_kinesis(batches[4][1], 1e12)
    assert history.reads == reads


def test_history_other_containers_were_handed_is_windowed_not_decided_nor_counted() -> None:
    ledger = registered(registered(InMemoryLedger(memory_types=memory_type)), "invoices")
    actuator = mapped(mapped(InMemoryActuator()), "invoices")
    clock, history = HandClock(START), InMemoryHistory()
    other, this = (_container(ledger, actuator, clock, history=history) for _ in range(2))
    [(at, orders)] = _batches(1)
    clock.now = at
    other.process_kinesis(history.deliver(orders), 1e12)
    [record] = reduced.encode(reduce_samples([sample("invoices", at + 0.5)]), "telemetry:x")
    line = RecordedLine(at + 1.0, SHARD, "200", "invoices", record.data)
    outcome = this.process_kinesis(history.deliver(recorded_event([line])), 1e12)
    assert [d.queue for d in outcome.decisions] == ["invoices"]
    assert this.loop.book.window("orders").stats(0.0, 1e12).samples == 20
    assert this.loop.counters["samples_windowed"] == 1


def test_the_kinesis_history_reads_a_shard_up_to_the_batch_within_its_calls() -> None:
    client = boto3.client(
        "kinesis", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    history = KinesisHistory("reduced", client, sleep=lambda _: None, max_calls=2)

    def record(sequence: int) -> dict[str, Any]:
        return {"SequenceNumber": str(sequence), "Data": b"{}", "PartitionKey": "orders"}

    with Stubber(client) as stub:
        stub.add_response(
            "get_shard_iterator",
            {"ShardIterator": "i1"},
            {
                "StreamName": "reduced",
                "ShardId": SHARD,
                "ShardIteratorType": "AT_SEQUENCE_NUMBER",
                "StartingSequenceNumber": "5",
            },
        )
        stub.add_response("get_records", {"Records": [record(5)], "NextShardIterator": "i2"})
        stub.add_response(
            "get_records", {"Records": [record(6), record(9)], "NextShardIterator": "i3"}
        )
        read = history.read(SHARD, StreamStart(sequence=5), 9, 1e12)
        stub.assert_no_pending_responses()
    assert read.complete
    assert [r["kinesis"]["sequenceNumber"] for r in read.records] == ["5", "6"]
    assert read.records[0]["eventID"] == f"{SHARD}:5"
    with Stubber(client) as stub:
        stub.add_response("get_shard_iterator", {"ShardIterator": "i1"})
        stub.add_response("get_records", {"Records": [record(5)], "NextShardIterator": "i2"})
        stub.add_client_error("get_records", "ProvisionedThroughputExceededException")
        stub.add_client_error("get_records", "ProvisionedThroughputExceededException")
        throttled = history.read(SHARD, StreamStart(time=START), 9, 1e12)
    assert not throttled.complete


# -- the control plane, shared by the invocations that may run at once --------------------------
@given(st.integers(1, 10), st.integers(1, 10))
def test_the_lanes_and_the_tick_together_keep_to_the_controllers_ceiling(
    shards: int, factor: int
) -> None:
    env = {
        "QUEUEMESH_REDUCED_SHARDS": str(shards),
        "QUEUEMESH_CONTROLLER_PARALLELIZATION": str(factor),
    }
    calls, per_s = invocation_pace({"Records": []}, env)
    tick_calls, tick_per_s = invocation_pace({"detail-type": "Scheduled Event"}, env)
    lanes = shards * factor
    assert calls >= 1
    assert lanes * calls / per_s + tick_calls / tick_per_s <= CONTROL_PLANE_CALLS_PER_S + 1e-9
    if lanes <= 10:  # the lanes' share is spent whole
        assert lanes * calls / per_s == CONTROL_PLANE_CALLS_PER_S - tick_calls


def test_a_lane_count_that_is_not_a_whole_number_fails_the_cold_start_naming_it() -> None:
    with pytest.raises(RuntimeError, match=r"^QUEUEMESH_REDUCED_SHARDS='two': "):
        lanes({"QUEUEMESH_REDUCED_SHARDS": "two"})


def test_a_paced_actuator_keeps_to_its_share() -> None:
    clock = HandClock(START)

    def sleep(seconds: float) -> None:
        clock.now += seconds

    plane = SimControlPlane(mapped(InMemoryActuator()), clock)
    actuator = LambdaActuator(plane, clock=clock, sleep=sleep)
    actuator.pace(*lane_pace(4))  # 2 calls in any 0.8 s
    for _ in range(5):
        actuator.read("esm-orders", 1e12)
    assert clock.now - START == pytest.approx(1.6 + 2 * CONTROL_PLANE_WINDOW_MARGIN_S)
