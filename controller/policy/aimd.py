"""The original QueueMesh rule: halve on pressure, add a fixed step while healthy."""

from __future__ import annotations

import math

from controller.model import Action, Decision, QueueState, QueueStateName
from controller.settings import PolicyParams
from controller.window import WindowStats


def clamp(value: int, params: PolicyParams) -> int:
    return max(params.cmin, min(params.cmax, value))


def hold(
    state: QueueState,
    reason: str,
    now: float,
    pressure_rate: float = 0.0,
    success_rate: float = 0.0,
) -> Decision:
    """Keep the mapping as it is; the state's memory is untouched."""
    return Decision(
        queue=state.queue,
        action=Action.HOLD,
        previous=state.concurrency,
        target=state.concurrency,
        state=state.state,
        reason=reason,
        pressure_rate=pressure_rate,
        success_rate=success_rate,
        new_state=state.evolve(last_action=Action.HOLD, last_reason=reason, last_evaluated_at=now),
        previous_enabled=state.enabled,
        enabled=state.enabled,
    )


def change(
    state: QueueState,
    *,
    action: Action,
    target: int,
    state_name: QueueStateName,
    reason: str,
    now: float,
    consecutive_breaches: int,
    pressure_rate: float = 0.0,
    success_rate: float = 0.0,
    **memory: object,
) -> Decision:
    """Move the mapping to ``target``; ``memory`` updates the algorithm's own state fields."""
    return Decision(
        queue=state.queue,
        action=action,
        previous=state.concurrency,
        target=target,
        state=state_name,
        reason=reason,
        pressure_rate=pressure_rate,
        success_rate=success_rate,
        new_state=state.evolve(
            state=state_name,
            concurrency=target,
            previous_concurrency=state.concurrency,
            consecutive_breaches=consecutive_breaches,
            last_action=action,
            last_reason=reason,
            last_evaluated_at=now,
            last_change_at=now if target != state.concurrency else state.last_change_at,
            **memory,
        ),
        previous_enabled=state.enabled,
        enabled=state.enabled,
    )


def aimd_step(
    state: QueueState,
    pressure_rate: float,
    success_rate: float,
    params: PolicyParams,
    now: float,
) -> Decision:
    """One application of the original rule to the given rates (no window, no settling)."""
    current = state.concurrency
    if pressure_rate >= params.t1:
        target = clamp(math.floor(current * params.beta), params)
        breaches = state.consecutive_breaches + 1
        name = QueueStateName.THROTTLED if breaches == 1 else QueueStateName.CRITICAL_BACKOFF
        reason = (
            f"HTTP 429 breach: Error rate {pressure_rate:.1%} >= T1 ({params.t1:.1%}). "
            f"Applied factor Beta={params.beta:g}. Scaled from {current} -> {target}."
        )
        if target >= current:
            reason = (
                f"HTTP 429 breach: Error rate {pressure_rate:.1%} >= T1 ({params.t1:.1%}). "
                f"Already at Cmin ({params.cmin}); holding at {current}."
            )
        return change(
            state,
            action=Action.HOLD if target >= current else Action.MULTIPLICATIVE_DECREASE,
            target=target,
            state_name=name,
            reason=reason,
            now=now,
            consecutive_breaches=breaches,
            pressure_rate=pressure_rate,
            success_rate=success_rate,
        )
    if success_rate >= params.t2:
        if current >= params.cmax:
            reason = (
                f"Healthy: Success rate {success_rate:.1%} >= T2 ({params.t2:.1%}). "
                f"At Cmax ({params.cmax}); holding at {current}."
            )
            return change(
                state,
                action=Action.HOLD,
                target=current,
                state_name=QueueStateName.HEALTHY,
                reason=reason,
                now=now,
                consecutive_breaches=0,
                pressure_rate=pressure_rate,
                success_rate=success_rate,
            )
        target = clamp(current + params.alpha, params)
        name = QueueStateName.HEALTHY if target == params.cmax else QueueStateName.RECOVERING
        reason = (
            f"Healthy: Success rate {success_rate:.1%} >= T2 ({params.t2:.1%}). "
            f"Applied step Alpha={params.alpha}. Scaled from {current} -> {target}."
        )
        return change(
            state,
            action=Action.ADDITIVE_INCREASE,
            target=target,
            state_name=name,
            reason=reason,
            now=now,
            consecutive_breaches=0,
            pressure_rate=pressure_rate,
            success_rate=success_rate,
        )
    reason = (
        f"Within band: Error rate {pressure_rate:.1%} < T1 ({params.t1:.1%}) and success rate "
        f"{success_rate:.1%} < T2 ({params.t2:.1%}). Holding at {current}."
    )
    return hold(state, reason, now, pressure_rate, success_rate)


class Aimd:
    """The original rule, judged on the guarded window instead of a single batch."""

    name = "aimd"

    def decide(
        self, state: QueueState, stats: WindowStats, now: float, params: PolicyParams
    ) -> Decision:
        return aimd_step(state, stats.pressure_rate, stats.success_rate, params, now)
