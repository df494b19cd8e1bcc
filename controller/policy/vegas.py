"""``vegas``: Netflix concurrency-limits' ``VegasLimit``, one windowed sample a decision.

Rule (``limit/VegasLimit.java``): the queue the limit builds is
``queue = ceil(limit * (1 - rtt_noload / rtt))``, where ``rtt_noload`` is the least RTT seen
(re-probed, taking the current RTT, every ``jitter * probeMultiplier * limit`` samples, jitter
in [0.5, 1)). A sample that sets a new least RTT, or probes, only records it. Otherwise, on a
drop: ``limit - log10(limit)``; while under half of the limit is in use: hold; with
``queue <= threshold``: ``limit + beta``; ``queue < alpha``: ``limit + log10(limit)``;
``queue > beta``: ``limit - log10(limit)``; else hold. Defaults kept: ``alpha = 3 log10``,
``beta = 6 log10``, ``threshold = log10`` (of the limit, at least 1), ``smoothing`` 1.0,
``probeMultiplier`` 30; ``maxConcurrency`` is the queue's Cmax.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Final

from controller.policy.base import Situation
from controller.policy.netflix import (
    LimitSample,
    LimitUpdate,
    WindowedLimit,
    estimated_limit,
    log10_root,
)
from controller.settings import PolicyParams

SMOOTHING: Final = 1.0
PROBE_MULTIPLIER: Final = 30
ALPHA_FACTOR: Final = 3
BETA_FACTOR: Final = 6


@dataclass(frozen=True, slots=True)
class VegasMemory:
    """The limit as a real number (0: not yet estimated), the no-load RTT (0: none yet), the
    samples since the last probe and the probes taken (which seed the next probe's jitter)."""

    estimated_limit: float = 0.0
    rtt_noload_ms: float = 0.0
    probe_count: int = 0
    probes: int = 0


class Vegas(WindowedLimit[VegasMemory]):
    """Delay-based: grows while the queue it builds is short, shrinks once it is long."""

    name = "vegas"
    memory_type = VegasMemory

    def update(
        self, situation: Situation[VegasMemory], sample: LimitSample
    ) -> LimitUpdate[VegasMemory]:
        estimate = estimated_limit(situation.memory.estimated_limit, situation.state)
        memory = replace(situation.memory, estimated_limit=estimate)
        rtt = sample.rtt_ms
        if rtt is None or rtt <= 0:
            return LimitUpdate(estimate, "no latency reported: hold", memory)
        probe_count = memory.probe_count + 1
        jitter = _probe_jitter(situation.state.queue, memory.probes)
        if jitter * PROBE_MULTIPLIER * estimate <= probe_count:
            memory = replace(memory, rtt_noload_ms=rtt, probe_count=0, probes=memory.probes + 1)
            return LimitUpdate(estimate, "probed no-load rtt", memory)
        memory = replace(memory, probe_count=probe_count)
        if memory.rtt_noload_ms == 0 or rtt < memory.rtt_noload_ms:
            memory = replace(memory, rtt_noload_ms=rtt)
            return LimitUpdate(estimate, "new no-load rtt", memory)
        new_limit, rule = _update(estimate, memory.rtt_noload_ms, sample, situation.params)
        return LimitUpdate(new_limit, rule, replace(memory, estimated_limit=new_limit))


def _update(
    estimate: float, rtt_noload_ms: float, sample: LimitSample, params: PolicyParams
) -> tuple[float, str]:
    """``updateEstimatedLimit``: the new real-valued limit and the rule that gave it."""
    rtt = sample.rtt_ms or rtt_noload_ms
    queue = math.ceil(estimate * (1 - rtt_noload_ms / rtt))
    log = log10_root(int(estimate))
    if sample.did_drop:
        new_limit, rule = estimate - log, f"drop: -{log}"
    elif sample.inflight * 2 < estimate:
        return estimate, "under half in use: hold"
    else:
        alpha, beta, threshold = ALPHA_FACTOR * log, BETA_FACTOR * log, log
        if queue <= threshold:
            new_limit, rule = estimate + beta, f"queue {queue} <= {threshold}: +{beta}"
        elif queue < alpha:
            new_limit, rule = estimate + log, f"queue {queue} < alpha {alpha}: +{log}"
        elif queue > beta:
            new_limit, rule = estimate - log, f"queue {queue} > beta {beta}: -{log}"
        else:
            return estimate, f"queue {queue} within {alpha}..{beta}: hold"
    new_limit = max(1.0, min(float(params.cmax), new_limit))
    return (1 - SMOOTHING) * estimate + SMOOTHING * new_limit, rule


def _probe_jitter(queue: str, probes: int) -> float:
    """The probe interval's jitter in [0.5, 1): drawn per queue and probe, so the same
    evidence always gives the same decision."""
    return random.Random(f"{queue}:{probes}").uniform(0.5, 1.0)
