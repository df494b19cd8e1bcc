"""The one interface every limit algorithm implements, and the verdict it returns.

An algorithm is pure: it reads the queue's state, its own memory and the evidence, and returns
a ``Verdict`` (where the mapping should be and why, and what to remember). It never builds the
``Decision`` nor enforces the shared guards: ``controller.policy.guards.decide`` does both, for
every algorithm alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from controller.model import QueueState, QueueStateName
from controller.policy.evidence import Evidence, Refusal
from controller.settings import PolicyParams
from controller.window import QueueWindow, WindowStats

M = TypeVar("M")


@dataclass(frozen=True, slots=True)
class Verdict(Generic[M]):
    """Where an algorithm wants the mapping, and why.

    ``None`` leaves a field as the queue's state has it. ``wake_at`` asks to be decided again
    at that time without telemetry (0: no wake-up). The rates are what the verdict rests on,
    for the audit trail and the dashboard.
    """

    target: int
    state: QueueStateName
    reason: str
    memory: M
    enabled: bool | None = None
    consecutive_breaches: int | None = None
    wake_at: float | None = None
    pressure_rate: float = 0.0
    success_rate: float = 0.0


@dataclass(frozen=True, slots=True)
class NoMemory:
    """The memory of an algorithm that needs nothing beyond the queue's state."""


class LimitAlgorithm(Generic[M]):
    """Decides a queue's next concurrency.

    Subclasses name themselves (``name``, the registry key and the ledger's memory key), name
    their memory record (``memory_type``: a frozen dataclass whose defaults are a fresh
    queue's), and judge admissible evidence in ``on_evidence``. An algorithm that selects its
    own evidence from the window (pulse probes judge invocations older than the last change)
    or acts without telemetry (a paused mapping sends none) overrides ``decide`` instead.
    """

    name: ClassVar[str]
    memory_type: ClassVar[type[Any]] = NoMemory

    def memory_of(self, state: QueueState) -> M:
        """The queue's memory of this algorithm; a fresh record if another one decided it."""
        if state.algorithm == self.name and isinstance(state.memory, self.memory_type):
            remembered: M = state.memory
            return remembered
        fresh: M = self.memory_type()
        return fresh

    def decide(
        self,
        state: QueueState,
        memory: M,
        evidence: Evidence,
        window: QueueWindow,
        now: float,
        params: PolicyParams,
    ) -> Verdict[M]:
        """Hold while the evidence is not admissible, else judge it with ``on_evidence``."""
        if evidence.refusal is not None:
            return refused(state, memory, evidence.refusal)
        return self.on_evidence(state, memory, evidence.stats, now, params)

    def on_evidence(
        self, state: QueueState, memory: M, stats: WindowStats, now: float, params: PolicyParams
    ) -> Verdict[M]:
        """Judge ``stats``: invocations that started after the last change (plus its settle
        margin), at least ``params.min_samples`` calls, none stale."""
        raise NotImplementedError(f"{type(self).__name__} overrides neither on_evidence nor decide")


def clamp(value: int, params: PolicyParams) -> int:
    """``value`` within Cmin..Cmax."""
    return max(params.cmin, min(params.cmax, value))


def refused(state: QueueState, memory: M, refusal: Refusal) -> Verdict[M]:
    """The HOLD a refusal of the evidence calls for."""
    return Verdict(
        state.concurrency,
        state.state,
        refusal.reason,
        memory,
        pressure_rate=refusal.pressure_rate,
        success_rate=refusal.success_rate,
    )
