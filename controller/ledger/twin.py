"""The ledger's in-memory twin: the same items as DynamoDB's in a dict, the same conditions,
a lock instead of DynamoDB's conditional transaction (simulator, replay and tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from controller.ledger.codec import (
    AUDIT_END,
    AUDIT_PREFIX,
    CONFIG_SK,
    DEFAULT_RETENTION_S,
    GUARD_ATTRIBUTES,
    STATE_SK,
    WAKE_UP_ATTRIBUTE,
    WAKE_UP_KEY,
    check_commit,
    config_key,
    config_registration,
    decode_audit,
    decode_config,
    decode_state,
    default_suffix,
    encode_audit,
    encode_config,
    encode_state,
    entries_since,
    iso_utc,
    queue_key,
    queue_of,
    read_config_items,
    unique,
)
from controller.ledger.memory import Item, MemoryCodec, MemoryTypes
from controller.model import AuditEntry, QueueConfig, QueueState
from controller.ports import ConfigRead, LedgerError, VersionConflict


class InMemoryLedger:
    """The twin of ``DynamoLedger``: the same items in a dict, the same conditions, a lock."""

    def __init__(
        self,
        *,
        memory_types: MemoryTypes,
        retention_s: int = DEFAULT_RETENTION_S,
        suffix: Callable[[], str] = default_suffix,
    ) -> None:
        self.retention_s = retention_s
        self._memory = MemoryCodec(memory_types)
        self._suffix = suffix
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], Item] = {}

    def commit(self, state: QueueState, audit: AuditEntry) -> QueueState:
        check_commit(state, audit)
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
        return decode_state(state_item, self._memory)

    def get_configs(self, queues: Iterable[str]) -> dict[str, QueueConfig]:
        return {queue_of(item): decode_config(item) for item in self._get(queues, CONFIG_SK)}

    def set_deadline(self, deadline: float) -> None:
        """Nothing to bound: the twin answers at once."""

    def read_configs(self, queues: Iterable[str]) -> ConfigRead:
        return read_config_items(self._get(queues, CONFIG_SK))

    def put_item(self, item: Item) -> None:
        """Store a raw item as is (tests: a hand-edited or legacy item)."""
        with self._lock:
            self._items[(item["PK"], item["SK"])] = dict(item)

    def get_states(self, queues: Iterable[str]) -> dict[str, QueueState]:
        return {
            queue_of(item): decode_state(item, self._memory) for item in self._get(queues, STATE_SK)
        }

    def list_configs(self) -> list[QueueConfig]:
        return [decode_config(item) for item in self._with_sort_key(CONFIG_SK)]

    def list_states(self) -> list[QueueState]:
        return [decode_state(item, self._memory) for item in self._with_sort_key(STATE_SK)]

    def due_states(self, now: float) -> list[QueueState]:
        wake_at = GUARD_ATTRIBUTES["wake_at"]
        with self._lock:
            items = [
                item
                for item in self._items.values()
                if item.get(WAKE_UP_ATTRIBUTE) == WAKE_UP_KEY and item[wake_at] <= now
            ]
        return sorted((decode_state(item, self._memory) for item in items), key=lambda s: s.queue)

    def put_config(self, config: QueueConfig) -> None:
        item = encode_config(config)
        with self._lock:
            self._items[(item["PK"], item["SK"])] = item

    def merge_config(self, config: QueueConfig) -> None:
        """See ``DynamoLedger.merge_config``."""
        key, always, when_absent = config_registration(config)
        with self._lock:
            stored = self._items.get((key["PK"], key["SK"]), {})
            self._items[(key["PK"], key["SK"])] = {**key, **when_absent, **stored, **always}

    def delete_config(self, queue: str) -> None:
        key = config_key(queue)
        with self._lock:
            self._items.pop((key["PK"], key["SK"]), None)

    def audit_trail(self, queue: str, since: float | None = None) -> list[AuditEntry]:
        pk = queue_key(queue)
        low = AUDIT_PREFIX if since is None else AUDIT_PREFIX + iso_utc(since, "milliseconds")
        with self._lock:
            items = sorted(
                (sk, item)
                for (item_pk, sk), item in self._items.items()
                if item_pk == pk and low <= sk <= AUDIT_END
            )
        return entries_since([decode_audit(item) for _, item in items], since)

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
            found = (self._items.get((queue_key(q), sort_key)) for q in unique(queues))
            return [item for item in found if item is not None]

    def _with_sort_key(self, sort_key: str) -> list[Item]:
        with self._lock:
            return [item for (_, sk), item in sorted(self._items.items()) if sk == sort_key]
