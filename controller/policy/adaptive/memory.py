"""What the adaptive limit remembers about a queue between decisions, the situations it
decides in, and its verdicts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from controller.model import QueueState, QueueStateName
from controller.policy.base import Situation, Verdict
from controller.settings import PolicyParams
from controller.window import WindowStats


@dataclass(frozen=True, slots=True)
class AdaptiveMemory:
    """The adaptive limit's private record (the ledger keeps it under ``adaptive``).

    Zero means "not set" throughout: a fresh record is a queue never decided.
    """

    # A HOLD that changes the record is written too (a transition that moves no mapping,
    # ``controller.planner.step_for``): it schedules the probes, pulses and pauses to come,
    # and whichever warm container decides the queue next reads its state from the ledger
    # (docs/architecture.md, "Scaling out the controller"). Rare: a verdict the group
    # overrules, a failed test of Cmin that lengthens the pause. The peers' records (EWMAs
    # moving with every batch) stay in the container that holds them.
    written_when_held: ClassVar[bool] = True

    # The lowest level known to break (probes near it are pulses), and the level whose
    # overload set it (clean there again: that overload is over).
    ceiling: int = 0
    broke_at: int = 0
    # The ceiling was set by calls the downstream refused (429, 503), not by latency or
    # timeouts: past the level that broke, growth goes on by pulses, each judged before the next.
    ceiling_refused: bool = False
    # The pulse probe in progress: the level it raises from, by how much, and its timeline.
    probe_base: int = 0
    probe_step: int = 0
    probe_started_at: float = 0.0
    probe_until: float = 0.0
    probe_ended_at: float = 0.0
    judge_at: float = 0.0
    # Probes passed in a row (the next step's size), the backoff after a failed one, and when
    # the next may start.
    probe_streak: int = 0
    probe_backoff_s: float = 0.0
    next_probe_at: float = 0.0
    # The last cut, for its correction: when it was made, where its evidence began, how many
    # calls it was sized on, and the invocations in use it was sized from.
    cut_at: float = 0.0
    cut_evidence_since: float = 0.0
    cut_requests: int = 0
    cut_running: float = 0.0
    # The slowest second's mean call latency (ms) when load-driven timeouts last cut: the
    # client's timeout is at least that, so growth and probes stop short of it (0: none).
    timeout_latency_ms: float = 0.0
    # Pausing below the floor: the current period, and when it ends.
    pause_s: float = 0.0
    paused_until: float = 0.0
    # The level the downstream's announced quota last sustained (``announced``): a higher one
    # announced later is its return, raised to without a probe.
    announced_level: int = 0


AdaptiveSituation = Situation[AdaptiveMemory]
AdaptiveVerdict = Verdict[AdaptiveMemory]


def ceiling_above(level: int) -> int:
    """The ceiling over a level the queue settles at (after a cut, a pause, or a passed probe
    or test): the next level up is the lowest taken to break."""
    return level + 1


def near_timeout(
    memory: AdaptiveMemory,
    stats: WindowStats,
    headroom: float,
    growth: float = 1.0,
    *,
    raised_from: WindowStats | None = None,
) -> bool:
    """``stats``' calls as a whole, their latency grown ``growth`` times (with as many times
    the invocations, at most, on a load line), are within ``headroom`` of the latency at which
    timeouts last cut: no growth, and a probe fails or is not chained.

    ``raised_from``: the evidence of the level ``stats`` were raised from (a pulse's base),
    given where that level's latency is the downstream's (``Latency.slowed_downstream``).
    Where it is within the headroom already, the raise is near only where it took the latency
    ``headroom`` of the way from that level's to the timeout's."""
    mean = stats.mean_latency_ms
    if mean is None or memory.timeout_latency_ms <= 0:
        return False
    limit = headroom * memory.timeout_latency_ms
    floor = raised_from.mean_latency_ms if raised_from is not None else None
    if floor is not None and floor >= limit:
        limit = floor + headroom * (memory.timeout_latency_ms - floor)
    return mean * growth >= limit


def move(
    target: int,
    name: QueueStateName,
    reason: str,
    memory: AdaptiveMemory,
    stats: WindowStats | None = None,
    *,
    enabled: bool | None = None,
    breaches: int | None = None,
    wake_at: float | None = None,
    ends_probe: bool = False,
    restores: bool = False,
) -> AdaptiveVerdict:
    """A verdict resting on ``stats`` (its rates reported; none: 0)."""
    return Verdict(
        target,
        name,
        reason,
        memory,
        enabled=enabled,
        consecutive_breaches=breaches,
        wake_at=wake_at,
        pressure_rate=stats.pressure_rate if stats else 0.0,
        success_rate=stats.success_rate if stats else 0.0,
        ends_probe=ends_probe,
        restores=restores,
    )


def hold(
    state: QueueState,
    reason: str,
    memory: AdaptiveMemory,
    stats: WindowStats | None = None,
    *,
    name: QueueStateName | None = None,
    wake_at: float | None = None,
) -> AdaptiveVerdict:
    """Keep the mapping as it is (``name``: a new state name for the queue)."""
    return move(state.concurrency, name or state.state, reason, memory, stats, wake_at=wake_at)


def rising(target: int, params: PolicyParams) -> QueueStateName:
    return QueueStateName.HEALTHY if target >= params.cmax else QueueStateName.RECOVERING
