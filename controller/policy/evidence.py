"""Which telemetry a verdict may rest on: the guards every algorithm shares."""

from __future__ import annotations

from dataclasses import dataclass

from controller.model import QueueState
from controller.settings import PolicyParams
from controller.window import WindowSnapshot, WindowStats


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why no verdict may rest on the evidence yet: the reason (and rates) of the HOLD."""

    reason: str
    pressure_rate: float = 0.0
    success_rate: float = 0.0


def evidence_since(state: QueueState, now: float, params: PolicyParams) -> float:
    """Where admissible evidence starts: the window, but never before the last change settled."""
    return max(now - params.window_s, state.last_change_at + params.settle_margin_s)


def vetted_evidence(
    state: QueueState, window: WindowSnapshot, now: float, params: PolicyParams
) -> tuple[WindowStats, Refusal | None]:
    """The invocations a verdict may judge, and why none may be judged yet (``None``: they
    may).

    Only invocations that started after the last change (plus its settle margin) count, so a
    lagging stream of old 429s cannot cut twice; stale telemetry and too few calls hold.
    """
    stats = window.stats(evidence_since(state, now, params), now + 1.0)
    if stats.newest_event_time is None:
        reason = f"No telemetry since the last change; holding at {state.concurrency}."
        return stats, Refusal(reason)
    age = now - stats.newest_event_time
    if age > params.stale_after_s:
        reason = f"Telemetry stale: newest sample {age:.0f}s old; holding at {state.concurrency}."
        return stats, Refusal(reason)
    if stats.requests < params.min_samples:
        reason = (
            f"Insufficient evidence: {stats.requests} calls since the last change "
            f"(< {params.min_samples}); holding at {state.concurrency}."
        )
        return stats, Refusal(reason, stats.pressure_rate, stats.success_rate)
    return stats, None
