"""The ledger's items: keys, attribute names and the codec of every item type (docs/ledger.md).

Items are plain Python values with numbers as ``Decimal``, as boto3's TypeDeserializer gives
them, so DynamoDB and the in-memory twin store, order and compare the same items. The rules
both ledgers apply to a write are here too, so they cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from controller.constants import (
    DEFAULT_PRIORITY,
    DEFAULT_WEIGHT,
    MAX_PRIORITY,
    MAX_WEIGHT,
    MIN_WEIGHT,
)
from controller.groups import GroupMemory
from controller.ledger.memory import (
    MemoryCodec,
    encode_memory,
    to_attribute,
    to_number,
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
from controller.ports import ConfigRead, InvalidConfig, LedgerError, StoredGroupMemory

# An item as both ledgers hold it: attribute name -> plain value (numbers as ``Decimal``).
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
# The group a queue item names, and the global index on it (keys only): the queues of one
# group, read without a scan (``Ledger.group_members``). A CONFIG item's is the operator's
# group; a STATE item's the downstream the queue's telemetry named when it was last decided
# (``QueueState.downstream``), so a container that never saw that telemetry (a paused queue
# sends none) finds the queue's group, and the group's members, all in one Query. No other
# item has the attribute.
GROUP_ATTRIBUTE = "Group"
GROUP_INDEX = "Groups"
# What DynamoDB takes as an index's partition key: a non-empty string of at most 2,048 bytes
# (UTF-8); a write carrying any other value in ``Group`` is refused whole.
MAX_INDEX_KEY_BYTES = 2048
DEFAULT_RETENTION_S = 30 * 24 * 3600
# The CONFIG attribute naming the queue's mapping: the one a registration always writes.
ESM_UUID_ATTRIBUTE = "EsmUuid"

# The guards every algorithm shares, by ``QueueState`` field: top-level attributes of the state
# item (docs/ledger.md).
GUARD_ATTRIBUTES = {
    "last_change_at": "LastChangeAt",
    "hold_until": "HoldUntil",
    "enabled": "Enabled",
    "wake_at": "WakeAt",
    "paused_since": "PausedSince",
}
# A claim's end (``QueueState.apply_by``): written only on a claim in flight, so an item
# without it (all others, and every item an older controller wrote) reads as none in flight.
APPLY_BY_ATTRIBUTE = "ApplyBy"
# Written by every STATE item since ``PausedSince`` was added, well after the ``WakeUps`` index:
# such an item carries ``WakeUp`` whenever its queue wants one, so the wake-up sweep leaves it.
UNSWEPT_MARK = GUARD_ATTRIBUTES["paused_since"]
# Items written before memory was kept per algorithm hold the guards and the adaptive
# algorithm's fields flat in ``Memory``; this key tells them apart.
LEGACY_MEMORY_KEY = "last_change_at"
LEGACY_MEMORY_ALGORITHM = "adaptive"


def queue_key(queue: str) -> str:
    return f"QUEUE#{queue}"


def state_key(queue: str) -> Item:
    return {"PK": queue_key(queue), "SK": STATE_SK}


def queue_of(item: Mapping[str, Any]) -> str:
    return str(item["PK"]).removeprefix("QUEUE#")


def iso_utc(epoch_s: float, timespec: str = "microseconds") -> str:
    stamp = datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec=timespec)
    return stamp.replace("+00:00", "Z")


def epoch_of(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


# --- STATE#CURRENT --------------------------------------------------------------------------


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
        "Memory": encode_memory(state.algorithm, state.memory),
    }
    for name, attribute in GUARD_ATTRIBUTES.items():
        item[attribute] = to_attribute(getattr(state, name))
    if state.wake_at > 0:
        item[WAKE_UP_ATTRIBUTE] = WAKE_UP_KEY
    if state.apply_by > 0:
        item[APPLY_BY_ATTRIBUTE] = to_number(state.apply_by)
    return with_downstream(item, state.downstream)


def stored_downstream(downstream: str | None) -> str | None:
    """What a STATE item's ``Group`` holds for ``downstream``: the name, or none where none
    is named or no index key can hold it (``indexable``)."""
    return downstream if downstream is not None and indexable(downstream) else None


def with_downstream(item: Mapping[str, Any], downstream: str | None) -> Item:
    """``item`` with ``downstream`` as its ``Group`` (``stored_downstream``) and nothing else
    new: what a commit writes, and the twin's ``record_downstream`` (DynamoDB's is one
    UpdateItem)."""
    recorded = {name: value for name, value in item.items() if name != GROUP_ATTRIBUTE}
    group = stored_downstream(downstream)
    if group is not None:
        recorded[GROUP_ATTRIBUTE] = group
    return recorded


def members_listed(items: Iterable[Mapping[str, Any]]) -> list[str]:
    """The queues the ``Groups`` index lists under one group, each once: by its CONFIG item,
    its STATE item or both."""
    listing = (CONFIG_SK, STATE_SK)
    return sorted({queue_of(item) for item in items if item["SK"] in listing})


def indexable(group: str) -> bool:
    """Whether ``group`` can key the ``Groups`` index. Telemetry names a downstream in up to
    1,024 characters, up to 4,096 bytes: a longer one is not stored, and its queue is grouped
    only where its telemetry is held."""
    return 0 < len(group.encode()) <= MAX_INDEX_KEY_BYTES


@dataclass(frozen=True, slots=True)
class WakeUpRepair:
    """What a STATE item written without ``WakeUp`` (before the ``WakeUps`` index, or in the
    old flat layout) needs so the tick finds its paused queue: ``WakeUp``, the index's
    top-level ``WakeAt`` (``wake_at``: the item's own wake-up time, else the sweep's ``now``)
    and, in the flat layout without a wake-up time, that time where the controller reads it
    (``Memory.wake_at``). Written only if ``version`` is still stored and ``WakeUp`` still
    absent, so it never overwrites a newer commit (which carries its own wake-up)."""

    state: QueueState
    version: int
    wake_at: float
    set_legacy_time: bool


def wake_up_repair(item: Mapping[str, Any], memory: MemoryCodec, now: float) -> WakeUpRepair | None:
    """The repair ``item`` needs, or ``None``: it has its ``WakeUp``, its mapping is not
    paused (an enabled mapping sends telemetry, which wakes it), or it was written by a
    controller that writes every wake-up it wants (``UNSWEPT_MARK``: one without is a
    disabled mapping that wants none, an operator's say)."""
    if WAKE_UP_ATTRIBUTE in item or UNSWEPT_MARK in item:
        return None
    state = decode_state(item, memory)
    if state.enabled:
        return None
    wake_at = state.wake_at if state.wake_at > 0 else now
    legacy = LEGACY_MEMORY_KEY in (item.get("Memory") or {})
    return WakeUpRepair(
        state=state.evolve(wake_at=wake_at),
        version=state.version,
        wake_at=wake_at,
        set_legacy_time=legacy and state.wake_at <= 0,
    )


def repaired(item: Mapping[str, Any], repair: WakeUpRepair) -> Item:
    """``item`` with ``repair`` written (the twin's update; DynamoDB's is one UpdateItem)."""
    wake_at = to_number(repair.wake_at)
    fixed: Item = {**item, WAKE_UP_ATTRIBUTE: WAKE_UP_KEY, GUARD_ATTRIBUTES["wake_at"]: wake_at}
    if repair.set_legacy_time:
        fixed["Memory"] = {**item["Memory"], "wake_at": wake_at}
    return fixed


def decode_state(item: Mapping[str, Any], memory: MemoryCodec) -> QueueState:
    """The state an item holds; ``memory`` reads the deciding algorithm's record back."""
    stored: Mapping[str, Any] = item.get("Memory") or {}
    guards: Mapping[str, Any]
    if LEGACY_MEMORY_KEY in stored:
        guards, stored = stored, {LEGACY_MEMORY_ALGORITHM: stored}
    else:
        guards = {name: item[attr] for name, attr in GUARD_ATTRIBUTES.items() if attr in item}
    algorithm, record = memory.decode_memory(stored)
    stored_guards = {name: guards[name] for name in GUARD_ATTRIBUTES if name in guards}
    return QueueState(
        queue=queue_of(item),
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
        memory=record,
        # An index key: DynamoDB stores nothing but a non-empty string there.
        downstream=item.get(GROUP_ATTRIBUTE),
        apply_by=float(item.get(APPLY_BY_ATTRIBUTE, 0)),
        **memory.fields(QueueState, stored_guards),  # type: ignore[arg-type]
    )


# --- AUDIT# ---------------------------------------------------------------------------------


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
        queue=queue_of(item),
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


def entries_since(entries: list[AuditEntry], since: float | None) -> list[AuditEntry]:
    """The entries from ``since`` on: the sort key has millisecond precision, the exact bound
    is applied here."""
    if since is None:
        return entries
    return [entry for entry in entries if entry.timestamp >= since]


# --- CONFIG ---------------------------------------------------------------------------------


def config_key(queue: str) -> Item:
    return {"PK": queue_key(queue), "SK": CONFIG_SK}


def encode_config(config: QueueConfig) -> Item:
    item: Item = {
        **config_key(config.queue),
        ESM_UUID_ATTRIBUTE: config.esm_uuid,
        "Mode": str(config.mode),
        "Overrides": {name: to_number(value) for name, value in config.overrides.items()},
    }
    if config.pinned_concurrency is not None:
        item["PinnedConcurrency"] = Decimal(config.pinned_concurrency)
    if config.group is not None:
        item[GROUP_ATTRIBUTE] = config.group
    if config.weight != DEFAULT_WEIGHT:
        item["Weight"] = to_number(config.weight)
    if config.priority != DEFAULT_PRIORITY:
        item["Priority"] = Decimal(config.priority)
    return item


def decode_config(item: Mapping[str, Any]) -> QueueConfig:
    pinned = item.get("PinnedConcurrency")
    overrides = item.get("Overrides") or {}
    if not isinstance(overrides, Mapping):
        raise TypeError(f"Overrides must be a map, got {type(overrides).__name__}")
    return QueueConfig(
        queue=queue_of(item),
        esm_uuid=str(item[ESM_UUID_ATTRIBUTE]),
        mode=Mode(item.get("Mode", Mode.ACTIVE)),
        pinned_concurrency=None if pinned is None else int(pinned),
        overrides={name: _override(name, value) for name, value in overrides.items()},
        group=_group(item.get(GROUP_ATTRIBUTE)),
        weight=_bounded("Weight", item.get("Weight", DEFAULT_WEIGHT), MIN_WEIGHT, MAX_WEIGHT),
        priority=_priority(item.get("Priority", DEFAULT_PRIORITY)),
    )


def _group(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise TypeError(f"Group must be a non-empty string, got {value!r}")
    return value


def _priority(value: object) -> int:
    priority = _bounded("Priority", value, 0, MAX_PRIORITY)
    if not priority.is_integer():
        raise ValueError(f"Priority must be an integer, got {priority:g}")
    return int(priority)


def _bounded(name: str, value: object, lower: float, upper: float) -> float:
    number = _override(name, value)
    if not lower <= number <= upper:
        raise ValueError(f"{name} must be in [{lower:g}, {upper:g}], got {number:g}")
    return number


def _override(name: str, value: object) -> float:
    # A DynamoDB BOOL reads as a Python bool, which float() would take for 0 or 1.
    if isinstance(value, bool) or not isinstance(value, Decimal | int | float):
        raise TypeError(f"override {name!r} must be a number, got {value!r}")
    return float(value)


def read_config_items(items: Iterable[Mapping[str, Any]]) -> ConfigRead:
    """Decode each CONFIG item on its own: one that does not decode is reported, not raised."""
    read = ConfigRead()
    for item in items:
        queue = queue_of(item)
        try:
            read.valid[queue] = decode_config(item)
        except (KeyError, TypeError, ValueError, ArithmeticError) as error:
            problem = f"CONFIG item does not decode: {type(error).__name__}: {error}"
            fingerprint = repr(sorted(item.items()))
            read.invalid[queue] = InvalidConfig(queue, problem, fingerprint)
    return read


def config_registration(config: QueueConfig) -> tuple[Item, Item, Item]:
    """A deploy's registration of ``config``: the item's key, the attributes it always writes
    (the mapping id) and those it writes only where the stored item has none, so an
    operator's mode, pin and overrides survive a redeploy (a new item is ``config``'s)."""
    item = encode_config(config)
    key = {name: item.pop(name) for name in ("PK", "SK")}
    always = {ESM_UUID_ATTRIBUTE: item.pop(ESM_UUID_ATTRIBUTE)}
    return key, always, item


# --- GROUP#<name> / CURRENT -----------------------------------------------------------------

GROUP_PREFIX = "GROUP#"
GROUP_SK = "CURRENT"


def group_key(group: str) -> Item:
    return {"PK": GROUP_PREFIX + group, "SK": GROUP_SK}


def is_group_item(item: Mapping[str, Any]) -> bool:
    return str(item.get("PK", "")).startswith(GROUP_PREFIX) and item.get("SK") == GROUP_SK


def encode_group_report(report: GroupReport) -> Item:
    """A group's last report: ``CapacityRps`` absent while the capacity is not known."""
    item: Item = {
        **group_key(report.group),
        "At": to_number(report.at),
        "Members": [
            {
                "Queue": member.queue,
                "ShareRps": to_number(member.share_rps),
                "Level": Decimal(member.level),
                "Paused": member.paused,
            }
            for member in report.members
        ],
    }
    if report.capacity_rps is not None:
        item["CapacityRps"] = to_number(report.capacity_rps)
    return item


def decode_group_report(item: Mapping[str, Any]) -> GroupReport:
    capacity = item.get("CapacityRps")
    return GroupReport(
        group=str(item["PK"]).removeprefix(GROUP_PREFIX),
        at=float(item["At"]),
        capacity_rps=None if capacity is None else float(capacity),
        members=tuple(
            GroupShare(
                queue=str(member["Queue"]),
                share_rps=float(member["ShareRps"]),
                level=int(member["Level"]),
                paused=bool(member.get("Paused", False)),
            )
            for member in item.get("Members") or []
        ),
    )


def read_group_items(items: Iterable[Mapping[str, Any]]) -> list[GroupReport]:
    """The reports the GROUP items hold, by group name; one that does not decode (a hand
    edit) is a ``LedgerError`` naming it."""
    reports = []
    for item in items:
        try:
            reports.append(decode_group_report(item))
        except (KeyError, TypeError, ValueError, ArithmeticError) as error:
            raise LedgerError(
                f"item {item.get('PK')!r} does not decode: {type(error).__name__}: {error}"
            ) from error
    return sorted(reports, key=lambda report: report.group)


# --- GROUP#<name> / MEMORY ------------------------------------------------------------------

GROUP_MEMORY_SK = "MEMORY"


def group_memory_key(group: str) -> Item:
    return {"PK": GROUP_PREFIX + group, "SK": GROUP_MEMORY_SK}


def encode_group_memory(group: str, memory: GroupMemory, version: int) -> Item:
    """The group's memory at ``version``: the ``GroupMemory`` record by its field names, as
    an algorithm's memory is stored."""
    fields = dataclasses.fields(memory)
    return {
        **group_memory_key(group),
        "Version": Decimal(version),
        "Memory": {f.name: to_attribute(getattr(memory, f.name)) for f in fields},
    }


def decode_group_memory(item: Mapping[str, Any], memory_codec: MemoryCodec) -> StoredGroupMemory:
    """The stored memory; a field the record no longer has is ignored, one it lacks takes its
    default, and one that does not decode (a hand edit) leaves the memory ``None``."""
    try:
        version = int(item.get("Version", 0))
    except (TypeError, ValueError, ArithmeticError) as error:
        raise LedgerError(f"item {item.get('PK')!r} MEMORY has no version: {error}") from error
    try:
        fields = memory_codec.fields(GroupMemory, item.get("Memory") or {})
    except (TypeError, ValueError, ArithmeticError, AttributeError):
        return StoredGroupMemory(version, None)
    # Every field is a number (the estimate may be None) or a number per member.
    if not all(map(_number_or_numbers, fields.values())):
        return StoredGroupMemory(version, None)
    return StoredGroupMemory(version, GroupMemory(**fields))  # type: ignore[arg-type]


def _number_or_numbers(value: object) -> bool:
    if isinstance(value, dict):
        return all(isinstance(v, float) for v in value.values())
    return value is None or isinstance(value, float)


def group_of(item: Mapping[str, Any]) -> str:
    return str(item["PK"]).removeprefix(GROUP_PREFIX)


# --- the rules of a write, the same in both ledgers -----------------------------------------


def check_commit(state: QueueState, audit: AuditEntry) -> None:
    if state.queue != audit.queue:
        raise ValueError(f"audit for {audit.queue!r} committed with state of {state.queue!r}")
    if state.version < 0:
        raise ValueError(f"state version must not be negative, got {state.version}")


_sequence = itertools.count()


def default_suffix() -> str:
    """An audit item's sort-key suffix. A process-wide sequence first: entries one writer makes
    in the same millisecond keep their order (a failed actuation after its transition); the
    random part keeps writers apart."""
    return f"{next(_sequence):010x}{uuid.uuid4().hex[:8]}"


def unique(queues: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(queues))
