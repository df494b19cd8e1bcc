"""What the fleet bench watches while the controller works: seconds per phase across threads
(``Stopwatch``), the ledger and the actuator with their time accounted (``TimedLedger``,
``TimedActuator``), and every Lambda control-plane call, timestamped (``CallLog``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from controller.groups import GroupMemory
from controller.model import AuditEntry, GroupReport, QueueConfig, QueueState
from controller.ports import ConfigRead, MappingView, StoredGroupMemory, WakeUpSweep


class Stopwatch:
    """Accumulated seconds per phase, across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds: dict[str, float] = {}

    @contextmanager
    def timing(self, phase: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            with self._lock:
                self.seconds[phase] = self.seconds.get(phase, 0.0) + elapsed

    def get(self, phase: str) -> float:
        return self.seconds.get(phase, 0.0)


class TimedLedger:
    """The ledger, with the time spent in it accounted."""

    def __init__(self, inner: Any, watch: Stopwatch) -> None:
        self._inner = inner
        self._watch = watch
        self.commits = 0

    def get_configs(self, queues: Iterable[str]) -> dict[str, QueueConfig]:
        with self._watch.timing("ledger"):
            return dict(self._inner.get_configs(queues))

    def read_configs(self, queues: Iterable[str]) -> ConfigRead:
        with self._watch.timing("ledger"):
            read: ConfigRead = self._inner.read_configs(queues)
            return read

    def set_deadline(self, deadline: float) -> None:
        self._inner.set_deadline(deadline)

    def list_configs(self) -> list[QueueConfig]:
        with self._watch.timing("ledger"):
            return list(self._inner.list_configs())

    def group_members(self, group: str) -> list[str]:
        with self._watch.timing("ledger"):
            return list(self._inner.group_members(group))

    def put_config(self, config: QueueConfig) -> None:
        with self._watch.timing("ledger"):
            self._inner.put_config(config)

    def get_states(self, queues: Iterable[str]) -> dict[str, QueueState]:
        with self._watch.timing("ledger"):
            return dict(self._inner.get_states(queues))

    def list_states(self) -> list[QueueState]:
        with self._watch.timing("ledger"):
            return list(self._inner.list_states())

    def due_states(self, now: float) -> list[QueueState]:
        with self._watch.timing("ledger"):
            return list(self._inner.due_states(now))

    def sweep_wake_ups(self, now: float, resume: object | None = None) -> WakeUpSweep:
        with self._watch.timing("ledger"):
            sweep: WakeUpSweep = self._inner.sweep_wake_ups(now, resume)
            return sweep

    def commit(self, state: QueueState, audit: AuditEntry) -> QueueState:
        self.commits += 1
        with self._watch.timing("ledger"), self._watch.timing("commit"):
            committed: QueueState = self._inner.commit(state, audit)
            return committed

    def record_downstream(self, queue: str, downstream: str | None, version: int) -> None:
        with self._watch.timing("ledger"):
            self._inner.record_downstream(queue, downstream, version)

    def audit_trail(self, queue: str, since: float | None = None) -> list[AuditEntry]:
        with self._watch.timing("ledger"):
            return list(self._inner.audit_trail(queue, since))

    def put_group_report(self, report: GroupReport) -> None:
        with self._watch.timing("ledger"):
            self._inner.put_group_report(report)

    def group_reports(self) -> list[GroupReport]:
        with self._watch.timing("ledger"):
            return list(self._inner.group_reports())

    def get_group_memories(self, groups: Iterable[str]) -> dict[str, StoredGroupMemory]:
        with self._watch.timing("ledger"):
            return dict(self._inner.get_group_memories(groups))

    def put_group_memory(self, group: str, memory: GroupMemory, version: int) -> int:
        with self._watch.timing("ledger"):
            stored: int = self._inner.put_group_memory(group, memory, version)
            return stored


class TimedActuator:
    """The actuator, with the time spent in it (pacing included) accounted; ``on_apply``
    hears of each mapping update."""

    def __init__(
        self, inner: Any, watch: Stopwatch, on_apply: Callable[[], None] = lambda: None
    ) -> None:
        self._inner = inner
        self._watch = watch
        self._on_apply = on_apply

    def read(self, uuid: str, deadline: float) -> MappingView:
        with self._watch.timing("actuate"):
            view: MappingView = self._inner.read(uuid, deadline)
            return view

    def read_many(self, uuids: Collection[str], deadline: float) -> dict[str, MappingView]:
        with self._watch.timing("actuate"):
            return dict(self._inner.read_many(uuids, deadline))

    def apply(self, uuid: str, max_concurrency: int, enabled: bool, deadline: float) -> MappingView:
        with self._watch.timing("actuate"):
            view: MappingView = self._inner.apply(uuid, max_concurrency, enabled, deadline)
        self._on_apply()
        return view


class CallLog:
    """Every Lambda control-plane call the controller makes, timestamped (botocore hook)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: list[tuple[float, str]] = []

    def attach(self, lambda_client: Any) -> None:
        lambda_client.meta.events.register("before-call.lambda", self._seen)

    def _seen(self, model: Any, **_: Any) -> None:
        with self._lock:
            self.calls.append((time.monotonic(), str(model.name)))

    def max_in_one_second(self, operation: str | None = None) -> int:
        times = sorted(t for t, name in self.calls if operation is None or name == operation)
        best, start = 0, 0
        for end, moment in enumerate(times):
            while moment - times[start] >= 1.0:
                start += 1
            best = max(best, end - start + 1)
        return best

    def span_s(self) -> float:
        """Seconds from the first call to the last."""
        times = [t for t, _ in self.calls]
        return max(times) - min(times) if times else 0.0

    def count(self, operation: str | None = None) -> int:
        return sum(1 for _, name in self.calls if operation is None or name == operation)
