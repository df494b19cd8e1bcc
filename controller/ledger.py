"""The ledger: queue state, audit trail and configuration in one DynamoDB table, and its twin.

Both implementations store the same items (``encode_*`` / ``decode_*`` below, plain Python
values with numbers as ``Decimal``), so they round-trip, order and compare identically; the
twin only replaces DynamoDB's conditional transaction with a lock.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
import threading
import time
import types
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from enum import Enum
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from controller.aws import Backoff, CallAbandoned, Clock, PacedCaller, Sleep, error_code
from controller.aws import client as aws_client
from controller.model import (
    Action,
    AuditEntry,
    AuditEvent,
    Mode,
    QueueConfig,
    QueueState,
    QueueStateName,
)
from controller.policy import memory_type
from controller.ports import ConfigRead, InvalidConfig, LedgerError, VersionConflict

Item = dict[str, Any]

STATE_SK = "STATE#CURRENT"
CONFIG_SK = "CONFIG"
AUDIT_PREFIX = "AUDIT#"
# Sorts after every timestamp, so AUDIT#<since>..AUDIT#~ spans all later entries.
AUDIT_END = AUDIT_PREFIX + "~"
# The sparse index of wake-ups: only a STATE item that wants one carries ``WakeUp`` (always
# ``WAKE_UP_KEY``), so a Query on it reads the due states and nothing else (no audit history).
WAKE_UP_INDEX = "WakeUps"
WAKE_UP_ATTRIBUTE = "WakeUp"
WAKE_UP_KEY = "DUE"
DEFAULT_RETENTION_S = 30 * 24 * 3600
BATCH_GET_LIMIT = 100
BATCH_GET_ROUNDS = 8
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


# The guards every algorithm shares, by ``QueueState`` field: top-level attributes of the state
# item (docs/ledger.md).
GUARD_ATTRIBUTES = {
    "last_change_at": "LastChangeAt",
    "hold_until": "HoldUntil",
    "enabled": "Enabled",
    "wake_at": "WakeAt",
}
# Items written before memory was kept per algorithm hold the guards and the adaptive
# algorithm's fields flat in ``Memory``; this key tells them apart.
LEGACY_MEMORY_KEY = "last_change_at"
LEGACY_MEMORY_ALGORITHM = "adaptive"

_type_hints: dict[type, dict[str, Any]] = {}


def _hints(record_type: type) -> dict[str, Any]:
    if record_type not in _type_hints:
        _type_hints[record_type] = typing.get_type_hints(record_type)
    return _type_hints[record_type]


def queue_key(queue: str) -> str:
    return f"QUEUE#{queue}"


def _queue_of(item: Mapping[str, Any]) -> str:
    return str(item["PK"]).removeprefix("QUEUE#")


def iso_utc(epoch_s: float, timespec: str = "microseconds") -> str:
    stamp = datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec=timespec)
    return stamp.replace("+00:00", "Z")


def epoch_of(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def to_number(value: float) -> Decimal:
    if not math.isfinite(value):
        raise LedgerError(f"cannot store non-finite number {value!r}")
    # repr round-trips a float exactly; Decimal(float) would carry binary noise.
    return Decimal(repr(float(value)))


def _to_attribute(value: object) -> object:
    if isinstance(value, Enum):
        return _to_attribute(value.value)
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return to_number(value)
    if isinstance(value, list | tuple):
        return [_to_attribute(element) for element in value]
    if isinstance(value, Mapping):
        return {str(key): _to_attribute(element) for key, element in value.items()}
    raise LedgerError(f"cannot store policy memory value {value!r} ({type(value).__name__})")


def _from_attribute(value: object, annotation: Any) -> object:
    """Turn a stored memory value back into the field's declared type."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        choices = [arg for arg in args if arg is not type(None)]
        if isinstance(value, Decimal):
            return int(value) if int in choices and float not in choices else float(value)
        return _from_attribute(value, choices[0]) if len(choices) == 1 else value
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return annotation(value)
    if isinstance(value, Decimal):
        return int(value) if annotation is int else float(value)
    if isinstance(value, list):
        element_type = args[0] if args else Any
        elements = [_from_attribute(element, element_type) for element in value]
        return tuple(elements) if origin is tuple else elements
    if isinstance(value, dict):
        value_type = args[1] if len(args) == 2 else Any
        return {key: _from_attribute(element, value_type) for key, element in value.items()}
    return value


def encode_state(state: QueueState) -> Item:
    item: Item = {
        "PK": queue_key(state.queue),
        "SK": STATE_SK,
        "CurrentState": str(state.state),
        "CurrentMaxConcurrency": Decimal(state.concurrency),
        "PreviousMaxConcurrency": Decimal(state.previous_concurrency),
        "ConsecutiveBreaches": Decimal(state.consecutive_breaches),
        "LastAction": str(state.last_action),
        "LastReason": state.last_reason,
        "TargetEsmUuid": state.esm_uuid,
        "LastEvaluatedTimestamp": iso_utc(state.last_evaluated_at),
        "Version": Decimal(state.version),
        "Memory": _encode_memory(state.algorithm, state.memory),
    }
    for name, attribute in GUARD_ATTRIBUTES.items():
        item[attribute] = _to_attribute(getattr(state, name))
    if state.wake_at > 0:
        item[WAKE_UP_ATTRIBUTE] = WAKE_UP_KEY
    return item


def decode_state(item: Mapping[str, Any]) -> QueueState:
    stored: Mapping[str, Any] = item.get("Memory") or {}
    guards: Mapping[str, Any]
    if LEGACY_MEMORY_KEY in stored:
        guards, stored = stored, {LEGACY_MEMORY_ALGORITHM: stored}
    else:
        guards = {name: item[attr] for name, attr in GUARD_ATTRIBUTES.items() if attr in item}
    state_hints = _hints(QueueState)
    algorithm, memory = _decode_memory(stored)
    return QueueState(
        queue=_queue_of(item),
        esm_uuid=str(item.get("TargetEsmUuid", "")),
        state=QueueStateName(item["CurrentState"]),
        concurrency=int(item["CurrentMaxConcurrency"]),
        previous_concurrency=int(item["PreviousMaxConcurrency"]),
        consecutive_breaches=int(item.get("ConsecutiveBreaches", 0)),
        last_action=Action(item.get("LastAction", Action.HOLD)),
        last_reason=str(item.get("LastReason", "")),
        last_evaluated_at=epoch_of(item["LastEvaluatedTimestamp"]),
        version=int(item["Version"]),
        algorithm=algorithm,
        memory=memory,
        **{  # type: ignore[arg-type]
            name: _from_attribute(guards[name], state_hints[name])
            for name in GUARD_ATTRIBUTES
            if name in guards
        },
    )


def _encode_memory(algorithm: str, memory: object) -> Item:
    """``{algorithm: {field: value}}``, by the record's own field names; ``{}`` for none."""
    if not algorithm or memory is None:
        return {}
    if not dataclasses.is_dataclass(memory) or isinstance(memory, type):
        raise LedgerError(f"cannot store memory {memory!r}: not a dataclass record")
    fields = dataclasses.fields(memory)
    return {algorithm: {f.name: _to_attribute(getattr(memory, f.name)) for f in fields}}


def _decode_memory(stored: Mapping[str, Any]) -> tuple[str, object]:
    """The algorithm's name and its record. A record of an algorithm not registered (any
    more) is dropped; a stored field the record no longer has is ignored, and one it lacks
    takes its default."""
    for algorithm, fields in stored.items():
        record_type = memory_type(algorithm)
        if record_type is None:
            continue
        hints = _hints(record_type)
        return algorithm, record_type(
            **{
                f.name: _from_attribute(fields[f.name], hints[f.name])
                for f in dataclasses.fields(record_type)
                if f.name in fields
            }
        )
    return "", None


def audit_sort_key(timestamp: float, suffix: str) -> str:
    return f"{AUDIT_PREFIX}{iso_utc(timestamp, 'milliseconds')}#{suffix}"


def encode_audit(audit: AuditEntry, suffix: str, retention_s: int) -> Item:
    return {
        "PK": queue_key(audit.queue),
        "SK": audit_sort_key(audit.timestamp, suffix),
        "EventType": str(audit.event_type),
        "PreviousValue": Decimal(audit.previous_value),
        "NewValue": Decimal(audit.new_value),
        "Action": audit.action,
        "Reason": audit.reason,
        "ErrorRate": to_number(audit.error_rate),
        "SuccessRate": to_number(audit.success_rate),
        "ControlLoopLatencyMs": to_number(audit.control_loop_latency_ms),
        "Timestamp": iso_utc(audit.timestamp),
        "ExpiresAt": Decimal(math.ceil(audit.timestamp + retention_s)),
    }


def decode_audit(item: Mapping[str, Any]) -> AuditEntry:
    return AuditEntry(
        queue=_queue_of(item),
        timestamp=epoch_of(item["Timestamp"]),
        event_type=AuditEvent(item["EventType"]),
        previous_value=int(item["PreviousValue"]),
        new_value=int(item["NewValue"]),
        action=str(item["Action"]),
        reason=str(item.get("Reason", "")),
        error_rate=float(item.get("ErrorRate", 0)),
        success_rate=float(item.get("SuccessRate", 1)),
        control_loop_latency_ms=float(item.get("ControlLoopLatencyMs", 0)),
    )


def encode_config(config: QueueConfig) -> Item:
    item: Item = {
        "PK": queue_key(config.queue),
        "SK": CONFIG_SK,
        "EsmUuid": config.esm_uuid,
        "Mode": str(config.mode),
        "Overrides": {name: to_number(value) for name, value in config.overrides.items()},
    }
    if config.pinned_concurrency is not None:
        item["PinnedConcurrency"] = Decimal(config.pinned_concurrency)
    return item


def decode_config(item: Mapping[str, Any]) -> QueueConfig:
    pinned = item.get("PinnedConcurrency")
    overrides: Mapping[str, Any] = item.get("Overrides") or {}
    return QueueConfig(
        queue=_queue_of(item),
        esm_uuid=str(item["EsmUuid"]),
        mode=Mode(item.get("Mode", Mode.ACTIVE)),
        pinned_concurrency=None if pinned is None else int(pinned),
        overrides={name: float(value) for name, value in overrides.items()},
    )


def read_config_items(items: Iterable[Mapping[str, Any]]) -> ConfigRead:
    """Decode each CONFIG item on its own: one that does not decode is reported, not raised."""
    read = ConfigRead()
    for item in items:
        queue = _queue_of(item)
        try:
            read.valid[queue] = decode_config(item)
        except (KeyError, TypeError, ValueError, ArithmeticError) as error:
            problem = f"CONFIG item does not decode: {type(error).__name__}: {error}"
            fingerprint = repr(sorted(item.items()))
            read.invalid[queue] = InvalidConfig(queue, problem, fingerprint)
    return read


def _check_commit(state: QueueState, audit: AuditEntry) -> None:
    if state.queue != audit.queue:
        raise ValueError(f"audit for {audit.queue!r} committed with state of {state.queue!r}")
    if state.version < 0:
        raise ValueError(f"state version must not be negative, got {state.version}")


_sequence = itertools.count()


def _default_suffix() -> str:
    # A process-wide sequence first: entries one writer makes in the same millisecond keep their
    # order (a failed actuation after its transition); the random part keeps writers apart.
    return f"{next(_sequence):010x}{uuid.uuid4().hex[:8]}"


def _unique(queues: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(queues))


def create_ledger_table(client: Any, name: str) -> str:
    """Create an on-demand table with the ledger's key schema (local stacks, benchmarks and
    tests; template.yaml creates the deployed one, with TTL, recovery and encryption)."""
    client.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "PK", "KeyType": "HASH"},
            {"AttributeName": "SK", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
            {"AttributeName": WAKE_UP_ATTRIBUTE, "AttributeType": "S"},
            {"AttributeName": GUARD_ATTRIBUTES["wake_at"], "AttributeType": "N"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": WAKE_UP_INDEX,
                "KeySchema": [
                    {"AttributeName": WAKE_UP_ATTRIBUTE, "KeyType": "HASH"},
                    {"AttributeName": GUARD_ATTRIBUTES["wake_at"], "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


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
        retention_s: int = DEFAULT_RETENTION_S,
        suffix: Callable[[], str] = _default_suffix,
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
        _check_commit(state, audit)
        state_item = encode_state(state.evolve(version=state.version + 1))
        state_put: dict[str, Any] = {"TableName": self.table_name, "Item": self._wire(state_item)}
        if state.version == 0:
            state_put["ConditionExpression"] = "attribute_not_exists(PK)"
        else:
            state_put["ConditionExpression"] = "Version = :expected"
            state_put["ExpressionAttributeValues"] = {":expected": {"N": str(state.version)}}
        audit_put = {
            "TableName": self.table_name,
            "Item": self._wire(encode_audit(audit, self._suffix(), self.retention_s)),
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
        return decode_state(state_item)

    def get_configs(self, queues: Iterable[str]) -> dict[str, QueueConfig]:
        items = self._batch_get(_unique(queues), CONFIG_SK)
        return {_queue_of(item): decode_config(item) for item in items}

    def read_configs(self, queues: Iterable[str]) -> ConfigRead:
        return read_config_items(self._batch_get(_unique(queues), CONFIG_SK))

    def get_states(self, queues: Iterable[str]) -> dict[str, QueueState]:
        items = self._batch_get(_unique(queues), STATE_SK)
        return {_queue_of(item): decode_state(item) for item in items}

    def list_configs(self) -> list[QueueConfig]:
        items = self._scan(CONFIG_SK)
        return sorted((decode_config(item) for item in items), key=lambda c: c.queue)

    def list_states(self) -> list[QueueState]:
        items = self._scan(STATE_SK)
        return sorted((decode_state(item) for item in items), key=lambda s: s.queue)

    def due_states(self, now: float) -> list[QueueState]:
        # A global index reads eventually consistent: a wake-up written a moment ago shows up
        # at the next tick at the latest.
        items = self._pages(
            "due states",
            "query",
            consistent=False,
            IndexName=WAKE_UP_INDEX,
            KeyConditionExpression="#due = :due AND #wake <= :now",
            ExpressionAttributeNames={
                "#due": WAKE_UP_ATTRIBUTE,
                "#wake": GUARD_ATTRIBUTES["wake_at"],
            },
            ExpressionAttributeValues={
                ":due": {"S": WAKE_UP_KEY},
                ":now": {"N": str(to_number(now))},
            },
        )
        return sorted((decode_state(item) for item in items), key=lambda s: s.queue)

    def put_config(self, config: QueueConfig) -> None:
        self._call(
            f"put config of {config.queue}",
            "put_item",
            TableName=self.table_name,
            Item=self._wire(encode_config(config)),
        )

    def audit_trail(self, queue: str, since: float | None = None) -> list[AuditEntry]:
        low = AUDIT_PREFIX if since is None else AUDIT_PREFIX + iso_utc(since, "milliseconds")
        items = self._pages(
            f"audit trail of {queue}",
            "query",
            KeyConditionExpression="PK = :pk AND SK BETWEEN :low AND :high",
            ExpressionAttributeValues={
                ":pk": {"S": queue_key(queue)},
                ":low": {"S": low},
                ":high": {"S": AUDIT_END},
            },
        )
        return _since([decode_audit(item) for item in items], since)

    def audit_items(self, queue: str) -> list[Item]:
        """The raw audit items of a queue in sort-key order (tests and tooling)."""
        return self._pages(
            f"audit items of {queue}",
            "query",
            KeyConditionExpression="PK = :pk AND begins_with(SK, :audit)",
            ExpressionAttributeValues={
                ":pk": {"S": queue_key(queue)},
                ":audit": {"S": AUDIT_PREFIX},
            },
        )

    def _batch_get(self, queues: list[str], sort_key: str) -> list[Item]:
        found: list[Item] = []
        for start in range(0, len(queues), BATCH_GET_LIMIT):
            chunk = queues[start : start + BATCH_GET_LIMIT]
            keys = [{"PK": {"S": queue_key(q)}, "SK": {"S": sort_key}} for q in chunk]
            found.extend(self._batch_get_chunk(keys))
        return found

    def _batch_get_chunk(self, keys: list[dict[str, Any]]) -> list[Item]:
        found: list[Item] = []
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

    def _scan(self, sort_key: str) -> list[Item]:
        return self._pages(
            f"scan for {sort_key}",
            "scan",
            FilterExpression="SK = :sk",
            ExpressionAttributeValues={":sk": {"S": sort_key}},
        )

    def _pages(
        self, what: str, operation: str, *, consistent: bool = True, **params: Any
    ) -> list[Item]:
        """All items of a Query or Scan, following LastEvaluatedKey (each page retried alone)."""
        items: list[Item] = []
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

    def _call(self, what: str, operation: str, **params: Any) -> dict[str, Any]:
        try:
            return self._caller.call(operation, self._deadline(), **params)
        except CallAbandoned as failure:
            raise LedgerError(f"{what}: {failure}") from failure.__cause__ or failure

    def set_deadline(self, deadline: float) -> None:
        self._invocation_deadline = deadline

    def _deadline(self) -> float:
        return min(self._clock() + self.call_timeout_s, self._invocation_deadline)

    def _wire(self, item: Item) -> dict[str, Any]:
        return {name: self._serializer.serialize(value) for name, value in item.items()}

    def _plain(self, raw: Mapping[str, Any]) -> Item:
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


def _since(entries: list[AuditEntry], since: float | None) -> list[AuditEntry]:
    # The sort key has millisecond precision; the exact bound is applied here.
    if since is None:
        return entries
    return [entry for entry in entries if entry.timestamp >= since]


class InMemoryLedger:
    """The twin of ``DynamoLedger``: the same items in a dict, the same conditions, a lock."""

    def __init__(
        self,
        *,
        retention_s: int = DEFAULT_RETENTION_S,
        suffix: Callable[[], str] = _default_suffix,
    ) -> None:
        self.retention_s = retention_s
        self._suffix = suffix
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], Item] = {}

    def commit(self, state: QueueState, audit: AuditEntry) -> QueueState:
        _check_commit(state, audit)
        state_item = encode_state(state.evolve(version=state.version + 1))
        audit_item = encode_audit(audit, self._suffix(), self.retention_s)
        state_key = (state_item["PK"], state_item["SK"])
        audit_key = (audit_item["PK"], audit_item["SK"])
        with self._lock:
            current = self._items.get(state_key)
            current_version = 0 if current is None else int(current["Version"])
            if current_version != state.version:
                raise VersionConflict(
                    f"queue {state.queue}: state is no longer at version {state.version}"
                )
            if audit_key in self._items:
                raise LedgerError(f"queue {state.queue}: audit item {audit_key[1]} exists")
            self._items[state_key] = state_item
            self._items[audit_key] = audit_item
        return decode_state(state_item)

    def get_configs(self, queues: Iterable[str]) -> dict[str, QueueConfig]:
        return {_queue_of(item): decode_config(item) for item in self._get(queues, CONFIG_SK)}

    def set_deadline(self, deadline: float) -> None:
        """Nothing to bound: the twin answers at once."""

    def read_configs(self, queues: Iterable[str]) -> ConfigRead:
        return read_config_items(self._get(queues, CONFIG_SK))

    def put_item(self, item: Item) -> None:
        """Store a raw item as is (tests: a hand-edited or legacy item)."""
        with self._lock:
            self._items[(item["PK"], item["SK"])] = dict(item)

    def get_states(self, queues: Iterable[str]) -> dict[str, QueueState]:
        return {_queue_of(item): decode_state(item) for item in self._get(queues, STATE_SK)}

    def list_configs(self) -> list[QueueConfig]:
        return [decode_config(item) for item in self._with_sort_key(CONFIG_SK)]

    def list_states(self) -> list[QueueState]:
        return [decode_state(item) for item in self._with_sort_key(STATE_SK)]

    def due_states(self, now: float) -> list[QueueState]:
        wake_at = GUARD_ATTRIBUTES["wake_at"]
        with self._lock:
            items = [
                item
                for item in self._items.values()
                if item.get(WAKE_UP_ATTRIBUTE) == WAKE_UP_KEY and item[wake_at] <= now
            ]
        return sorted((decode_state(item) for item in items), key=lambda s: s.queue)

    def put_config(self, config: QueueConfig) -> None:
        item = encode_config(config)
        with self._lock:
            self._items[(item["PK"], item["SK"])] = item

    def audit_trail(self, queue: str, since: float | None = None) -> list[AuditEntry]:
        pk = queue_key(queue)
        low = AUDIT_PREFIX if since is None else AUDIT_PREFIX + iso_utc(since, "milliseconds")
        with self._lock:
            items = sorted(
                (sk, item)
                for (item_pk, sk), item in self._items.items()
                if item_pk == pk and low <= sk <= AUDIT_END
            )
        return _since([decode_audit(item) for _, item in items], since)

    def audit_items(self, queue: str) -> list[Item]:
        """The raw audit items of a queue in sort-key order (tests and tooling)."""
        pk = queue_key(queue)
        with self._lock:
            return [
                dict(item)
                for (item_pk, sk), item in sorted(self._items.items())
                if item_pk == pk and sk.startswith(AUDIT_PREFIX)
            ]

    def _get(self, queues: Iterable[str], sort_key: str) -> list[Item]:
        with self._lock:
            found = (self._items.get((queue_key(q), sort_key)) for q in _unique(queues))
            return [item for item in found if item is not None]

    def _with_sort_key(self, sort_key: str) -> list[Item]:
        with self._lock:
            return [item for (_, sk), item in sorted(self._items.items()) if sk == sort_key]
