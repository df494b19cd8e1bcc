"""One execution environment's telemetry, aggregated (docs/worker.md, "Aggregated documents"):
per queue, the invocations that started in one second become one document.

Lambda runs one invocation at a time in an execution environment, so once an invocation that
started in a later second ends, no other can join a second's report: it is complete. A report
is written at the end of the first invocation that ends once its second has passed, or earlier,
at the end of an invocation after which the next is not expected to start within the second
(the environment waited longer than that before this invocation), and at shutdown where the
runtime lets the process know (``drain``). Invocations are only ever summed with others that
started in the same second, so the document places each of them in the second the controller
would have placed it in from its own document (the window's buckets are seconds of invocation
starts), and judges none of them against a change it started before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from worker import announced
from worker.tally import Tally


@dataclass(slots=True)
class Report:
    """One queue's invocations that started in ``second`` (epoch seconds, whole), summed: the
    calls of all of them, how many there were, their durations' sum, when the last ended
    (epoch seconds: the document's timestamp), and the announced limit of the last one that
    ended with one (the one the controller's window keeps: the newest)."""

    second: int
    calls: Tally = field(default_factory=Tally)
    invocations: int = 0
    busy_ms: float = 0.0
    ended_at: float = 0.0
    limit: announced.Limit | None = None


class Reports:
    """The reports an execution environment holds, per queue and second of invocation start."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, int], Report] = {}
        self._last_ended_at: float | None = None

    def ended(
        self, tallies: Mapping[str, Tally], invocation_ms: float, ended_at: float
    ) -> list[tuple[str, Report]]:
        """One invocation's calls per queue: it ran ``invocation_ms`` and ended at ``ended_at``
        (epoch seconds). Returns the reports to write now, let go: those whose second has
        passed, or will have when the next invocation is expected to start (as long after
        this one as this one started after the last; at once after the first)."""
        started_at = ended_at - invocation_ms / 1000.0
        waited = math.inf if self._last_ended_at is None else started_at - self._last_ended_at
        self._last_ended_at = ended_at
        second = math.floor(started_at)
        for queue, tally in tallies.items():
            report = self._held.get((queue, second))
            if report is None:
                report = self._held[queue, second] = Report(second)
            report.calls.absorb(tally)
            report.invocations += 1
            report.busy_ms += invocation_ms
            report.ended_at = max(report.ended_at, ended_at)
            limit = tally.limit
            if limit is not None:
                report.limit = limit
        next_start = ended_at + max(waited, 0.0)
        passed = [key for key in self._held if key[1] + 1 <= next_start]
        return [(key[0], self._held.pop(key)) for key in passed]

    def drain(self) -> list[tuple[str, Report]]:
        """Every report held, let go (at shutdown). One swap, so a signal handler calling it
        between two of ``ended``'s steps takes what was complete and leaves the rest."""
        held, self._held = self._held, {}
        return [(queue, report) for (queue, _), report in held.items()]
