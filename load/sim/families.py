"""Families of scenarios: random draws, so that a law is judged on downstreams nobody picked.

A draw is a function of (family, seed, draw) alone: the same three give the same scenario, on
any machine. Seeds 1-1000 are the tuning range, 1001 on the reporting range
(``REPORTING_SEEDS``): a law tuned on the first is judged on the second. Every draw is an
ordinary scenario document (the format of ``load/scenarios``), so ``--emit`` can write it and
``--scenario`` run it alone. The ranges below are documented in docs/simulator.md ("Families").
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable

from controller.constants import MAX_PRIORITY
from load.announce import HeaderStyle
from load.oracle import pooled_drain_time
from load.sim.draw_parts import (
    DURATION_S,
    EVENTS_END_S,
    LATENCY_MS,
    MIN_CONCURRENCY,
    TELEMETRY_DELAY_S,
    Document,
    Steps,
    as_schedule,
    calls_sent,
    give_work,
    log_uniform,
    worker,
)
from load.sim.scenario import Scenario, parse_scenario

FAMILIES = (
    "healthy",
    "throttling",
    "latency",
    "shared",
    "mixed",
    "throttling-announced",
    "fleet",
)
# Announced variants: each draw is the named family's same draw, its downstreams announcing
# their quota in a header style drawn per draw. Stripe's style is left out: it announces no
# quota, and the simulated limit is a rate, so its draws would be the blind family's.
ANNOUNCED_FAMILIES = {"throttling-announced": "throttling"}
QUOTA_STYLES = tuple(style for style in HeaderStyle if style is not HeaderStyle.STRIPE)
# Seeds below this one are for tuning; reports use it and those above.
REPORTING_SEEDS = 1001
MAX_DRAWS = 1000


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

# fleet (issue 33): many queues in front of one API, two APIs on some draws.
FLEET_QUEUES = (20, 100)
# Each tenant's cap is smaller than a lone queue's: the fleet's floor (Cmin each) is what
# matters, and a hundred caps of 100 would make every draw a storm of the same shape.
FLEET_MAX_CONCURRENCY = (5, 50)
FLEET_TWO_APIS = 0.25
# The capacity at its lowest over what the API's queues send at Cmin: above 1 the fleet fits
# at its floor; below 1 only pausing some of the queues helps.
FLEET_LOWEST = {"fits": (1.2, 4.0), "below-floor": (0.1, 0.9)}
# A fleet's work is sized by its API's lowest capacity (a drain of DRAIN_TARGET_S at it), so
# that capacity is bounded, and the messages with it: where the drawn latency would make the
# fleet's floor too fast for it, the API's calls are slower (a draw runs in seconds, and the
# overload lasts long enough for telemetry 1-40 s late to tell).
FLEET_LOWEST_MAX_RPS = 1200.0
FLEET_MAX_MESSAGES = 120_000
# steady: at the lowest throughout; drop: down to it from FLEET_DROP times it, and back 60-360 s
# later; cliff: down for good. Drops come early: the work is sized by the lowest capacity, and
# a fleet would have drained most of it at the first one before a later drop.
FLEET_SHAPES = ("steady", "drop", "cliff")
FLEET_DROP = (1.5, 5.0)
FLEET_DROP_AT_S = (20.0, 120.0)
FLEET_STANDINGS = ("equal", "weights", "priorities", "both")
FLEET_WEIGHT = (0.1, 10.0)
# At most this share of a fleet's queues get a priority above the default.
FLEET_PRIORITIZED = 0.2
# On this share of draws the queues name their group in CONFIG (else their telemetry's
# Downstream groups them).
FLEET_NAMED_GROUP = 0.5


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
    return as_schedule([[t, round(max(1.0, rate), 1)] for t, rate in steps if t < EVENTS_END_S])


def _flash(shape: str) -> float:
    """A flash crowd: four times the work at a steady capacity."""
    return 4.0 if shape == "flash" else 1.0


def _noise(rng: random.Random) -> float:
    return round(rng.uniform(*NOISE_5XX), 4) if rng.random() < 0.5 else 0.0


# -- the families ------------------------------------------------------------------------------

Built = tuple[list[Document], list[Document], str]


def _healthy(rng: random.Random) -> Built:
    queue = worker(rng, "work", "api")
    latency = round(log_uniform(rng, *LATENCY_MS), 1)
    sends = calls_sent(queue, latency)
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
        downstream["latency_ms"] = as_schedule(
            [
                [0, latency],
                [start, round(latency * factor, 1)],
                [start + rng.randint(*BROWNOUT_FOR_S), latency],
            ]
        )
    elif kind == "queueing":
        downstream["latency_model"] = "queueing"
    queue["timeout_ms"] = rng.randint(*HEALTHY_TIMEOUT_MS)
    load = give_work(rng, queue, sends)
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
    return as_schedule(steps)


def _throttling(rng: random.Random) -> Built:
    queue = worker(rng, "work", "api")
    latency = round(log_uniform(rng, *LATENCY_MS), 1)
    sends = calls_sent(queue, latency)
    shape = rng.choice(CAPACITY_SHAPES)
    first = sends * rng.uniform(*CAPACITY_SHARE)
    capacity = _capacity(rng, first, calls_sent(queue, latency, MIN_CONCURRENCY), shape)
    downstream = {
        "name": "api",
        "capacity_rps": capacity,
        "latency_ms": latency,
        "noise_5xx_rate": _noise(rng),
    }
    load = give_work(rng, queue, _flash(shape) * first)
    return [downstream], [queue], f"throttling: {shape} capacity, {latency} ms, {load}"


def _latency(rng: random.Random) -> Built:
    count = rng.randint(*LATENCY_QUEUES)
    no_load = round(log_uniform(rng, *LATENCY_NO_LOAD_MS), 1)
    queues = [worker(rng, f"work-{index + 1}", "db") for index in range(count)]
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
        downstream["latency_ms"] = as_schedule([[0, no_load], [start, round(no_load * factor, 1)]])
    elif degrading == "less-capacity":
        factor = rng.uniform(*DEGRADE_FACTOR)
        downstream["capacity_rps"] = as_schedule(
            [[0, service], [start, round(max(1.0, service / factor), 1)]]
        )
    for queue in queues:
        give_work(rng, queue, service / count, count)
    return [downstream], queues, f"latency: {count} queue(s), {degrading}, {no_load} ms no-load"


def _shared(rng: random.Random) -> Built:
    count = rng.randint(*SHARED_QUEUES)
    latency = round(log_uniform(rng, *LATENCY_MS), 1)
    queues = [worker(rng, f"work-{index + 1}", "api") for index in range(count)]
    sends = sum(calls_sent(queue, latency) for queue in queues)
    shape = rng.choice(CAPACITY_SHAPES)
    first = sends * rng.uniform(*CAPACITY_SHARE)
    floor = sum(calls_sent(queue, latency, MIN_CONCURRENCY) for queue in queues)
    downstream = {
        "name": "api",
        "capacity_rps": _capacity(rng, first, floor, shape),
        "latency_ms": latency,
        "noise_5xx_rate": _noise(rng),
    }
    for queue in queues:
        give_work(rng, queue, _flash(shape) * first / count * rng.uniform(0.2, 1.8), count)
    return [downstream], queues, f"shared: {count} queues, {shape} capacity, {latency} ms"


def _mixed(rng: random.Random) -> Built:
    queue = worker(rng, "work", "api")
    latency = round(log_uniform(rng, *LATENCY_MS), 1)
    sends = calls_sent(queue, latency)
    shape = rng.choice(CAPACITY_SHAPES[1:])
    first = sends * rng.uniform(*CAPACITY_SHARE)
    start = rng.uniform(30, 300)
    slower = round(latency * rng.uniform(*BROWNOUT_FACTOR), 1)
    downstream = {
        "name": "api",
        "capacity_rps": _capacity(rng, first, calls_sent(queue, latency, MIN_CONCURRENCY), shape),
        "latency_ms": as_schedule(
            [[0, latency], [start, slower], [start + rng.randint(*BROWNOUT_FOR_S), latency]]
        ),
        "latency_model": rng.choice(("constant", "queueing")),
        "noise_5xx_rate": _noise(rng),
    }
    queue["timeout_ms"] = max(
        LATENCY_TIMEOUT_MS[0], int(latency * rng.uniform(*MIXED_TIMEOUT_FACTOR))
    )
    load = give_work(rng, queue, _flash(shape) * first)
    return [downstream], [queue], f"mixed: {shape} capacity, {latency} -> {slower} ms, {load}"


def _fleet(rng: random.Random) -> Built:
    count = rng.randint(*FLEET_QUEUES)
    apis = ["api-1", "api-2"] if rng.random() < FLEET_TWO_APIS else ["api"]
    split = rng.randint(1, count - 1) if len(apis) == 2 else count
    queues = [
        worker(rng, f"tenant-{index + 1:03}", apis[index >= split], FLEET_MAX_CONCURRENCY)
        for index in range(count)
    ]
    downstreams, parts = [], []
    for api in apis:
        tenants = [queue for queue in queues if queue["downstream"] == api]
        regime, shape = rng.choice(tuple(FLEET_LOWEST)), rng.choice(FLEET_SHAPES)
        over_floor = rng.uniform(*FLEET_LOWEST[regime])
        latency = _slow_enough(
            tenants, log_uniform(rng, *LATENCY_MS), FLEET_LOWEST_MAX_RPS / over_floor
        )
        floor = sum(calls_sent(queue, latency, MIN_CONCURRENCY) for queue in tenants)
        lowest = floor * over_floor
        first = lowest * rng.uniform(*FLEET_DROP)
        capacity: Steps = [[0, first if shape != "steady" else lowest]]
        if shape != "steady":
            capacity.append([rng.uniform(*FLEET_DROP_AT_S), lowest])
        if shape == "drop":
            capacity.append([capacity[1][0] + rng.uniform(60, 360), first])
        downstreams.append(
            {
                "name": api,
                "capacity_rps": as_schedule(
                    [[t, round(max(1.0, rate), 1)] for t, rate in capacity if t < EVENTS_END_S]
                ),
                "latency_ms": latency,
            }
        )
        for queue in tenants:
            rate = lowest / len(tenants) * rng.uniform(0.2, 1.8)
            give_work(rng, queue, rate, count, FLEET_MAX_MESSAGES)
        parts.append(f"{api} {regime} {shape} ({len(tenants)} queues, {latency} ms)")
    standing = rng.choice(FLEET_STANDINGS)
    if standing in ("weights", "both"):
        for queue in queues:
            queue["weight"] = round(log_uniform(rng, *FLEET_WEIGHT), 2)
    if standing in ("priorities", "both"):
        for queue in rng.sample(queues, rng.randint(1, int(count * FLEET_PRIORITIZED))):
            queue["priority"] = rng.randint(1, MAX_PRIORITY)
    grouping = "grouped by Downstream"
    if rng.random() < FLEET_NAMED_GROUP:
        grouping = "group named in CONFIG"
        for queue in queues:
            queue["group"] = queue["downstream"]
    return (
        downstreams,
        queues,
        f"fleet: {count} queues; {'; '.join(parts)}; {standing}; {grouping}",
    )


def _slow_enough(tenants: list[Document], latency_ms: float, floor_rps: float) -> float:
    """``latency_ms`` (to 0.1 ms), or the latency at which the ``tenants``' Cmin invocations
    send ``floor_rps`` where they would send more."""

    def floor(ms: float) -> float:
        return sum(calls_sent(queue, ms, MIN_CONCURRENCY) for queue in tenants)

    low = high = latency_ms
    while floor(high) > floor_rps:
        low, high = high, high * 2
    for _ in range(40):
        middle = (low + high) / 2
        low, high = (middle, high) if floor(middle) > floor_rps else (low, middle)
    return math.ceil(high * 10) / 10


_BUILDERS: dict[str, Callable[[random.Random], Built]] = {
    "healthy": _healthy,
    "throttling": _throttling,
    "latency": _latency,
    "shared": _shared,
    "mixed": _mixed,
    "fleet": _fleet,
}
