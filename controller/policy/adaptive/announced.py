"""Announced limits: where the downstream announces its quota, size from it, before the blind
phases (docs/algorithms.md, "Announced limits").

A downstream that sends rate-limit headers says the level it sustains before any 429 and when
its quota comes back, so neither needs a probe (``Situation.quota``, the newest it announced):

- **The level.** The quota sustains ``Quota.sustained_rate`` calls a second for all its users:
  its quota over its window, and, until the announced window resets, no more than its
  remaining spread over the window's rest. Shared max-min fair by demand among the queues
  that report the same downstream (``max_min_share``: another queue that wants less than an
  even part, ``Situation.shared_with``, leaves the rest to those that want more), at the
  calls a second one of this queue's invocations makes (``WindowStats.invocation_pace``,
  measured at the level the mapping now has), it fits ``share / pace`` invocations: the
  announced level is that, rounded down, within Cmin..Cmax. The rate is the one at the time
  a level set now acts, once the invocations running end (``Fit``).
- **Step down before the first 429.** A mapping above the announced level is cut to it at
  once, whatever the evidence says: the remaining quota running toward zero faster than the
  reset refills it lowers the rate, and so the level, before it is spent.
- **Below the floor, pause.** Where even Cmin would draw the pausing pressure, the mapping is
  paused at Cmin: until the reset when the window's remaining is what binds (the return is
  known), else for the blind pause's period. A test at Cmin after a pause ends at the first
  quota it brings back: resumed at the announced level when that fits, paused again (for twice
  as long) when it does not.
- **Know the return.** When the announced level rises above the one announced before (a
  reset, a quota raised, a capacity back; by more than ``announced_hysteresis`` of the fit,
  so that a pace measured a little differently does not move it), the mapping goes to it at
  once: no blind probe.
- **Within it, the blind law.** At or below the announced level the blind phases decide (a cut
  on 429s the quota does not explain, latency), a cut no deeper than the level's
  accepted share; where they would grow or probe (clean, the allowance in use) the mapping
  goes to the announced level itself, and at it they hold.
- **A concurrency limit is not a quota.** A 429 that names a concurrency limit (Stripe's
  ``*-concurrency``) wants the concurrency that was in flight when calls were still accepted,
  which is the blind cut in proportion (invocations in use times the accepted share); a rate
  level from a quota would say nothing of it. While the window's recent seconds hold such 429s
  this phase stands aside, so no quota raises the level over them. A 429 that names a rate
  limit changes nothing: a quota, where announced, already sizes, and without one the blind
  cut is a rate cut.

Without an announced quota (or without a measured pace) the phase decides nothing and the law
is the blind one, unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from controller.model import QueueStateName
from controller.policy.adaptive.memory import (
    AdaptiveMemory,
    AdaptiveSituation,
    AdaptiveVerdict,
    ceiling_above,
    hold,
    move,
    rising,
)
from controller.policy.adaptive.pausing import Pausing, floor_pressure
from controller.policy.base import clamp
from controller.window import WindowStats


@dataclass(frozen=True, slots=True)
class Fit:
    """What an announced quota sustains for one queue: ``rate`` calls a second for all its
    users once a level set now acts (at ``acts_at``), of which the queue's ``share`` is
    ``invocations`` of its own at its pace."""

    invocations: float
    rate: float
    acts_at: float
    share: float


class Announced(Pausing):
    """Sizing from an announced quota, built on pausing (a quota below the floor pauses)."""

    def announced_fit(self, situation: AdaptiveSituation) -> Fit | None:
        """What the announced quota sustains for this queue (``None``: no quota, no measured
        pace, or 429s naming a concurrency limit in the seconds before the newest
        announcement)."""
        quota = situation.quota
        if quota is None:
            return None
        # The seconds up to the newest announcement: a paused queue's are all in the past.
        recent = situation.window.stats(quota.event_time - self.announced_span_s, math.inf)
        if recent.throttled_concurrency > 0:
            return None
        paced = self._paced(situation, recent)
        pace = paced.invocation_pace
        if pace is None:
            return None
        # A level set now acts once the invocations running end: a window that resets before
        # then is whole again by the time it acts (a one-second window announced with little
        # left just before its end is not a rate of that little a second).
        acts_at = situation.now + paced.mean_invocation_s
        rate = quota.sustained_rate(acts_at)
        if rate is None:
            return None
        share = max_min_share(rate, situation.shared_with)
        return Fit(share / pace, rate, acts_at, share)

    def _paced(self, situation: AdaptiveSituation, recent: WindowStats) -> WindowStats:
        """The invocations whose pace sizes the level: those started since the mapping last
        changed, once there are ``min_samples`` of them, else all of ``recent``. A level's pace
        is its own: where invocations share a host, a CPU or a connection pool, fewer of them
        each call faster (the live demo on a loaded host: 2.0 calls per invocation-second at
        16, 3.0 at 7), and a span reaching back across a cut measures the level before it, so
        the level crept down a step each time the span moved on while the quota was overrun."""
        since = situation.state.last_change_at
        if since <= recent.since:
            return recent
        current = situation.window.stats(since, math.inf)
        return current if current.samples >= situation.params.min_samples else recent

    def announced(self, situation: AdaptiveSituation, fit: Fit) -> AdaptiveVerdict | None:
        """The announced phase's verdict on a queue whose quota sustains ``fit`` (``None``: the
        blind phases decide, within the announced level)."""
        params = situation.params
        if floor_pressure(fit.invocations, params) >= self.pausing_pressure(params):
            return self._below_floor(situation, fit)
        state, memory = situation.state, situation.memory
        level = clamp(math.floor(fit.invocations), params)
        if memory.paused_until > 0:
            return self._resumed(situation, fit, level)
        current = state.concurrency
        if current > level:
            return move(
                level,
                QueueStateName.THROTTLED,
                f"Announced quota: {_sustains(situation, fit)}; stepping down before it is "
                f"spent. Scaled from {current} -> {level}.",
                _sized(memory, level, broke_at=current),
                situation.stats,
            )
        risen = (
            math.floor(fit.invocations * (1.0 - self.announced_hysteresis)) > memory.announced_level
        )
        if level > current and risen:
            return move(
                level,
                rising(level, params),
                f"Announced quota: {_sustains(situation, fit)}, more than announced before: "
                f"raising without a probe. Scaled from {current} -> {level}.",
                _sized(memory, level),
                situation.stats,
                breaches=0,
                wake_at=0.0,
            )
        return None

    def within_announced(
        self, situation: AdaptiveSituation, fit: Fit, verdict: AdaptiveVerdict
    ) -> AdaptiveVerdict:
        """The blind phases' ``verdict`` under the announced level: where they would grow or
        probe (clean, the allowance in use), the mapping goes to the announced level itself,
        with no probe; at it, they hold. A cut on 429s is no deeper than the level's accepted
        share: the quota says the level fits, so what the 429s show is the level's calls
        bunching within a second (or a user of the quota that does not report), not an
        in-use estimate to start over from."""
        level = clamp(math.floor(fit.invocations), situation.params)
        state = situation.state
        current = state.concurrency
        if verdict.enabled is False or verdict.target == current:
            return verdict
        if verdict.target < current:
            shallow = max(
                situation.params.cmin,
                min(current - 1, math.floor(current * (1.0 - verdict.pressure_rate))),
            )
            if verdict.target >= shallow:
                return verdict
            return replace(
                verdict,
                target=shallow,
                reason=f"{verdict.reason} Announced quota fits {level}: no deeper than the "
                f"accepted share, {shallow}.",
                memory=replace(verdict.memory, ceiling=ceiling_above(shallow)),
            )
        if level <= current:
            return hold(
                state,
                f"At the announced level ({_sustains(situation, fit)}); holding at {current}.",
                situation.memory,
                situation.stats,
            )
        return move(
            level,
            rising(level, situation.params),
            f"Clean below the announced level ({_sustains(situation, fit)}): raising to it "
            f"without a probe. Scaled from {current} -> {level}.",
            _sized(verdict.memory, level),
            situation.stats,
            breaches=0,
            wake_at=0.0,
        )

    def _below_floor(self, situation: AdaptiveSituation, fit: Fit) -> AdaptiveVerdict | None:
        """Pause at Cmin, where even Cmin would overload the quota; a test that brings back a
        quota still below the floor ends at once (``None``: the blind pausing goes on)."""
        state, memory, now = situation.state, situation.memory, situation.now
        params = situation.params
        quota = situation.quota
        assert quota is not None  # the fit comes from it
        low, high = self.pause_s
        if memory.paused_until == 0:
            if quota.resets_after(fit.acts_at) and quota.reset_at is not None:
                until, why = quota.reset_at, "until the quota resets"
            else:
                until, why = now + low, f"for {low:.0f}s"
            period = low
        elif (state.enabled or memory.judge_at > 0) and quota.event_time >= memory.probe_started_at:
            period = max(low, min(high, 2 * memory.pause_s))
            until, why = now + period, f"again for {period:.0f}s"
        else:
            return None
        cmin = params.cmin
        return move(
            cmin,
            QueueStateName.CRITICAL_BACKOFF,
            f"Announced quota below the floor: {_sustains(situation, fit)}, Cmin ({cmin}) would "
            f"draw {floor_pressure(fit.invocations, params):.0%}; pausing the mapping {why}.",
            replace(
                _sized(memory, cmin, broke_at=max(state.concurrency, memory.broke_at)),
                pause_s=period,
                paused_until=until,
            ),
            situation.stats,
            enabled=False,
            breaches=state.consecutive_breaches + 1,
            wake_at=until,
        )

    def _resumed(
        self, situation: AdaptiveSituation, fit: Fit, level: int
    ) -> AdaptiveVerdict | None:
        """A paused queue resumes at the announced level once its quota fits the floor again:
        announced by the test after the pause, or whole again at the reset it was paused until
        (``None``: nothing announced since; the blind pausing goes on)."""
        quota, memory, now = situation.quota, situation.memory, situation.now
        assert quota is not None  # the fit comes from it
        tested = 0 < memory.probe_started_at <= quota.event_time
        reset = quota.reset_at is not None and quota.event_time < quota.reset_at <= now
        if not (tested or reset):
            return None
        return move(
            level,
            rising(level, situation.params),
            f"Announced quota fits again: {_sustains(situation, fit)}; resuming at {level}.",
            replace(_sized(memory, level), pause_s=0.0, paused_until=0.0),
            situation.stats,
            enabled=True,
            breaches=0,
            wake_at=0.0,
        )


def _sized(memory: AdaptiveMemory, level: int, *, broke_at: int = 0) -> AdaptiveMemory:
    """The memory of a level set from the quota: it is the announced level, the level above it
    is the ceiling (where the blind phases take over should announcements stop), and no probe
    or pause test is in progress."""
    return replace(
        memory,
        announced_level=level,
        ceiling=ceiling_above(level),
        broke_at=broke_at or memory.broke_at,
        probe_base=0,
        probe_step=0,
        probe_until=0.0,
        judge_at=0.0,
    )


def max_min_share(rate: float, others: tuple[float, ...]) -> float:
    """The calls a second of ``rate`` a queue that wants more may take beside ``others``
    (what each other queue sharing it wants): max-min fair, each other queue that wants less
    than an even part of what is left takes what it wants, the rest is shared evenly. Never
    less than ``rate`` over the queues; all of it for a queue alone."""
    left, sharing = rate, len(others) + 1
    for wanted in sorted(others):
        if wanted >= left / sharing:
            break
        left, sharing = left - wanted, sharing - 1
    return left / sharing


def _sustains(situation: AdaptiveSituation, fit: Fit) -> str:
    if not situation.shared_with:
        return f"{fit.rate:.1f} calls/s sustain {fit.invocations:.1f} invocations"
    return (
        f"{fit.rate:.1f} calls/s shared by {len(situation.shared_with) + 1} queues leave "
        f"{fit.share:.1f} to this one, which sustain {fit.invocations:.1f} invocations"
    )
