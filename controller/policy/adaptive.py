"""The adaptive limit: proportional cuts, pulse probes, a remembered ceiling, pausing.

Built from where rejected calls come from (docs/simulator.md, CONTROL-NOTES):

- **Attach modestly.** A mapping first seen at a high cap is set to a modest level (its last
  known good level, else ``start_level``) before the poller's ramp turns into a storm.
- **Cut in proportion.** On pressure at or above T1 the target is the concurrency really in use
  (busy time / elapsed time from the invocations' durations, or the cap when the poller fills
  it) times the accepted share, which lands near the fitting level in one step.
- **Judge only fresh evidence.** Every verdict uses invocations that started after the last
  change (plus the settle margin); anything older is ignored.
- **Grow only when used and clean.** Growth needs pressure under ``grow_below`` and the
  allowance actually in use. Far from any known ceiling the level grows by ``growth``; near the
  remembered ceiling (the last level that broke) growth is by *pulse probes*: the cap is raised
  by a step for ``pulse_s`` and put back, and only the invocations that started during the pulse
  are judged, so a failed probe costs about one invocation per extra slot whatever the
  telemetry delay. Failed probes back off (``probe_backoff_s``, doubling); a probe that passes
  commits the step and clears the ceiling when it passes it.
- **Pause below the floor.** Overload at Cmin cannot be cut further: the mapping is disabled for
  a bounded, growing period (``pause_s``), then tested with a short pulse at Cmin, and resumed
  only if that pulse was clean.

Every time is the caller's ``now``: pure, no clock reads, no I/O.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any

from controller.model import Action, Decision, QueueState, QueueStateName
from controller.policy.evidence import vetted_evidence
from controller.settings import PolicyParams
from controller.window import QueueWindow, WindowStats


@dataclass(frozen=True, slots=True)
class AdaptiveLimit:
    """Tunables; the contract's T1, Cmin, Cmax, window and settle margin come from params."""

    start_level: int = 5
    first_growth: float = 2.0
    growth: float = 1.5
    grow_below: float = 0.005
    trim_above: float = 0.0025
    trim_evidence: int = 400
    poller_ramp_per_s: float = 5.0
    # The newest seconds of invocation starts, whose pressure sizes a cut.
    latest_s: int = 1
    storm_factor: float = 2.0
    sizing_z: float = 1.0
    pulse_s: float = 1.0
    judge_after_s: float = 6.0
    judge_patience_s: float = 20.0
    probe_tolerance: float = 0.005
    probe_backoff_s: tuple[float, float] = (10.0, 40.0)
    probe_jitter: float = 0.2
    # Time after a cut over which growth back to the plateau goes from one step to all of it.
    plateau_ramp_s: float = 120.0
    pause_s: tuple[float, float] = (15.0, 120.0)
    pause_above: float = 0.12
    # In-use estimates at least this share of the cap mean the poller fills the cap.
    saturated_share: float = 0.6
    estimate_span_s: float = 10.0
    # Growth needs at least this share of the cap in use over the window (the poller's ramp
    # after the last step included).
    used_share: float = 0.5

    name = "adaptive"

    def decide(
        self, state: QueueState, stats: WindowStats, now: float, params: PolicyParams
    ) -> Decision:
        """The plain interface: judge vetted evidence only (no probes, no pauses)."""
        return self._on_evidence(state, stats, now, params, probing=False)

    def decide_window(
        self, state: QueueState, window: QueueWindow, now: float, params: PolicyParams
    ) -> Decision:
        """The full algorithm: it selects its own evidence from the queue's window."""
        if state.paused_until > 0:
            return self._paused(state, window, now, params)
        if state.probe_until > 0:
            if now >= state.probe_until:
                return self._end_pulse(state, now)
            return _hold(state, f"Probing at {state.concurrency}; judging after the pulse.", now)
        failed_probe: Decision | None = None
        if state.judge_at > 0 and now >= state.judge_at:
            verdict = self._judge_pulse(state, window, now, params)
            if verdict.action is not Action.HOLD or verdict.new_state.judge_at > 0:
                return verdict
            # A failed probe may have met a real overload at the base level: judge the base's
            # own evidence now rather than a batch later.
            failed_probe, state = verdict, verdict.new_state
        decision = self._evaluate(state, window, now, params)
        if failed_probe is not None and decision.action is Action.HOLD:
            return failed_probe
        return decision

    def _evaluate(
        self, state: QueueState, window: QueueWindow, now: float, params: PolicyParams
    ) -> Decision:
        if state.last_change_at == 0 and state.good_level == 0:
            # Never decided: attach at a modest level at once, before any storm builds up.
            attach = self._attach(state, now, params)
            if attach is not None:
                return attach
        stats = vetted_evidence(state, window, now, params)
        if isinstance(stats, Decision):
            return stats
        used = _busy_concurrency(stats, self.estimate_span_s)
        return self._on_evidence(
            state,
            stats,
            now,
            params,
            probing=True,
            used=used,
            latest=self._latest_pressure(stats, window, params),
        )

    def _latest_pressure(
        self, stats: WindowStats, window: QueueWindow, params: PolicyParams
    ) -> tuple[float, float]:
        """The pressure among the newest second of invocation starts, as (storm, sizing).

        A storm that began a moment ago shows there before it shows in the whole evidence's
        share: ``storm`` is that pressure when it is clear (enough calls, well above T1), else
        0. ``sizing`` is the same pressure on half the evidence, to size a cut the whole
        evidence has already called for, which the older, cleaner seconds would understate.
        """
        if stats.newest_event_time is None:
            return 0.0, 0.0
        mean_s = stats.busy_ms / stats.timed_samples / 1000.0 if stats.timed_samples else 0.0
        newest = math.floor(stats.newest_event_time - mean_s)
        latest = window.stats(max(stats.since, newest - self.latest_s + 1), newest + 1)
        pressure = latest.pressure_rate
        sizing = pressure if 2 * latest.requests >= params.min_samples else 0.0
        clear = (
            latest.requests >= 2 * params.min_samples and pressure >= self.storm_factor * params.t1
        )
        return (pressure if clear else 0.0), sizing

    # -- the steps ------------------------------------------------------------------------
    def _attach(self, state: QueueState, now: float, params: PolicyParams) -> Decision | None:
        start = _clamp(self.start_level, params)
        if state.concurrency <= start:
            return None
        return _decision(
            state,
            Action.MULTIPLICATIVE_DECREASE,
            start,
            QueueStateName.RECOVERING,
            f"Attaching: first decision for this queue; starting at {start} rather than "
            f"{state.concurrency} and growing while clean. Scaled from {state.concurrency} -> "
            f"{start}.",
            now,
            good_level=start,
        )

    def _on_evidence(
        self,
        state: QueueState,
        stats: WindowStats,
        now: float,
        params: PolicyParams,
        *,
        probing: bool,
        used: float | None = None,
        latest: tuple[float, float] = (0.0, 0.0),
    ) -> Decision:
        """``used``: invocations in use over the whole window, before and after the last
        change (``None``: unknown), to tell a queue that fills its allowance from an idle one.
        ``latest``: the pressure among the newest invocations (see ``_latest_pressure``)."""
        current = state.concurrency
        pressure = stats.pressure_rate
        in_use = self._in_use(state, stats)
        storm, sizing = latest
        # A few rejections over the whole evidence with a burst in its newest second are the
        # first reports of a storm, not a level just over the capacity.
        beginning = pressure >= self.trim_above and sizing >= self.storm_factor * params.t1
        if max(pressure, storm) >= params.t1 or beginning:
            if current <= params.cmin:
                if probing and pressure >= self._pause_above(params):
                    return self._pause(state, stats, now)
                return _hold(
                    state,
                    f"Overload at Cmin ({params.cmin}): pressure {pressure:.1%} >= T1 "
                    f"({params.t1:.1%}); cannot cut further, and not enough to pause.",
                    now,
                    stats,
                )
            return self._cut(state, stats, in_use, now, params, max(storm, sizing))
        if state.judge_at > 0:
            return _hold(state, f"Judging a probe; holding at {current}.", now, stats)
        if (
            probing
            and pressure >= self.trim_above
            and stats.requests >= self.trim_evidence
            and current > params.cmin
        ):
            # A level that keeps drawing a few rejections is just over the capacity: each
            # rejected message comes back a visibility timeout later, which is what a drain
            # waits for at the end. Step down one and remember the level.
            target = current - 1
            return _decision(
                state,
                Action.MULTIPLICATIVE_DECREASE,
                target,
                state.state,
                f"Trim: pressure {pressure:.2%} over {stats.requests} calls stays above "
                f"{self.trim_above:.2%} (under T1 {params.t1:.1%}). Scaled from {current} -> "
                f"{target}.",
                now,
                stats,
                ceiling=current,
                next_probe_at=now + self._spread(state, now, state.probe_backoff_s),
                probe_streak=0,
            )
        if pressure >= self.grow_below:
            return _hold(
                state,
                f"Within band: pressure {pressure:.1%} < T1 ({params.t1:.1%}) but not under "
                f"{self.grow_below:.1%}; holding at {current}.",
                now,
                stats,
            )
        good = current
        if current >= params.cmax:
            name = QueueStateName.HEALTHY
            return _hold(
                state, f"Healthy at Cmax ({params.cmax}).", now, stats, name=name, good_level=good
            )
        if used is not None and used < self.used_share * current:
            return _hold(
                state,
                f"Clean but the allowance is not used (about {used:.1f} of {current} in use); "
                f"holding at {current}.",
                now,
                stats,
                good_level=good,
            )
        if now < state.hold_until:
            return _hold(
                state,
                f"Honouring Retry-After until {state.hold_until - now:.0f}s from now; "
                f"holding at {current}.",
                now,
                stats,
            )
        ceiling = state.ceiling
        if ceiling == 0 or current + 1 < ceiling or not probing:
            # Below any level known to break: grow by real steps, fast before the queue's first
            # overload, gently after it, halving the gap to a known ceiling. A step that breaks
            # is cut in proportion.
            factor = self.first_growth if state.probe_backoff_s == 0 else self.growth
            target = max(current + 1, math.floor(current * factor))
            if ceiling:
                target = min(target, current + max(1, (ceiling - current) // 2), ceiling - 1)
            memory: dict[str, Any] = {}
            if state.plateau > current:
                # Capacity has come back past the ceiling the last cut left: grow back
                # towards the level that was good before that cut, the more boldly the longer
                # ago the cut was (a probe that passes soon after it more likely shows a cut
                # that went too deep), at most doubling. The level above the plateau broke
                # then: probe it only after the longest backoff.
                since_cut = max(0.0, now - state.cut_at)
                boldness = min(1.0, since_cut / self.plateau_ramp_s)
                step = max(1, math.ceil((state.plateau - current) * boldness))
                target = min(state.plateau, 2 * current, current + step)
                if target == state.plateau:
                    longest = self.probe_backoff_s[1]
                    memory = {
                        "probe_backoff_s": longest,
                        "next_probe_at": now + self._spread(state, now, longest),
                    }
            target = _clamp(target, params)
            if target <= current:
                return _hold(state, f"At the ceiling ({ceiling}); holding at {current}.", now)
            limit = f"below the ceiling {ceiling}" if ceiling else "no known ceiling"
            return _decision(
                state,
                Action.ADDITIVE_INCREASE,
                target,
                _rising(target, params),
                f"Clean: pressure {pressure:.1%} < {self.grow_below:.1%} with the allowance "
                f"in use, {limit}. Scaled from {current} -> {target}.",
                now,
                stats,
                good_level=good,
                **memory,
            )
        if now < state.next_probe_at:
            return _hold(
                state,
                f"Clean; next probe in {state.next_probe_at - now:.0f}s (ceiling {ceiling}). "
                f"Holding at {current}.",
                now,
                stats,
                good_level=good,
            )
        step = max(1, min(state.probe_streak, math.floor(current * (self.growth - 1.0))))
        target = _clamp(current + step, params)
        # The poller adds a few invocations per second: a bigger step needs a longer pulse.
        pulse = self.pulse_s + (step - 1) / self.poller_ramp_per_s
        return _decision(
            state,
            Action.ADDITIVE_INCREASE,
            target,
            _rising(target, params),
            f"Probe: clean at {current} (pressure {pressure:.1%}), ceiling {ceiling}; raising "
            f"to {target} for {pulse:.1f}s, then back to {current} until the probe's "
            "invocations are judged.",
            now,
            stats,
            good_level=good,
            probe_base=current,
            probe_step=target - current,
            probe_started_at=now,
            probe_until=now + pulse,
            wake_at=now + pulse,
        )

    def _cut(
        self,
        state: QueueState,
        stats: WindowStats,
        in_use: float,
        now: float,
        params: PolicyParams,
        latest_pressure: float,
    ) -> Decision:
        current = state.concurrency
        pressure = max(stats.pressure_rate, latest_pressure)
        fresh = stats.pressure_rate < params.t1
        # Size the cut on a pessimistic share: a decision on a few dozen calls would otherwise
        # under-cut and need a second cut a settle period later, the storm going on meanwhile.
        margin = self.sizing_z * math.sqrt(pressure * (1.0 - pressure) / max(1, stats.requests))
        proportional = math.floor(in_use * (1.0 - min(1.0, pressure + margin)))
        if fresh:
            # A storm seen only in the newest seconds: their first reports come from the calls
            # made early in each second, which the downstream still accepted, so the share
            # understates it. Cut at least by beta.
            proportional = min(proportional, math.floor(current * params.beta))
        target = _clamp(min(current - 1, proportional), params)
        breaches = state.consecutive_breaches + 1
        name = QueueStateName.THROTTLED if breaches == 1 else QueueStateName.CRITICAL_BACKOFF
        backoff = state.probe_backoff_s or self.probe_backoff_s[0]
        hold_until = state.hold_until
        if stats.retry_after_s > 0:
            hold_until = max(hold_until, now + stats.retry_after_s)
        return _decision(
            state,
            Action.MULTIPLICATIVE_DECREASE,
            target,
            name,
            f"Overload: {'newest ' if fresh else ''}pressure {pressure:.1%} >= T1 "
            f"({params.t1:.1%}) with about {in_use:.1f} invocations in use; cut to the accepted "
            f"share{' (at least by beta)' if fresh else ''}. Scaled from {current} -> {target}.",
            now,
            stats,
            consecutive_breaches=breaches,
            ceiling=target + 1,
            plateau=self._plateau_after_cut(state, target),
            cut_at=now,
            probe_streak=0,
            next_probe_at=now + self._spread(state, now, backoff),
            probe_backoff_s=backoff,
            hold_until=hold_until,
            judge_at=0.0,
            probe_step=0,
            wake_at=0.0,
        )

    @staticmethod
    def _plateau_after_cut(state: QueueState, target: int) -> int:
        """The level to grow back to after this cut: the one that was good before it. A cut
        at or under the old plateau shows that one is stale."""
        if state.good_level > target and state.good_level <= state.concurrency:
            return state.good_level
        if state.plateau and state.concurrency <= state.plateau:
            return 0
        return state.plateau

    def _end_pulse(self, state: QueueState, now: float) -> Decision:
        base = state.probe_base
        return _decision(
            state,
            Action.MULTIPLICATIVE_DECREASE,
            base,
            state.state,
            f"Probe pulse over: back to {base}; judging the invocations that started at "
            f"{state.concurrency}. Scaled from {state.concurrency} -> {base}.",
            now,
            probe_until=0.0,
            probe_ended_at=now,
            judge_at=now + self.judge_after_s,
            wake_at=now + self.judge_after_s,
        )

    def _pulse_stats(self, state: QueueState, window: QueueWindow) -> WindowStats:
        # Whole seconds from the pulse's start to its end: invocations started under the
        # raised cap, and the base level running beside them.
        return window.stats(math.floor(state.probe_started_at), state.probe_ended_at)

    def _judge_pulse(
        self, state: QueueState, window: QueueWindow, now: float, params: PolicyParams
    ) -> Decision:
        stats = self._pulse_stats(state, window)
        probed = state.probe_base + state.probe_step
        overdue = now >= state.judge_at + self.judge_patience_s
        if stats.requests < params.min_samples and not overdue:
            return _hold(
                state,
                f"Waiting for the probe's telemetry ({stats.requests} calls so far).",
                now,
                stats,
            )
        cleared: dict[str, Any] = {"judge_at": 0.0, "probe_step": 0, "wake_at": 0.0}
        # The base level's own evidence since the pulse ended must be clean too: a probe never
        # commits a raise into an overload that began after it.
        since = max(now - params.window_s, state.last_change_at + params.settle_margin_s)
        base = window.stats(since, now + 1.0)
        if (
            stats.requests >= params.min_samples
            and stats.pressure_rate < self.probe_tolerance
            and base.pressure_rate < params.t1
        ):
            target = _clamp(probed, params)
            ceiling, streak, plateau = state.ceiling, state.probe_streak, state.plateau
            if probed >= ceiling:
                # The ceiling was stale (capacity came back). Grow by real steps back to the
                # level that was good before the last cut, if above; else keep probing, with
                # steps doubling while probes pass.
                if plateau > probed:
                    ceiling, streak = plateau + 1, 0
                else:
                    ceiling, streak, plateau = probed + 1, 2 * max(1, streak), 0
            return _decision(
                state,
                Action.ADDITIVE_INCREASE,
                target,
                _rising(target, params),
                f"Probe passed: pressure {stats.pressure_rate:.1%} at {probed}. "
                f"Scaled from {state.concurrency} -> {target}.",
                now,
                stats,
                ceiling=ceiling,
                plateau=plateau,
                good_level=target,
                probe_backoff_s=self.probe_backoff_s[0],
                probe_streak=streak,
                next_probe_at=now,
                **cleared,
            )
        if state.probe_step > 1:
            # A big step failed: try a smaller one at once rather than backing off.
            backoff = state.probe_backoff_s or self.probe_backoff_s[0]
            next_probe_at = now
        else:
            backoff = min(
                self.probe_backoff_s[1],
                2 * state.probe_backoff_s if state.probe_backoff_s else self.probe_backoff_s[0],
            )
            next_probe_at = now + self._spread(state, now, backoff)
        verdict = (
            f"pressure {stats.pressure_rate:.1%} at {probed}"
            if stats.requests >= params.min_samples
            else "too little telemetry"
        )
        return _hold(
            state,
            f"Probe failed ({verdict}); next probe in {next_probe_at - now:.0f}s. Holding at "
            f"{state.concurrency}.",
            now,
            stats,
            ceiling=probed if state.ceiling == 0 else min(state.ceiling, probed),
            probe_backoff_s=backoff,
            probe_streak=0,
            next_probe_at=next_probe_at,
            **cleared,
        )

    def _pause(self, state: QueueState, stats: WindowStats, now: float) -> Decision:
        low, high = self.pause_s
        pause = min(high, 2 * state.pause_s) if state.pause_s else low
        return _decision(
            state,
            Action.PAUSE,
            state.concurrency,
            QueueStateName.CRITICAL_BACKOFF,
            f"Overload at Cmin: pressure {stats.pressure_rate:.1%} even at {state.concurrency}; "
            f"pausing the mapping for {pause:.0f}s.",
            now,
            stats,
            enabled=False,
            consecutive_breaches=state.consecutive_breaches + 1,
            pause_s=pause,
            paused_until=now + pause,
            wake_at=now + pause,
        )

    def _paused(
        self, state: QueueState, window: QueueWindow, now: float, params: PolicyParams
    ) -> Decision:
        if state.enabled:
            if now < state.probe_until:
                return _hold(state, f"Testing Cmin ({state.concurrency}) after a pause.", now)
            return _decision(
                state,
                Action.PAUSE,
                state.concurrency,
                QueueStateName.CRITICAL_BACKOFF,
                "Pause test over: paused again until its invocations are judged.",
                now,
                enabled=False,
                probe_until=0.0,
                probe_ended_at=now,
                judge_at=now + self.judge_after_s,
                wake_at=now + self.judge_after_s,
            )
        if state.judge_at > 0:
            if now < state.judge_at:
                return _hold(state, "Paused; judging the test at Cmin.", now)
            stats = self._pulse_stats(state, window)
            overdue = now >= state.judge_at + self.judge_patience_s
            if stats.requests < params.min_samples and not overdue:
                return _hold(state, "Paused; waiting for the test's telemetry.", now, stats)
            pause_above = self._pause_above(params)
            if stats.requests == 0 or stats.pressure_rate < pause_above:
                verdict = (
                    "no calls seen"
                    if stats.requests == 0
                    else f"pressure {stats.pressure_rate:.1%} < {pause_above:.1%}"
                )
                return _decision(
                    state,
                    Action.RESUME,
                    state.concurrency,
                    QueueStateName.RECOVERING,
                    f"Pause test passed ({verdict}); resuming at {state.concurrency}.",
                    now,
                    stats,
                    enabled=True,
                    consecutive_breaches=0,
                    pause_s=0.0,
                    paused_until=0.0,
                    judge_at=0.0,
                    wake_at=0.0,
                    ceiling=state.concurrency + 1,
                    next_probe_at=now + self._spread(state, now, 0.0),
                )
            low, high = self.pause_s
            pause = min(high, 2 * state.pause_s) if state.pause_s else low
            return _hold(
                state,
                f"Pause test failed (pressure {stats.pressure_rate:.1%} at {state.concurrency}); "
                f"paused for {pause:.0f}s more.",
                now,
                stats,
                pause_s=pause,
                paused_until=now + pause,
                judge_at=0.0,
                wake_at=now + pause,
            )
        if now < state.paused_until:
            return _hold(
                state,
                f"Paused for {state.paused_until - now:.0f}s more (overload at Cmin).",
                now,
                wake_at=state.paused_until,
            )
        return _decision(
            state,
            Action.RESUME,
            state.concurrency,
            QueueStateName.CRITICAL_BACKOFF,
            f"Pause over: testing {state.concurrency} for {self.pulse_s:g}s.",
            now,
            enabled=True,
            probe_started_at=now,
            probe_until=now + self.pulse_s,
            wake_at=now + self.pulse_s,
        )

    def _pause_above(self, params: PolicyParams) -> float:
        """The pressure at Cmin that pauses the mapping: a share of failed calls at which
        messages would run through their receives into the dead-letter queue. Below it the
        queue keeps running at Cmin (pausing on a downstream shared with busier queues would
        only hand them its share)."""
        return max(params.t1, self.pause_above)

    def _spread(self, state: QueueState, now: float, backoff_s: float) -> float:
        """The wait before the next probe, spread by up to ``probe_jitter`` either way.

        Queues sharing a downstream would otherwise probe in step (and a probe's blind
        seconds would fall at the same phase every cycle). The spread comes from a hash of
        the queue and the time, so the same inputs give the same decision.
        """
        base = backoff_s or self.probe_backoff_s[0]
        digest = zlib.crc32(f"{state.queue}:{now:.3f}".encode())
        unit = digest / 0xFFFFFFFF * 2.0 - 1.0
        return base * (1.0 + self.probe_jitter * unit)

    def _in_use(self, state: QueueState, stats: WindowStats) -> float:
        """Invocations really running, from their durations; the cap once they fill it.

        Telemetry of the last seconds is still arriving, so a short span under-counts: the
        estimate is trusted only over ``estimate_span_s`` and only to say "well under the cap".
        """
        estimate = _busy_concurrency(stats, self.estimate_span_s)
        if estimate is None or estimate >= self.saturated_share * state.concurrency:
            estimate = float(state.concurrency)
        # After a raise the poller climbs a few invocations per second: the newest evidence
        # cannot have run more than that ramp allows.
        if state.previous_concurrency < state.concurrency and stats.newest_event_time is not None:
            ramp_s = max(0.0, stats.newest_event_time - state.last_change_at)
            reachable = state.previous_concurrency + self.poller_ramp_per_s * ramp_s
            estimate = min(estimate, reachable)
        return estimate


def _busy_concurrency(stats: WindowStats, min_span_s: float) -> float | None:
    """Busy time / elapsed time over the invocations the stats cover (``None``: too short)."""
    if not stats.timed_samples or stats.newest_event_time is None:
        return None
    mean_s = stats.busy_ms / stats.timed_samples / 1000.0
    first_start = math.ceil(stats.since)
    last_start = stats.newest_event_time - mean_s
    span = last_start - first_start + mean_s
    if span < min_span_s:
        return None
    return stats.busy_ms / 1000.0 / span


def _clamp(value: int, params: PolicyParams) -> int:
    return max(params.cmin, min(params.cmax, value))


def _rising(target: int, params: PolicyParams) -> QueueStateName:
    return QueueStateName.HEALTHY if target >= params.cmax else QueueStateName.RECOVERING


def _decision(
    state: QueueState,
    action: Action,
    target: int,
    name: QueueStateName,
    reason: str,
    now: float,
    stats: WindowStats | None = None,
    *,
    enabled: bool | None = None,
    consecutive_breaches: int | None = None,
    **memory: Any,
) -> Decision:
    enabled = state.enabled if enabled is None else enabled
    moved = target != state.concurrency or enabled != state.enabled
    if consecutive_breaches is None:
        consecutive_breaches = (
            0 if action is Action.ADDITIVE_INCREASE else state.consecutive_breaches
        )
    return Decision(
        queue=state.queue,
        action=action,
        previous=state.concurrency,
        target=target,
        state=name,
        reason=reason,
        pressure_rate=stats.pressure_rate if stats else 0.0,
        success_rate=stats.success_rate if stats else 0.0,
        new_state=state.evolve(
            state=name,
            concurrency=target,
            previous_concurrency=state.concurrency if moved else state.previous_concurrency,
            consecutive_breaches=consecutive_breaches,
            last_action=action,
            last_reason=reason,
            last_evaluated_at=now,
            last_change_at=now if moved else state.last_change_at,
            enabled=enabled,
            **memory,
        ),
        previous_enabled=state.enabled,
        enabled=enabled,
    )


def _hold(
    state: QueueState,
    reason: str,
    now: float,
    stats: WindowStats | None = None,
    *,
    name: QueueStateName | None = None,
    good_level: int | None = None,
    **memory: Any,
) -> Decision:
    if good_level is not None:
        memory["good_level"] = good_level
    return _decision(
        state, Action.HOLD, state.concurrency, name or state.state, reason, now, stats, **memory
    )
