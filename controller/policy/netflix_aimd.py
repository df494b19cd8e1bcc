"""``netflix-aimd``: Netflix concurrency-limits' ``AIMDLimit``, one windowed sample a decision.

Rule (``limit/AIMDLimit.java``): on a drop, or a round trip longer than ``timeout``, the limit
becomes ``max(1, min(limit - 1, floor(limit * backoffRatio)))``; else, when at least half of
it is in use (``inflight * 2 >= limit``), ``limit + 1``; else it holds. Defaults kept:
``backoffRatio`` 0.9, ``timeout`` 5 s. Its only state is the limit: the mapping's concurrency.
"""

from __future__ import annotations

import math
from typing import Final

from controller.policy.base import NoMemory, Situation
from controller.policy.netflix import LimitSample, LimitUpdate, WindowedLimit

BACKOFF_RATIO: Final = 0.9
TIMEOUT_MS: Final = 5000.0


class NetflixAimd(WindowedLimit[NoMemory]):
    """Loss-based: a multiplicative cut on any drop, +1 while the limit is half used."""

    name = "netflix-aimd"

    def update(self, situation: Situation[NoMemory], sample: LimitSample) -> LimitUpdate[NoMemory]:
        limit = situation.state.concurrency
        too_slow = sample.rtt_ms is not None and sample.rtt_ms > TIMEOUT_MS
        if sample.did_drop or too_slow:
            new_limit = max(1, min(limit - 1, math.floor(limit * BACKOFF_RATIO)))
            rule = f"backoff {BACKOFF_RATIO:g}"
        elif sample.inflight * 2 >= limit:
            new_limit, rule = limit + 1, "half in use: +1"
        else:
            new_limit, rule = limit, "under half in use: hold"
        return LimitUpdate(new_limit, rule, situation.memory)
