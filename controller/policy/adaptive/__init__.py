"""The adaptive limit: proportional cuts, pulse probes, a remembered ceiling, pausing.

Built from where rejected calls come from (docs/simulator.md, docs/algorithms.md):

- **Do no harm.** A queue is never cut below the concurrency in use without pressure: a mapping
  first seen is left to the poller's ramp, and a healthy queue under its cap is held.
- **Cut in proportion** (``sizing``). On pressure at or above T1 the target is the concurrency
  really in use (the busiest seconds by Little's law, what a still-climbing poller has reached,
  or the cap when the poller fills it) times the accepted share, which lands near the fitting
  level in one step; a level whose refusals one invocation too many explains steps down one.
  A storm's first reports cut at once, sized on the newest second or, after a clean history,
  on the seconds since the storm's onset; the cut is corrected on the rest of them.
- **Judge only fresh evidence.** Every verdict on the queue's telemetry uses the shared guards'
  vetted evidence: invocations that started after the last change (plus the settle margin).
- **Grow only when used and clean** (``probing``). Growth needs pressure under ``grow_below``,
  refused calls under ``clean_below`` (a level refusing under T1 holds, neither grown nor
  stepped down), and the allowance actually in use, and then keeps up with the poller's ramp
  (at most doubling a step). Near the remembered ceiling growth is by pulse probes, which
  judge only the invocations that ran during the pulse, paid for from a budget of the goodput;
  clean above the level that broke, a ceiling set by latency or timeouts expires and growth
  returns to full speed, and past one set by refused calls growth goes on by pulses.
- **Announced limits first** (``announced``). Where the downstream announces its quota, the
  level it sustains caps the mapping before the first 429, a rise of it is raised to without a
  probe, and a quota below the floor pauses until its reset; the blind phases decide within it.
  Without announced fields the law is the blind one.
- **Latency is load only where the load moves it** (``latency``). Latency alone never cuts;
  timeouts that are not refusals cut where the window's per-second latency moved with its
  concurrency, to the level that line puts under the timeout, and growth stops short of it.
- **Pause below the floor** (``pausing``). Overload at Cmin cannot be cut further: the mapping
  is disabled for a bounded, growing period, then tested with a short pulse at Cmin. A cut
  whose fitting level would leave Cmin hard overloaded pauses at once.

The algorithm is one object holding its tunables (``Tuning``) as ``self``; its phases are
layered classes, each in its own module and built on those before it: ``Probing``,
``Pausing``, ``Sizing``, ``Latency`` and, beside the last two, ``Announced``; ``AdaptiveLimit``
on top. Every time is the
situation's ``now``: pure, no clock reads, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from controller.model import QueueStateName
from controller.policy.adaptive.announced import Announced
from controller.policy.adaptive.latency import Latency
from controller.policy.adaptive.memory import (
    AdaptiveMemory,
    AdaptiveSituation,
    AdaptiveVerdict,
    ceiling_above,
    hold,
    near_timeout,
)
from controller.policy.adaptive.probing import overload_beneath, pulse_stats
from controller.policy.adaptive.probing import refused as calls_refused
from controller.policy.adaptive.sizing import settled_use
from controller.policy.adaptive.tuning import Tuning
from controller.policy.base import LimitAlgorithm, clamp, refused
from controller.policy.evidence import evidence_since, vetted_evidence

__all__ = ["AdaptiveLimit", "AdaptiveMemory", "Tuning"]


@dataclass(frozen=True)
class AdaptiveLimit(Announced, Latency, LimitAlgorithm[AdaptiveMemory]):
    """The adaptive limit with its tunables (``Tuning``).

    It selects its own evidence: a pulse probe is judged on the invocations that ran during it
    (older than the last change), and a paused mapping is decided without telemetry.
    """

    name = "adaptive"
    memory_type = AdaptiveMemory

    def decide(self, situation: AdaptiveSituation) -> AdaptiveVerdict:
        situation = resumed_by_another(situation)
        fit = self.announced_fit(situation)
        if fit is None:
            return self._blind(situation)
        announced = self.announced(situation, fit)
        if announced is not None:
            return announced
        level = clamp(math.floor(fit.invocations), situation.params)
        if situation.memory.announced_level != level:
            situation = replace(situation, memory=replace(situation.memory, announced_level=level))
        return self.within_announced(situation, fit, self._blind(situation))

    def _blind(self, situation: AdaptiveSituation) -> AdaptiveVerdict:
        """The law where nothing is announced: the blind phases."""
        situation = lagging_evidence(situation)
        state, memory, now = situation.state, situation.memory, situation.now
        if memory.paused_until > 0:
            return self.while_paused(situation)
        corrected = self.correction(situation)
        if corrected is not None:
            return corrected
        if memory.probe_until > 0:
            if now >= memory.probe_until:
                return self.end_pulse(situation)
            return hold(state, f"Probing at {state.concurrency}; judging after the pulse.", memory)
        if memory.judge_at > 0 and now >= memory.judge_at:
            return self._judge_probe(situation)
        return self._evaluate(situation)

    def _judge_probe(self, situation: AdaptiveSituation) -> AdaptiveVerdict:
        state, memory, params = situation.state, situation.memory, situation.params
        pulse = pulse_stats(memory, situation.window)
        if self.awaiting_telemetry(situation, pulse):
            # The base level's own evidence may show an overload meanwhile: cut it now, the
            # probe given up, rather than once the pulse's reports have all come in.
            given_up = replace(memory, judge_at=0.0, probe_step=0)
            verdict = self._evaluate(replace(situation, memory=given_up))
            if verdict.target < state.concurrency or verdict.enabled is False:
                return verdict
            reason = f"Waiting for the probe's telemetry ({pulse.requests} calls so far)."
            return hold(state, reason, memory, pulse)
        raised_from = situation.stats if self.slowed_downstream(situation) else None
        if self.passed(pulse, situation.stats, params) and not near_timeout(
            memory, pulse, self.timeout_headroom, raised_from=raised_from
        ):
            return self.commit(situation, pulse)
        failed = self.back_off(situation, pulse)
        # A failed probe may have met a real overload at the base level: judge the base's own
        # evidence now rather than a batch later, or, while none is fresh yet, the pulse's
        # when it shows more pressure than the raise explains.
        judged = replace(situation, memory=failed.memory)
        if situation.refusal is not None and overload_beneath(memory, pulse, params):
            judged = replace(judged, stats=pulse, refusal=None)
        verdict = self._evaluate(judged)
        if verdict.target == state.concurrency and verdict.enabled in (None, state.enabled):
            return failed
        # The probe is over whatever the base's evidence calls for.
        return verdict if verdict.wake_at is not None else replace(verdict, wake_at=0.0)

    def _evaluate(self, situation: AdaptiveSituation) -> AdaptiveVerdict:
        if situation.refusal is not None:
            return refused(situation, situation.refusal)
        return self._judge(situation)

    def _judge(self, situation: AdaptiveSituation) -> AdaptiveVerdict:
        """The queue's own evidence, in order: overload (cut, or pause at Cmin), the band under
        T1, then growth while clean and used."""
        state, stats, params = situation.state, situation.stats, situation.params
        current, pressure = state.concurrency, stats.pressure_rate
        memory = situation.memory
        storm, sizing_pressure = self.latest_pressure(situation)
        # Read only while some call was refused: a clean queue, the usual case, has no surge.
        surge = self.surge_pressure(situation) if 0 < pressure < params.t1 else 0.0
        # A few rejections over the whole evidence with a burst in its newest second, or all
        # in the seconds since a clean history, are the first reports of a storm, not a level
        # just over the capacity.
        beginning = pressure >= self.clean_below and (
            sizing_pressure >= self.storm_factor * params.t1 or surge >= params.t1
        )
        timeout_cut = self.timeout_cut(situation)
        if timeout_cut is not None:
            return timeout_cut
        if max(pressure, storm) >= params.t1 or beginning:
            if current > params.cmin:
                return self.cut(situation, max(storm, sizing_pressure, surge))
            if pressure >= self.pausing_pressure(params):
                return self.pause(situation)
            return hold(
                state,
                f"Overload at Cmin ({params.cmin}): pressure {pressure:.1%} >= T1 "
                f"({params.t1:.1%}); cannot cut further, and not enough to pause.",
                memory,
                stats,
            )
        if memory.judge_at > 0:
            return hold(state, f"Judging a probe; holding at {current}.", memory, stats)
        # Timeouts under T1 cut only as load-driven (above). A level refusing calls under T1
        # holds: grown, it would refuse more; stepped down and probed back, it refused more
        # than it does (docs/measurements.md, "Rules the families do not need (stop 56)").
        clean = self.clean_below if calls_refused(stats) else self.grow_below
        if pressure >= clean:
            near_end = self.step_down_near_end(situation, stats)
            if near_end is not None:
                return near_end
            return hold(
                state,
                f"Within band: pressure {pressure:.1%} < T1 ({params.t1:.1%}) but not under "
                f"{clean * 100:g}%; holding at {current}.",
                memory,
                stats,
            )
        if near_timeout(memory, stats, self.timeout_headroom):
            if self.slowed_downstream(situation):
                # Held, a queue cut to Cmin by a slowdown's timeouts stayed there at the slowed
                # latency (mixed seed 7 draw 16: 250 s, 18,000 messages waiting, 442 calls/s
                # of capacity); pulses, each judged on the margin its base left to the
                # timeout's latency (``near_timeout``'s ``raised_from``), find what fits.
                return self.probe(
                    situation,
                    f"latency {stats.mean_latency_ms:.0f} ms near where calls timed out "
                    f"({memory.timeout_latency_ms:.0f} ms) but the downstream's, not its load's, "
                    f"this far under the {memory.cut_running:.1f} invocations the last cut was "
                    "sized from",
                )
            return hold(
                state,
                f"Latency {stats.mean_latency_ms:.0f} ms, near where calls timed out "
                f"({memory.timeout_latency_ms:.0f} ms): not growing; holding at {current}.",
                memory,
                stats,
            )
        if current >= params.cmax:
            reason = f"Healthy at Cmax ({params.cmax})."
            return hold(state, reason, memory, stats, name=QueueStateName.HEALTHY)
        used = settled_use(situation, self.estimate_span_s)
        if used is not None and used < self.used_share * current:
            return hold(
                state,
                f"Clean but the allowance is not used (about {used:.1f} of {current} in use); "
                f"holding at {current}.",
                memory,
                stats,
            )
        # Growth waits out any Retry-After: the shared guards hold a raise until then.
        if memory.ceiling == 0 or ceiling_above(current) < memory.ceiling:
            return self.grow(situation)
        return self.probe(situation)


def resumed_by_another(situation: AdaptiveSituation) -> AdaptiveSituation:
    """The situation with the law's pause forgotten where the mapping runs though the law did
    not resume it: its own test of a pause runs with a pulse set (``probe_until``), so running
    without one, the mapping was resumed by the group (a member's turn, docs/algorithms.md,
    "Groups") and no pause or test is going on. Remembered, the pause had the law ask every
    batch to end a test that was not running, overruled by the group, and none of its own cuts
    reached the group (``fleet-below-floor`` seed 1: 177 such decisions)."""
    memory = situation.memory
    if memory.paused_until == 0 or memory.probe_until > 0 or not situation.state.enabled:
        return situation
    over = replace(memory, pause_s=0.0, paused_until=0.0, judge_at=0.0)
    return replace(situation, memory=over)


def lagging_evidence(situation: AdaptiveSituation) -> AdaptiveSituation:
    """The guards' evidence, or, when it is refused only because the telemetry lags behind
    the invocations' starts, the window's span up to the newest start reported since the last
    change settled. A delay of 40 s on invocations of 30 s leaves no report in the last
    ``window_s`` of starts, and a delay of 30 s on invocations of 3 s leaves a few, always too
    few to judge: such a queue is never judged (a static cap that times out every call stays
    one; a level 40% refused was held for 160 s)."""
    state, window, params = situation.state, situation.window, situation.params
    if situation.refusal is None:
        return situation
    settled = evidence_since(state, state.last_change_at, params)
    reported = [second for second, _ in window.seconds(settled, situation.now + 1.0)]
    if not reported:
        return situation
    newest = window.newest_event_time(settled, situation.now + 1.0)
    if newest is None or situation.now - newest > params.stale_after_s:
        return situation
    stats, refusal = vetted_evidence(state, window, min(reported[-1] + 1.0, situation.now), params)
    if refusal is not None and situation.stats.newest_event_time is not None:
        return situation
    return replace(situation, stats=stats, refusal=refusal)
