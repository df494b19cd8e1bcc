"""The one interface every limit algorithm implements."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from controller.model import Decision, QueueState
from controller.settings import PolicyParams
from controller.window import QueueWindow, WindowStats


class LimitAlgorithm(Protocol):
    """Decides a queue's next concurrency from evidence the guards have already vetted.

    Implementations are pure: same inputs, same decision. ``stats`` covers only invocations
    that started after the last change (plus its settle margin), and holds at least
    ``params.min_samples`` calls.
    """

    name: str

    def decide(
        self, state: QueueState, stats: WindowStats, now: float, params: PolicyParams
    ) -> Decision: ...


@runtime_checkable
class WindowedAlgorithm(Protocol):
    """An algorithm that selects its own evidence from the queue's window (pulse probes judge
    invocations that started before the last change) and may act without new telemetry (a
    paused mapping sends none). ``decide`` applies only the operator-mode and bounds guards
    before handing it the window."""

    name: str

    def decide_window(
        self, state: QueueState, window: QueueWindow, now: float, params: PolicyParams
    ) -> Decision: ...
