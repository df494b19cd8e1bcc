"""The ledger contract, run against DynamoDB (moto's server) and against the in-memory twin."""

from __future__ import annotations

import dataclasses
import itertools
import random
from decimal import Decimal
from typing import Any

import boto3
import pytest
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.groups import GroupMemory
from controller.ledger import (
    BATCH_GET_LIMIT,
    DEFAULT_RETENTION_S,
    DynamoLedger,
    InMemoryLedger,
    MemoryCodec,
    create_ledger_table,
    decode_state,
    encode_config,
    encode_state,
    read_config_items,
)
from controller.model import (
    Action,
    AuditEntry,
    AuditEvent,
    GroupReport,
    GroupShare,
    Mode,
    QueueConfig,
    QueueState,
    QueueStateName,
)
from controller.policy import memory_type
from controller.policy.adaptive import AdaptiveMemory
from controller.ports import LedgerError, StoredGroupMemory, VersionConflict

T0 = 1_790_000_000.0  # a fixed instant: 2026-09-21


def dynamodb_client(endpoint: str) -> Any:
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


_tables = itertools.count()


def create_table(client: Any) -> str:
    return create_ledger_table(client, f"ledger-{next(_tables)}")


@pytest.fixture(params=["dynamodb", "in-memory"])
def ledger(request: pytest.FixtureRequest) -> DynamoLedger | InMemoryLedger:
    if request.param == "in-memory":
        return InMemoryLedger(memory_types=memory_type)
    client = dynamodb_client(request.getfixturevalue("moto_endpoint"))
    return DynamoLedger(create_table(client), client, memory_types=memory_type)


def fresh_state(queue: str = "orders", **changes: Any) -> QueueState:
    base = QueueState(
        queue=queue,
        esm_uuid="esm-1",
        state=QueueStateName.HEALTHY,
        concurrency=100,
        previous_concurrency=100,
    )
    return base.evolve(**changes)


def audit(queue: str = "orders", at: float = T0, new: int = 50, **changes: Any) -> AuditEntry:
    entry = AuditEntry(
        queue=queue,
        timestamp=at,
        event_type=AuditEvent.TRANSITION,
        previous_value=100,
        new_value=new,
        action=str(Action.MULTIPLICATIVE_DECREASE),
        reason="pressure 0.20 >= T1 0.05",
        error_rate=0.2,
        success_rate=0.8,
        control_loop_latency_ms=12.5,
    )
    return dataclasses.replace(entry, **changes)


def test_commit_round_trips_state_with_memory(ledger: DynamoLedger | InMemoryLedger) -> None:
    state = fresh_state(
        state=QueueStateName.THROTTLED,
        concurrency=50,
        consecutive_breaches=1,
        last_action=Action.MULTIPLICATIVE_DECREASE,
        last_reason="pressure 0.20 >= T1 0.05",
        last_evaluated_at=T0 + 0.25,
        last_change_at=T0 + 0.125,
        hold_until=T0 + 30.5,
        enabled=False,
        wake_at=T0 + 15.0,
        apply_by=T0 + 59.5,
        algorithm="adaptive",
        memory=AdaptiveMemory(ceiling=51, broke_at=80, probe_step=2, probe_backoff_s=20.5),
    )

    stored = ledger.commit(state, audit())

    assert stored == state.evolve(version=1)
    assert ledger.get_states(["orders", "absent"]) == {"orders": stored}
    assert ledger.list_states() == [stored]


def test_commit_writes_the_audit_entry(ledger: DynamoLedger | InMemoryLedger) -> None:
    entry = audit()

    ledger.commit(fresh_state(concurrency=50), entry)

    assert ledger.audit_trail("orders") == [entry]
    assert ledger.audit_trail("other") == []


def test_audit_item_carries_ttl_and_sort_key(ledger: DynamoLedger | InMemoryLedger) -> None:
    ledger.commit(fresh_state(), audit(at=T0 + 0.5))

    (item,) = ledger.audit_items("orders")

    assert item["ExpiresAt"] == Decimal(int(T0) + DEFAULT_RETENTION_S + 1)
    assert item["SK"].startswith("AUDIT#2026-09-21T")
    assert item["SK"].split("#")[1].endswith(".500Z")
    assert len(item["SK"].split("#")[2]) > 0
    assert item["Timestamp"].endswith("Z")
    assert item["EventType"] == "TRANSITION"
    assert item["ErrorRate"] == Decimal("0.2")


def test_retention_is_a_constructor_parameter(moto_endpoint: str) -> None:
    client = dynamodb_client(moto_endpoint)
    for ledger in (
        InMemoryLedger(retention_s=3600, memory_types=memory_type),
        DynamoLedger(create_table(client), client, retention_s=3600, memory_types=memory_type),
    ):
        ledger.commit(fresh_state(), audit(at=T0))
        assert ledger.audit_items("orders")[0]["ExpiresAt"] == Decimal(int(T0) + 3600)


def test_versions_increase_with_each_commit(ledger: DynamoLedger | InMemoryLedger) -> None:
    first = ledger.commit(fresh_state(), audit(at=T0))
    second = ledger.commit(first.evolve(concurrency=50), audit(at=T0 + 1))

    assert (first.version, second.version) == (1, 2)
    assert ledger.get_states(["orders"])["orders"].concurrency == 50


def test_racing_writers_one_wins_and_the_loser_commits_on_top(
    ledger: DynamoLedger | InMemoryLedger,
) -> None:
    ledger.commit(fresh_state(), audit(at=T0, new=100))
    seen_by_a = ledger.get_states(["orders"])["orders"]
    seen_by_b = ledger.get_states(["orders"])["orders"]

    ledger.commit(seen_by_a.evolve(concurrency=50), audit(at=T0 + 1, new=50))
    with pytest.raises(VersionConflict):
        ledger.commit(seen_by_b.evolve(concurrency=40), audit(at=T0 + 2, new=40))
    reread = ledger.get_states(["orders"])["orders"]
    final = ledger.commit(reread.evolve(concurrency=25), audit(at=T0 + 3, new=25))

    assert reread.concurrency == 50
    assert final.version == 3
    assert [entry.new_value for entry in ledger.audit_trail("orders")] == [100, 50, 25]


def test_a_failed_condition_writes_no_audit(ledger: DynamoLedger | InMemoryLedger) -> None:
    ledger.commit(fresh_state(), audit(at=T0))

    with pytest.raises(VersionConflict):
        ledger.commit(fresh_state(), audit(at=T0 + 1))  # version 0: "no state yet", but there is
    with pytest.raises(VersionConflict):
        ledger.commit(fresh_state(version=7), audit(at=T0 + 2))

    assert len(ledger.audit_trail("orders")) == 1
    assert ledger.get_states(["orders"])["orders"].version == 1


def test_commit_of_unknown_state_at_a_version_conflicts(
    ledger: DynamoLedger | InMemoryLedger,
) -> None:
    with pytest.raises(VersionConflict):
        ledger.commit(fresh_state(version=3), audit())
    assert ledger.get_states(["orders"]) == {}
    assert ledger.audit_trail("orders") == []


def test_audit_trail_is_oldest_first_and_honours_since(
    ledger: DynamoLedger | InMemoryLedger,
) -> None:
    # Timestamps exact in binary and in microseconds; two fall in the same millisecond as since.
    times = [T0 + 5.0, T0, T0 + 2.015625, T0 + 2.03125, T0 + 9]
    state = fresh_state()
    for at in times:
        state = ledger.commit(state, audit(at=at))

    assert [e.timestamp for e in ledger.audit_trail("orders")] == sorted(times)
    assert [e.timestamp for e in ledger.audit_trail("orders", since=T0 + 2.0157)] == [
        T0 + 2.03125,
        T0 + 5.0,
        T0 + 9,
    ]
    assert ledger.audit_trail("orders", since=T0 + 10) == []


def test_audit_trail_pages_through_many_entries(ledger: DynamoLedger | InMemoryLedger) -> None:
    state = fresh_state()
    reason = "x" * 100_000  # 12 items of 100 KB need two of DynamoDB's 1 MB pages
    for i in range(12):
        state = ledger.commit(state, audit(at=T0 + i, reason=reason))

    trail = ledger.audit_trail("orders")

    assert [e.timestamp for e in trail] == [T0 + i for i in range(12)]
    assert all(e.reason == reason for e in trail)


def test_group_reports_replace_each_other_and_stay_apart_from_the_queues(
    ledger: DynamoLedger | InMemoryLedger,
) -> None:
    shares = (GroupShare("orders", 60.5, 12), GroupShare("billing", 0.0, 2, paused=True))
    first = GroupReport("payments", T0, None, shares)
    ledger.put_group_report(first)
    ledger.put_group_report(GroupReport("api.example.com", T0 + 1, 12.25))
    ledger.put_config(QueueConfig(queue="orders", esm_uuid="esm-1", group="payments"))
    now = dataclasses.replace(first, at=T0 + 10, capacity_rps=80.125)
    ledger.put_group_report(now)
    assert ledger.group_reports() == [GroupReport("api.example.com", T0 + 1, 12.25), now]
    assert [config.queue for config in ledger.list_configs()] == ["orders"]
    assert ledger.list_states() == [] and ledger.due_states(T0 + 100) == []
    assert ledger.sweep_wake_ups(T0 + 100).woken == []


def test_a_group_memory_is_stored_on_the_version_read_and_stays_apart_from_the_report(
    ledger: DynamoLedger | InMemoryLedger,
) -> None:
    learned = GroupMemory(capacity_rps=27.5, ceiling_rps=30.25, running_since={"orders": T0})
    assert ledger.get_group_memories(["payments"]) == {}
    assert ledger.put_group_memory("payments", GroupMemory(), 0) == 1
    with pytest.raises(VersionConflict):  # another writer stored one first
        ledger.put_group_memory("payments", learned, 0)
    assert ledger.put_group_memory("payments", learned, 1) == 2
    with pytest.raises(VersionConflict):
        ledger.put_group_memory("payments", GroupMemory(), 1)
    ledger.put_group_report(GroupReport("payments", T0, 27.5))
    assert ledger.get_group_memories(["payments", "crm"]) == {
        "payments": StoredGroupMemory(2, learned)
    }
    assert ledger.group_reports() == [GroupReport("payments", T0, 27.5)]
    assert ledger.list_states() == [] and ledger.list_configs() == []


def test_configs_round_trip_and_unregistered_queues_are_absent(
    ledger: DynamoLedger | InMemoryLedger,
) -> None:
    active = QueueConfig(
        queue="orders",
        esm_uuid="esm-1",
        overrides={"t1": 0.1, "cmax": 50},
        group="payments",
        weight=2.5,
        priority=9,
    )
    pinned = QueueConfig(queue="refunds", esm_uuid="esm-2", mode=Mode.PINNED, pinned_concurrency=7)
    ledger.put_config(active)
    ledger.put_config(pinned)

    assert ledger.get_configs(["orders", "refunds", "ghost"]) == {
        "orders": active,
        "refunds": pinned,
    }
    assert ledger.list_configs() == [active, pinned]
    assert ledger.list_states() == []


def test_group_members_lists_the_queues_of_one_config_group(
    ledger: DynamoLedger | InMemoryLedger,
) -> None:
    """Read from the Groups index (no scan): only CONFIG items carry ``Group``; a group's
    report and memory, under ``GROUP#<name>``, are not its members."""
    for queue, group in (("orders", "billing"), ("refunds", "billing"), ("reports", "other")):
        ledger.put_config(QueueConfig(queue=queue, esm_uuid=f"esm-{queue}", group=group))
    ledger.put_config(QueueConfig(queue="invoices", esm_uuid="esm-invoices"))
    ledger.put_group_report(GroupReport("billing", T0, 30.0))
    assert ledger.group_members("billing") == ["orders", "refunds"]
    assert ledger.group_members("nobody") == []
    # A changed group moves the queue.
    ledger.put_config(QueueConfig(queue="refunds", esm_uuid="esm-refunds", group="other"))
    assert ledger.group_members("billing") == ["orders"]
    assert ledger.group_members("other") == ["refunds", "reports"]


def test_group_members_lists_the_queues_whose_state_names_the_group_as_downstream(
    ledger: DynamoLedger | InMemoryLedger,
) -> None:
    """A transition stores the downstream the queue's telemetry named (``Group`` on its STATE
    item, in the same index): a container that never saw that telemetry lists the group's
    members all in one Query, whichever item names them, each once."""
    ledger.put_config(QueueConfig(queue="orders", esm_uuid="esm-orders", group="billing"))
    named = fresh_state("refunds", downstream="billing")
    assert ledger.commit(named, audit("refunds")).downstream == "billing"
    ledger.commit(fresh_state("orders", downstream="billing"), audit("orders"))
    ledger.commit(fresh_state("reports", downstream="reports-api"), audit("reports"))
    assert ledger.group_members("billing") == ["orders", "refunds"]
    assert ledger.get_states(["refunds"])["refunds"].downstream == "billing"
    # A later transition naming none (or no key the index takes: empty, or over 2,048 bytes)
    # leaves the index; the state commits all the same.
    stored = ledger.get_states(["refunds"])["refunds"]
    ledger.commit(stored.evolve(downstream=None), audit("refunds", at=T0 + 1))
    assert ledger.group_members("billing") == ["orders"]
    for index, unkeyable in enumerate(("", "é" * 1025), start=2):
        stored = ledger.get_states(["reports"])["reports"]
        ledger.commit(stored.evolve(downstream=unkeyable), audit("reports", at=T0 + index))
        assert ledger.get_states(["reports"])["reports"].downstream is None
        assert ledger.group_members(unkeyable) == []
    assert ledger.group_members("reports-api") == []


def test_a_recorded_downstream_changes_the_state_item_s_group_and_nothing_else(
    ledger: DynamoLedger | InMemoryLedger,
) -> None:
    """A steady queue's telemetry naming a new downstream is recorded without a transition:
    the STATE item's ``Group`` alone (no audit item, the version kept), so the index lists
    the queue under it; none, or a name no index key takes, removes it."""
    committed = ledger.commit(fresh_state(downstream="old-api"), audit())
    ledger.record_downstream("orders", "payments-api", committed.version)
    stored = ledger.get_states(["orders"])["orders"]
    assert stored == committed.evolve(downstream="payments-api")
    assert len(ledger.audit_trail("orders")) == 1
    assert ledger.group_members("payments-api") == ["orders"]
    assert ledger.group_members("old-api") == []
    for unkeyable in (None, "", "é" * 1025):
        ledger.record_downstream("orders", "payments-api", committed.version)
        ledger.record_downstream("orders", unkeyable, committed.version)
        assert ledger.get_states(["orders"])["orders"] == committed.evolve(downstream=None)
        assert ledger.group_members("payments-api") == []
    # A transition read before the record still commits on top, with its own downstream.
    moved = ledger.commit(stored.evolve(concurrency=50), audit(at=T0 + 1))
    assert (moved.version, ledger.get_states(["orders"])["orders"]) == (2, moved)


def test_a_record_behind_a_transition_conflicts_and_leaves_the_transition_whole(
    ledger: DynamoLedger | InMemoryLedger,
) -> None:
    """The record is conditioned on the version its writer read: a transition committed
    since (which stores its own downstream) is never overwritten, nor a missing STATE item
    made up."""
    seen = ledger.commit(fresh_state(downstream="old-api"), audit())
    other = ledger.commit(seen.evolve(concurrency=50, downstream="cold-api"), audit(at=T0 + 1))
    with pytest.raises(VersionConflict):
        ledger.record_downstream("orders", "payments-api", seen.version)
    assert ledger.get_states(["orders"])["orders"] == other
    assert ledger.group_members("payments-api") == []
    for version in (0, 1):
        with pytest.raises(VersionConflict):
            ledger.record_downstream("refunds", "payments-api", version)
    assert ledger.get_states(["refunds"]) == {}
    assert ledger.group_members("payments-api") == []


def test_put_config_replaces_the_previous_config(ledger: DynamoLedger | InMemoryLedger) -> None:
    ledger.put_config(QueueConfig(queue="orders", esm_uuid="esm-1", overrides={"t1": 0.1}))
    replacement = QueueConfig(queue="orders", esm_uuid="esm-9", mode=Mode.DRY_RUN)
    ledger.put_config(replacement)

    assert ledger.list_configs() == [replacement]


def test_merge_config_moves_the_mapping_and_keeps_what_an_operator_set(
    ledger: DynamoLedger | InMemoryLedger,
) -> None:
    ledger.merge_config(QueueConfig(queue="orders", esm_uuid="esm-1"))
    assert ledger.list_configs() == [QueueConfig(queue="orders", esm_uuid="esm-1")]

    operated = QueueConfig(
        queue="orders",
        esm_uuid="esm-1",
        mode=Mode.PINNED,
        pinned_concurrency=7,
        overrides={"t1": 0.1},
        group="payments",
        weight=0.5,
        priority=3,
    )
    ledger.put_config(operated)
    ledger.merge_config(QueueConfig(queue="orders", esm_uuid="esm-2", mode=Mode.ACTIVE))

    assert ledger.list_configs() == [dataclasses.replace(operated, esm_uuid="esm-2")]
    ledger.delete_config("orders")
    ledger.delete_config("orders")  # gone already: nothing to do
    assert ledger.list_configs() == []


@pytest.mark.parametrize("overrides", [{"t1": True}, {"t1": "0.1"}, {"t1": None}, [Decimal(1)]])
def test_an_override_that_is_not_a_number_makes_the_config_invalid(overrides: object) -> None:
    """A DynamoDB BOOL reads as True, which float() would take for 1."""
    item = {**encode_config(QueueConfig(queue="orders", esm_uuid="esm-1")), "Overrides": overrides}

    read = read_config_items([item])

    assert read.valid == {}
    assert read.invalid["orders"].problem.startswith("CONFIG item does not decode: TypeError")


def test_get_configs_beyond_one_batch(ledger: DynamoLedger | InMemoryLedger) -> None:
    queues = [f"q{i:03}" for i in range(BATCH_GET_LIMIT * 2 + 37)]
    registered = queues[::2]
    for queue in registered:
        ledger.put_config(QueueConfig(queue=queue, esm_uuid=f"esm-{queue}"))

    found = ledger.get_configs(queues + queues[:5])  # duplicates are fine

    assert sorted(found) == registered
    assert found["q100"].esm_uuid == "esm-q100"


def test_state_and_config_of_a_queue_are_separate_items(
    ledger: DynamoLedger | InMemoryLedger,
) -> None:
    ledger.put_config(QueueConfig(queue="orders", esm_uuid="esm-1"))
    ledger.commit(fresh_state(), audit())

    assert [c.queue for c in ledger.list_configs()] == ["orders"]
    assert [s.queue for s in ledger.list_states()] == ["orders"]


def test_commit_rejects_an_audit_of_another_queue(ledger: DynamoLedger | InMemoryLedger) -> None:
    with pytest.raises(ValueError, match="refunds"):
        ledger.commit(fresh_state(), audit(queue="refunds"))


def test_in_memory_ledger_is_safe_across_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    ledger = InMemoryLedger(memory_types=memory_type)
    ledger.commit(fresh_state(), audit(at=T0))

    def bump(worker: int) -> int:
        conflicts = 0
        for step in range(50):
            while True:
                current = ledger.get_states(["orders"])["orders"]
                try:
                    ledger.commit(current, audit(at=T0 + worker + step / 100))
                    break
                except VersionConflict:
                    conflicts += 1
        return conflicts

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(bump, range(4)))

    assert ledger.get_states(["orders"])["orders"].version == 1 + 4 * 50
    assert len(ledger.audit_trail("orders")) == 1 + 4 * 50


# DynamoDB-only paths: error translation and unprocessed keys, through botocore's Stubber.


def stubbed_ledger() -> tuple[DynamoLedger, Stubber, list[float]]:
    client = boto3.client(
        "dynamodb",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    sleeps: list[float] = []
    ledger = DynamoLedger(
        "t",
        client,
        clock=lambda: 0.0,
        sleep=sleeps.append,
        rng=random.Random(1),
        memory_types=memory_type,
    )
    return ledger, Stubber(client), sleeps


def config_item(queue: str) -> dict[str, Any]:
    return {
        "PK": {"S": f"QUEUE#{queue}"},
        "SK": {"S": "CONFIG"},
        "EsmUuid": {"S": f"esm-{queue}"},
        "Mode": {"S": "ACTIVE"},
    }


def test_unprocessed_keys_are_fetched_again() -> None:
    ledger, stubber, sleeps = stubbed_ledger()
    b_key = {"PK": {"S": "QUEUE#b"}, "SK": {"S": "CONFIG"}}
    stubber.add_response(
        "batch_get_item",
        {
            "Responses": {"t": [config_item("a")]},
            "UnprocessedKeys": {"t": {"Keys": [b_key], "ConsistentRead": True}},
        },
    )
    stubber.add_response(
        "batch_get_item",
        {"Responses": {"t": [config_item("b")]}},
        {"RequestItems": {"t": {"Keys": [b_key], "ConsistentRead": True}}},
    )

    with stubber:
        configs = ledger.get_configs(["a", "b"])

    assert sorted(configs) == ["a", "b"]
    assert len(sleeps) == 1
    stubber.assert_no_pending_responses()


def test_keys_left_unprocessed_for_good_are_an_error() -> None:
    ledger, stubber, sleeps = stubbed_ledger()
    a_key = {"PK": {"S": "QUEUE#a"}, "SK": {"S": "CONFIG"}}
    for _ in range(8):
        stubber.add_response(
            "batch_get_item",
            {"Responses": {}, "UnprocessedKeys": {"t": {"Keys": [a_key]}}},
        )

    with stubber, pytest.raises(LedgerError, match="unprocessed"):
        ledger.get_configs(["a"])
    assert len(sleeps) == 7


def test_other_transaction_failures_are_ledger_errors_with_cause() -> None:
    ledger, stubber, _ = stubbed_ledger()
    stubber.add_client_error(
        "transact_write_items",
        service_error_code="TransactionCanceledException",
        service_message="Transaction cancelled [None, ConditionalCheckFailed]",
        response_meta={},
    )
    stubber.add_client_error("transact_write_items", service_error_code="ValidationException")

    with stubber:
        for _ in range(2):
            with pytest.raises(LedgerError) as caught:
                ledger.commit(fresh_state(), audit())
            assert not isinstance(caught.value, VersionConflict)
            assert caught.value.__cause__ is not None


def test_a_record_is_one_conditional_update_a_failed_condition_a_conflict_not_retried() -> None:
    ledger, stubber, sleeps = stubbed_ledger()
    update = {
        "TableName": "t",
        "Key": {"PK": {"S": "QUEUE#orders"}, "SK": {"S": "STATE#CURRENT"}},
        "UpdateExpression": "SET #group = :group",
        "ConditionExpression": "#version = :version",
        "ExpressionAttributeNames": {"#group": "Group", "#version": "Version"},
        "ExpressionAttributeValues": {":version": {"N": "4"}, ":group": {"S": "payments-api"}},
    }
    stubber.add_response("update_item", {}, update)
    stubber.add_client_error(
        "update_item", service_error_code="ConditionalCheckFailedException", expected_params=update
    )
    stubber.add_client_error("update_item", service_error_code="ValidationException")

    with stubber:
        ledger.record_downstream("orders", "payments-api", 4)
        with pytest.raises(VersionConflict) as conflict:
            ledger.record_downstream("orders", "payments-api", 4)
        with pytest.raises(LedgerError) as failure:
            ledger.record_downstream("orders", "payments-api", 4)
    assert isinstance(conflict.value.__cause__, ClientError)
    assert not isinstance(failure.value, VersionConflict)
    assert isinstance(failure.value.__cause__, ClientError)
    assert sleeps == []
    stubber.assert_no_pending_responses()


def test_cancellation_named_only_in_the_message_is_a_conflict() -> None:
    ledger, stubber, _ = stubbed_ledger()
    stubber.add_client_error(
        "transact_write_items",
        service_error_code="TransactionCanceledException",
        service_message="Transaction cancelled, please refer cancellation reasons "
        "for specific reasons [ConditionalCheckFailed, None]",
    )

    with stubber, pytest.raises(VersionConflict):
        ledger.commit(fresh_state(version=4), audit())


# Guards and each algorithm's memory record are stored by field name: any state survives.

finite = st.floats(min_value=0, max_value=4e9, allow_nan=False)


@settings(max_examples=60)
@given(
    concurrency=st.integers(2, 1000),
    breaches=st.integers(0, 50),
    reason=st.text(max_size=40),
    last_change_at=finite,
    hold_until=finite,
    enabled=st.booleans(),
    version=st.integers(1, 10**9),
    downstream=st.none() | st.text(max_size=1024),
    apply_by=finite,
)
def test_state_items_round_trip(
    concurrency: int,
    breaches: int,
    reason: str,
    last_change_at: float,
    hold_until: float,
    enabled: bool,
    version: int,
    downstream: str | None,
    apply_by: float,
) -> None:
    state = fresh_state(
        concurrency=concurrency,
        consecutive_breaches=breaches,
        last_reason=reason,
        last_change_at=last_change_at,
        hold_until=hold_until,
        enabled=enabled,
        version=version,
        downstream=downstream,
        apply_by=apply_by,
    )

    item = encode_state(state)
    decoded = decode_state(item, MemoryCodec(memory_type))

    # A downstream the Groups index cannot key (empty, over 2,048 bytes) is not stored.
    keyable = downstream is not None and 0 < len(downstream.encode()) <= 2048
    assert decoded == state.evolve(downstream=downstream if keyable else None)
    assert item["Enabled"] is enabled
    assert isinstance(item["HoldUntil"], Decimal)
    # Only a claim in flight carries its end.
    assert ("ApplyBy" in item) is (apply_by > 0)


def test_an_item_without_a_claims_end_has_none_in_flight() -> None:
    """Items written before ``ApplyBy`` existed (and every item but a claim's) read as no
    claim in flight."""
    item = encode_state(fresh_state(version=1, apply_by=T0 + 60.0))
    assert item["ApplyBy"] == Decimal(repr(T0 + 60.0))
    del item["ApplyBy"]

    assert decode_state(item, MemoryCodec(memory_type)).apply_by == 0.0


def test_missing_fields_take_defaults_and_unknown_ones_are_ignored() -> None:
    item = encode_state(fresh_state(hold_until=T0, wake_at=T0, version=1))
    del item["WakeAt"], item["LastChangeAt"]
    item["Memory"] = {"adaptive": {"ceiling": Decimal(9), "retired_field": "x"}}

    decoded = decode_state(item, MemoryCodec(memory_type))

    assert (decoded.hold_until, decoded.wake_at, decoded.last_change_at) == (T0, 0.0, 0.0)
    assert decoded.algorithm == "adaptive"
    assert decoded.memory == AdaptiveMemory(ceiling=9)


def test_memory_of_an_unknown_algorithm_is_dropped() -> None:
    item = encode_state(fresh_state(version=1))
    item["Memory"] = {"retired-algorithm": {"ceiling": Decimal(9)}}

    decoded = decode_state(item, MemoryCodec(memory_type))

    assert (decoded.algorithm, decoded.memory) == ("", None)


def test_items_written_before_memory_was_kept_per_algorithm_still_read() -> None:
    """The old layout: guards and the adaptive algorithm's fields flat in ``Memory``; a field
    the record no longer has (``good_level``) is ignored."""
    item = encode_state(fresh_state(version=3))
    for attribute in ("LastChangeAt", "HoldUntil", "Enabled", "WakeAt"):
        del item[attribute]
    item["Memory"] = {
        "last_change_at": Decimal("1790000000.125"),
        "hold_until": Decimal(0),
        "enabled": False,
        "wake_at": Decimal("1790000015.5"),
        "ceiling": Decimal(9),
        "good_level": Decimal(8),
        "probe_backoff_s": Decimal(20),
        "paused_until": Decimal("1790000015.5"),
    }

    decoded = decode_state(item, MemoryCodec(memory_type))

    assert (decoded.last_change_at, decoded.enabled, decoded.wake_at) == (
        T0 + 0.125,
        False,
        T0 + 15.5,
    )
    assert decoded.algorithm == "adaptive"
    assert decoded.memory == AdaptiveMemory(ceiling=9, probe_backoff_s=20.0, paused_until=T0 + 15.5)
    assert isinstance(decoded.memory.probe_backoff_s, float)


class RecordingDynamo:
    """Answers TransactWriteItems with the given errors first, then success; keeps the calls."""

    def __init__(self, *errors: ClientError) -> None:
        self.errors = list(errors)
        self.calls: list[dict[str, Any]] = []

    def transact_write_items(self, **params: Any) -> dict[str, Any]:
        self.calls.append(params)
        if self.errors:
            raise self.errors.pop(0)
        return {}


def cancelled(*codes: str) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "cancelled"},
            "CancellationReasons": [{"Code": code} for code in codes],
        },
        "TransactWriteItems",
    )


@pytest.mark.parametrize(
    "error",
    [
        cancelled("TransactionConflict", "None"),
        cancelled("None", "ThrottlingError"),
        ClientError(
            {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}},
            "TransactWriteItems",
        ),
        ClientError(
            {
                "Error": {"Code": "InternalServerError", "Message": "oops"},
                "ResponseMetadata": {"HTTPStatusCode": 500},
            },
            "TransactWriteItems",
        ),
    ],
)
def test_transient_commit_failures_are_retried_with_the_same_token(error: ClientError) -> None:
    client = RecordingDynamo(error)
    sleeps: list[float] = []
    ledger = DynamoLedger(
        "t", client, clock=lambda: 0.0, sleep=sleeps.append, memory_types=memory_type
    )

    stored = ledger.commit(fresh_state(version=2), audit())

    assert stored.version == 3
    assert len(client.calls) == 2
    tokens = {call["ClientRequestToken"] for call in client.calls}
    assert len(tokens) == 1
    assert len(sleeps) == 1


def test_a_version_conflict_is_not_retried() -> None:
    client = RecordingDynamo(cancelled("ConditionalCheckFailed", "None"))
    ledger = DynamoLedger(
        "t", client, clock=lambda: 0.0, sleep=lambda _: None, memory_types=memory_type
    )

    with pytest.raises(VersionConflict) as caught:
        ledger.commit(fresh_state(version=2), audit())

    assert isinstance(caught.value.__cause__, ClientError)
    assert len(client.calls) == 1


def test_the_commit_gives_up_at_its_deadline() -> None:
    now = [0.0]
    busy = [cancelled("TransactionConflict", "None") for _ in range(50)]
    client = RecordingDynamo(*busy)

    def sleep(seconds: float) -> None:
        now[0] += seconds

    ledger = DynamoLedger(
        "t", client, call_timeout_s=2.0, clock=lambda: now[0], sleep=sleep, memory_types=memory_type
    )

    with pytest.raises(LedgerError) as caught:
        ledger.commit(fresh_state(version=2), audit())

    assert not isinstance(caught.value, VersionConflict)
    assert isinstance(caught.value.__cause__, ClientError)
    assert 1 < len(client.calls) < 50
    assert now[0] < 2.0


@dataclasses.dataclass(frozen=True, slots=True)
class RicherMemory:
    """An algorithm that remembers more: its record needs no ledger change."""

    ceiling: int | None = None
    probe_backoff_s: float = 10.0
    recent_levels: tuple[int, ...] = ()
    last_mode: Mode = Mode.ACTIVE
    note: str = ""


def test_a_new_memory_record_round_trips_without_ledger_changes() -> None:
    # The registry is the ledger builder's to hand in: the ledger knows no algorithm.
    codec = MemoryCodec({"remembering": RicherMemory}.get)
    memory = RicherMemory(
        ceiling=48,
        probe_backoff_s=20.5,
        recent_levels=(25, 30),
        last_mode=Mode.DRY_RUN,
        note="plateau",
    )
    state = fresh_state(
        state=QueueStateName.RECOVERING,
        concurrency=30,
        previous_concurrency=25,
        version=3,
        hold_until=T0 + 0.5,
        algorithm="remembering",
        memory=memory,
    )

    wire = {k: TypeSerializer().serialize(v) for k, v in encode_state(state).items()}
    item = {k: TypeDeserializer().deserialize(v) for k, v in wire.items()}  # as DynamoDB holds it
    decoded = decode_state(item, codec)

    assert decoded == state
    assert item["Memory"]["remembering"]["ceiling"] == Decimal(48)
    assert item["Memory"]["remembering"]["last_mode"] == "DRY_RUN"
    without_ceiling = state.evolve(memory=dataclasses.replace(memory, ceiling=None))
    assert decode_state(encode_state(without_ceiling), codec) == without_ceiling


def test_unstorable_memory_is_a_ledger_error() -> None:
    with pytest.raises(LedgerError, match="non-finite"):
        encode_state(fresh_state(hold_until=float("inf")))


def test_entries_of_one_millisecond_keep_their_commit_order(
    ledger: DynamoLedger | InMemoryLedger,
) -> None:
    state = fresh_state()
    for new in range(20, 40):
        state = ledger.commit(state, audit(at=T0, new=new))

    assert [entry.new_value for entry in ledger.audit_trail("orders")] == list(range(20, 40))
