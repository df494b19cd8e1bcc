"""When a wake-up's message is delivered: the one rule the SQS scheduler and its simulated twin
share (``controller.ports.WakeUpScheduler``)."""

from __future__ import annotations

import math

from controller.constants import WAKE_UP_MAX_DELAY_S


def delay_s(wake_at: float, now: float) -> int | None:
    """The whole seconds a wake-up for ``wake_at`` waits from ``now`` (epoch s): never early,
    so the run it causes finds the queue due. ``None`` past ``WAKE_UP_MAX_DELAY_S``: left to the
    scheduled tick."""
    wait = max(0, math.ceil(wake_at - now))
    return None if wait > WAKE_UP_MAX_DELAY_S else wait
