"""The demo's terminal view: redrawn in place on a TTY, a status line every few seconds if not."""

from __future__ import annotations

import math
from typing import Any, TextIO

from stack.local.demo.result import Timeline

VIEW_REFRESH_S = 1.0
PLAIN_VIEW_EVERY_S = 5.0
RATE_WINDOW_S = 3


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
        queue: str,
        mapping: Any,
        counters: Any,
        depth: Any,
        timeline: Timeline,
        answered: Any,
        state: Any,
        finished: int,
        total: int,
    ) -> None:
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
        state_name = state.state.value if state else "HEALTHY"
        reason = state.last_reason if state else "no decision yet"
        capacity = timeline.capacity[-1]
        if not self._live:
            if now - self._last_plain >= PLAIN_VIEW_EVERY_S:
                self._last_plain = now
                self._out.write(
                    f"t={now:5.1f}s capacity={capacity:.0f}/s max_concurrency="
                    f"{mapping.max_concurrency} in_flight={counters.in_flight} "
                    f"backlog={depth.visible + depth.in_flight} goodput={goodput:.0f}/s "
                    f"rejected={share:.0%} dlq={depth.dead_lettered} state={state_name}\n"
                )
                self._out.flush()
            return
        bar = "#" * min(40, mapping.max_concurrency) if mapping.enabled else "(paused)"
        lines = [
            f"\x1b[1mQueueMesh demo\x1b[0m  scenario {scenario}  t={now:5.1f}s   "
            f"downstream capacity {capacity:.0f} req/s",
            f"queue {queue}",
            f"  MaximumConcurrency {mapping.max_concurrency:4d}  {bar}",
            f"  in flight {counters.in_flight:4d}   backlog {depth.visible + depth.in_flight:6d}"
            f"   done {finished}/{total}   dead-lettered {depth.dead_lettered}",
            f"  goodput {goodput:6.1f} /s   rejected share "
            f"{_colour(share)}{share:6.1%}\x1b[0m   state \x1b[1m{state_name}\x1b[0m",
            f"  last decision: {reason[:100]}",
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
