"""The original QueueMesh rule: halve on pressure, add a fixed step while healthy."""

from __future__ import annotations

import math
from typing import TypeVar

from controller.model import QueueState, QueueStateName
from controller.policy.base import EvidenceJudge, NoMemory, Situation, Verdict, clamp
from controller.settings import PolicyParams

M = TypeVar("M")


class Aimd(EvidenceJudge[NoMemory]):
    """The original rule, judged on the guarded window instead of a single batch (the
    operator's manual evaluation applies it to given rates: ``guards.evaluate_manually``)."""

    name = "aimd"

    def judge(self, situation: Situation[NoMemory]) -> Verdict[NoMemory]:
        stats = situation.stats
        return aimd_rule(
            situation.state,
            situation.memory,
            stats.pressure_rate,
            stats.success_rate,
            situation.params,
        )


def aimd_rule(
    state: QueueState, memory: M, pressure_rate: float, success_rate: float, params: PolicyParams
) -> Verdict[M]:
    """The rule on the given rates. At or above T1: ``C = max(Cmin, floor(C * beta))``,
    THROTTLED, then CRITICAL_BACKOFF while breaches follow each other. At or above T2:
    ``C = min(Cmax, C + alpha)``, RECOVERING, HEALTHY at Cmax. Between the two: hold."""
    current = state.concurrency

    def verdict(
        target: int, name: QueueStateName, reason: str, breaches: int | None = None
    ) -> Verdict[M]:
        return Verdict(
            target,
            name,
            reason,
            memory,
            consecutive_breaches=breaches,
            pressure_rate=pressure_rate,
            success_rate=success_rate,
        )

    if pressure_rate >= params.t1:
        target = clamp(math.floor(current * params.beta), params)
        breaches = state.consecutive_breaches + 1
        name = QueueStateName.THROTTLED if breaches == 1 else QueueStateName.CRITICAL_BACKOFF
        breach = f"HTTP 429 breach: Error rate {pressure_rate:.1%} >= T1 ({params.t1:.1%})."
        if target >= current:
            reason = f"{breach} Already at Cmin ({params.cmin}); holding at {current}."
            return verdict(current, name, reason, breaches)
        reason = f"{breach} Applied factor Beta={params.beta:g}. Scaled from {current} -> {target}."
        return verdict(target, name, reason, breaches)
    if success_rate >= params.t2:
        healthy = f"Healthy: Success rate {success_rate:.1%} >= T2 ({params.t2:.1%})."
        if current >= params.cmax:
            reason = f"{healthy} At Cmax ({params.cmax}); holding at {current}."
            return verdict(current, QueueStateName.HEALTHY, reason, 0)
        target = clamp(current + params.alpha, params)
        name = QueueStateName.HEALTHY if target == params.cmax else QueueStateName.RECOVERING
        reason = f"{healthy} Applied step Alpha={params.alpha}. Scaled from {current} -> {target}."
        return verdict(target, name, reason, 0)
    reason = (
        f"Within band: Error rate {pressure_rate:.1%} < T1 ({params.t1:.1%}) and success rate "
        f"{success_rate:.1%} < T2 ({params.t2:.1%}). Holding at {current}."
    )
    return verdict(current, state.state, reason)
