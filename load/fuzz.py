"""Fuzzing the controller's inputs: generated Kinesis events through the decoder and the handler.

``make fuzz`` (``python -m load.fuzz``) runs 100,000 generated events by default and prints how
many ran and how long it took. Each event starts from a realistic one (CloudWatch Logs
subscription records of worker EMF documents) and is broken at one or more layers: the Lambda
event's shape, a record's fields, the base64, the gzip bytes, the payload, a log event, an EMF
document's members, its time and its queue name; some log events are re-sent under new
sequence numbers. What must hold for every one: the decoder never raises, the handler never
raises and answers a Kinesis response, and the mapping stays within 2..1000.

The same generator runs a few hundred examples in the normal test suite
(``tests/unit/test_fuzz.py``).
"""

from __future__ import annotations

import base64
import gzip
import json
import random
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools import Logger

from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.constants import MAX_CONCURRENCY, MIN_CONCURRENCY
from controller.ledger import InMemoryLedger
from controller.loop import ControlLoop
from controller.model import QueueConfig, Sample
from controller.policy import memory_type
from controller.policy.aimd import Aimd
from controller.settings import PolicyParams
from controller.telemetry import decode_kinesis_event
from load.arguments import tool_parser
from load.recording import emf_document
from worker import schema

DEFAULT_INPUTS = 100_000
# One event in this many also goes through the handler (slower: windows, plan, ledger twin).
HANDLER_EVERY = 4
REGISTERED = "orders"
QUEUE_NAMES = (REGISTERED, "payments", "orders.fifo", "x" * 80, "x" * 81, "bad name", "", "订单")
# The handler's clock; event times are drawn around it.
NOW = 1_764_428_400.0
# A document's members to break: the telemetry schema's metrics and dimensions, and EMF's
# metadata.
MEMBERS = (
    *(metric.name for metric in schema.METRICS),
    schema.QUEUE_DIMENSION,
    schema.DOWNSTREAM_DIMENSION,
    "_aws",
)


@dataclass(slots=True)
class FuzzReport:
    inputs: int = 0
    decoded: int = 0
    handled: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    def summary(self, seed: int) -> str:
        verdict = "no failures" if not self.failures else f"{len(self.failures)} failure(s)"
        return (
            f"fuzz: {self.inputs:,} generated inputs (decoder {self.decoded:,}, handler "
            f"{self.handled:,}) in {self.seconds:.1f} s, seed {seed}: {verdict}"
        )


def json_value(rng: random.Random, depth: int = 0) -> Any:
    """Any JSON-ish value, including the ones JSON cannot spell (NaN, infinities)."""
    kind = rng.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.choice([0, -1, 1, 2**63, -(2**70), rng.randrange(-(10**6), 10**7)])
    if kind == 3:
        return rng.choice([0.5, -0.0, 1e300, -1e300, float("nan"), float("inf"), rng.random()])
    if kind == 4:
        return "".join(rng.choice('ab{}[]"\\:,0é\x00 ') for _ in range(rng.randrange(12)))
    if kind == 5:
        return rng.choice(["", "orders", "_aws", "DATA_MESSAGE", "CONTROL_MESSAGE"])
    if kind in (6, 7):
        return [json_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(MEMBERS): json_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def _event_time(rng: random.Random) -> float:
    offset = rng.choice([0.0, -1.0, -30.0, 29.0, 31.0, 3600.0, -3600.0, 365 * 86400.0])
    return NOW + offset - rng.random() * 5


def _document(rng: random.Random) -> dict[str, Any]:
    sample = Sample(
        rng.choice(QUEUE_NAMES),
        _event_time(rng),
        requests=rng.randrange(0, 30),
        ok=rng.randrange(0, 20),
        throttled=rng.randrange(0, 10),
        invocation_ms=rng.choice([None, 250.0, 900_000.0]),
    )
    document = emf_document(sample)
    for _ in range(rng.choice([0, 0, 1, 2])):
        metadata = document.get("_aws")
        target = metadata if isinstance(metadata, dict) and rng.random() < 0.2 else document
        key = rng.choice([*MEMBERS, "Timestamp", "CloudWatchMetrics"])
        if rng.random() < 0.2:
            target.pop(key, None)
        else:
            target[key] = json_value(rng)
    return document


def _message(rng: random.Random) -> Any:
    kind = rng.randrange(12)
    if kind == 0:
        return json_value(rng)
    if kind == 1:
        return "START RequestId: 1 Version: $LATEST"
    text = json.dumps(_document(rng))
    if kind == 2:
        return text[: rng.randrange(len(text))]
    if kind == 3:
        return f"2025-11-29T15:00:00Z INFO {text}"
    return text


def _payload(rng: random.Random, first_id: int) -> dict[str, Any]:
    events: list[Any] = [
        {
            "id": rng.choice([str(first_id + n), first_id + n]),
            "timestamp": NOW * 1000,
            "message": _message(rng),
        }
        for n in range(rng.randrange(1, 4))
    ]
    if rng.random() < 0.1:
        events.append(json_value(rng))
    if rng.random() < 0.1:
        events[0] = {**events[0], rng.choice(["id", "timestamp", "message"]): json_value(rng)}
    payload: dict[str, Any] = {
        "messageType": "DATA_MESSAGE",
        "owner": "123456789012",
        "logGroup": "/aws/lambda/orders-worker",
        "logStream": "2025/11/29/[$LATEST]0",
        "logEvents": events,
    }
    if rng.random() < 0.1:
        payload[rng.choice([*payload])] = json_value(rng)
    return payload


def _data(rng: random.Random, first_id: int) -> Any:
    raw = gzip.compress(json.dumps(_payload(rng, first_id)).encode(), compresslevel=1, mtime=0)
    kind = rng.randrange(20)
    if kind == 0:
        cut = rng.randrange(len(raw))
        raw = raw[:cut]
    elif kind == 1:
        flipped = bytearray(raw)
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        raw = bytes(flipped)
    elif kind == 2:
        raw = rng.randbytes(rng.randrange(64))
    encoded = base64.b64encode(raw).decode()
    if kind == 3:
        return encoded[: rng.randrange(len(encoded))] + "!"
    if kind == 4:
        return json_value(rng)
    return encoded


def fuzz_event(rng: random.Random, first_sequence: int = 0) -> Any:
    """One generated Lambda event: mostly a Kinesis batch, broken somewhere."""
    records: list[Any] = []
    for n in range(rng.randrange(1, 4)):
        record: dict[str, Any] = {
            "eventID": f"shardId-00000000000{rng.randrange(2)}:{first_sequence + n}",
            "kinesis": {
                "sequenceNumber": str(first_sequence + n),
                "partitionKey": "pk",
                "data": _data(rng, (first_sequence + n) * 10),
            },
        }
        if rng.random() < 0.05:
            record["kinesis"][rng.choice(["sequenceNumber", "data"])] = json_value(rng)
        if rng.random() < 0.05:
            record[rng.choice(["kinesis", "eventID"])] = json_value(rng)
        records.append(record if rng.random() < 0.97 else json_value(rng))
    if records and rng.random() < 0.1:
        # The same log events again, under a new sequence number (at-least-once delivery).
        resent = records[0]
        if isinstance(resent, dict) and isinstance(resent.get("kinesis"), dict):
            records.append({**resent, "kinesis": {**resent["kinesis"], "sequenceNumber": "9" * 20}})
    if rng.random() < 0.03:
        return {"Records": json_value(rng)}
    return {"Records": records}


def fresh_app() -> tuple[ControllerApp, InMemoryActuator]:
    """A controller on in-memory twins with one registered queue (``orders`` at 100)."""
    ledger, actuator = InMemoryLedger(memory_types=memory_type), InMemoryActuator()
    ledger.put_config(QueueConfig(queue=REGISTERED, esm_uuid="esm-orders"))
    actuator.add_mapping("esm-orders", 100)
    app = ControllerApp(
        ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd()),
        clock=lambda: NOW,
        emit=lambda _: None,
        # Errors only: the run's info lines would be hundreds of thousands.
        logger=Logger(service="queuemesh-fuzz", level="ERROR"),
    )
    return app, actuator


def run(inputs: int = DEFAULT_INPUTS, seed: int = 1, max_failures: int = 1) -> FuzzReport:
    """Generate ``inputs`` events; stops early after ``max_failures`` failures."""
    rng = random.Random(seed)
    report = FuzzReport()
    app, actuator = fresh_app()
    started = time.perf_counter()
    for index in range(inputs):
        event = fuzz_event(rng, first_sequence=index * 10)
        report.inputs += 1
        try:
            check_decoder(event)
            report.decoded += 1
            if index % HANDLER_EVERY == 0:
                check_handler(app, actuator, event)
                report.handled += 1
        except Exception:  # any raise is the finding
            report.failures.append(
                f"input {index} (seed {seed}): {repr(event)[:2000]}\n{traceback.format_exc()}"
            )
            if len(report.failures) >= max_failures:
                break
    report.seconds = time.perf_counter() - started
    return report


def check_decoder(event: Any) -> None:
    """Decode ``event``; raises only if the decoder does, or breaks its own bookkeeping."""
    result = decode_kinesis_event(event)
    if len(result.samples) != len(result.log_event_keys):
        raise AssertionError("a sample without its log event key")


def check_handler(app: ControllerApp, actuator: InMemoryActuator, event: Any) -> None:
    """Hand ``event`` to the application; raises if it does, answers other than a Kinesis
    response, or moves the mapping out of bounds."""
    response = app.handle(event, None)
    if not isinstance(response.get("batchItemFailures"), list):
        raise AssertionError(f"not a Kinesis response: {response!r}")
    concurrency = actuator.read("esm-orders", 0).max_concurrency
    if concurrency is None or not MIN_CONCURRENCY <= concurrency <= MAX_CONCURRENCY:
        raise AssertionError(f"mapping moved out of bounds: {concurrency}")


def main(argv: list[str] | None = None) -> int:
    parser = tool_parser("load.fuzz", __doc__)
    parser.add_argument("--inputs", type=int, default=DEFAULT_INPUTS, help="events to generate")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    if args.inputs < 1:
        parser.error("--inputs must be at least 1")
    report = run(args.inputs, args.seed)
    for failure in report.failures:
        print(failure)
    print(report.summary(args.seed))
    return 1 if report.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
