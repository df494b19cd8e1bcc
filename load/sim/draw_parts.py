"""The parts every family of scenarios draws (load/sim/families.py): the run, the worker and
its queue, and the work a queue is given. Ranges documented in docs/simulator.md ("Families")."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

from load.oracle import pace
from load.sim.scenario import DEFAULT_INVOCATION_OVERHEAD_MS

Document = dict[str, Any]
Steps = list[list[float]]

DURATION_S = 1200
# Capacity shapes, arrivals and pauses happen in the first half; the rest is for draining.
EVENTS_END_S = DURATION_S / 2
# Messages are capped so that a family of 200 draws runs in minutes; backlogs are scaled down
# (with the arrivals) until the oracle drains them within the events' half of the run.
MAX_MESSAGES = 40_000
DRAIN_TARGET_S = (60.0, 300.0)

# The worker and its queue, in every family.
TELEMETRY_DELAY_S = (1.0, 40.0)
BATCH_SIZE = (1, 10)
VISIBILITY_TIMEOUT_S = (10, 120)
MAX_RECEIVE_COUNT = (3, 10)
MAX_CONCURRENCY = (10, 100)
MIN_CONCURRENCY = 2
LATENCY_MS = (20.0, 800.0)


def log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def worker(
    rng: random.Random, name: str, downstream: str, caps: tuple[int, int] = MAX_CONCURRENCY
) -> Document:
    """A queue's settings (no backlog or arrivals yet), its cap drawn from ``caps``."""
    return {
        "name": name,
        "downstream": downstream,
        "backlog": 0,
        "arrivals_rps": [[0, 0]],
        "batch_size": rng.randint(*BATCH_SIZE),
        "visibility_timeout_s": rng.randint(*VISIBILITY_TIMEOUT_S),
        "max_receive_count": rng.randint(*MAX_RECEIVE_COUNT),
        "max_concurrency": rng.randint(*caps),
        "min_concurrency": MIN_CONCURRENCY,
    }


def calls_sent(queue: Document, latency_ms: float, concurrency: int | None = None) -> float:
    """The calls a second ``concurrency`` (default: the cap's) invocations send."""
    level = queue["max_concurrency"] if concurrency is None else concurrency
    per_invocation = pace(queue["batch_size"], latency_ms, DEFAULT_INVOCATION_OVERHEAD_MS)
    return level * per_invocation


def give_work(
    rng: random.Random, queue: Document, rate: float, queues: int = 1, most: int = MAX_MESSAGES
) -> str:
    """Gives ``queue`` a backlog and arrivals worth a drain of ``DRAIN_TARGET_S`` at ``rate``
    calls a second: a backlog, a steady stream, or bursts; at most its share of ``most``
    messages among ``queues``. Says which."""
    work = rate * rng.uniform(*DRAIN_TARGET_S)
    shape = rng.choice(("backlog", "stream", "bursts"))
    end = rng.uniform(60, EVENTS_END_S)
    if shape == "backlog":
        arrivals: Steps = [[0, 0]]
        backlog = work
    elif shape == "stream":
        stream = rng.uniform(0.1, 0.8) * rate
        arrivals = [[0, round(stream, 2)], [int(end), 0]]
        backlog = max(0.0, work - stream * int(end))
    else:
        arrivals, t = [[0, 0]], rng.uniform(0, 60)
        while t < end - 10:
            length = rng.uniform(5, 60)
            burst_rate = round(rng.uniform(0.5, 3) * rate, 2)
            arrivals += [[int(t), burst_rate], [int(min(t + length, EVENTS_END_S)), 0]]
            t += length + rng.uniform(10, 120)
        arrivals = as_schedule(arrivals)
        backlog = rng.uniform(0, 0.5) * work
    total = backlog + sum(
        step_rate * (following[0] - start)
        for (start, step_rate), following in itertools.pairwise(arrivals)
    )
    scale = min(1.0, most / queues / total) if total > 0 else 1.0
    queue["backlog"] = max(1, int(backlog * scale))
    queue["arrivals_rps"] = [[t, round(step_rate * scale, 2)] for t, step_rate in arrivals]
    return shape


def as_schedule(steps: Steps) -> Steps:
    """A schedule from ``[t, value]`` pairs: integral, increasing times (a later pair at the
    same second replaces an earlier one), starting at 0."""
    merged: dict[int, float] = {0: steps[0][1]}
    for start, value in steps:
        merged[int(start)] = value
    return [[t, merged[t]] for t in sorted(merged)]
