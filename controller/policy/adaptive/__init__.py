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
- **Grow only when used and clean** (``probing``). Growth needs pressure under ``grow_below``
  and the allowance actually in use, and then keeps up with the poller's ramp (at most
  doubling a step). Near the remembered ceiling growth is by pulse probes, which judge only the
  invocations that ran during the pulse, paid for from a budget of the goodput; clean
  above the level that broke, a ceiling set by latency or timeouts expires and growth returns
  to full speed, and past one set by refused calls growth goes on by pulses.
- **Latency** (``latency``). A rise of the evidence's per-second latency (or a failed pulse's
  calls) over the no-load baseline by ``latency_tolerance`` cuts in proportion, a quarter at
  most, before client timeouts come.
- **Pause below the floor** (``pausing``). Overload at Cmin cannot be cut further: the mapping
  is disabled for a bounded, growing period, then tested with a short pulse at Cmin. A cut
  whose fitting level would leave Cmin hard overloaded pauses at once.

Every time is the caller's ``now``: pure, no clock reads, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from controller.model import QueueState, QueueStateName
from controller.policy.adaptive import latency, pausing, probing, sizing
from controller.policy.adaptive.memory import AdaptiveMemory, AdaptiveVerdict, ceiling_above, hold
from controller.policy.adaptive.tuning import Tuning
from controller.policy.base import LimitAlgorithm, refused
from controller.policy.evidence import Evidence
from controller.settings import PolicyParams
from controller.window import QueueWindow, WindowStats

__all__ = ["AdaptiveLimit", "AdaptiveMemory", "Tuning"]


@dataclass(frozen=True)
class AdaptiveLimit(Tuning, LimitAlgorithm[AdaptiveMemory]):
    """The adaptive limit with its tunables (``Tuning``).

    It selects its own evidence: a pulse probe is judged on the invocations that ran during it
    (older than the last change), and a paused mapping is decided without telemetry.
    """

    name = "adaptive"
    memory_type = AdaptiveMemory

    def decide(
        self,
        state: QueueState,
        memory: AdaptiveMemory,
        evidence: Evidence,
        window: QueueWindow,
        now: float,
        params: PolicyParams,
    ) -> AdaptiveVerdict:
        if memory.paused_until > 0:
            return pausing.while_paused(self, state, memory, window, now, params)
        corrected = sizing.correction(self, state, memory, window, now, params)
        if corrected is not None:
            return corrected
        if memory.probe_until > 0:
            if now >= memory.probe_until:
                return probing.end_pulse(self, state, memory, now)
            return hold(state, f"Probing at {state.concurrency}; judging after the pulse.", memory)
        if memory.judge_at > 0 and now >= memory.judge_at:
            return self._judge_probe(state, memory, evidence, window, now, params)
        return self._evaluate(state, memory, evidence, window, now, params)

    def _judge_probe(
        self,
        state: QueueState,
        memory: AdaptiveMemory,
        evidence: Evidence,
        window: QueueWindow,
        now: float,
        params: PolicyParams,
    ) -> AdaptiveVerdict:
        pulse = probing.pulse_stats(memory, window)
        if probing.awaiting_telemetry(self, memory, pulse, now, params):
            reason = f"Waiting for the probe's telemetry ({pulse.requests} calls so far)."
            return hold(state, reason, memory, pulse)
        running = probing.running_stats(memory, pulse, window)
        if probing.passed(self, pulse, running, evidence.stats, params) and not latency.too_slow(
            self, memory, pulse
        ):
            return probing.commit(self, state, memory, pulse, now, params)
        failed = probing.back_off(self, state, memory, pulse, now, params)
        # A failed probe may have met a real overload at the base level: judge the base's own
        # evidence now rather than a batch later, or, while none is fresh yet, the pulse's
        # when it shows more pressure than the raise explains.
        if evidence.refusal is not None and probing.overload_beneath(memory, pulse, params):
            evidence = Evidence(pulse)
        verdict = self._evaluate(state, failed.memory, evidence, window, now, params)
        if verdict.target == state.concurrency and verdict.enabled in (None, state.enabled):
            return latency.slow_pulse(self, state, failed, pulse, now, params)
        # The probe is over whatever the base's evidence calls for.
        return verdict if verdict.wake_at is not None else replace(verdict, wake_at=0.0)

    def _evaluate(
        self,
        state: QueueState,
        memory: AdaptiveMemory,
        evidence: Evidence,
        window: QueueWindow,
        now: float,
        params: PolicyParams,
    ) -> AdaptiveVerdict:
        if evidence.refusal is not None:
            return refused(state, memory, evidence.refusal)
        return self._judge(state, memory, evidence.stats, window, now, params)

    def _judge(
        self,
        state: QueueState,
        memory: AdaptiveMemory,
        stats: WindowStats,
        window: QueueWindow,
        now: float,
        params: PolicyParams,
    ) -> AdaptiveVerdict:
        """The queue's own evidence, in order: overload (cut, or pause at Cmin), a level just
        over the capacity (trim), the band between, then growth while clean and used."""
        current, pressure = state.concurrency, stats.pressure_rate
        latencies = latency.second_latencies(stats, window, params)
        memory = latency.with_floor(self, state, memory, latencies, now, params)
        latency_rise = latency.rise(self, memory, latencies)
        storm, sizing_pressure = sizing.latest_pressure(self, stats, window, params)
        # Read only while some call was refused: a clean queue, the usual case, has no surge.
        surge = (
            sizing.surge_pressure(self, stats, window, params) if 0 < pressure < params.t1 else 0.0
        )
        # A few rejections over the whole evidence with a burst in its newest second, or all in
        # the seconds since a clean history, are the first reports of a storm, not a level just
        # over the capacity.
        beginning = pressure >= self.trim_above and (
            sizing_pressure >= self.storm_factor * params.t1 or surge >= params.t1
        )
        if max(pressure, storm) >= params.t1 or beginning:
            if current > params.cmin:
                latest = max(storm, sizing_pressure, surge)
                return sizing.cut(self, state, memory, stats, now, params, window, latest)
            if pressure >= pausing.pause_above(self, params):
                return pausing.pause(self, state, memory, stats, now)
            return hold(
                state,
                f"Overload at Cmin ({params.cmin}): pressure {pressure:.1%} >= T1 "
                f"({params.t1:.1%}); cannot cut further, and not enough to pause.",
                memory,
                stats,
            )
        if latency_rise >= self.cutting_rise and current > params.cmin:
            running = sizing.in_use(self, state, stats, window)
            return latency.cut(self, state, memory, stats, now, params, running, latency_rise)
        if memory.judge_at > 0:
            return hold(state, f"Judging a probe; holding at {current}.", memory, stats)
        if (
            pressure >= self.trim_above
            and stats.requests >= self.trim_evidence
            and current > params.cmin
        ):
            return sizing.trim(self, state, memory, stats, window, now, params, sizing_pressure)
        if pressure >= self.grow_below:
            return hold(
                state,
                f"Within band: pressure {pressure:.1%} < T1 ({params.t1:.1%}) but not under "
                f"{self.grow_below:.1%}; holding at {current}.",
                memory,
                stats,
            )
        if latency_rise >= self.holding_rise:
            return hold(
                state,
                f"Latency {latency_rise:.2f}x the no-load latency: not growing; holding at "
                f"{current}.",
                memory,
                stats,
            )
        good = replace(memory, good_level=current)
        if current >= params.cmax:
            reason = f"Healthy at Cmax ({params.cmax})."
            return hold(state, reason, good, stats, name=QueueStateName.HEALTHY)
        used = sizing.busy_concurrency(stats, self.estimate_span_s)
        if used is not None and used < self.used_share * current:
            return hold(
                state,
                f"Clean but the allowance is not used (about {used:.1f} of {current} in use); "
                f"holding at {current}.",
                good,
                stats,
            )
        # Growth waits out any Retry-After: the shared guards hold a raise until then.
        if memory.ceiling == 0 or ceiling_above(current) < memory.ceiling:
            return probing.grow(self, state, memory, stats, now, params)
        return probing.probe(self, state, memory, stats, now, params)
