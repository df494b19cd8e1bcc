"""Families of scenarios: random draws, so that a law is judged on downstreams nobody picked.

A draw is a function of (family, seed, draw) alone: the same three give the same scenario, on
any machine. Seeds 1-1000 are the tuning range, 1001 on the reporting range
(``REPORTING_SEEDS``): a law tuned on the first is judged on the second. Every draw is an
ordinary scenario document (the format of ``load/scenarios``), so ``--emit`` can write it and
``--scenario`` run it alone. The ranges below are documented in docs/simulator.md ("Families").
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable
from typing import Any

from load.announce import HeaderStyle
from load.oracle import pace, pooled_drain_time
from load.sim.scenario import DEFAULT_INVOCATION_OVERHEAD_MS, Scenario, parse_scenario

Document = dict[str, Any]
Steps = list[list[float]]

FAMILIES = ("healthy", "throttling", "latency", "shared", "mixed", "throttling-announced")
# Announced variants: each draw is the named family's same draw, its downstreams announcing
# their quota in a header style drawn per draw. Stripe's style is left out: it announces no
# quota, and the simulated limit is a rate, so its draws would be the blind family's.
ANNOUNCED_FAMILIES = {"throttling-announced": "throttling"}
QUOTA_STYLES = tuple(style for style in HeaderStyle if style is not HeaderStyle.STRIPE)
# Seeds below this one are for tuning; reports use it and those above.
REPORTING_SEEDS = 1001
MAX_DRAWS = 1000

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

# healthy: capacity this many times what the cap sends at the no-load latency.
HEADROOM = (3.0, 20.0)
HEALTHY_LATENCIES = ("constant", "tail", "pauses", "brownout", "queueing")
TAIL_SHAPE = (1.1, 3.0)
PAUSE_EVERY_S = (20, 120)
PAUSE_FOR_S = (1, 8)
BROWNOUT_FACTOR = (2.0, 5.0)
BROWNOUT_FOR_S = (60, 300)
# A healthy worker's client timeout: far above any latency the family draws, pauses included.
HEALTHY_TIMEOUT_MS = (10_000, 30_000)

# throttling, shared, mixed: the first capacity over what the cap sends, and the shapes.
CAPACITY_SHARE = (0.2, 1.5)
CAPACITY_SHAPES = ("steady", "drop", "cliff", "staircase", "other-level", "below-floor", "flash")
NOISE_5XX = (0.001, 0.05)

# latency: downstreams that never answer 429.
LATENCY_QUEUES = (1, 4)
LATENCY_NO_LOAD_MS = (5.0, 200.0)
LATENCY_TIMEOUT_MS = (300, 5000)
# The callers at which the latency reaches the shortest client timeout, over the caps' total
# (below 1, the static caps time out).
TIMEOUT_AT_CALLERS = (0.3, 3.0)
DEGRADE_FACTOR = (1.5, 4.0)

SHARED_QUEUES = (2, 5)
# mixed: the client timeout over the no-load latency.
MIXED_TIMEOUT_FACTOR = (2.0, 8.0)


def draw_name(family: str, seed: int, draw: int) -> str:
    """A draw's scenario name, also its file name under ``--emit``."""
    return f"{family}-{seed}-{draw}"


def draw_scenario(family: str, seed: int, draw: int) -> Scenario:
    """The ``draw``-th scenario of ``family`` under ``seed``."""
    document = draw_document(family, seed, draw)
    return parse_scenario(json.dumps(document), source=f"{document['name']}.json")


def draw_document(family: str, seed: int, draw: int) -> Document:
    """The ``draw``-th scenario of ``family`` under ``seed``, as a scenario file's JSON."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; families: {', '.join(FAMILIES)}")
    if family in ANNOUNCED_FAMILIES:
        return _announced(family, draw_document(ANNOUNCED_FAMILIES[family], seed, draw), seed, draw)
    rng = random.Random(f"family:{family}:{seed}:{draw}")
    downstreams, queues, description = _BUILDERS[family](rng)
    document: Document = {
        "name": draw_name(family, seed, draw),
        "description": description,
        "duration_s": DURATION_S,
        "seed": rng.randrange(1, 2**31),
        "telemetry_delay_s": sorted(round(rng.uniform(*TELEMETRY_DELAY_S), 1) for _ in range(2)),
        "downstreams": downstreams,
        "queues": queues,
    }
    return _drainable(document)


def _announced(family: str, blind: Document, seed: int, draw: int) -> Document:
    """``blind``, a draw of the family ``family`` varies, with its downstreams announcing."""
    style = random.Random(f"family:{family}:{seed}:{draw}").choice(QUOTA_STYLES)
    for downstream in blind["downstreams"]:
        downstream["announce"] = style.value
    blind["name"] = draw_name(family, seed, draw)
    blind["description"] = f"{blind['description']}, announced ({style})"
    return blind


def _drainable(document: Document) -> Document:
    """The document with its queues' messages scaled down until the oracle drains each
    downstream's within the events' half of the run (a draw is a test, not a wait)."""
    for _ in range(12):
        scenario = parse_scenario(json.dumps(document), source=f"{document['name']}.json")
        late = any(
            (drain := pooled_drain_time(spec.capacity_rps, queues, scenario.duration_s)) is None
            or drain > EVENTS_END_S
            for spec in scenario.downstreams
            if (queues := [q for q in scenario.queues if q.downstream == spec.name])
        )
        if not late:
            return document
        for queue in document["queues"]:
            queue["backlog"] = max(1, queue["backlog"] // 2)
            queue["arrivals_rps"] = [[t, round(rate / 2, 2)] for t, rate in queue["arrivals_rps"]]
    return document


# -- the parts every family draws ---------------------------------------------------------------


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _worker(rng: random.Random, name: str, downstream: str) -> Document:
    """A queue's settings (no backlog or arrivals yet)."""
    return {
        "name": name,
        "downstream": downstream,
        "backlog": 0,
        "arrivals_rps": [[0, 0]],
        "batch_size": rng.randint(*BATCH_SIZE),
        "visibility_timeout_s": rng.randint(*VISIBILITY_TIMEOUT_S),
        "max_receive_count": rng.randint(*MAX_RECEIVE_COUNT),
        "max_concurrency": rng.randint(*MAX_CONCURRENCY),
        "min_concurrency": MIN_CONCURRENCY,
    }


def _sends(queue: Document, latency_ms: float, concurrency: int | None = None) -> float:
    """The calls a second ``concurrency`` (default: the cap's) invocations send."""
    level = queue["max_concurrency"] if concurrency is None else concurrency
    per_invocation = pace(queue["batch_size"], latency_ms, DEFAULT_INVOCATION_OVERHEAD_MS)
    return level * per_invocation


def _load(rng: random.Random, queue: Document, rate: float, queues: int = 1) -> str:
    """Gives ``queue`` a backlog and arrivals worth a drain of ``DRAIN_TARGET_S`` at ``rate``
    calls a second: a backlog, a steady stream, or bursts; at most its share of
    ``MAX_MESSAGES`` among ``queues``. Says which."""
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
        arrivals = _steps(arrivals)
        backlog = rng.uniform(0, 0.5) * work
    total = backlog + sum(
        step_rate * (following[0] - start)
        for (start, step_rate), following in itertools.pairwise(arrivals)
    )
    scale = min(1.0, MAX_MESSAGES / queues / total) if total > 0 else 1.0
    queue["backlog"] = max(1, int(backlog * scale))
    queue["arrivals_rps"] = [[t, round(step_rate * scale, 2)] for t, step_rate in arrivals]
    return shape


def _steps(steps: Steps) -> Steps:
    """A schedule from ``[t, value]`` pairs: integral, increasing times (a later pair at the
    same second replaces an earlier one), starting at 0."""
    merged: dict[int, float] = {0: steps[0][1]}
    for start, value in steps:
        merged[int(start)] = value
    return [[t, merged[t]] for t in sorted(merged)]


def _capacity(rng: random.Random, first: float, floor: float, shape: str) -> Steps:
    """A 429 API's capacity schedule of ``shape`` from ``first`` calls a second; ``floor`` is
    what Cmin invocations send (``below-floor`` goes under it)."""
    t1 = rng.uniform(30, 240)
    t2 = t1 + rng.uniform(60, 360)
    steps: Steps = [[0, first]]
    if shape == "drop":
        steps += [[t1, first * rng.uniform(0.1, 0.7)], [t2, first]]
    elif shape == "cliff":
        steps += [[t1, first * rng.uniform(0.02, 0.2)]]
    elif shape == "staircase":
        count, low = rng.randint(2, 5), first * rng.uniform(0.05, 0.4)
        levels = [first - (first - low) * (k + 1) / count for k in range(count)]
        t = t1
        for level in levels + levels[-2::-1] + [first]:
            steps.append([t, level])
            t += rng.uniform(20, 90)
    elif shape == "other-level":
        steps += [[t1, first * rng.uniform(0.1, 0.7)], [t2, first * rng.uniform(0.3, 2.0)]]
    elif shape == "below-floor":
        steps += [[t1, floor * rng.uniform(0.1, 0.9)], [t2, first]]
    return _steps([[t, round(max(1.0, rate), 1)] for t, rate in steps if t < EVENTS_END_S])


def _flash(shape: str) -> float:
    """A flash crowd: four times the work at a steady capacity."""
    return 4.0 if shape == "flash" else 1.0


def _noise(rng: random.Random) -> float:
    return round(rng.uniform(*NOISE_5XX), 4) if rng.random() < 0.5 else 0.0


# -- the families ------------------------------------------------------------------------------

Built = tuple[list[Document], list[Document], str]


def _healthy(rng: random.Random) -> Built:
    queue = _worker(rng, "work", "api")
    latency = round(_log_uniform(rng, *LATENCY_MS), 1)
    sends = _sends(queue, latency)
    capacity = round(sends * rng.uniform(*HEADROOM), 1)
    kind = rng.choice(HEALTHY_LATENCIES)
    downstream: Document = {"name": "api", "capacity_rps": [[0, capacity]], "latency_ms": latency}
    if kind == "tail":
        downstream["latency_tail"] = round(rng.uniform(*TAIL_SHAPE), 2)
    elif kind == "pauses":
        downstream["latency_ms"] = _pauses(rng, latency)
    elif kind == "brownout":
        start = rng.uniform(30, 300)
        factor = rng.uniform(*BROWNOUT_FACTOR)
        downstream["latency_ms"] = _steps(
            [
                [0, latency],
                [start, round(latency * factor, 1)],
                [start + rng.randint(*BROWNOUT_FOR_S), latency],
            ]
        )
    elif kind == "queueing":
        downstream["latency_model"] = "queueing"
    queue["timeout_ms"] = rng.randint(*HEALTHY_TIMEOUT_MS)
    load = _load(rng, queue, sends)
    return [downstream], [queue], f"healthy: {kind} latency ({latency} ms), {load}"


def _pauses(rng: random.Random, latency: float) -> Steps:
    """A latency schedule that stops answering for a few seconds every so often: a call made in
    a paused second is answered when the pause ends (to the second)."""
    every, length = rng.randint(*PAUSE_EVERY_S), rng.randint(*PAUSE_FOR_S)
    steps: Steps = [[0, latency]]
    start = rng.randint(1, every)
    while start + length < EVENTS_END_S:
        for second in range(length):
            steps.append([start + second, round(latency + (length - second) * 1000.0, 1)])
        steps.append([start + length, latency])
        start += every
    return _steps(steps)


def _throttling(rng: random.Random) -> Built:
    queue = _worker(rng, "work", "api")
    latency = round(_log_uniform(rng, *LATENCY_MS), 1)
    sends = _sends(queue, latency)
    shape = rng.choice(CAPACITY_SHAPES)
    first = sends * rng.uniform(*CAPACITY_SHARE)
    capacity = _capacity(rng, first, _sends(queue, latency, MIN_CONCURRENCY), shape)
    downstream = {
        "name": "api",
        "capacity_rps": capacity,
        "latency_ms": latency,
        "noise_5xx_rate": _noise(rng),
    }
    load = _load(rng, queue, _flash(shape) * first)
    return [downstream], [queue], f"throttling: {shape} capacity, {latency} ms, {load}"


def _latency(rng: random.Random) -> Built:
    count = rng.randint(*LATENCY_QUEUES)
    no_load = round(_log_uniform(rng, *LATENCY_NO_LOAD_MS), 1)
    queues = [_worker(rng, f"work-{index + 1}", "db") for index in range(count)]
    for queue in queues:
        queue["timeout_ms"] = rng.randint(*LATENCY_TIMEOUT_MS)
    # Each caller has one call in flight, and a call waits behind the others (``no_load +
    # in_progress / service``): the latency reaches the shortest timeout at about
    # ``service x timeout`` callers, drawn as a multiple of the caps' total.
    callers = sum(queue["max_concurrency"] for queue in queues)
    shortest_s = min(queue["timeout_ms"] for queue in queues) / 1000.0
    service = round(max(1.0, rng.uniform(*TIMEOUT_AT_CALLERS) * callers / shortest_s), 1)
    downstream: Document = {
        "name": "db",
        "capacity_rps": [[0, service]],
        "latency_ms": no_load,
        "latency_model": "queueing",
        "answers_429": False,
    }
    degrading = rng.choice(("steady", "slower", "less-capacity"))
    start = rng.uniform(30, 300)
    if degrading == "slower":
        # Slower, but not past every client's timeout even without load.
        most = min(queue["timeout_ms"] for queue in queues) / 2 / no_load
        factor = max(1.0, min(most, rng.uniform(*DEGRADE_FACTOR)))
        downstream["latency_ms"] = _steps([[0, no_load], [start, round(no_load * factor, 1)]])
    elif degrading == "less-capacity":
        factor = rng.uniform(*DEGRADE_FACTOR)
        downstream["capacity_rps"] = _steps(
            [[0, service], [start, round(max(1.0, service / factor), 1)]]
        )
    for queue in queues:
        _load(rng, queue, service / count, count)
    return [downstream], queues, f"latency: {count} queue(s), {degrading}, {no_load} ms no-load"


def _shared(rng: random.Random) -> Built:
    count = rng.randint(*SHARED_QUEUES)
    latency = round(_log_uniform(rng, *LATENCY_MS), 1)
    queues = [_worker(rng, f"work-{index + 1}", "api") for index in range(count)]
    sends = sum(_sends(queue, latency) for queue in queues)
    shape = rng.choice(CAPACITY_SHAPES)
    first = sends * rng.uniform(*CAPACITY_SHARE)
    floor = sum(_sends(queue, latency, MIN_CONCURRENCY) for queue in queues)
    downstream = {
        "name": "api",
        "capacity_rps": _capacity(rng, first, floor, shape),
        "latency_ms": latency,
        "noise_5xx_rate": _noise(rng),
    }
    for queue in queues:
        _load(rng, queue, _flash(shape) * first / count * rng.uniform(0.2, 1.8), count)
    return [downstream], queues, f"shared: {count} queues, {shape} capacity, {latency} ms"


def _mixed(rng: random.Random) -> Built:
    queue = _worker(rng, "work", "api")
    latency = round(_log_uniform(rng, *LATENCY_MS), 1)
    sends = _sends(queue, latency)
    shape = rng.choice(CAPACITY_SHAPES[1:])
    first = sends * rng.uniform(*CAPACITY_SHARE)
    start = rng.uniform(30, 300)
    slower = round(latency * rng.uniform(*BROWNOUT_FACTOR), 1)
    downstream = {
        "name": "api",
        "capacity_rps": _capacity(rng, first, _sends(queue, latency, MIN_CONCURRENCY), shape),
        "latency_ms": _steps(
            [[0, latency], [start, slower], [start + rng.randint(*BROWNOUT_FOR_S), latency]]
        ),
        "latency_model": rng.choice(("constant", "queueing")),
        "noise_5xx_rate": _noise(rng),
    }
    queue["timeout_ms"] = max(
        LATENCY_TIMEOUT_MS[0], int(latency * rng.uniform(*MIXED_TIMEOUT_FACTOR))
    )
    load = _load(rng, queue, _flash(shape) * first)
    return [downstream], [queue], f"mixed: {shape} capacity, {latency} -> {slower} ms, {load}"


_BUILDERS: dict[str, Callable[[random.Random], Built]] = {
    "healthy": _healthy,
    "throttling": _throttling,
    "latency": _latency,
    "shared": _shared,
    "mixed": _mixed,
}
