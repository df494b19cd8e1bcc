"""How long a downstream takes to answer one call: the latency model shared by the simulator's
downstream (load/sim/services.py) and the demo's real HTTP one (load/downstream.py).

Pure functions of their arguments (no clock, no randomness of their own), so both downstreams
answer alike given the same calls in progress and the same random draws.
"""

from __future__ import annotations

# The queueing model's latency is at most this multiple of the no-load latency (the
# utilisation it stands for is capped at 0.99), so that a collapse stays finite.
MAX_QUEUEING_FACTOR = 100.0


def queueing_latency(no_load_s: float, in_progress: int, capacity_rps: float) -> float:
    """The latency of a call that waits behind ``in_progress`` calls, served at capacity.

    ``no_load + in_progress / capacity``: with N callers in a closed loop this settles at
    ``no_load / (1 - utilisation)`` (utilisation = throughput / capacity), the queueing
    curve; computed from the work in progress rather than from a measured rate, it has no
    measurement lag to oscillate on.
    """
    ceiling = no_load_s * MAX_QUEUEING_FACTOR
    if capacity_rps <= 0:
        return ceiling
    return min(ceiling, no_load_s + in_progress / capacity_rps)


def pareto_factor(shape: float, uniform: float) -> float:
    """A heavy-tailed (Pareto, ``shape`` > 1) multiplier of the latency with a mean of 1, so
    that ``latency_ms`` stays the mean latency; ``uniform`` is a draw in [0, 1)."""
    return (shape - 1.0) / shape * (1.0 - uniform) ** (-1.0 / shape)
