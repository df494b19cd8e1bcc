"""``gradient2``: Netflix concurrency-limits' ``Gradient2Limit``, one windowed sample a decision.

Rule (``limit/Gradient2Limit.java``): a short RTT (the sample's) against a long one (an
exponential average over ``longWindow`` samples after a plain average over the first 10,
cut by 10% whenever it exceeds twice the short one, so it recovers from a long overload).
While under half of the limit is in use the limit holds; else
``gradient = clamp(long / short, 0.5, 1)``, ``new = limit * gradient + queueSize`` and the
limit moves a ``smoothing`` share of the way there. Defaults kept: ``smoothing`` 0.2,
``queueSize`` 4, ``longWindow`` 600; ``minLimit`` and ``maxConcurrency`` (20, 200) are the
queue's Cmin and Cmax.

Gradient2 does not read drops: a downstream answering 429 as fast as 200 leaves its gradient
at 1, and it would keep growing. The one departure, for the contract every algorithm keeps
(docs/algorithms.md): on evidence whose pressure is at or above T1, a raise becomes a hold.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from controller.policy.base import Situation
from controller.policy.netflix import LimitSample, LimitUpdate, WindowedLimit, estimated_limit

SMOOTHING: Final = 0.2
QUEUE_SIZE: Final = 4
LONG_WINDOW: Final = 600
WARMUP_WINDOW: Final = 10
# The long RTT is cut by this factor when it exceeds the short one by DRIFT_RATIO.
LONG_RTT_DECAY: Final = 0.9
DRIFT_RATIO: Final = 2.0


@dataclass(frozen=True, slots=True)
class Gradient2Memory:
    """The limit as a real number (0: not yet estimated) and the long RTT's exponential
    average: its value, and the samples and their sum while it warms up."""

    estimated_limit: float = 0.0
    long_rtt_ms: float = 0.0
    long_count: int = 0
    long_sum_ms: float = 0.0


class Gradient2(WindowedLimit[Gradient2Memory]):
    """Latency-gradient based: shrinks as the short RTT outgrows the long one."""

    name = "gradient2"
    memory_type = Gradient2Memory

    def update(
        self, situation: Situation[Gradient2Memory], sample: LimitSample
    ) -> LimitUpdate[Gradient2Memory]:
        params, pressure = situation.params, situation.stats.pressure_rate
        estimate = estimated_limit(situation.memory.estimated_limit, situation.state)
        memory = replace(situation.memory, estimated_limit=estimate)
        short = sample.rtt_ms
        if short is None or short <= 0:
            return LimitUpdate(estimate, "no latency reported: hold", memory)
        memory = _with_long_rtt(memory, short)
        long = memory.long_rtt_ms
        if long / short > DRIFT_RATIO:
            memory = replace(memory, long_rtt_ms=long * LONG_RTT_DECAY)
        if sample.inflight < estimate / 2:
            return LimitUpdate(estimate, "under half in use: hold", memory)
        gradient = max(0.5, min(1.0, long / short))
        target = estimate * gradient + QUEUE_SIZE
        new_limit = estimate * (1 - SMOOTHING) + target * SMOOTHING
        new_limit = max(float(params.cmin), min(float(params.cmax), new_limit))
        rule = f"gradient {gradient:.2f} (long rtt {long:.0f}ms)"
        if int(new_limit) > situation.state.concurrency and pressure >= params.t1:
            new_limit = estimate
            rule = f"{rule}; pressure {pressure:.1%} >= T1: hold"
        return LimitUpdate(new_limit, rule, replace(memory, estimated_limit=new_limit))


def _with_long_rtt(memory: Gradient2Memory, rtt_ms: float) -> Gradient2Memory:
    """``ExpAvgMeasurement.add``: a plain average over the first samples, then exponential."""
    if memory.long_count < WARMUP_WINDOW:
        count, total = memory.long_count + 1, memory.long_sum_ms + rtt_ms
        return replace(memory, long_rtt_ms=total / count, long_count=count, long_sum_ms=total)
    factor = 2.0 / (LONG_WINDOW + 1)
    return replace(memory, long_rtt_ms=memory.long_rtt_ms * (1 - factor) + rtt_ms * factor)
