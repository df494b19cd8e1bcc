"""``envoy-gradient``: Envoy's adaptive concurrency gradient controller, one windowed sample a
decision.

Rule (envoyproxy/envoy ``source/extensions/filters/http/adaptive_concurrency/controller/
gradient_controller.cc``, ``calculateNewLimit``): ``gradient = clamp((minRTT + buffer) /
sampleRTT, 0.5, 2)`` with ``buffer`` a share of minRTT; ``limit = limit * gradient`` and
the new limit is ``limit + sqrt(limit)`` (the burst headroom), rounded down. The minRTT is
measured first and again every ``interval`` (plus a jitter of up to ``jitter`` of it): the
limit is set to the probe concurrency until ``request_count`` calls have reported, their RTT
is the minRTT, and the limit goes back to where it was. Defaults kept: ``buffer`` 25%,
``interval`` 60 s, ``jitter`` 15%, ``min_concurrency`` 3, ``request_count`` 50;
``max_concurrency_limit`` is the queue's Cmax. docs/algorithms.md has where it departs.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Final

from controller.policy.base import Situation
from controller.policy.netflix import LimitSample, LimitUpdate, WindowedLimit

MIN_RTT_BUFFER: Final = 0.25
MIN_RTT_INTERVAL_S: Final = 60.0
MIN_RTT_JITTER: Final = 0.15
PROBE_CONCURRENCY: Final = 3
MIN_RTT_REQUESTS: Final = 50


@dataclass(frozen=True, slots=True)
class EnvoyGradientMemory:
    """The minRTT (ms; 0: not measured yet), the limit to go back to once it is measured (0:
    not measuring), when the next measurement starts, and the measurements taken (which seed
    the next one's jitter)."""

    min_rtt_ms: float = 0.0
    deferred_limit: int = 0
    next_measure_at: float = 0.0
    measurements: int = 0


class EnvoyGradient(WindowedLimit[EnvoyGradientMemory]):
    """Latency-gradient based: scales the limit by how far the round trip sits over the
    measured minRTT, with a square-root headroom."""

    name = "envoy-gradient"
    memory_type = EnvoyGradientMemory

    def update(
        self, situation: Situation[EnvoyGradientMemory], sample: LimitSample
    ) -> LimitUpdate[EnvoyGradientMemory]:
        memory, limit, rtt = situation.memory, situation.state.concurrency, sample.rtt_ms
        now, queue = situation.now, situation.state.queue
        if rtt is None or rtt <= 0:
            # No round trip to measure or judge: no measurement starts, one under way waits.
            return LimitUpdate(limit, "no latency reported: hold", memory)
        if memory.deferred_limit > 0:
            calls = situation.stats.requests
            if calls < MIN_RTT_REQUESTS:
                return LimitUpdate(limit, f"measuring minRTT: {calls} calls so far", memory)
            measured = memory.measurements + 1
            wait = MIN_RTT_INTERVAL_S * (1 + _jitter(queue, measured))
            remembered = EnvoyGradientMemory(rtt, 0, now + wait, measured)
            rule = f"minRTT {rtt:.0f}ms measured: back to {memory.deferred_limit}"
            return _unless_pressed(situation, memory.deferred_limit, rule, remembered)
        if memory.min_rtt_ms == 0 or now >= memory.next_measure_at:
            measuring = replace(memory, deferred_limit=limit)
            return LimitUpdate(PROBE_CONCURRENCY, "measuring minRTT", measuring)
        buffered = memory.min_rtt_ms * (1 + MIN_RTT_BUFFER)
        gradient = max(0.5, min(2.0, buffered / rtt))
        scaled = limit * gradient
        new_limit = max(PROBE_CONCURRENCY, math.floor(scaled + math.sqrt(scaled)))
        rule = f"gradient {gradient:.2f} (minRTT {memory.min_rtt_ms:.0f}ms)"
        return _unless_pressed(situation, new_limit, rule, memory)


def _unless_pressed(
    situation: Situation[EnvoyGradientMemory],
    new_limit: int,
    rule: str,
    memory: EnvoyGradientMemory,
) -> LimitUpdate[EnvoyGradientMemory]:
    """The update to ``new_limit``, but never a raise on evidence whose pressure is at or above
    T1: the controller does not read drops (the one departure, as gradient2's)."""
    current, pressure = situation.state.concurrency, situation.stats.pressure_rate
    if new_limit > current and pressure >= situation.params.t1:
        return LimitUpdate(current, f"{rule}; pressure {pressure:.1%} >= T1: hold", memory)
    return LimitUpdate(new_limit, rule, memory)


def _jitter(queue: str, measurements: int) -> float:
    """The share of the interval added before the next measurement, in [0, ``MIN_RTT_JITTER``):
    drawn per queue and measurement, so the same evidence always gives the same decision."""
    return random.Random(f"{queue}:{measurements}").uniform(0.0, MIN_RTT_JITTER)
