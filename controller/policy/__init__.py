"""Deciding a queue's next concurrency.

``decide`` applies the guards every algorithm shares (operator mode, bounds, evidence cut at
the last change, stale telemetry, too few calls, Retry-After) and hands vetted evidence to a
``LimitAlgorithm``. Adding an algorithm is one file in this package plus a line in
``ALGORITHMS``.
"""

from __future__ import annotations

from controller.model import Action, Decision, Mode, QueueConfig, QueueState
from controller.policy.adaptive import AdaptiveLimit
from controller.policy.aimd import Aimd, aimd_step, change, clamp, hold
from controller.policy.base import LimitAlgorithm, WindowedAlgorithm
from controller.policy.evidence import evidence_since, vetted_evidence
from controller.settings import PolicyParams
from controller.window import QueueWindow

__all__ = [
    "ALGORITHMS",
    "DEFAULT_ALGORITHM",
    "LimitAlgorithm",
    "WindowedAlgorithm",
    "aimd_step",
    "decide",
    "evidence_since",
]

ALGORITHMS: dict[str, type[LimitAlgorithm]] = {Aimd.name: Aimd, AdaptiveLimit.name: AdaptiveLimit}
# Measured best on every shipped scenario (docs/simulator.md); the Lambda, replay and the
# simulator all start from it.
DEFAULT_ALGORITHM = AdaptiveLimit.name


def decide(
    algorithm: LimitAlgorithm,
    state: QueueState,
    config: QueueConfig,
    window: QueueWindow,
    now: float,
    params: PolicyParams,
) -> Decision:
    if config.mode is Mode.PINNED:
        return hold(state, f"Pinned by operator at {state.concurrency}; not adjusting.", now)
    if not params.cmin <= state.concurrency <= params.cmax:
        target = clamp(state.concurrency, params)
        reason = (
            f"Bounds are Cmin={params.cmin}, Cmax={params.cmax}. "
            f"Scaled from {state.concurrency} -> {target}."
        )
        grows = target > state.concurrency
        return change(
            state,
            action=Action.ADDITIVE_INCREASE if grows else Action.MULTIPLICATIVE_DECREASE,
            target=target,
            state_name=state.state,
            reason=reason,
            now=now,
            consecutive_breaches=state.consecutive_breaches,
        )
    if isinstance(algorithm, WindowedAlgorithm):
        return algorithm.decide_window(state, window, now, params)
    stats = vetted_evidence(state, window, now, params)
    if isinstance(stats, Decision):
        return stats
    decision = algorithm.decide(state, stats, now, params)
    if decision.target > decision.previous and now < state.hold_until:
        return hold(
            state,
            f"Honouring Retry-After until {state.hold_until - now:.0f}s from now; "
            f"holding at {state.concurrency}.",
            now,
            stats.pressure_rate,
            stats.success_rate,
        )
    if decision.target < decision.previous and stats.retry_after_s > 0:
        return _with_retry_after(decision, now + stats.retry_after_s)
    return decision


def _with_retry_after(decision: Decision, hold_until: float) -> Decision:
    new_state = decision.new_state.evolve(hold_until=max(hold_until, decision.new_state.hold_until))
    return Decision(
        queue=decision.queue,
        action=decision.action,
        previous=decision.previous,
        target=decision.target,
        state=decision.state,
        reason=decision.reason,
        pressure_rate=decision.pressure_rate,
        success_rate=decision.success_rate,
        new_state=new_state,
        previous_enabled=decision.previous_enabled,
        enabled=decision.enabled,
    )
