"""A warm controller's memory is flat after warm-up, whatever queue names the stream carries.

Measured with tracemalloc over the controller's own code (the in-memory ledger and actuator
stand in for AWS and are left out): allocations still held, not time.
"""

from __future__ import annotations

import gc
import logging
import tracemalloc
from pathlib import Path

from aws_lambda_powertools import Logger

import controller
from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.cache import LruCache
from controller.constants import CACHED_QUEUES
from controller.ledger import InMemoryLedger
from controller.loop import ControlLoop
from controller.policy import memory_type
from controller.policy.aimd import Aimd
from controller.settings import PolicyParams
from tests.factories import config, kinesis_event, sample

CONTROLLER = Path(controller.__file__).parent
# The twins hold what AWS would: the ledger's items and the mapping updates made.
AWS_TWINS = ("ledger.py", "actuator.py")
REGISTERED = CACHED_QUEUES + CACHED_QUEUES // 2
PER_BATCH = 25
BATCH_EVERY_S = 10.0
WARM_AFTER = 125


def controller_bytes() -> int:
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, f"{CONTROLLER}/*")]
        + [tracemalloc.Filter(False, f"{CONTROLLER}/{twin}") for twin in AWS_TWINS]
    )
    return sum(stat.size for stat in snapshot.statistics("filename"))


def test_a_warm_controllers_memory_is_flat_over_rotating_queue_names() -> None:
    """200 batches, each naming 25 registered queues (rotating over more than the caches hold)
    and 25 queue names never seen before (unregistered)."""
    ledger, actuator = InMemoryLedger(memory_types=memory_type), InMemoryActuator()
    for n in range(REGISTERED):
        ledger.put_config(config(f"q{n}"))
        actuator.add_mapping(f"esm-q{n}", 100)
    now = [1_000_000.0]
    quiet = Logger(service="memory-test", level="WARNING", logger_handler=logging.NullHandler())
    app = ControllerApp(
        ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd()),
        clock=lambda: now[0],
        emit=lambda _: None,
        logger=quiet,
    )

    held = []
    tracemalloc.start()
    try:
        for batch in range(200):
            now[0] += BATCH_EVERY_S
            names = [f"q{(batch * PER_BATCH + i) % REGISTERED}" for i in range(PER_BATCH)]
            names += [f"unregistered-{batch}-{i}" for i in range(PER_BATCH)]
            samples = [sample(queue, at=now[0] - 1.0) for queue in names]
            app.process_kinesis(kinesis_event(samples, first_sequence=batch * 100), 1e12)
            # Warm: every cache filled (by batch 80) and churned once.
            if batch >= WARM_AFTER and batch % 25 == 0:
                held.append(controller_bytes())
        held.append(controller_bytes())
    finally:
        tracemalloc.stop()
    assert app.loop.counters["samples_windowed"] == 200 * PER_BATCH
    # Unbounded caches grow here by about 4 KB a batch: 280 KB over these 75 batches.
    assert max(held) - min(held) < 64 * 1024, f"controller memory held after warm-up: {held}"
    assert held[-1] < 8 * 1024 * 1024


def test_the_cache_forgets_the_least_recently_used_entry() -> None:
    cache: LruCache[str, int] = LruCache(2)
    cache["a"], cache["b"] = 1, 2
    assert cache.get("a") == 1  # "a" is now the newest
    cache["c"] = 3
    assert ("a" in cache, "b" in cache, "c" in cache) == (True, False, True)
    assert (len(cache), cache.evictions) == (2, 1)
    cache.evict_oldest_while(lambda value: value < 3)
    assert list(cache.items()) == [("c", 3)]
