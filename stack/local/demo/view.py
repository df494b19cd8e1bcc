"""The demo's terminal view: redrawn in place on a TTY, a status line every few seconds if not."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from stack.local.demo.result import Timeline

VIEW_REFRESH_S = 1.0
PLAIN_VIEW_EVERY_S = 5.0
RATE_WINDOW_S = 3


@dataclass(frozen=True, slots=True)
class QueueView:
    """One queue as the view samples it (by the scenario's name and its SQS name): its
    mapping, its poller's counters, its depth, its state in the ledger (``None``: not decided
    yet) and its messages finished of those sent."""

    name: str
    sqs_name: str
    mapping: Any
    counters: Any
    depth: Any
    state: Any
    finished: int
    total: int

    @property
    def label(self) -> str:
        return f"{self.name} ({self.sqs_name})"

    @property
    def backlog(self) -> int:
        return int(self.depth.visible + self.depth.in_flight)

    @property
    def state_name(self) -> str:
        return str(self.state.state.value) if self.state else "HEALTHY"

    @property
    def reason(self) -> str:
        return str(self.state.last_reason) if self.state else "no decision yet"

    def bar(self) -> str:
        return "#" * min(40, self.mapping.max_concurrency) if self.mapping.enabled else "(paused)"

    def plain(self) -> str:
        """The queue's part of a status line (no TTY)."""
        return (
            f"[{self.name}] max_concurrency={self.mapping.max_concurrency} "
            f"in_flight={self.counters.in_flight} backlog={self.backlog} "
            f"dlq={self.depth.dead_lettered} state={self.state_name}"
        )


class LiveView:
    """The terminal view: redrawn in place on a TTY, a status line every few seconds if not."""

    def __init__(self, out: TextIO, *, live: bool) -> None:
        self._out = out
        self._live = live
        self._drawn = 0
        self._last_plain = -math.inf
        self.dashboard: str | None = None

    def note(self, message: str) -> None:
        self._out.write(f"queuemesh demo: {message}\n")
        self._out.flush()

    def show(
        self,
        now: float,
        scenario: str,
        queues: Sequence[QueueView],
        timeline: Timeline,
        answered: Any,
    ) -> None:
        """One sample of the run: the first queue (the storm's and the cure's) in full, each
        other queue on its downstream in one line."""
        second = int(now)
        window = range(max(0, second - RATE_WINDOW_S), second)
        ok = sum(answered.per_second[s].ok for s in window if s in answered.per_second)
        rejected = sum(
            answered.per_second[s].rejected + answered.per_second[s].timed_out
            for s in window
            if s in answered.per_second
        )
        goodput = ok / max(1, len(window))
        share = rejected / (ok + rejected) if ok + rejected else 0.0
        capacity = timeline.capacity[-1]
        main, *others = queues
        if not self._live:
            if now - self._last_plain >= PLAIN_VIEW_EVERY_S:
                self._last_plain = now
                line = (
                    f"t={now:5.1f}s capacity={capacity:.0f}/s goodput={goodput:.0f}/s "
                    f"rejected={share:.0%} "
                )
                self._out.write(line + " ".join(queue.plain() for queue in queues) + "\n")
                self._out.flush()
            return
        lines = [
            f"\x1b[1mQueueMesh demo\x1b[0m  scenario {scenario}  t={now:5.1f}s   "
            f"downstream capacity {capacity:.0f} req/s",
            f"  goodput {goodput:6.1f} /s   rejected share "
            f"{_colour(share)}{share:6.1%}\x1b[0m  (every queue's calls to the downstream)",
            f"queue {main.label}",
            f"  MaximumConcurrency {main.mapping.max_concurrency:4d}  {main.bar()}",
            f"  in flight {main.counters.in_flight:4d}   backlog {main.backlog:6d}"
            f"   done {main.finished}/{main.total}   dead-lettered {main.depth.dead_lettered}"
            f"   state \x1b[1m{main.state_name}\x1b[0m",
            f"  last decision: {main.reason[:100]}",
            *(
                f"queue {queue.label}: MaximumConcurrency {queue.mapping.max_concurrency}, "
                f"in flight {queue.counters.in_flight}, backlog {queue.backlog}, "
                f"done {queue.finished}/{queue.total}, {queue.state_name}"
                for queue in others
            ),
        ]
        if self.dashboard is not None:
            lines.append(f"  dashboard: {self.dashboard}")
        if self._drawn:
            self._out.write(f"\x1b[{self._drawn}F")
        for line in lines:
            self._out.write(f"\x1b[2K{line}\n")
        self._out.flush()
        self._drawn = len(lines)

    def close(self) -> None:
        self._out.flush()


def _colour(share: float) -> str:
    if share >= 0.2:
        return "\x1b[31m"
    if share >= 0.05:
        return "\x1b[33m"
    return "\x1b[32m"
