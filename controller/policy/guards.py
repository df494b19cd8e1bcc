"""The guards every algorithm gets, and the one way a verdict becomes a ``Decision``.

In order: the operator's mode (a pinned queue is held), the bounds (a mapping found outside
Cmin..Cmax is pulled inside before any algorithm runs), the evidence (only invocations that
started after the last change settled, enough of them, not stale: ``evidence.py``), then the
algorithm's verdict on the ``Situation`` built here, clamped to Cmin..Cmax, never raised
before the Retry-After of the last cut, nor, where it probes for capacity, while the queue has
nothing waiting (an empty queue's probe learns nothing but may meet the next burst one level
too high; a raise to a level the evidence shows fits, a cut's correction, is no probe: the
messages its storm refused, invisible for their visibility timeout, come back to that level),
and a cut made on evidence carrying Retry-After holds raises until it has passed. Dry-run is
the engine's: it decides and records, and only the execution is skipped. The operator's manual
evaluation (``evaluate_manually``) is decided here too, by the original rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.model import Action, Backlog, Decision, Mode, QueueConfig, QueueState
from controller.policy.aimd import aimd_rule
from controller.policy.base import LimitAlgorithm, Situation, Verdict, clamp
from controller.policy.evidence import vetted_evidence
from controller.settings import PolicyParams
from controller.window import QueueWindow, WindowStats


def decide(
    algorithm: LimitAlgorithm[Any],
    state: QueueState,
    config: QueueConfig,
    window: QueueWindow,
    now: float,
    params: PolicyParams,
    backlog: Backlog | None = None,
    *,
    sharing: Mapping[str, Mapping[str, float]] | None = None,
) -> Decision:
    """The queue's next decision: the shared guards around ``algorithm``'s verdict.

    ``backlog``: the queue's backlog as read (``None``: unknown). ``sharing``: the queues
    that report each downstream with an announced quota, and the calls a second each may want
    of it (``QueueBook.announcing``): the situation carries the queue's newest quota and what
    the other queues sharing it want."""
    if config.mode is Mode.PINNED:
        return _pinned(state, now)
    if not params.cmin <= state.concurrency <= params.cmax:
        target = clamp(state.concurrency, params)
        reason = (
            f"Bounds are Cmin={params.cmin}, Cmax={params.cmax}. "
            f"Scaled from {state.concurrency} -> {target}."
        )
        return decision_from(state, _holding(state, reason, target), now)
    memory = algorithm.memory_of(state)
    snapshot = window.snapshot()
    stats, refusal = vetted_evidence(state, snapshot, now, params)
    quota = window.quota
    shared_with: tuple[float, ...] = ()
    if quota is not None and quota.downstream is not None and sharing:
        wanted = sharing.get(quota.downstream, {})
        shared_with = tuple(rps for queue, rps in wanted.items() if queue != state.queue)
    situation = Situation(
        state, memory, stats, refusal, snapshot, now, params, backlog, quota, shared_with
    )
    verdict = algorithm.decide(situation)
    target = clamp(verdict.target, params)
    if target > state.concurrency and now < state.hold_until:
        reason = (
            f"Honouring Retry-After until {state.hold_until - now:.0f}s from now; "
            f"holding at {state.concurrency}."
        )
        return _held(state, memory, stats, reason, now, algorithm.name)
    hold_until = state.hold_until
    if target < state.concurrency and refusal is None and stats.retry_after_s > 0:
        hold_until = max(hold_until, now + stats.retry_after_s)
    decision = decision_from(
        state, verdict, now, algorithm.name, target=target, hold_until=hold_until
    )
    if backlog is not None and backlog.visible == 0 and decision.probes:
        reason = (
            f"Nothing waiting in the queue: no raise to {target}; holding at {state.concurrency}."
        )
        return _held(state, memory, stats, reason, now, algorithm.name)
    return decision


def _held(
    state: QueueState, memory: Any, stats: WindowStats, reason: str, now: float, algorithm: str
) -> Decision:
    """A guard holding a raise back: the mapping and the algorithm's memory stay as they were
    (the algorithm decides again on later evidence as if it had not asked)."""
    held = Verdict(
        state.concurrency,
        state.state,
        reason,
        memory,
        pressure_rate=stats.pressure_rate,
        success_rate=stats.success_rate,
    )
    return decision_from(state, held, now, algorithm)


def evaluate_manually(
    state: QueueState,
    config: QueueConfig,
    pressure_rate: float,
    success_rate: float,
    now: float,
    params: PolicyParams,
) -> Decision:
    """The operator's manual evaluation: a pinned queue is held (as ``decide`` holds it);
    otherwise the original rule (``aimd_rule``) once on the given rates, with no window and no
    settling. Whatever algorithm's memory the state holds is kept."""
    if config.mode is Mode.PINNED:
        return _pinned(state, now)
    verdict = aimd_rule(state, state.memory, pressure_rate, success_rate, params)
    return decision_from(state, verdict, now)


def decision_from(
    state: QueueState,
    verdict: Verdict[Any],
    now: float,
    algorithm: str | None = None,
    *,
    target: int | None = None,
    hold_until: float | None = None,
) -> Decision:
    """The decision that carries out ``verdict`` on ``state``, with the state to record.

    ``algorithm`` names whose memory the verdict holds (default: the state's). The action is
    what the verdict does to the mapping: a pause or resume when it flips ``enabled``, else
    an increase, a decrease or a hold.
    """
    target = verdict.target if target is None else target
    enabled = state.enabled if verdict.enabled is None else verdict.enabled
    wake_at = verdict.wake_at
    if wake_at is None:
        # A wake-up no algorithm asked for (an operator's change, as ``register`` wrote one
        # before it stopped) is served by the queue's first decision; an algorithm's stays
        # until it says otherwise (a past one: decide again at every tick).
        wake_at = state.wake_at if state.algorithm else 0.0
    moved = target != state.concurrency or enabled != state.enabled
    action = _action(state, target, enabled, ends_probe=verdict.ends_probe)
    breaches = verdict.consecutive_breaches
    new_state = state.evolve(
        state=verdict.state,
        concurrency=target,
        previous_concurrency=state.concurrency if moved else state.previous_concurrency,
        consecutive_breaches=state.consecutive_breaches if breaches is None else breaches,
        last_action=action,
        last_reason=verdict.reason,
        last_evaluated_at=now,
        last_change_at=now if moved else state.last_change_at,
        hold_until=state.hold_until if hold_until is None else hold_until,
        enabled=enabled,
        wake_at=wake_at,
        paused_since=paused_since(state, enabled, wake_at, now),
        algorithm=state.algorithm if algorithm is None else algorithm,
        memory=verdict.memory,
    )
    return Decision(
        queue=state.queue,
        action=action,
        previous=state.concurrency,
        target=target,
        state=verdict.state,
        reason=verdict.reason,
        pressure_rate=verdict.pressure_rate,
        success_rate=verdict.success_rate,
        new_state=new_state,
        previous_enabled=state.enabled,
        enabled=enabled,
        restores=verdict.restores,
        asks_backlog=verdict.asks_backlog,
    )


def paused_since(state: QueueState, enabled: bool, wake_at: float, now: float) -> float:
    """When the controller's pause a decision leaves the queue in began (0: none).

    A pause lasts from the decision that disables the mapping until one enables it with no
    wake-up wanted: an enabled mapping that asks to be woken is a test of the pause (a pulse),
    still the pause the operator waits out (the ``LongestPauseSeconds`` health metric). A
    mapping found disabled (an operator's doing) is not the controller's pause."""
    if state.paused_since > 0 and (not enabled or wake_at > 0):
        return state.paused_since
    return now if state.enabled and not enabled else 0.0


def _action(state: QueueState, target: int, enabled: bool, *, ends_probe: bool) -> Action:
    if enabled != state.enabled:
        return Action.RESUME if enabled else Action.PAUSE
    if target == state.concurrency:
        return Action.HOLD
    # Back to the probe's base: lower, or higher where a group cut the queue during the pulse;
    # neither a cut nor a raise of the queue's own.
    if ends_probe:
        return Action.PROBE_END
    if target > state.concurrency:
        return Action.ADDITIVE_INCREASE
    return Action.MULTIPLICATIVE_DECREASE


def _pinned(state: QueueState, now: float) -> Decision:
    reason = f"Pinned by operator at {state.concurrency}; not adjusting."
    return decision_from(state, _holding(state, reason), now)


def _holding(state: QueueState, reason: str, target: int | None = None) -> Verdict[object]:
    """A guard's own verdict: the state's memory, whichever algorithm it belongs to, kept."""
    target = state.concurrency if target is None else target
    return Verdict(target, state.state, reason, state.memory)
