"""`queuemesh bench decode`: the telemetry decoder against the bare cost of reading its input.

The batch is what the controller Lambda receives at its largest: up to 10,000 Kinesis records,
each a gzip'd CloudWatch Logs subscription payload carrying a few worker EMF documents for
several queues. The decoder's run (decode, then group samples per queue) is timed against a
floor measured in the same process with the same JSON library: base64, gunzip and JSON-parse
each payload and each log event's message, nothing else. ``floor_ratio`` is our time over the
floor's; it is what to watch, as it depends far less on the machine than MB/s do. The decoder
parses less than the floor: it recognises the metric declarations a worker repeats in every
document and skips them (``controller/telemetry/``). ``scanner_floor_ratio`` is the same
against a stricter floor that calls the JSON library's bare scanner, as the decoder itself
does, instead of ``json.loads``.
"""

from __future__ import annotations

import binascii
import gc
import json
import random
import sys
import time
import zlib
from collections.abc import Callable
from typing import Any

from load.bench import BenchError
from worker import schema

TARGET_MB_PER_S = 2.0
TARGET_FLOOR_RATIO = 1.2
BASE_TIME_MS = 1_764_428_400_000


def measure(
    *, records: int, max_events: int, queues: int, repeat: int, seed: int, chunk: int = 250
) -> dict[str, Any]:
    from controller.telemetry import decode_kinesis_event

    event, payload_bytes, log_events = build_event(records, max_events, queues, seed)

    def ours(batch: dict[str, Any]) -> int:
        result = decode_kinesis_event(batch)
        by_queue: dict[str, list[Any]] = {}
        for sample in result.samples:
            group = by_queue.get(sample.queue)
            if group is None:
                by_queue[sample.queue] = [sample]
            else:
                group.append(sample)
        return sum(len(group) for group in by_queue.values())

    decoded = ours(event)
    if decoded != log_events:
        skipped = dict(decode_kinesis_event(event).skipped)
        raise BenchError(
            f"the decoder read {decoded} of {log_events} generated documents (skipped: "
            f"{skipped}); the benchmark's batch no longer matches the telemetry contract"
        )
    for floor_run in (floor, floor_scanner):
        if floor_run(event) != log_events:
            raise BenchError(f"{floor_run.__name__} parsed a different number of log events")

    batches = [
        {"Records": event["Records"][start : start + chunk]} for start in range(0, records, chunk)
    ]
    seconds = _best_of(repeat, batches, (ours, floor, floor_scanner))
    our_s, floor_s, scanner_s = seconds
    megabytes = payload_bytes / 1e6
    report: dict[str, Any] = {
        "records": records,
        "log_events": log_events,
        "queues": queues,
        "payload_mb": round(megabytes, 4),
        "seconds": round(our_s, 6),
        "mb_per_s": round(megabytes / our_s, 3),
        "records_per_s": round(records / our_s, 1),
        "samples_per_s": round(log_events / our_s, 1),
        "floor_seconds": round(floor_s, 6),
        "floor_mb_per_s": round(megabytes / floor_s, 3),
        "floor_ratio": round(our_s / floor_s, 3),
        "scanner_floor_seconds": round(scanner_s, 6),
        "scanner_floor_ratio": round(our_s / scanner_s, 3),
        "repeat": repeat,
        "clock": "process CPU time, best of the repeats per chunk of records",
        "json_library": f"json (stdlib, Python {sys.version.split()[0]})",
        "targets": {"mb_per_s": TARGET_MB_PER_S, "floor_ratio": TARGET_FLOOR_RATIO},
    }
    report["meets_targets"] = (
        report["mb_per_s"] >= TARGET_MB_PER_S and report["floor_ratio"] <= TARGET_FLOOR_RATIO
    )
    return report


def floor(event: dict[str, Any]) -> int:
    """Decompress and fully parse every payload and message; return the log events parsed."""
    loads = json.loads
    parsed = 0
    for record in event["Records"]:
        payload = loads(zlib.decompress(binascii.a2b_base64(record["kinesis"]["data"]), 31))
        for log_event in payload["logEvents"]:
            loads(log_event["message"])
            parsed += 1
    return parsed


def floor_scanner(event: dict[str, Any]) -> int:
    """The floor through the JSON library's bare scanner (as the decoder calls it): stricter."""
    scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
    parsed = 0
    for record in event["Records"]:
        text = zlib.decompress(binascii.a2b_base64(record["kinesis"]["data"]), 31).decode()
        payload, _ = scan(text, 0)
        for log_event in payload["logEvents"]:
            scan(log_event["message"], 0)
            parsed += 1
    return parsed


def _best_of(
    repeat: int, batches: list[dict[str, Any]], runs: tuple[Callable[[dict[str, Any]], int], ...]
) -> list[float]:
    """Seconds per run over all batches: for each batch, the best of ``repeat`` tries.

    The runs alternate batch by batch, and the clock is this process's CPU time, so that the
    other work of a shared machine weighs on every side alike and not on the result.
    """
    best = [[float("inf")] * len(batches) for _ in runs]
    for _ in range(repeat):
        gc.collect()
        for index, batch in enumerate(batches):
            for side, run_once in enumerate(runs):
                started = time.process_time()
                run_once(batch)
                elapsed = time.process_time() - started
                best[side][index] = min(best[side][index], elapsed)
    return [sum(per_batch) for per_batch in best]


def build_event(
    records: int, max_events: int, queues: int, seed: int
) -> tuple[dict[str, Any], int, int]:
    """A Lambda Kinesis event of subscription payloads; its compressed size and EMF count."""
    from load.recording import RecordedLine, kinesis_event, subscription_payload

    rng = random.Random(seed)
    queue_names = [f"orders-{index:02d}" for index in range(queues)]
    lines = []
    log_events = 0
    for index in range(records):
        events_here = rng.randint(max(1, max_events // 2), max_events)
        at_ms = BASE_TIME_MS + index * 10
        data = subscription_payload(
            [
                (
                    (at_ms + offset) / 1000,
                    _worker_emf(rng, rng.choice(queue_names), at_ms + offset - 3),
                )
                for offset in range(events_here)
            ],
            f"/aws/lambda/worker-{index % 4}",
            f"2025/11/29/[$LATEST]{rng.getrandbits(128):032x}",
            first_id=log_events,
        )
        log_events += events_here
        lines.append(
            RecordedLine(
                arrival=at_ms / 1000 + 2,
                shard="shardId-000000000000",
                # AWS's sequence numbers are 56 digits (moto's are small integers).
                sequence=str(49_656_798_632_213_455_391_620_093_153_372 + index),
                partition_key=f"{rng.getrandbits(128):032x}",
                data=data,
            )
        )
    payload_bytes = sum(len(line.data) for line in lines)
    stream_arn = "arn:aws:kinesis:eu-west-1:123456789012:stream/telemetry"
    return kinesis_event(lines, stream_arn, "eu-west-1"), payload_bytes, log_events


def _worker_emf(rng: random.Random, queue: str, at_ms: int) -> str:
    """One worker invocation's document, with the members and declarations the worker prints
    through aws-lambda-powertools (``RetryAfterSeconds`` declared when there is one)."""
    calls = rng.randint(1, 10)
    throttled = rng.choice((0, 0, 0, rng.randint(0, calls)))
    overloaded = rng.choice((0, 0, 0, 0, rng.randint(0, calls - throttled)))
    ok = calls - throttled - overloaded
    members: list[tuple[schema.Metric, Any]] = [
        (schema.REQUESTS, [float(calls)]),
        (schema.OK, [float(ok)]),
        (schema.THROTTLED, [float(throttled)]),
        (schema.SERVER_ERRORS, [float(overloaded)]),
        (schema.OVERLOADED, [float(overloaded)]),
        (schema.CLIENT_ERRORS, [0.0]),
        (schema.LATENCY, [round(rng.uniform(20, 200), 2) for _ in range(calls)]),
        (schema.INVOCATION_DURATION, [float(rng.randint(100, 3000))]),
    ]
    if throttled:
        members.append((schema.RETRY_AFTER, rng.randint(1, 30)))
    document = schema.emf_document(
        queue,
        members,
        timestamp_ms=at_ms,
        dimensions={schema.DOWNSTREAM_DIMENSION: "payments.example.com", "service": "worker"},
    )
    return json.dumps(document, separators=(",", ":")) + "\n"
