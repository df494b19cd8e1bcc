"""Work taken off the invocation slots: a bounded queue served by threads of its own."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

# Invocations whose log lines or deletes may wait for a handoff thread before a slot waits too
# (late log lines are late telemetry for the controller).
HANDOFF_CAPACITY = 16
# How long a waiting thread sleeps before it looks again (a put or a close wakes it sooner).
WAIT_S = 1.0

Item = TypeVar("Item")


class Handoff(Generic[Item]):
    """Work taken off the invocation slots: ``threads`` threads handle the items put, in the
    order put, up to ``batch`` at a time. ``put`` waits while ``HANDOFF_CAPACITY`` items are
    pending; after ``close`` the threads end once everything put before is handled, and a late
    ``put`` is handled by its caller, so nothing put is ever dropped."""

    def __init__(
        self,
        name: str,
        handle: Callable[[list[Item]], None],
        on_error: Callable[[str], None],
        *,
        batch: int = 1,
        threads: int = 1,
    ) -> None:
        self._handle = handle
        self._on_error = on_error
        self._batch = batch
        self._pending: deque[Item] = deque()
        self._changed = threading.Condition()
        self._closed = False
        self._name = name
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}-{index}", daemon=True)
            for index in range(threads)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def put(self, item: Item) -> None:
        with self._changed:
            while len(self._pending) >= HANDOFF_CAPACITY and not self._closed:
                self._changed.wait(WAIT_S)
            if not self._closed:
                self._pending.append(item)
                self._changed.notify_all()
                return
        self._handle_safely([item])

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def join(self, deadline: float) -> None:
        """Wait for the threads until ``deadline`` (``time.monotonic()``)."""
        for thread in self._threads:
            if thread.ident is not None:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def _run(self) -> None:
        while True:
            with self._changed:
                if not self._pending:
                    if self._closed:
                        return
                    self._changed.wait(WAIT_S)
                    continue
                taken = [
                    self._pending.popleft() for _ in range(min(self._batch, len(self._pending)))
                ]
                self._changed.notify_all()
            self._handle_safely(taken)

    def _handle_safely(self, items: list[Item]) -> None:
        try:
            self._handle(items)
        except Exception as error:
            self._on_error(f"{self._name}: {error}")
