"""The one interface every limit algorithm implements."""

from __future__ import annotations

from typing import Protocol

from controller.model import Decision, QueueState
from controller.settings import PolicyParams
from controller.window import WindowStats


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
