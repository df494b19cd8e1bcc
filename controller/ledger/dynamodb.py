"""The ledger on DynamoDB: one table holds queue state, audit trail and configuration.

Its twin (``controller.ledger.twin``) stores the same items; this adapter adds DynamoDB's
conditional transaction, paging, batching and the retries of ``controller.aws``.
"""

from __future__ import annotations

import math
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from controller.aws import Backoff, CallAbandoned, Clock, PacedCaller, Sleep, error_code
from controller.aws import client as aws_client
from controller.groups import GroupMemory
from controller.ledger import codec
from controller.ledger.memory import MemoryCodec, MemoryTypes, to_number
from controller.model import AuditEntry, GroupReport, QueueConfig, QueueState
from controller.ports import (
    ConfigRead,
    LedgerError,
    StoredGroupMemory,
    VersionConflict,
    WakeUpSweep,
)

BATCH_GET_LIMIT = 100
BATCH_GET_ROUNDS = 8
# Scan pages (up to 1 MB each) one ``sweep_wake_ups`` call reads: the sweep is a rare
# fallback, spread over ticks rather than stretching one.
WAKE_UP_SWEEP_PAGES = 4
RETRYABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "TransactionInProgressException",
    }
)
TRANSIENT_CANCELLATIONS = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)


class DynamoLedger:
    """The ledger on one DynamoDB table (keys ``PK``/``SK``, TTL attribute ``ExpiresAt``).

    ``client`` is a boto3 DynamoDB client (or resource); one is made from the environment
    (``AWS_ENDPOINT_URL`` honoured, botocore's retries off) when omitted. Every call goes
    through ``controller.aws.PacedCaller``: throttling, transaction conflicts, 5xx and
    connection errors are retried with full-jitter backoff for at most ``call_timeout_s``, and
    never past the invocation's deadline (``set_deadline``).
    """

    def __init__(
        self,
        table_name: str,
        client: Any = None,
        *,
        memory_types: MemoryTypes,
        retention_s: int = codec.DEFAULT_RETENTION_S,
        suffix: Callable[[], str] = codec.default_suffix,
        call_timeout_s: float = 10.0,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        rng: random.Random | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        if client is None:
            client = aws_client("dynamodb")
        client = client.meta.client if hasattr(client, "Table") else client
        self.table_name = table_name
        self._memory = MemoryCodec(memory_types)
        self.retention_s = retention_s
        self.call_timeout_s = call_timeout_s
        self._invocation_deadline = math.inf
        self._suffix = suffix
        self._clock = clock
        self._caller = PacedCaller(
            client,
            retryable=RETRYABLE_CODES,
            retry_if=_transaction_retryable,
            backoff=backoff or Backoff(base_s=0.05, cap_s=1.0),
            clock=clock,
            sleep=sleep,
            rng=rng,
        )
        self._serializer = TypeSerializer()
        self._deserializer = TypeDeserializer()

    def commit(self, state: QueueState, audit: AuditEntry) -> QueueState:
        codec.check_commit(state, audit)
        state_item = codec.encode_state(state.evolve(version=state.version + 1))
        state_put: dict[str, Any] = {"TableName": self.table_name, "Item": self._wire(state_item)}
        if state.version == 0:
            state_put["ConditionExpression"] = "attribute_not_exists(PK)"
        else:
            state_put["ConditionExpression"] = "Version = :expected"
            state_put["ExpressionAttributeValues"] = {":expected": {"N": str(state.version)}}
        audit_put = {
            "TableName": self.table_name,
            "Item": self._wire(codec.encode_audit(audit, self._suffix(), self.retention_s)),
            "ConditionExpression": "attribute_not_exists(SK)",
        }
        try:
            self._caller.call(
                "transact_write_items",
                self._deadline(),
                TransactItems=[{"Put": state_put}, {"Put": audit_put}],
                # The same token on every retry: a retry of a commit that did land succeeds
                # instead of failing its own version condition.
                ClientRequestToken=uuid.uuid4().hex,
            )
        except CallAbandoned as failure:
            cause = failure.__cause__
            if isinstance(cause, ClientError) and _state_condition_failed(cause):
                raise VersionConflict(
                    f"queue {state.queue}: state is no longer at version {state.version}"
                ) from cause
            raise LedgerError(f"queue {state.queue}: commit: {failure}") from cause or failure
        return codec.decode_state(state_item, self._memory)

    def record_downstream(self, queue: str, downstream: str | None, version: int) -> None:
        """One UpdateItem conditioned on ``Version``; a failed condition is not retried."""
        group = codec.stored_downstream(downstream)
        names = {"#group": codec.GROUP_ATTRIBUTE, "#version": "Version"}
        values: dict[str, Any] = {":version": {"N": str(version)}}
        if group is None:
            update = "REMOVE #group"
        else:
            update = "SET #group = :group"
            values[":group"] = {"S": group}
        self._update_state(queue, "record downstream", update, "#version = :version", names, values)

    def _update_state(
        self,
        queue: str,
        what: str,
        update: str,
        condition: str,
        names: dict[str, str],
        values: dict[str, Any],
    ) -> None:
        """One conditional UpdateItem of ``queue``'s STATE item; ``VersionConflict``: the
        condition failed (another writer got there first), never retried."""
        try:
            self._caller.call(
                "update_item",
                self._deadline(),
                TableName=self.table_name,
                Key=self._wire(codec.state_key(queue)),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except CallAbandoned as failure:
            cause = failure.__cause__
            if isinstance(cause, ClientError) and (
                error_code(cause) == "ConditionalCheckFailedException"
            ):
                raise VersionConflict(f"queue {queue}: {what}: its condition failed") from cause
            raise LedgerError(f"queue {queue}: {what}: {failure}") from cause or failure

    def get_configs(self, queues: Iterable[str]) -> dict[str, QueueConfig]:
        items = self._batch_get(codec.unique(queues), codec.CONFIG_SK)
        return {codec.queue_of(item): codec.decode_config(item) for item in items}

    def read_configs(self, queues: Iterable[str]) -> ConfigRead:
        return codec.read_config_items(self._batch_get(codec.unique(queues), codec.CONFIG_SK))

    def get_states(self, queues: Iterable[str]) -> dict[str, QueueState]:
        items = self._batch_get(codec.unique(queues), codec.STATE_SK)
        return {codec.queue_of(item): codec.decode_state(item, self._memory) for item in items}

    def list_configs(self) -> list[QueueConfig]:
        items = self._scan(codec.CONFIG_SK)
        return sorted((codec.decode_config(item) for item in items), key=lambda c: c.queue)

    def group_members(self, group: str) -> list[str]:
        if not codec.indexable(group):
            return []  # no item can name it: DynamoDB would refuse the Query
        items = self._pages(
            "group members",
            "query",
            consistent=False,
            IndexName=codec.GROUP_INDEX,
            KeyConditionExpression="#group = :group",
            ExpressionAttributeNames={"#group": codec.GROUP_ATTRIBUTE},
            ExpressionAttributeValues={":group": {"S": group}},
        )
        return codec.members_listed(items)

    def list_states(self) -> list[QueueState]:
        items = self._scan(codec.STATE_SK)
        return sorted(
            (codec.decode_state(item, self._memory) for item in items), key=lambda s: s.queue
        )

    def due_states(self, now: float) -> list[QueueState]:
        # A global index reads eventually consistent: a wake-up written a moment ago shows up
        # at the next tick at the latest.
        items = self._pages(
            "due states",
            "query",
            consistent=False,
            IndexName=codec.WAKE_UP_INDEX,
            KeyConditionExpression="#due = :due AND #wake <= :now",
            ExpressionAttributeNames={
                "#due": codec.WAKE_UP_ATTRIBUTE,
                "#wake": codec.GUARD_ATTRIBUTES["wake_at"],
            },
            ExpressionAttributeValues={
                ":due": {"S": codec.WAKE_UP_KEY},
                ":now": {"N": str(to_number(now))},
            },
        )
        return sorted(
            (codec.decode_state(item, self._memory) for item in items), key=lambda s: s.queue
        )

    def sweep_wake_ups(self, now: float, resume: object | None = None) -> WakeUpSweep:
        """A paginated Scan (at most ``WAKE_UP_SWEEP_PAGES`` pages, eventually consistent)
        filtered to paused STATE items without ``WakeUp``, then one conditional UpdateItem
        each. An item another writer committed meanwhile fails its condition and is skipped:
        its commit wrote the wake-up it wants."""
        woken: list[QueueState] = []
        start = resume if isinstance(resume, dict) else None
        for _ in range(WAKE_UP_SWEEP_PAGES):
            params: dict[str, Any] = {
                "TableName": self.table_name,
                "FilterExpression": "SK = :state AND attribute_not_exists(#wake_up) AND "
                "attribute_not_exists(#unswept) AND "
                "(#enabled = :paused OR #memory.#legacy_enabled = :paused)",
                "ExpressionAttributeNames": {
                    "#wake_up": codec.WAKE_UP_ATTRIBUTE,
                    "#unswept": codec.UNSWEPT_MARK,
                    "#enabled": codec.GUARD_ATTRIBUTES["enabled"],
                    "#memory": "Memory",
                    "#legacy_enabled": "enabled",
                },
                "ExpressionAttributeValues": {
                    ":state": {"S": codec.STATE_SK},
                    ":paused": {"BOOL": False},
                },
            }
            if start is not None:
                params["ExclusiveStartKey"] = start
            page = self._call("sweep for missing wake-ups", "scan", **params)
            for raw in page.get("Items", []):
                repair = codec.wake_up_repair(self._plain(raw), self._memory, now)
                if repair is not None and self._repair(repair):
                    woken.append(repair.state)
            start = page.get("LastEvaluatedKey")
            if not start:
                return WakeUpSweep(woken)
        return WakeUpSweep(woken, start)

    def _repair(self, repair: codec.WakeUpRepair) -> bool:
        names = {
            "#wake_up": codec.WAKE_UP_ATTRIBUTE,
            "#wake_at": codec.GUARD_ATTRIBUTES["wake_at"],
            "#version": "Version",
        }
        values = {
            ":due": {"S": codec.WAKE_UP_KEY},
            ":wake_at": {"N": str(to_number(repair.wake_at))},
            ":version": {"N": str(repair.version)},
        }
        sets = ["#wake_up = :due", "#wake_at = :wake_at"]
        if repair.set_legacy_time:
            names["#memory"], names["#legacy_wake_at"] = "Memory", "wake_at"
            sets.append("#memory.#legacy_wake_at = :wake_at")
        try:
            self._update_state(
                repair.state.queue,
                "wake-up repair",
                "SET " + ", ".join(sets),
                "attribute_not_exists(#wake_up) AND #version = :version",
                names,
                values,
            )
        except VersionConflict:
            return False
        return True

    def put_config(self, config: QueueConfig) -> None:
        self._put(f"put config of {config.queue}", codec.encode_config(config))

    def merge_config(self, config: QueueConfig) -> None:
        """Point the queue's CONFIG item at ``config``'s mapping and keep whatever else it
        holds (``codec.config_registration``), in one conditional-free update: a deploy's
        registration."""
        key, always, when_absent = codec.config_registration(config)
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        assignments = []
        for index, (attribute, value) in enumerate({**always, **when_absent}.items()):
            name, placeholder = f"#a{index}", f":a{index}"
            names[name], values[placeholder] = attribute, self._serializer.serialize(value)
            kept = placeholder if attribute in always else f"if_not_exists({name}, {placeholder})"
            assignments.append(f"{name} = {kept}")
        self._call(
            f"merge config of {config.queue}",
            "update_item",
            TableName=self.table_name,
            Key=self._wire(key),
            UpdateExpression="SET " + ", ".join(assignments),
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def delete_config(self, queue: str) -> None:
        self._call(
            f"delete config of {queue}",
            "delete_item",
            TableName=self.table_name,
            Key=self._wire(codec.config_key(queue)),
        )

    def audit_trail(self, queue: str, since: float | None = None) -> list[AuditEntry]:
        low = (
            codec.AUDIT_PREFIX
            if since is None
            else codec.AUDIT_PREFIX + codec.iso_utc(since, "milliseconds")
        )
        items = self._pages(
            f"audit trail of {queue}",
            "query",
            KeyConditionExpression="PK = :pk AND SK BETWEEN :low AND :high",
            ExpressionAttributeValues={
                ":pk": {"S": codec.queue_key(queue)},
                ":low": {"S": low},
                ":high": {"S": codec.AUDIT_END},
            },
        )
        return codec.entries_since([codec.decode_audit(item) for item in items], since)

    def put_group_report(self, report: GroupReport) -> None:
        self._put(f"put report of group {report.group}", codec.encode_group_report(report))

    def group_reports(self) -> list[GroupReport]:
        items = self._scan(codec.GROUP_SK)
        return codec.read_group_items(item for item in items if codec.is_group_item(item))

    def audit_items(self, queue: str) -> list[codec.Item]:
        """The raw audit items of a queue in sort-key order (tests and tooling)."""
        return self._pages(
            f"audit items of {queue}",
            "query",
            KeyConditionExpression="PK = :pk AND begins_with(SK, :audit)",
            ExpressionAttributeValues={
                ":pk": {"S": codec.queue_key(queue)},
                ":audit": {"S": codec.AUDIT_PREFIX},
            },
        )

    def get_group_memories(self, groups: Iterable[str]) -> dict[str, StoredGroupMemory]:
        keys = [codec.group_memory_key(group) for group in codec.unique(groups)]
        return {
            codec.group_of(item): codec.decode_group_memory(item, self._memory)
            for item in self._batch_get_keys(keys)
        }

    def put_group_memory(self, group: str, memory: GroupMemory, version: int) -> int:
        """One PutItem conditioned on the version read (``attribute_not_exists(PK)`` for 0)."""
        item = codec.encode_group_memory(group, memory, version + 1)
        put: dict[str, Any] = {"TableName": self.table_name, "Item": self._wire(item)}
        if version == 0:
            put["ConditionExpression"] = "attribute_not_exists(PK)"
        else:
            put["ConditionExpression"] = "Version = :expected"
            put["ExpressionAttributeValues"] = {":expected": {"N": str(version)}}
        try:
            self._caller.call("put_item", self._deadline(), **put)
        except CallAbandoned as failure:
            cause = failure.__cause__
            if (
                isinstance(cause, ClientError)
                and error_code(cause) == "ConditionalCheckFailedException"
            ):
                raise VersionConflict(
                    f"group {group}: memory is no longer at version {version}"
                ) from cause
            raise LedgerError(f"group {group}: put memory: {failure}") from cause or failure
        return version + 1

    def _batch_get(self, queues: list[str], sort_key: str) -> list[codec.Item]:
        return self._batch_get_keys([{"PK": codec.queue_key(q), "SK": sort_key} for q in queues])

    def _batch_get_keys(self, keys: list[codec.Item]) -> list[codec.Item]:
        found: list[codec.Item] = []
        for start in range(0, len(keys), BATCH_GET_LIMIT):
            chunk = keys[start : start + BATCH_GET_LIMIT]
            found.extend(self._batch_get_chunk([self._wire(key) for key in chunk]))
        return found

    def _batch_get_chunk(self, keys: list[dict[str, Any]]) -> list[codec.Item]:
        found: list[codec.Item] = []
        request: dict[str, Any] = {self.table_name: {"Keys": keys, "ConsistentRead": True}}
        deadline = self._deadline()
        for round_number in range(BATCH_GET_ROUNDS):
            if round_number > 0 and not self._caller.pause(round_number - 1, deadline):
                break
            response = self._call("batch get", "batch_get_item", RequestItems=request)
            found.extend(self._plain(raw) for raw in response["Responses"].get(self.table_name, []))
            request = response.get("UnprocessedKeys") or {}
            if not request:
                return found
        raise LedgerError(
            f"batch get: keys still unprocessed after {round_number + 1} rounds (throttled?)"
        )

    def _scan(self, sort_key: str) -> list[codec.Item]:
        return self._pages(
            f"scan for {sort_key}",
            "scan",
            FilterExpression="SK = :sk",
            ExpressionAttributeValues={":sk": {"S": sort_key}},
        )

    def _pages(
        self, what: str, operation: str, *, consistent: bool = True, **params: Any
    ) -> list[codec.Item]:
        """All items of a Query or Scan, following LastEvaluatedKey (each page retried alone)."""
        items: list[codec.Item] = []
        start: dict[str, Any] | None = None
        while True:
            page_params = dict(params, TableName=self.table_name, ConsistentRead=consistent)
            if start is not None:
                page_params["ExclusiveStartKey"] = start
            page = self._call(what, operation, **page_params)
            items.extend(self._plain(raw) for raw in page.get("Items", []))
            start = page.get("LastEvaluatedKey")
            if not start:
                return items

    def _put(self, what: str, item: codec.Item) -> None:
        """One unconditional PutItem: ``item`` replaces whatever its key held."""
        self._call(what, "put_item", TableName=self.table_name, Item=self._wire(item))

    def _call(self, what: str, operation: str, **params: Any) -> dict[str, Any]:
        try:
            return self._caller.call(operation, self._deadline(), **params)
        except CallAbandoned as failure:
            raise LedgerError(f"{what}: {failure}") from failure.__cause__ or failure

    def set_deadline(self, deadline: float) -> None:
        self._invocation_deadline = deadline

    def _deadline(self) -> float:
        return min(self._clock() + self.call_timeout_s, self._invocation_deadline)

    def _wire(self, item: codec.Item) -> dict[str, Any]:
        return {name: self._serializer.serialize(value) for name, value in item.items()}

    def _plain(self, raw: Mapping[str, Any]) -> codec.Item:
        return {name: self._deserializer.deserialize(value) for name, value in raw.items()}


def _cancellation_codes(error: ClientError) -> list[str]:
    """Per-item reasons of a cancelled transaction, in item order ("None": that item was fine)."""
    if error_code(error) != "TransactionCanceledException":
        return []
    reasons = error.response.get("CancellationReasons") or []
    if reasons:
        return [str(reason.get("Code") or "None") for reason in reasons]
    # Some endpoints only name the reasons in the message: "... [ConditionalCheckFailed, None]".
    message = str(error.response.get("Error", {}).get("Message", ""))
    if "[" not in message:
        return []
    return [code.strip() for code in message.rpartition("[")[2].rstrip("]").split(",")]


def _state_condition_failed(error: ClientError) -> bool:
    """True when the state item's (first) condition cancelled the transaction."""
    codes = _cancellation_codes(error)
    return bool(codes) and codes[0] == "ConditionalCheckFailed"


def _transaction_retryable(error: ClientError) -> bool:
    """A transaction cancelled only by contention or throttling may simply be tried again."""
    codes = set(_cancellation_codes(error)) - {"None"}
    return bool(codes) and codes <= TRANSIENT_CANCELLATIONS
