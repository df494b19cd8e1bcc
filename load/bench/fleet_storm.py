"""`queuemesh bench fleet --storm N`: a fleet of thousands of queues, a storm on N of them, on
the in-process twins with the account's control plane on virtual time.

The real ``ControllerApp`` (decoder, book, planner, executor) and the real ``LambdaActuator``
(its pacing and retries) call the simulator's control plane (``load.sim.control_plane``: the
in-memory mappings behind the account's quota of 15 requests a second, refusing as Lambda
does); the ledger is the in-memory twin. Time is virtual wherever the controller waits (its
pacing, its backoff, the invocation's deadline), so the time until every cut is applied is what
the pacing gives, measured in seconds of the account's clock, not of this machine's; decoding
and deciding are measured in CPU seconds of this process (one core).

Measured: decode and decide throughput per core on the storm's first batch (every queue
reports, N of them 40% 429s); the invocations until every storm queue's mapping is cut, and
that time against the floor of its control-plane calls at the controller's paced 12 a second
and at the account's 15; whether every queue with evidence was decided; then a warm
controller's memory over ``MEMORY_BATCHES`` batches rotating over the whole fleet: the bytes
reachable from the controller, the twins left out, and the twins' own (``load.bench.held``).
"""

from __future__ import annotations

import math
import random
import time
from typing import Any

from controller.actuator import InMemoryActuator, LambdaActuator
from controller.app import ControllerApp
from controller.constants import (
    CONTROL_PLANE_CALLS_PER_S,
    CONTROL_PLANE_QUOTA_PER_S,
    WINDOW_RETENTION_S,
)
from controller.ledger import InMemoryLedger
from controller.loop import ControlLoop
from controller.model import Mode
from controller.policy import memory_type
from controller.registration import register_queue
from controller.settings import PolicyParams
from controller.telemetry import decode_kinesis_event
from load.bench.fleet import DECODE_REPEATS, quiet_logger, storm_event, timed_planning
from load.bench.fleet_watch import Stopwatch
from load.bench.held import held_bytes
from load.clock import HandClock
from load.localfleet import START_CONCURRENCY
from load.progress import ProgressCallback
from load.sim.control_plane import SimControlPlane

MEMORY_BATCHES = 200
# Queues reporting in each batch of the memory run: the batches rotate over the whole fleet.
MEMORY_BATCH_QUEUES = 100
MEMORY_SAMPLES_EVERY = 25
# Seconds between the memory run's batches: 200 of them span several window retentions, so the
# windows and the log-event ids reach the size their retention bounds.
MEMORY_BATCH_EVERY_S = 10.0


def measure(
    queue_count: int,
    storm: int,
    timeout_s: float,
    max_invocations: int,
    progress: ProgressCallback | None = None,
) -> dict[str, Any]:
    """The benchmark (see the module's docstring); ``progress`` hears of each stage."""
    notify = progress or (lambda done, total, what: None)
    queues = [f"fleet-{index:05d}" for index in range(queue_count)]
    storming, calm = queues[:storm], queues[storm:]
    clock = HandClock(1_767_225_600.0)
    ledger = InMemoryLedger(memory_types=memory_type)
    mappings = InMemoryActuator(clock=clock)
    plane = SimControlPlane(mappings, clock)
    notify(0, queue_count, "registering queues")
    for queue in queues:
        uuid = f"esm-{queue}"
        mappings.add_mapping(uuid, START_CONCURRENCY, event_source_arn=f"arn:aws:sqs:::{queue}")
        register_queue(
            ledger, mappings, queue, uuid, {}, Mode.ACTIVE, clock=clock, deadline=lambda: math.inf
        )
    mappings.calls.clear()  # registration set the mappings; the storm's cuts are what count
    actuator = LambdaActuator(plane, clock=clock, sleep=clock.sleep, rng=random.Random(0))
    loop = ControlLoop(ledger, actuator, PolicyParams(), monotonic=clock, clock=clock)
    app = ControllerApp(
        loop, clock=clock, monotonic=clock, emit=lambda _: None, logger=quiet_logger()
    )

    event = storm_event(storming, clock.now, calm=calm)
    samples = len(decode_kinesis_event(event).samples)
    decode_cpu_s = _cpu_best_of(DECODE_REPEATS, lambda: decode_kinesis_event(event))

    watch, planned = Stopwatch(), set[str]()
    invocations = []
    first_call_at = None
    batch: dict[str, Any] = event
    # Each batch's sequence numbers above the last one's, as a shard's are.
    sequence = 1
    with timed_planning(watch, lambda plan: planned.update(s.queue for s in plan.steps)):
        for number in range(max_invocations):
            started = clock.now
            outcome = app.process_kinesis(batch, started + timeout_s)
            if first_call_at is None and mappings.calls:
                first_call_at = started
            uncut = [q for q in storming if _level(mappings, q) >= START_CONCURRENCY]
            cut = storm - len(uncut)
            invocations.append(
                {
                    "invocation": number + 1,
                    "virtual_s": round(clock.now - started, 2),
                    "decided_and_done": len(outcome.decisions),
                    "cut_so_far": cut,
                }
            )
            notify(cut, storm, "storm queues cut")
            if cut == storm:
                break
            # The next batch a second after this invocation ends: the queues not cut yet go on
            # reporting their storm (their evidence would be stale by now), the others nothing.
            clock.now += 1.0
            sequence += len(batch["Records"])
            batch = storm_event(uncut, clock.now, first_sequence=sequence)
    last_cut_at = max((call.time for call in mappings.calls), default=clock.now)
    all_applied_s = last_cut_at - (first_call_at or last_cut_at)
    use = plane.use
    update_calls = len(mappings.calls)
    paced_floor_s = use.requests / CONTROL_PLANE_CALLS_PER_S
    quota_floor_s = use.requests / CONTROL_PLANE_QUOTA_PER_S
    decide_cpu_s = watch.get("decide_cpu")
    notify(0, MEMORY_BATCHES, "a warm controller over the fleet")
    sequence += len(batch["Records"])
    # The twins hold what AWS would (the ledger's items, the mappings): not the controller's.
    twins = (ledger, plane, mappings)
    memory = _memory_over_batches(app, twins, queues, clock, timeout_s, sequence, notify)
    return {
        "benchmark": "fleet",
        "queues": queue_count,
        "storm": storm,
        "control_plane": "simulated (load/sim/control_plane.py), virtual time",
        "timeout_s": timeout_s,
        "records": len(event["Records"]),
        "samples": samples,
        "decode_s": round(decode_cpu_s, 4),
        "decode_samples_per_core_s": round(samples / decode_cpu_s),
        "decide_s": round(decide_cpu_s, 4),
        "decide_queues_per_core_s": round(len(planned) / decide_cpu_s) if decide_cpu_s else None,
        "queues_with_evidence": queue_count,
        "queues_decided": len(planned),
        "control_plane_calls": use.requests,
        "control_plane_refused": use.refused,
        "update_calls": update_calls,
        "calls_ratio": round(use.requests / update_calls, 3) if update_calls else None,
        "quota_per_s": CONTROL_PLANE_QUOTA_PER_S,
        "ceiling_per_s": CONTROL_PLANE_CALLS_PER_S,
        "quota_floor_s": round(quota_floor_s, 2),
        "ceiling_floor_s": round(paced_floor_s, 2),
        "max_calls_in_any_1s": use.most_in_one_second,
        "all_applied_s": round(all_applied_s, 2),
        "all_applied_quota_ratio": round(all_applied_s / quota_floor_s, 3),
        "all_applied_ceiling_ratio": round(all_applied_s / paced_floor_s, 3),
        "invocations_until_all_applied": len(invocations),
        "first_invocation_changes": invocations[0]["cut_so_far"],
        "invocations": invocations,
        **memory,
    }


def _level(mappings: InMemoryActuator, queue: str) -> int:
    view = mappings.read(f"esm-{queue}", math.inf)
    return view.max_concurrency if view.enabled and view.max_concurrency else 0


def _cpu_best_of(repeats: int, work: Any) -> float:
    best = math.inf
    for _ in range(repeats):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best


def _memory_over_batches(
    app: ControllerApp,
    twins: tuple[object, ...],
    queues: list[str],
    clock: HandClock,
    timeout_s: float,
    first_sequence: int,
    notify: ProgressCallback,
) -> dict[str, Any]:
    """Bytes the controller holds, and the twins beside it, every ``MEMORY_SAMPLES_EVERY``
    batches, each batch ``MEMORY_BATCH_QUEUES`` queues reporting a calm second, rotating over
    the fleet."""
    held: list[tuple[int, int, int]] = []
    for number in range(1, MEMORY_BATCHES + 1):
        clock.now += MEMORY_BATCH_EVERY_S
        start = (number * MEMORY_BATCH_QUEUES) % len(queues)
        names = (queues + queues)[start : start + MEMORY_BATCH_QUEUES]
        sequence = first_sequence + (number - 1) * MEMORY_BATCH_QUEUES
        batch = storm_event([], clock.now, calm=names, first_sequence=sequence)
        app.process_kinesis(batch, clock.now + timeout_s)
        if number % MEMORY_SAMPLES_EVERY == 0:
            twin_bytes = sum(held_bytes(twin) for twin in twins)
            held.append((number, held_bytes(app, twins), twin_bytes))
            notify(number, MEMORY_BATCHES, "a warm controller over the fleet")
    # Warm: the batches span a window retention, so every bounded memory has filled; growth
    # after that is what a warm container would keep gaining.
    warm = [sample for sample in held if sample[0] * MEMORY_BATCH_EVERY_S > WINDOW_RETENTION_S]
    return {
        "memory_batches": MEMORY_BATCHES,
        "memory_batch_queues": MEMORY_BATCH_QUEUES,
        "memory_bytes_held": [size for _, size, _ in held],
        "memory_growth_bytes": warm[-1][1] - warm[0][1] if warm else 0,
        "twin_bytes_held": [size for _, _, size in held],
        "twin_growth_bytes": warm[-1][2] - warm[0][2] if warm else 0,
    }
