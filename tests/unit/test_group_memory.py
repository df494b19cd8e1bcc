"""A group's memory shared through the ledger: batches of queues sharing one downstream handed
in turn to several containers (and the tick to yet another) decide what one container decides
(docs/algorithms.md, "Groups: queues sharing one downstream"; docs/ledger.md, the MEMORY
item)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import ANY, Stubber
from hypothesis import given
from hypothesis import strategies as st

from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.executor import DisplayExecutor
from controller.groups import GroupMemory
from controller.ledger import (
    DynamoLedger,
    InMemoryLedger,
    decode_group_memory,
    encode_group_memory,
    group_memory_key,
)
from controller.ledger.codec import encode_state
from controller.ledger.memory import MemoryCodec
from controller.loop import BatchResult, ControlLoop
from controller.model import Decision, Sample
from controller.policy import memory_type
from controller.ports import StoredGroupMemory, VersionConflict
from controller.reduce import reduce_samples
from controller.schema import HealthMetric
from controller.settings import PolicyParams
from controller.stream import InMemoryHistory
from controller.telemetry import reduced
from load.clock import HandClock
from load.recording import RecordedLine
from load.recording import kinesis_event as recorded_event
from tests.factories import health_count, mapped, registered
from tests.unit.test_catch_up import START

SHARD = "shardId-000000000001"
QUEUES = ("orders", "refunds")
GROUP = "api"
# The downstream's calls a second, and each queue's invocations a second (two calls each).
CAPACITY = 30
INVOCATIONS = 12


def _second(queue: str, at: float, refused_share: float) -> list[Sample]:
    """The queue's invocations that started in the second at ``at``: two calls each, the
    downstream refusing ``refused_share`` of them."""
    refused = round(refused_share * 2 * INVOCATIONS)
    samples = []
    for index in range(INVOCATIONS):
        throttled = (refused > index) + (refused > index + INVOCATIONS)
        samples.append(
            Sample(
                queue=queue,
                event_time=at + 0.95,
                requests=2,
                ok=2 - throttled,
                throttled=throttled,
                invocation_ms=1000.0,
                downstream=GROUP,
            )
        )
    return samples


def _batches(seconds: int = 90) -> list[tuple[float, dict[str, Any]]]:
    """A second a batch of both queues' reduced records, on one shard: each sends 24 calls a
    second (48 together) to a downstream taking 30 from the 10th second to the 40th, so it
    refuses the rest; after that it takes them all (the group probes its estimate up again)."""
    batches = []
    for second in range(seconds):
        at = START + second
        sent = 2 * 2 * INVOCATIONS
        refused_share = max(0.0, 1 - CAPACITY / sent) if 10 <= second < 40 else 0.0
        lines = []
        for number, queue in enumerate(QUEUES):
            samples = _second(queue, at, refused_share)
            [record] = reduced.encode(reduce_samples(samples), f"telemetry:{queue}:{second}")
            sequence = str(100 + 7 * second + number)
            lines.append(RecordedLine(at + 2.0, SHARD, sequence, queue, record.data))
        batches.append((at + 2.0, recorded_event(lines)))
    return batches


def _shared() -> tuple[InMemoryLedger, InMemoryActuator]:
    ledger = InMemoryLedger(memory_types=memory_type)
    actuator = InMemoryActuator()
    for queue in QUEUES:
        registered(ledger, queue)
        mapped(actuator, queue, concurrency=20)
    return ledger, actuator


def _container(
    ledger: Any,
    actuator: InMemoryActuator,
    clock: HandClock,
    history: InMemoryHistory,
    emit: Callable[[str], None] = lambda _: None,
) -> ControllerApp:
    """A warm container running the default algorithm, whose memory a HOLD that changes it
    writes too (``AdaptiveMemory.written_when_held``): the containers share the queues' state
    and the group's memory through the ledger alone."""
    loop = ControlLoop(ledger, actuator, PolicyParams())
    return ControllerApp(loop, clock=clock, emit=emit, history=history)


# A decision as compared: (time, queue, action, target).
Decided = tuple[float, str, str, int]


def _decided(decisions: list[Decision]) -> list[Decided]:
    return [(d.new_state.last_evaluated_at, d.queue, d.action.value, d.target) for d in decisions]


def _run(containers: int, ledger: Any = None) -> tuple[list[Decided], list[ControllerApp]]:
    """The batches handed in turn to ``containers`` containers sharing one ledger: each
    decision."""
    if ledger is None:
        ledger, actuator = _shared()
    else:
        actuator = _shared()[1]
        for queue in QUEUES:
            registered(ledger, queue)
    clock, history = HandClock(START), InMemoryHistory()
    apps = [_container(ledger, actuator, clock, history) for _ in range(containers)]
    decisions: list[Decision] = []
    for number, (at, event) in enumerate(_batches()):
        clock.now = at
        history.deliver(event)
        decisions += apps[number % containers].process_kinesis(event, 1e12).decisions
    return _decided(decisions), apps


class Unshared(InMemoryLedger):
    """The twin that keeps no group memory: each container decides a group on its own copy
    (as before the MEMORY item)."""

    def get_group_memories(self, groups: Any) -> dict[str, StoredGroupMemory]:
        return {}

    def put_group_memory(self, group: str, memory: GroupMemory, version: int) -> int:
        return version


class Counting(InMemoryLedger):
    """The twin, counting the group memory's reads and writes."""

    reads = 0
    writes = 0

    def get_group_memories(self, groups: Any) -> dict[str, StoredGroupMemory]:
        self.reads += 1
        return super().get_group_memories(groups)

    def put_group_memory(self, group: str, memory: GroupMemory, version: int) -> int:
        self.writes += 1
        return super().put_group_memory(group, memory, version)


def test_a_groups_batches_handed_in_turn_to_containers_decide_as_one_container_would() -> None:
    one, _ = _run(1)
    levels = {target for _, queue, _, target in one if queue == "orders"}
    assert len(levels) > 2, one  # the group cut, then probed back up: its memory decided
    for containers in (2, 3):
        ledger = Counting(memory_types=memory_type)
        shared, apps = _run(containers, ledger)
        assert shared == one
        assert not any(app.loop.counters["group_memory_conflicts"] for app in apps)
        # One read a batch (every batch decides the group); a write only where it changed.
        assert ledger.reads == len(_batches())
        assert 0 < ledger.writes == ledger.get_group_memories([GROUP])[GROUP].version < 60
    # Each container on its own memory decides otherwise.
    assert _run(2, Unshared(memory_types=memory_type))[0] != one


def test_the_tick_in_a_third_container_decides_the_group_on_the_shared_estimate() -> None:
    """A member's wake-up lands in a third container, warm from the storm's first batches
    but handed none since: it decides the group on the estimate the batches' containers
    stored, where on its own memory it would know none; the next batch's container takes
    what the tick stored."""

    def tick_after_the_storm(ledger: InMemoryLedger) -> tuple[BatchResult, list[Any]]:
        actuator = _shared()[1]
        for queue in QUEUES:
            registered(ledger, queue)
        clock, history = HandClock(START), InMemoryHistory()
        apps = [_container(ledger, actuator, clock, history) for _ in range(3)]
        for number, (at, event) in enumerate(_batches(60)):
            clock.now = at
            app = apps[2] if number < 6 else apps[number % 2]
            app.process_kinesis(history.deliver(event), 1e12)
        orders = ledger.get_states(["orders"])["orders"]
        ledger.put_item(encode_state(orders.evolve(wake_at=clock.now)))
        clock.now += 0.5
        return apps[2].loop.tick(clock.now), [apps, clock, history]

    ledger = InMemoryLedger(memory_types=memory_type)
    ticked, (apps, clock, history) = tick_after_the_storm(ledger)
    [report] = ticked.groups
    stored = ledger.get_group_memories([GROUP])[GROUP]
    assert stored.memory is not None and stored.memory.capacity_rps is not None
    assert report.capacity_rps == pytest.approx(stored.memory.capacity_rps, abs=1e-3)
    assert apps[2].loop.book.group_memory() == {GROUP: stored.memory}
    # Alone, the tick's container knows no estimate.
    [alone] = tick_after_the_storm(Unshared(memory_types=memory_type))[0].groups
    assert alone.capacity_rps is None
    # The next batch's container starts from what the tick left, and stores on top of it.
    clock.now, event = _batches(61)[60]
    apps[0].process_kinesis(history.deliver(event), 1e12)
    assert not any(app.loop.counters["group_memory_conflicts"] for app in apps)
    latest = ledger.get_group_memories([GROUP])[GROUP]
    assert latest.version >= stored.version
    assert latest.memory == apps[0].loop.book.group_memory()[GROUP]


def test_a_dry_run_stores_no_memory_and_no_report_and_decides_as_a_real_run() -> None:
    """A dry run (``queuemesh replay --dry-run``, also against a live stack's ledger) only
    reads: it decides the group on its own copy, as a container whose stores land would."""
    ledger, actuator = _shared()
    clock, history = HandClock(START), InMemoryHistory()
    loop = ControlLoop(ledger, actuator, PolicyParams(), executor=DisplayExecutor(lambda _: None))
    dry = ControllerApp(loop, clock=clock, emit=lambda _: None, history=history)
    decisions: list[Decision] = []
    for at, event in _batches():
        clock.now = at
        decisions += dry.process_kinesis(history.deliver(event), 1e12).decisions
    assert ledger.get_group_memories([GROUP]) == {} and ledger.group_reports() == []
    assert ledger.get_states(list(QUEUES)) == {}
    assert _decided(decisions) == _run(1)[0]


class Interleaved:
    """One container's view of a shared ledger in which, just before its first store of a
    group's memory, ``meanwhile`` runs: another container decides and stores the group from
    the version both read (two lanes' batches at once)."""

    def __init__(self, ledger: InMemoryLedger) -> None:
        self.ledger = ledger
        self.meanwhile: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.ledger, name)

    def put_group_memory(self, group: str, memory: GroupMemory, version: int) -> int:
        while self.meanwhile:
            self.meanwhile.pop(0)()
        return self.ledger.put_group_memory(group, memory, version)


def test_two_containers_storing_from_the_same_version_one_lands_the_other_is_counted() -> None:
    ledger, actuator = _shared()
    clock, history = HandClock(START), InMemoryHistory()
    racing = Interleaved(ledger)
    first = _container(ledger, actuator, clock, history)
    second = _container(racing, actuator, clock, history)
    batches = _batches(40)
    for number, (at, event) in enumerate(batches[:30]):
        clock.now = at
        (first, second)[number % 2].process_kinesis(history.deliver(event), 1e12)
    before = ledger.get_group_memories([GROUP])[GROUP]
    assert before.memory is not None and before.memory.capacity_rps is not None

    def first_decides_the_next_batch() -> None:
        clock.now, event = batches[31]
        first.process_kinesis(history.deliver(event), 1e12)

    racing.meanwhile.append(first_decides_the_next_batch)
    clock.now, event = batches[30]
    second.process_kinesis(history.deliver(event), 1e12)
    assert second.loop.counters["group_memory_conflicts"] == 1
    assert first.loop.counters["group_memory_conflicts"] == 0
    # The ledger holds the first's memory whole, one version on; the second dropped its copy.
    after = ledger.get_group_memories([GROUP])[GROUP]
    assert after == StoredGroupMemory(before.version + 1, first.loop.book.group_memory()[GROUP])
    assert GROUP not in second.loop.book.group_memory()
    # Its next decision starts from the ledger's, and its store lands on top of it.
    clock.now, event = batches[32]
    second.process_kinesis(history.deliver(event), 1e12)
    stored = ledger.get_group_memories([GROUP])[GROUP]
    assert stored == StoredGroupMemory(after.version + 1, second.loop.book.group_memory()[GROUP])
    assert second.loop.counters["group_memory_conflicts"] == 1


def test_two_writers_from_the_same_version_one_lands() -> None:
    ledger = InMemoryLedger(memory_types=memory_type)
    assert ledger.put_group_memory(GROUP, GroupMemory(capacity_rps=20.0), 0) == 1
    with pytest.raises(VersionConflict):
        ledger.put_group_memory(GROUP, GroupMemory(capacity_rps=25.0), 0)
    assert ledger.get_group_memories([GROUP, "other"]) == {
        GROUP: StoredGroupMemory(1, GroupMemory(capacity_rps=20.0))
    }


# -- the item -------------------------------------------------------------------------------
seconds = st.floats(0, 2e9, allow_nan=False)
memories = st.builds(
    GroupMemory,
    capacity_rps=st.one_of(st.none(), st.floats(0, 1e6, allow_nan=False)),
    ceiling_rps=st.floats(0, 1e6, allow_nan=False),
    next_probe_at=seconds,
    probed_at=seconds,
    running_since=st.dictionaries(st.sampled_from(QUEUES), seconds),
    paused_since=st.dictionaries(st.sampled_from(QUEUES), seconds),
)


@given(memories, st.integers(0, 10**9))
def test_a_memory_round_trips_through_its_item(memory: GroupMemory, version: int) -> None:
    item = encode_group_memory(GROUP, memory, version)
    assert decode_group_memory(item, MemoryCodec(memory_type)) == StoredGroupMemory(version, memory)


def test_an_old_or_hand_edited_item_is_learned_afresh() -> None:
    codec = MemoryCodec(memory_type)
    bare = {**group_memory_key(GROUP), "Version": 4}
    assert decode_group_memory(bare, codec) == StoredGroupMemory(4, GroupMemory())
    edited = encode_group_memory(GROUP, GroupMemory(capacity_rps=9.0), 5)
    edited["Memory"]["capacity_rps"] = "lots"
    assert decode_group_memory(edited, codec) == StoredGroupMemory(5, None)
    ledger = InMemoryLedger(memory_types=memory_type)
    ledger.put_item(edited)
    loop = ControlLoop(ledger, InMemoryActuator(), PolicyParams())
    loop._read_group_memories([GROUP])
    assert loop.book.group_memory() == {GROUP: GroupMemory()}
    assert loop.counters["group_memories_unreadable"] == 1
    # Its next store replaces it (on its version).
    loop.book.remember_groups({GROUP: GroupMemory(capacity_rps=12.0)})
    loop._store_group_memories(1e12)
    assert ledger.get_group_memories([GROUP])[GROUP] == StoredGroupMemory(
        6, GroupMemory(capacity_rps=12.0)
    )


# -- the boto3 adapter ------------------------------------------------------------------------
def _dynamo(clock: HandClock | None = None) -> tuple[DynamoLedger, Any]:
    """The boto3 adapter on a stubbed client, on virtual time (its retries pass no time)."""
    clock = clock or HandClock(START)
    client = boto3.client(
        "dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    ledger = DynamoLedger(
        "ledger", client, memory_types=memory_type, clock=clock, sleep=clock.sleep
    )
    return ledger, client


def test_the_dynamodb_write_is_conditioned_on_the_version_read() -> None:
    ledger, client = _dynamo()
    memory = GroupMemory(capacity_rps=27.5, running_since={"orders": 1000.0})
    with Stubber(client) as stub:
        stub.add_response(
            "put_item",
            {},
            {
                "TableName": "ledger",
                "Item": ANY,
                "ConditionExpression": "Version = :expected",
                "ExpressionAttributeValues": {":expected": {"N": "3"}},
            },
        )
        stub.add_client_error("put_item", "ConditionalCheckFailedException")
        stub.add_response(
            "put_item",
            {},
            {"TableName": "ledger", "Item": ANY, "ConditionExpression": "attribute_not_exists(PK)"},
        )
        assert ledger.put_group_memory(GROUP, memory, 3) == 4
        with pytest.raises(VersionConflict):
            ledger.put_group_memory(GROUP, memory, 3)
        assert ledger.put_group_memory(GROUP, memory, 0) == 1
        stub.assert_no_pending_responses()


def test_the_dynamodb_read_is_strongly_consistent_and_decodes_the_item() -> None:
    ledger, client = _dynamo()
    memory = GroupMemory(capacity_rps=27.5, paused_since={"refunds": 990.5})
    item = ledger._wire(encode_group_memory(GROUP, memory, 7))
    keys = [ledger._wire(group_memory_key(GROUP))]
    with Stubber(client) as stub:
        stub.add_response(
            "batch_get_item",
            {"Responses": {"ledger": [item]}},
            {"RequestItems": {"ledger": {"Keys": keys, "ConsistentRead": True}}},
        )
        assert ledger.get_group_memories([GROUP]) == {GROUP: StoredGroupMemory(7, memory)}


def test_a_ledger_fault_on_the_memory_write_is_counted_and_the_decisions_land() -> None:
    """The loop on the twin's items but storing the group's memory through the real boto3
    adapter, whose every PutItem DynamoDB answers with a 500 until the call gives up."""
    ledger, client = _dynamo()
    failing: list[int] = []

    def internal_error(**_: Any) -> None:
        failing.append(1)
        error = {"Code": "InternalServerError", "Message": "injected"}
        raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 500}}, "PutItem")

    client.meta.events.register("before-call.dynamodb.PutItem", internal_error)

    class Through(InMemoryLedger):
        def put_group_memory(self, group: str, memory: GroupMemory, version: int) -> int:
            return ledger.put_group_memory(group, memory, version)

    twin = Through(memory_types=memory_type)
    actuator = _shared()[1]
    for queue in QUEUES:
        registered(twin, queue)
    clock, history = HandClock(START), InMemoryHistory()
    emitted: list[str] = []
    app = _container(twin, actuator, clock, history, emitted.append)
    decisions: list[Decision] = []
    for at, event in _batches():
        clock.now = at
        outcome = app.process_kinesis(history.deliver(event), 1e12)
        assert outcome.response() == {"batchItemFailures": []}
        decisions += outcome.decisions
    assert len(failing) > 1  # retried, then given up
    unstored = app.loop.counters["group_memories_unstored"]
    assert unstored > 0
    # Each one reached the health document of the container's next invocation (a tick
    # here: the batches above went through ``process_kinesis``), where its alarm watches.
    # The tick tries the store again, and fails again.
    app.handle({"detail-type": "Scheduled Event"}, None)
    documents = [json.loads(line) for line in emitted]
    failures = app.loop.counters["group_memories_unstored"]
    assert failures == unstored + 1
    assert health_count(documents, HealthMetric.GROUP_MEMORY_FAILURES) == failures
    assert twin.get_group_memories([GROUP]) == {}
    # The decisions landed (the group's cut is in the ledger and on the mappings), and the
    # container decided on its own copy meanwhile, as if its stores had landed.
    for queue in QUEUES:
        [last] = [d.target for d in decisions if d.queue == queue][-1:]
        assert twin.get_states([queue])[queue].concurrency == last
        assert actuator.read(f"esm-{queue}", 1e12).max_concurrency == last
    assert any("Group" in d.reason for d in decisions)
    assert _decided(decisions) == _run(1)[0]
