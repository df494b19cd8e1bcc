"""A group made by CONFIG ``Group`` alone, decided whole: the reducer keys a queue's records by
its CONFIG group (read through the ledger, cached), else by the downstream it names, else by
queue, so one lane reads the group (docs/architecture.md, "A group on one lane"); and a
container that holds only a due member's config (the tick) gathers the group's members from
the ledger (docs/algorithms.md, "Groups")."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.constants import CONFIG_READ_TIMEOUT_S
from controller.executor import STEP_BUDGET_S, DisplayExecutor
from controller.ledger import DynamoLedger, InMemoryLedger
from controller.ledger.codec import encode_config, encode_state
from controller.loop import ControlLoop
from controller.model import Action, AuditEntry, AuditEvent, QueueState, Sample
from controller.planner import Plan
from controller.policy import ALGORITHMS, memory_type
from controller.policy.aimd import Aimd
from controller.ports import ConfigRead, LedgerError
from controller.reduce import ConfiguredGroups, reduce_samples
from controller.reducer_app import ReducerApp
from controller.schema import HealthMetric
from controller.settings import PolicyParams
from controller.stream import InMemorySink
from controller.telemetry import reduced
from load.clock import HandClock
from tests.factories import config, health_count, kinesis_event, mapped, sample


class CountingLedger(InMemoryLedger):
    """The twin, counting the queues each CONFIG read asked for."""

    def __init__(self) -> None:
        super().__init__(memory_types=memory_type)
        self.reads: list[list[str]] = []

    def read_configs(self, queues: Iterable[str]) -> ConfigRead:
        asked = list(queues)
        self.reads.append(asked)
        return super().read_configs(asked)


def _grouped(ledger: InMemoryLedger, queue: str, group: str | None) -> None:
    ledger.put_config(replace(config(queue), group=group))


def test_a_config_group_keys_its_members_together_over_what_their_telemetry_names() -> None:
    samples = [
        sample("orders", 1000.9),
        replace(sample("refunds", 1000.9), downstream="refunds-api"),
        replace(sample("invoices", 1000.9), downstream="billing"),
        sample("reports", 1000.9),
    ]
    groups = {"orders": "billing", "refunds": "billing"}
    keys = {
        r.queue: r.partition_key for r in reduced.encode(reduce_samples(samples), "s:1", groups)
    }
    # The CONFIG group wins over the downstream named, and names the key a downstream of that
    # name gives: one namespace, as ``planner.groups_of`` reads them.
    assert keys["orders"] == keys["refunds"] == keys["invoices"]
    assert keys["orders"] == reduced.partition_key("orders", "billing")
    assert keys["reports"] == "reports"
    # Without the groups, as before: each keyed by its telemetry.
    plain = {r.queue: r.partition_key for r in reduced.encode(reduce_samples(samples), "s:1")}
    assert plain["orders"] == "orders" and plain["refunds"] != plain["invoices"]


def test_groups_are_read_once_per_period_and_a_change_is_picked_up_after_it() -> None:
    """Answers hold until the end of the 60 s of epoch time they were read in (960-1020 here),
    whenever in it they were read: every reducer container takes a change at the same
    moment."""
    ledger = CountingLedger()
    _grouped(ledger, "orders", "billing")
    _grouped(ledger, "refunds", None)
    groups = ConfiguredGroups(ledger, ttl_s=60.0)
    assert groups.read(["orders", "refunds", "unknown"], 1000.0, math.inf).groups == {
        "orders": "billing"
    }
    assert ledger.reads == [["orders", "refunds", "unknown"]]
    # Within the period nothing is read, even after a change (and a queue registered since).
    _grouped(ledger, "orders", "payments")
    _grouped(ledger, "unknown", "payments")
    assert groups.read(["orders", "refunds", "unknown"], 1019.9, math.inf).groups == {
        "orders": "billing"
    }
    assert len(ledger.reads) == 1
    # From the next period on each is read again: the changed group and the new registration
    # are keyed, 20 s after the first read (another container that read them at 961 s would
    # read them again now too).
    assert groups.read(["orders", "unknown"], 1020.0, math.inf).groups == {
        "orders": "payments",
        "unknown": "payments",
    }
    assert ledger.reads[1:] == [["orders", "unknown"]]
    # Only the queues not known in this period are read.
    groups.read(["orders", "refunds", "unknown"], 1021.0, math.inf)
    assert ledger.reads[2:] == [["refunds"]]


def test_the_cache_holds_at_most_its_capacity() -> None:
    ledger = CountingLedger()
    for queue in ("a", "b", "c"):
        _grouped(ledger, queue, "g")
    groups = ConfiguredGroups(ledger, ttl_s=60.0, capacity=2)
    groups.read(["a", "b", "c"], 1000.0, math.inf)
    # "b" and "c", the two most recent, are held; "a" was forgotten: asked again, it alone is
    # read again.
    assert groups.read(["b", "c"], 1001.0, math.inf).groups == {"b": "g", "c": "g"}
    assert len(ledger.reads) == 1
    assert groups.read(["a"], 1001.0, math.inf).groups == {"a": "g"}
    assert ledger.reads[1:] == [["a"]]


def test_an_invalid_config_costs_only_its_queue() -> None:
    ledger = CountingLedger()
    _grouped(ledger, "orders", "billing")
    _grouped(ledger, "refunds", "billing")
    broken = encode_config(replace(config("refunds"), group="billing"))
    ledger.put_item({**broken, "Mode": "SIDEWAYS"})
    read = ConfiguredGroups(ledger).read(["orders", "refunds"], 1000.0, math.inf)
    assert read.groups == {"orders": "billing"}
    assert read.unread == ()


def _failing_dynamo(clock: HandClock) -> tuple[DynamoLedger, list[int]]:
    """The boto3 adapter whose every BatchGetItem DynamoDB answers with a 500, on virtual time
    (its retries pass no real time)."""
    client = boto3.client(
        "dynamodb", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    calls: list[int] = []

    def internal_error(**_: Any) -> None:
        calls.append(1)
        error = {"Code": "InternalServerError", "Message": "injected"}
        raise ClientError(
            {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 500}}, "BatchGetItem"
        )

    client.meta.events.register("before-call.dynamodb.BatchGetItem", internal_error)
    ledger = DynamoLedger(
        "ledger",
        client,
        memory_types=memory_type,
        call_timeout_s=CONFIG_READ_TIMEOUT_S,
        clock=clock,
        sleep=clock.sleep,
    )
    return ledger, calls


def test_a_failed_read_costs_only_the_queues_it_was_for_and_is_tried_again() -> None:
    twin = CountingLedger()
    _grouped(twin, "orders", "billing")
    clock = HandClock(START)
    failing, calls = _failing_dynamo(clock)

    class Flaky(InMemoryLedger):
        """The twin's items, read through the failing adapter while ``down``."""

        down = False

        def read_configs(self, queues: Iterable[str]) -> ConfigRead:
            return failing.read_configs(queues) if self.down else twin.read_configs(queues)

        def set_deadline(self, deadline: float) -> None:
            failing.set_deadline(deadline)

    ledger = Flaky(memory_types=memory_type)
    groups = ConfiguredGroups(ledger, ttl_s=60.0)
    assert groups.read(["orders"], 1000.0, math.inf).groups == {"orders": "billing"}
    ledger.down = True
    read = groups.read(["orders", "refunds"], 1010.0, math.inf)
    # "orders" is known for this period; "refunds" alone could not be read.
    assert read.groups == {"orders": "billing"}
    assert read.unread == ("refunds",) and read.fault
    assert len(calls) > 1  # retried, then given up
    # In the next period neither can be read: "orders" keeps the group last read for it
    # (its records stay on its group's lane), "refunds" is keyed by its telemetry.
    read = groups.read(["orders", "refunds"], 1030.0, math.inf)
    assert read.groups == {"orders": "billing"}
    assert read.unread == ("orders", "refunds")
    _grouped(twin, "refunds", "billing")
    ledger.down = False
    assert groups.read(["orders", "refunds"], 1031.0, math.inf).groups == {
        "orders": "billing",
        "refunds": "billing",
    }


def test_the_reducer_keys_a_config_group_on_one_key_and_counts_what_it_could_not_read() -> None:
    ledger = CountingLedger()
    _grouped(ledger, "orders", "billing")
    _grouped(ledger, "refunds", "billing")
    printed: list[str] = []
    sink = InMemorySink()
    app = ReducerApp(sink, ledger, clock=lambda: 1010.0, emit=printed.append)
    batch = [sample("orders", 1000.9), sample("refunds", 1000.9), sample("invoices", 1000.9)]
    assert app.handle(kinesis_event(batch), None) == {"batchItemFailures": []}
    keys = {record.queue: record.partition_key for record in sink.records}
    assert keys["orders"] == keys["refunds"] == reduced.partition_key("orders", "billing")
    assert keys["invoices"] == "invoices"
    assert health_count([json.loads(line) for line in printed], HealthMetric.GROUP_KEYS_UNREAD) == 0

    class Down(CountingLedger):
        def read_configs(self, queues: Iterable[str]) -> ConfigRead:
            raise LedgerError("injected")

    printed.clear()
    sink = InMemorySink()
    app = ReducerApp(sink, Down(), clock=lambda: 1010.0, emit=printed.append)
    # Not retried: the records go out keyed by their telemetry, counted.
    assert app.handle(kinesis_event(batch, first_sequence=9), None) == {"batchItemFailures": []}
    assert {record.partition_key for record in sink.records} == {"orders", "refunds", "invoices"}
    assert health_count([json.loads(line) for line in printed], HealthMetric.GROUP_KEYS_UNREAD) == 3


START = 1000.0


class ListingLedger(InMemoryLedger):
    """The twin, counting its listings of a group's members (failing them while ``down``)
    and keeping each downstream recorded (failing the records of ``unrecordable`` queues)."""

    def __init__(self) -> None:
        super().__init__(memory_types=memory_type)
        self.listed: list[str] = []
        self.down = False
        self.recorded: list[tuple[str, str | None]] = []
        self.unrecordable: set[str] = set()

    def group_members(self, group: str) -> list[str]:
        self.listed.append(group)
        if self.down:
            raise LedgerError("injected")
        return super().group_members(group)

    def record_downstream(self, queue: str, downstream: str | None, version: int) -> None:
        if queue in self.unrecordable:
            raise LedgerError("injected")
        super().record_downstream(queue, downstream, version)
        self.recorded.append((queue, downstream))


def _billing(ledger: InMemoryLedger, actuator: InMemoryActuator) -> None:
    """``orders`` and ``refunds`` in the CONFIG group ``billing``, naming no downstream;
    ``orders`` paused by the controller, its wake-up due at ``START``; ``invoices`` alone."""
    for queue in ("orders", "refunds", "invoices"):
        _grouped(ledger, queue, None if queue == "invoices" else "billing")
        mapped(actuator, queue, concurrency=4)
    paused = QueueState.first("orders", "esm-orders", 4, enabled=False, at=START - 60.0)
    ledger.put_item(
        encode_state(paused.evolve(version=1, paused_since=START - 60.0, wake_at=START))
    )
    running = QueueState.first("refunds", "esm-refunds", 4, at=START - 60.0)
    ledger.put_item(encode_state(running.evolve(version=1)))


def _cold_loop(ledger: InMemoryLedger, actuator: InMemoryActuator) -> ControlLoop:
    return ControlLoop(ledger, actuator, PolicyParams(), executor=DisplayExecutor(lambda _: None))


def _ticked_with_group(
    ledger: ListingLedger, actuator: InMemoryActuator, at: float, group: str
) -> tuple[ControlLoop, Plan]:
    """A cold container's tick at ``at``, which decides the due ``orders`` with ``refunds``
    as ``group``, listed once; the loop and its plan."""
    loop = _cold_loop(ledger, actuator)
    ticked = loop.tick(at)
    assert ticked.fault is None and ticked.plan is not None
    assert {step.queue for step in ticked.plan.steps} == {"orders", "refunds"}
    [report] = ticked.groups
    assert report.group == group
    assert {share.queue for share in report.members} == {"orders", "refunds"}
    assert ledger.listed == [group]
    return loop, ticked.plan


def test_the_tick_in_a_cold_container_decides_a_due_member_with_its_config_group() -> None:
    ledger, actuator = ListingLedger(), InMemoryActuator()
    _billing(ledger, actuator)
    loop, _ = _ticked_with_group(ledger, actuator, START + 0.5, "billing")
    # Listed once per config TTL: the next ticks within it ask the ledger nothing more.
    ledger.put_item(encode_state(ledger.get_states(["orders"])["orders"].evolve(wake_at=START)))
    loop.tick(START + 30.0)
    assert ledger.listed == ["billing"]


def test_a_group_the_ledger_does_not_list_reaches_the_health_alarm() -> None:
    ledger, actuator = ListingLedger(), InMemoryActuator()
    _billing(ledger, actuator)
    ledger.down = True
    clock, emitted = HandClock(START), []
    clock.now = START + 0.5
    app = ControllerApp(_cold_loop(ledger, actuator), clock=clock, emit=emitted.append)
    app.handle({"detail-type": "Scheduled Event"}, None)
    documents = [json.loads(line) for line in emitted]
    # GroupMemoryFailures, which ControllerGroupMemoryFailuresAlarm watches.
    assert health_count(documents, HealthMetric.GROUP_MEMORY_FAILURES) == 1


def test_the_deployed_reducer_reads_the_ledger_its_template_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from controller import handler

    # The AWS clients are built (never called) at the cold start.
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with pytest.raises(RuntimeError, match="QUEUEMESH_TABLE is not set"):
        handler.build_reducer({"QUEUEMESH_REDUCED_STREAM": "reduced"})
    app = handler.build_reducer({"QUEUEMESH_REDUCED_STREAM": "reduced", "QUEUEMESH_TABLE": "t"})
    ledger = app.groups._ledger
    assert isinstance(ledger, DynamoLedger) and ledger.table_name == "t"
    assert ledger.call_timeout_s == CONFIG_READ_TIMEOUT_S


# -- a group made by the downstream its members' telemetry names ----------------------------


def _named(samples: list[Sample], downstream: str) -> list[Sample]:
    return [replace(s, downstream=downstream) for s in samples]


def _storm(queue: str, downstream: str) -> list[Sample]:
    """Ten seconds of ``queue`` under a 20% 429 storm, its telemetry naming ``downstream``."""
    seconds = [sample(queue, at=START - 10.0 + s + 0.9, ok=8, throttled=2) for s in range(10)]
    return _named(seconds, downstream)


def _payments(ledger: ListingLedger, actuator: InMemoryActuator) -> list[str]:
    """A warm container decides ``orders`` and ``refunds``, whose telemetry names the
    downstream ``payments-api`` (no CONFIG group), ``reports``, whose telemetry names it too
    but whose CONFIG ``Group`` is ``billing``, and ``invoices`` on ``other-api``: each cut once
    by a storm. Then ``orders`` is paused, its wake-up due 60 s later, and sends nothing.
    Returns the groups the warm container listed."""
    for queue in ("orders", "refunds", "reports", "invoices"):
        _grouped(ledger, queue, "billing" if queue == "reports" else None)
        mapped(actuator, queue, concurrency=8)
    warm = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())
    storms = [
        *_storm("orders", "payments-api"),
        *_storm("refunds", "payments-api"),
        *_storm("reports", "payments-api"),
        *_storm("invoices", "other-api"),
    ]
    decided = warm.run_batch(storms, now=START)
    assert decided.fault is None
    assert {d.queue for d in decided.done if d.action is Action.MULTIPLICATIVE_DECREASE} == {
        "orders",
        "refunds",
        "reports",
        "invoices",
    }
    listed_warm = list(ledger.listed)
    ledger.listed.clear()
    orders = ledger.get_states(["orders"])["orders"]
    ledger.put_item(
        encode_state(orders.evolve(enabled=False, paused_since=START, wake_at=START + 60.0))
    )
    return listed_warm


def test_a_transition_stores_the_downstream_its_telemetry_names_not_the_config() -> None:
    ledger, actuator = ListingLedger(), InMemoryActuator()
    # The warm container listed each group it decided (one Query each per config TTL).
    assert _payments(ledger, actuator) == ["billing", "other-api", "payments-api"]
    states = ledger.get_states(["orders", "refunds", "reports", "invoices"])
    assert {queue: state.downstream for queue, state in states.items()} == {
        "orders": "payments-api",
        "refunds": "payments-api",
        "reports": "payments-api",
        "invoices": "other-api",
    }
    # The operator's CONFIG items are as registered: the learned downstream is the STATE's.
    configs = ledger.get_configs(["orders", "reports"])
    assert configs["orders"].group is None and configs["reports"].group == "billing"
    # The index lists a group by both kinds of item; the CONFIG item decides (``reports``).
    assert ledger.group_members("payments-api") == ["orders", "refunds", "reports"]
    assert ledger.group_members("billing") == ["reports"]


def test_the_tick_in_a_cold_container_decides_a_due_member_with_the_group_its_telemetry_named() -> (
    None
):
    ledger, actuator = ListingLedger(), InMemoryActuator()
    _payments(ledger, actuator)
    # ``reports`` names the downstream too, but its CONFIG group wins: not a member.
    _, plan = _ticked_with_group(ledger, actuator, START + 60.5, "payments-api")
    # Holding none of their telemetry, it keeps what their STATEs named for their next write.
    assert {step.decision.new_state.downstream for step in plan.steps} == {"payments-api"}


@pytest.mark.parametrize(
    ("made_by", "due_at"),
    [(_billing, START + 0.5), (_payments, START + 60.5)],
    ids=["config-group", "learned-downstream"],
)
def test_a_group_the_ledger_does_not_list_costs_only_itself(
    made_by: Callable[[ListingLedger, InMemoryActuator], object], due_at: float
) -> None:
    ledger, actuator = ListingLedger(), InMemoryActuator()
    made_by(ledger, actuator)
    ledger.down = True
    loop = _cold_loop(ledger, actuator)
    ticked = loop.tick(due_at)
    # Decided alone, as before, and counted; the tick goes on.
    assert ticked.fault is None and ticked.plan is not None
    assert [step.queue for step in ticked.plan.steps] == ["orders"]
    assert ticked.groups == ()
    assert loop.counters["group_members_unread"] == 1


def _steady(queue: str, at: float, downstream: str = "payments-api") -> list[Sample]:
    """A second of ``queue`` at ease (three invocations, nothing refused), naming
    ``downstream``."""
    seconds = [sample(queue, at=at + 0.99, ok=10, invocation_ms=990) for _ in range(3)]
    return _named(seconds, downstream)


def _stored(ledger: InMemoryLedger, queue: str, concurrency: int, **changes: Any) -> None:
    """``queue``'s STATE item at version 1 (or as ``changes`` say), its mapping beside it."""
    state = QueueState.first(queue, f"esm-{queue}", concurrency, at=START - 60.0)
    ledger.put_item(encode_state(state.evolve(**{"version": 1, **changes})))


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_a_steady_queue_records_a_downstream_it_names_anew_once_then_writes_nothing(
    algorithm: str,
) -> None:
    """A STATE naming another downstream than the telemetry does now gets the new one with
    the queue's first decision, alone (no transition, no audit item, its version kept), and
    nothing more while the queue is steady."""
    ledger, actuator = ListingLedger(), InMemoryActuator()
    _grouped(ledger, "orders", None)
    mapped(actuator, "orders", concurrency=100)
    _stored(ledger, "orders", 100, downstream="old-api")
    loop = ControlLoop(ledger, actuator, PolicyParams(), algorithm=ALGORITHMS[algorithm]())
    for second in range(300):
        at = START + second
        loop.run_batch(_steady("orders", at, "new-api"), now=at + 2)
    assert ledger.recorded == [("orders", "new-api")]
    assert loop.counters["downstreams_recorded"] == 1
    assert ledger.audit_trail("orders") == []
    stored = ledger.get_states(["orders"])["orders"]
    assert (stored.version, stored.downstream) == (1, "new-api")
    assert ledger.group_members("new-api") == ["orders"]
    assert ledger.group_members("old-api") == []


@pytest.mark.parametrize("stored", [None, "old-api"], ids=["item-before-group", "moved"])
def test_a_cold_tick_decides_a_due_member_with_one_whose_downstream_was_recorded_alone(
    stored: str | None,
) -> None:
    """``refunds``' STATE names no downstream (written before ``Group`` existed) or the one
    its telemetry named before it moved, and ``refunds``, steady, makes no transition. The
    warm container holding its telemetry records the downstream it names now, so a cold
    container's tick at the paused ``orders``' wake-up decides it with ``refunds`` (main's
    code: alone, until a transition of ``refunds``)."""
    ledger, actuator = ListingLedger(), InMemoryActuator()
    for queue, concurrency in (("orders", 4), ("refunds", 100)):
        _grouped(ledger, queue, None)
        mapped(actuator, queue, concurrency=concurrency)
    _stored(ledger, "refunds", 100, downstream=stored)
    warm = ControlLoop(ledger, actuator, PolicyParams())
    for second in range(5):
        at = START + second
        assert warm.run_batch(_steady("refunds", at), now=at + 2).fault is None
    assert ledger.audit_trail("refunds") == []
    assert ledger.recorded == [("refunds", "payments-api")]
    # ``orders``, paused by a transition, which stored the downstream its telemetry named.
    _stored(
        ledger,
        "orders",
        4,
        version=2,
        enabled=False,
        paused_since=START,
        wake_at=START + 60.0,
        downstream="payments-api",
    )
    ledger.listed.clear()
    _ticked_with_group(ledger, actuator, START + 60.5, "payments-api")


def test_a_transition_that_came_first_is_not_overwritten_by_a_record() -> None:
    """Another container commits a transition of ``refunds`` (a cold one: naming the stored
    downstream) between this container's read of its state and its record: the record's
    condition fails, counted, and the transition stands whole. The state is read again, and
    the next decision records the downstream on top of that transition."""

    class Racing(ListingLedger):
        raced = False

        def record_downstream(self, queue: str, downstream: str | None, version: int) -> None:
            if not self.raced:
                self.raced = True
                seen = self.get_states([queue])[queue]
                audit = AuditEntry(queue, START, AuditEvent.TRANSITION, 100, 100, "HOLD", "cold")
                self.commit(seen.evolve(last_reason="cold", last_evaluated_at=START), audit)
            super().record_downstream(queue, downstream, version)

    ledger, actuator = Racing(), InMemoryActuator()
    _grouped(ledger, "refunds", None)
    mapped(actuator, "refunds", concurrency=100)
    _stored(ledger, "refunds", 100, downstream="old-api")
    warm = ControlLoop(ledger, actuator, PolicyParams())
    assert warm.run_batch(_steady("refunds", START), now=START + 2).fault is None
    assert warm.counters["downstream_conflicts"] == 1
    assert ledger.recorded == []
    raced = ledger.get_states(["refunds"])["refunds"]
    assert (raced.version, raced.last_reason, raced.downstream) == (2, "cold", "old-api")
    assert [entry.reason for entry in ledger.audit_trail("refunds")] == ["cold"]
    for second in range(1, 5):
        at = START + second
        assert warm.run_batch(_steady("refunds", at), now=at + 2).fault is None
    assert ledger.recorded == [("refunds", "payments-api")]
    recorded = ledger.get_states(["refunds"])["refunds"]
    assert recorded == raced.evolve(downstream="payments-api")


def test_a_downstream_not_recorded_costs_only_its_queue_and_reaches_the_health_alarm() -> None:
    """``refunds``' record fails: counted in ``GroupMemoryFailures`` (which
    ControllerGroupMemoryFailuresAlarm watches), never the batch's failure; ``orders``' cut in
    the same batch lands. Its STATE keeps the old downstream, and the next decision after the
    ledger takes writes again records it, once."""
    ledger, actuator = ListingLedger(), InMemoryActuator()
    for queue in ("orders", "refunds"):
        _grouped(ledger, queue, None)
        mapped(actuator, queue, concurrency=100 if queue == "refunds" else 8)
    _stored(ledger, "refunds", 100, downstream="old-api")
    ledger.unrecordable = {"refunds"}
    clock, emitted = HandClock(START), []
    clock.now = START + 2.0
    loop = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())
    app = ControllerApp(loop, clock=clock, emit=emitted.append)
    storm = [*_storm("orders", "orders-api"), *_steady("refunds", START - 1.0)]
    assert app.handle(kinesis_event(storm), None) == {"batchItemFailures": []}
    documents = [json.loads(line) for line in emitted]
    assert health_count(documents, HealthMetric.GROUP_MEMORY_FAILURES) == 1
    assert [entry.action for entry in ledger.audit_trail("orders")] == ["MULTIPLICATIVE_DECREASE"]
    assert ledger.get_states(["refunds"])["refunds"].downstream == "old-api"
    ledger.unrecordable.clear()
    for second in range(1, 4):
        at = START + second
        assert loop.run_batch(_steady("refunds", at), now=at + 2).fault is None
    assert ledger.recorded == [("refunds", "payments-api")]
    assert loop.counters["downstreams_unrecorded"] == 1


def test_a_record_waits_for_a_decision_with_a_steps_time_in_hand() -> None:
    """Like every ledger write of a plan, a record is started only with ``STEP_BUDGET_S`` in
    hand before the invocation's deadline; one left is counted and made with the queue's
    next decision."""
    ledger, actuator = ListingLedger(), InMemoryActuator()
    _grouped(ledger, "orders", None)
    mapped(actuator, "orders", concurrency=100)
    _stored(ledger, "orders", 100)
    loop = ControlLoop(ledger, actuator, PolicyParams(), monotonic=lambda: 0.0)
    late = loop.run_batch(_steady("orders", START), now=START + 2, deadline=STEP_BUDGET_S - 0.1)
    assert late.fault is None and [d.queue for d in late.done] == ["orders"]
    assert ledger.recorded == [] and loop.counters["downstreams_unrecorded"] == 1
    loop.run_batch(_steady("orders", START + 1), now=START + 3, deadline=STEP_BUDGET_S)
    assert ledger.recorded == [("orders", "payments-api")]
