"""The one interface every limit algorithm implements: a ``Situation`` in, a ``Verdict`` out.

An algorithm is pure: it reads the situation the guards built (the queue's state, its own
memory, the vetted evidence, the window as it stood) and returns a ``Verdict`` (where the
mapping should be and why, and what to remember). It never builds the ``Decision`` nor
enforces the shared guards: ``controller.policy.guards.decide`` does both, for every algorithm
alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from controller.model import Backlog, QueueState, QueueStateName
from controller.policy.evidence import Refusal
from controller.settings import PolicyParams
from controller.window import Quota, WindowSnapshot, WindowStats

M = TypeVar("M")


@dataclass(frozen=True, slots=True)
class Situation(Generic[M]):
    """Everything an algorithm may read to decide one queue, built by the guards.

    ``stats`` is the vetted evidence: invocations that started after the last change (plus
    its settle margin). ``refusal`` says why no verdict may rest on it yet (``None``: it is
    admissible: at least ``params.min_samples`` calls, none stale). ``window`` is the queue's
    whole window as it stood, for an algorithm that selects its own evidence. ``backlog`` is
    the queue's backlog when it was read (the messages waiting, and its visibility timeout;
    ``None``: unknown, not read or the read failed; the controller reads it only for a queue
    about to raise). ``quota`` is the newest rate limit the queue's downstream announced
    (``None``: none announced), and ``shared_with`` the calls a second each other queue that
    reports that downstream with an announced quota may want of it (empty: the queue uses it
    alone). All of it is frozen: the same situation always gives the same verdict.
    """

    state: QueueState
    memory: M
    stats: WindowStats
    refusal: Refusal | None
    window: WindowSnapshot
    now: float
    params: PolicyParams
    backlog: Backlog | None = None
    quota: Quota | None = None
    shared_with: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Verdict(Generic[M]):
    """Where an algorithm wants the mapping, and why.

    ``None`` leaves a field as the queue's state has it. ``wake_at`` asks to be decided again
    at that time without telemetry (0: no wake-up). The rates are what the verdict rests on,
    for the audit trail and the dashboard. ``ends_probe``: the verdict takes a probe's raised
    level back to its base (recorded as ``Action.PROBE_END``, not as a cut). ``restores``: its
    raise puts back a level the evidence shows fits, which is no probe
    (``Decision.restores``). ``asks_backlog``: a hold the queue's backlog, once read, may turn
    into a step down (``Decision.asks_backlog``).
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
    ends_probe: bool = False
    restores: bool = False
    asks_backlog: bool = False


@dataclass(frozen=True, slots=True)
class NoMemory:
    """The memory of an algorithm that needs nothing beyond the queue's state."""


class LimitAlgorithm(Generic[M]):
    """Decides a queue's next concurrency.

    Subclasses name themselves (``name``, the registry key and the ledger's memory key), name
    their memory record (``memory_type``: a frozen dataclass whose defaults are a fresh
    queue's), and implement ``decide``. Most judge admissible evidence only: they derive from
    ``EvidenceJudge``, which holds while the evidence is refused.
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

    def decide(self, situation: Situation[M]) -> Verdict[M]:
        """Where the mapping should be, and why."""
        raise NotImplementedError(f"{type(self).__name__} does not implement decide")


class EvidenceJudge(LimitAlgorithm[M]):
    """An algorithm that judges admissible evidence only: while the guards refuse the
    evidence it holds with the refusal's reason, else it ``judge``s the situation."""

    def decide(self, situation: Situation[M]) -> Verdict[M]:
        if situation.refusal is not None:
            return refused(situation, situation.refusal)
        return self.judge(situation)

    def judge(self, situation: Situation[M]) -> Verdict[M]:
        """Judge ``situation.stats``: admissible evidence (``situation.refusal`` is ``None``)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement judge")


def clamp(value: int, params: PolicyParams) -> int:
    """``value`` within Cmin..Cmax."""
    return max(params.cmin, min(params.cmax, value))


def refused(situation: Situation[M], refusal: Refusal) -> Verdict[M]:
    """The HOLD a refusal of the evidence calls for."""
    state = situation.state
    return Verdict(
        state.concurrency,
        state.state,
        refusal.reason,
        situation.memory,
        pressure_rate=refusal.pressure_rate,
        success_rate=refusal.success_rate,
    )
