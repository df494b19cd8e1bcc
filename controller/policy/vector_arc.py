"""``vector-arc``: Vector's adaptive request concurrency (ARC), one windowed sample a decision.

Rule (vectordotdev/vector ``src/sinks/util/adaptive_concurrency/controller.rs``,
``manage_limit``): the past round trip is an exponentially weighted mean and variance
(West's recurrence, ``ewma_alpha``) of each interval's mean RTT. Once there is one, each
interval: while the limit is under ``max``, was reached, met no back pressure and its RTT is
at most the past mean: ``limit + 1``; else, above 1, on back pressure (a retriable answer: a
429 or any 5xx, as Vector's HTTP sinks retry them; or a timeout) or an RTT at least
``rtt_deviation_scale`` standard deviations over the past mean:
``max(1, floor(limit * decrease_ratio))``; else hold. The interval's RTT then joins the past
one. Defaults kept: ``decrease_ratio`` 0.9, ``ewma_alpha`` 0.4, ``rtt_deviation_scale`` 2.5,
max 200. docs/algorithms.md has the mapping and where it departs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from controller.policy.base import Situation
from controller.policy.netflix import LimitSample, LimitUpdate, WindowedLimit

DECREASE_RATIO: Final = 0.9
EWMA_ALPHA: Final = 0.4
RTT_DEVIATION_SCALE: Final = 2.5
MAX_LIMIT: Final = 200
# The evidence has the average in use, not the moment a request waited for a permit: a limit
# counts as reached when this share of it is in use.
REACHED_SHARE: Final = 0.9


@dataclass(frozen=True, slots=True)
class ArcMemory:
    """The past round trip: its exponentially weighted mean (ms; 0: none yet) and variance."""

    rtt_mean_ms: float = 0.0
    rtt_variance: float = 0.0


class VectorArc(WindowedLimit[ArcMemory]):
    """AIMD on the round trip: +1 while the limit is reached, fast and clean; x0.9 on back
    pressure or a round trip well over its running average."""

    name = "vector-arc"
    memory_type = ArcMemory

    def update(
        self, situation: Situation[ArcMemory], sample: LimitSample
    ) -> LimitUpdate[ArcMemory]:
        past, limit, rtt = situation.memory, situation.state.concurrency, sample.rtt_ms
        if past.rtt_mean_ms == 0:
            if rtt is None:
                return LimitUpdate(limit, "no rtt yet: hold", past)
            return LimitUpdate(limit, "first rtt: hold", ArcMemory(rtt))
        threshold = math.sqrt(past.rtt_variance) * RTT_DEVIATION_SCALE
        reached = sample.inflight >= REACHED_SHARE * limit
        fast = rtt is not None and rtt <= past.rtt_mean_ms
        # Vector retries (and so backs off on) 429s and every 5xx, not only the 503s the
        # shared sample counts as a drop.
        back_pressure = sample.did_drop or situation.stats.server_errors > 0
        if limit < MAX_LIMIT and reached and not back_pressure and fast:
            new_limit, rule = limit + 1, f"reached, rtt <= past {past.rtt_mean_ms:.0f}ms: +1"
        elif limit > 1 and (back_pressure or (rtt or 0.0) >= past.rtt_mean_ms + threshold):
            new_limit = max(1, math.floor(limit * DECREASE_RATIO))
            why = (
                "back pressure" if back_pressure else f"rtt >= {past.rtt_mean_ms + threshold:.0f}ms"
            )
            rule = f"{why}: x{DECREASE_RATIO:g}"
        else:
            new_limit, rule = limit, "hold"
        return LimitUpdate(new_limit, rule, past if rtt is None else _with_rtt(past, rtt))


def _with_rtt(past: ArcMemory, rtt_ms: float) -> ArcMemory:
    """West's exponentially weighted mean and variance, one point on."""
    difference = rtt_ms - past.rtt_mean_ms
    increment = EWMA_ALPHA * difference
    variance = (1 - EWMA_ALPHA) * (past.rtt_variance + difference * increment)
    return ArcMemory(past.rtt_mean_ms + increment, variance)
