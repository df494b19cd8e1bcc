"""The ledger's in-memory twin: the same items as DynamoDB's in a dict, the same conditions,
a lock instead of DynamoDB's conditional transaction (simulator, replay and tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from controller.groups import GroupMemory
from controller.ledger import codec
from controller.ledger.memory import MemoryCodec, MemoryTypes
from controller.model import AuditEntry, GroupReport, QueueConfig, QueueState
from controller.ports import (
    ConfigRead,
    LedgerError,
    StoredGroupMemory,
    VersionConflict,
    WakeUpSweep,
)


class InMemoryLedger:
    """The twin of ``DynamoLedger``: the same items in a dict, the same conditions, a lock."""

    def __init__(
        self,
        *,
        memory_types: MemoryTypes,
        retention_s: int = codec.DEFAULT_RETENTION_S,
        suffix: Callable[[], str] = codec.default_suffix,
    ) -> None:
        self.retention_s = retention_s
        self._memory = MemoryCodec(memory_types)
        self._suffix = suffix
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], codec.Item] = {}

    def commit(self, state: QueueState, audit: AuditEntry) -> QueueState:
        codec.check_commit(state, audit)
        state_item = codec.encode_state(state.evolve(version=state.version + 1))
        audit_item = codec.encode_audit(audit, self._suffix(), self.retention_s)
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
        return codec.decode_state(state_item, self._memory)

    def record_downstream(self, queue: str, downstream: str | None, version: int) -> None:
        key = (codec.queue_key(queue), codec.STATE_SK)
        with self._lock:
            current = self._items.get(key)
            if current is None or int(current["Version"]) != version:
                raise VersionConflict(f"queue {queue}: state is no longer at version {version}")
            self._items[key] = codec.with_downstream(current, downstream)

    def get_configs(self, queues: Iterable[str]) -> dict[str, QueueConfig]:
        return {
            codec.queue_of(item): codec.decode_config(item)
            for item in self._get(queues, codec.CONFIG_SK)
        }

    def set_deadline(self, deadline: float) -> None:
        """Nothing to bound: the twin answers at once."""

    def read_configs(self, queues: Iterable[str]) -> ConfigRead:
        return codec.read_config_items(self._get(queues, codec.CONFIG_SK))

    def put_item(self, item: codec.Item) -> None:
        """Store a raw item as is (tests: a hand-edited or legacy item)."""
        with self._lock:
            self._items[(item["PK"], item["SK"])] = dict(item)

    def get_states(self, queues: Iterable[str]) -> dict[str, QueueState]:
        return {
            codec.queue_of(item): codec.decode_state(item, self._memory)
            for item in self._get(queues, codec.STATE_SK)
        }

    def list_configs(self) -> list[QueueConfig]:
        return [codec.decode_config(item) for item in self._with_sort_key(codec.CONFIG_SK)]

    def group_members(self, group: str) -> list[str]:
        if not codec.indexable(group):
            return []
        with self._lock:
            return codec.members_listed(
                item for item in self._items.values() if item.get(codec.GROUP_ATTRIBUTE) == group
            )

    def list_states(self) -> list[QueueState]:
        return [
            codec.decode_state(item, self._memory) for item in self._with_sort_key(codec.STATE_SK)
        ]

    def due_states(self, now: float) -> list[QueueState]:
        wake_at = codec.GUARD_ATTRIBUTES["wake_at"]
        with self._lock:
            items = [
                item
                for item in self._items.values()
                if item.get(codec.WAKE_UP_ATTRIBUTE) == codec.WAKE_UP_KEY and item[wake_at] <= now
            ]
        return sorted(
            (codec.decode_state(item, self._memory) for item in items), key=lambda s: s.queue
        )

    def sweep_wake_ups(self, now: float, resume: object | None = None) -> WakeUpSweep:
        """See ``DynamoLedger.sweep_wake_ups``: the twin sweeps the whole table at once."""
        woken = []
        with self._lock:
            for key, item in sorted(self._items.items()):
                if key[1] != codec.STATE_SK:
                    continue
                repair = codec.wake_up_repair(item, self._memory, now)
                if repair is not None:
                    self._items[key] = codec.repaired(item, repair)
                    woken.append(repair.state)
        return WakeUpSweep(woken)

    def put_config(self, config: QueueConfig) -> None:
        item = codec.encode_config(config)
        with self._lock:
            self._items[(item["PK"], item["SK"])] = item

    def merge_config(self, config: QueueConfig) -> None:
        """See ``DynamoLedger.merge_config``."""
        key, always, when_absent = codec.config_registration(config)
        with self._lock:
            stored = self._items.get((key["PK"], key["SK"]), {})
            self._items[(key["PK"], key["SK"])] = {**key, **when_absent, **stored, **always}

    def delete_config(self, queue: str) -> None:
        key = codec.config_key(queue)
        with self._lock:
            self._items.pop((key["PK"], key["SK"]), None)

    def audit_trail(self, queue: str, since: float | None = None) -> list[AuditEntry]:
        pk = codec.queue_key(queue)
        low = (
            codec.AUDIT_PREFIX
            if since is None
            else codec.AUDIT_PREFIX + codec.iso_utc(since, "milliseconds")
        )
        with self._lock:
            items = sorted(
                (sk, item)
                for (item_pk, sk), item in self._items.items()
                if item_pk == pk and low <= sk <= codec.AUDIT_END
            )
        return codec.entries_since([codec.decode_audit(item) for _, item in items], since)

    def put_group_report(self, report: GroupReport) -> None:
        item = codec.encode_group_report(report)
        with self._lock:
            self._items[(item["PK"], item["SK"])] = item

    def group_reports(self) -> list[GroupReport]:
        with self._lock:
            items = [item for item in self._items.values() if codec.is_group_item(item)]
        return codec.read_group_items(items)

    def get_group_memories(self, groups: Iterable[str]) -> dict[str, StoredGroupMemory]:
        with self._lock:
            keys = (codec.group_memory_key(group) for group in codec.unique(groups))
            found = [self._items.get((key["PK"], key["SK"])) for key in keys]
        return {
            codec.group_of(item): codec.decode_group_memory(item, self._memory)
            for item in found
            if item is not None
        }

    def put_group_memory(self, group: str, memory: GroupMemory, version: int) -> int:
        item = codec.encode_group_memory(group, memory, version + 1)
        key = (item["PK"], item["SK"])
        with self._lock:
            current = self._items.get(key)
            if (0 if current is None else int(current["Version"])) != version:
                raise VersionConflict(f"group {group}: memory is no longer at version {version}")
            self._items[key] = item
        return version + 1

    def audit_items(self, queue: str) -> list[codec.Item]:
        """The raw audit items of a queue in sort-key order (tests and tooling)."""
        pk = codec.queue_key(queue)
        with self._lock:
            return [
                dict(item)
                for (item_pk, sk), item in sorted(self._items.items())
                if item_pk == pk and sk.startswith(codec.AUDIT_PREFIX)
            ]

    def _get(self, queues: Iterable[str], sort_key: str) -> list[codec.Item]:
        with self._lock:
            found = (self._items.get((codec.queue_key(q), sort_key)) for q in codec.unique(queues))
            return [item for item in found if item is not None]

    def _with_sort_key(self, sort_key: str) -> list[codec.Item]:
        with self._lock:
            return [item for (_, sk), item in sorted(self._items.items()) if sk == sort_key]
