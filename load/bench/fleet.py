"""`queuemesh bench fleet`: one telemetry batch for a fleet of managed queues, on moto.

Setup (not timed): moto's server in this process on 127.0.0.1, the ledger table, a worker
function (a tiny zip), and per queue an SQS queue, an event source mapping at
MaximumConcurrency 100 and a CONFIG item. Then one Kinesis batch carrying a 40% 429 storm for
every queue goes through the real ``ControllerApp`` with ``DynamoLedger`` and
``LambdaActuator`` (real boto3 clients), with a Lambda-sized deadline.

Measured: decode, decide (plan), ledger (conditional state + audit commits), actuate
(UpdateEventSourceMapping, paced by the actuator's token bucket), and the most
UpdateEventSourceMapping calls seen in any one-second window. Lambda's control plane allows
15 requests/s per account, so 1,000 changes take more than a minute whatever the code does:
the controller executes what fits before its deadline and leaves the rest pending, and the
next batches carry them out. The benchmark follows batches until every mapping reads back at
its decided value, and reports how many batches and how long that took.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import io
import json
import math
import threading
import time
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from controller.model import (
    AuditEntry,
    AuditEvent,
    Mode,
    QueueConfig,
    QueueState,
    QueueStateName,
)
from controller.ports import MappingView
from load.progress import Progress, ProgressCallback

REGION = "us-east-1"
LOCAL_KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
TABLE = "queuemesh-ledger"
FUNCTION = "queuemesh-worker"
START_CONCURRENCY = 100
SETUP_THREADS = 8
FLOOR_TRANSACTIONS = 50
DECODE_REPEATS = 5
ROLE_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "lambda.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}


# --- the local fleet (shared with tests/test_ops.py) ----------------------------------------


def client(endpoint: str, service: str, **config: Any) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        config=Config(max_pool_connections=SETUP_THREADS * 2, **config),
        **LOCAL_KEYS,
    )


def create_function(endpoint: str, name: str = FUNCTION) -> str:
    iam = client(endpoint, "iam")
    role = iam.create_role(
        RoleName=f"{name}-role", AssumeRolePolicyDocument=json.dumps(ROLE_POLICY)
    )["Role"]["Arn"]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", "def handler(event, context):\n    return None\n")
    client(endpoint, "lambda").create_function(
        FunctionName=name,
        Runtime="python3.12",
        Role=role,
        Handler="app.handler",
        Code={"ZipFile": buffer.getvalue()},
    )
    return name


def create_mapping(
    sqs: Any,
    lambda_api: Any,
    queue: str,
    function: str = FUNCTION,
    concurrency: int = START_CONCURRENCY,
) -> str:
    """An SQS queue and its event source mapping; returns the mapping's UUID."""
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return str(
        lambda_api.create_event_source_mapping(
            EventSourceArn=arn,
            FunctionName=function,
            BatchSize=10,
            ScalingConfig={"MaximumConcurrency": concurrency},
        )["UUID"]
    )


@dataclass(frozen=True, slots=True)
class LocalFleet:
    endpoint: str
    table: str
    function: str
    mappings: dict[str, str]  # queue -> mapping UUID


def build_fleet(
    endpoint: str, queues: Sequence[str], register: bool = True, suffix: str = ""
) -> LocalFleet:
    """Table, function, queues and mappings on the emulator; registered when ``register``.

    moto's backends are shared by every server in a process: ``suffix`` keeps the table and
    function names of one fleet apart from another's.
    """
    from controller.ledger import create_ledger_table

    dynamodb = client(endpoint, "dynamodb")
    table = create_ledger_table(dynamodb, TABLE + suffix)
    function = create_function(endpoint, FUNCTION + suffix)
    # boto3 clients are thread-safe; making one costs more than a call to the emulator.
    sqs, lambda_api = client(endpoint, "sqs"), client(endpoint, "lambda")
    with ThreadPoolExecutor(SETUP_THREADS) as pool:
        uuids = list(pool.map(lambda q: create_mapping(sqs, lambda_api, q, function), queues))
    mappings = dict(zip(queues, uuids, strict=True))
    if register:
        seed_registrations(dynamodb, table, mappings, START_CONCURRENCY, time.time())
    return LocalFleet(endpoint, table, function, mappings)


def seed_registrations(
    dynamodb: Any, table: str, mappings: Mapping[str, str], concurrency: int, now: float
) -> None:
    """The items ``queuemesh register`` writes (CONFIG, a first state at the mapping's known
    value, the operator's audit item), batch-written: moto copies the whole table for every
    transaction, which would make seeding a large fleet quadratic."""
    from boto3.dynamodb.types import TypeSerializer

    from controller.ledger import (
        DEFAULT_RETENTION_S,
        encode_audit,
        encode_config,
        encode_state,
    )

    serializer = TypeSerializer()
    items = []
    for queue, uuid in mappings.items():
        state = QueueState(
            queue=queue,
            esm_uuid=uuid,
            state=QueueStateName.HEALTHY,
            concurrency=concurrency,
            previous_concurrency=concurrency,
            last_evaluated_at=now,
            version=1,
        )
        audit = AuditEntry(
            queue=queue,
            timestamp=now,
            event_type=AuditEvent.OPERATOR,
            previous_value=concurrency,
            new_value=concurrency,
            action="REGISTER",
            reason=f"Registered: mapping {uuid}, mode ACTIVE.",
        )
        items += [
            encode_config(QueueConfig(queue, uuid, Mode.ACTIVE)),
            encode_state(state),
            encode_audit(audit, "seed", DEFAULT_RETENTION_S),
        ]
    for start in range(0, len(items), 25):
        requests = [
            {"PutRequest": {"Item": {k: serializer.serialize(v) for k, v in item.items()}}}
            for item in items[start : start + 25]
        ]
        pending: dict[str, Any] = {table: requests}
        for _ in range(10):
            pending = dynamodb.batch_write_item(RequestItems=pending).get("UnprocessedItems")
            if not pending:
                break


# --- the benchmark --------------------------------------------------------------------------


class _TableSnapshots:
    """Stands in for the ``copy`` module inside moto's DynamoDB backend.

    moto snapshots a table for every TransactWriteItems by deep-copying it whole (1.7 s per
    transaction at 3,000 items here, where DynamoDB answers in tens of milliseconds), so a
    fleet benchmark would measure moto. A put replaces an item object rather than changing it,
    so copying the table's item index keeps moto's rollback exact for the ledger's
    transactions, which are puts only.
    """

    def __init__(self, table_type: type) -> None:
        self._table_type = table_type

    def deepcopy(self, value: Any, memo: Any = None) -> Any:
        import copy
        from collections import defaultdict

        if not isinstance(value, self._table_type):
            return copy.deepcopy(value, memo)
        table: Any = value
        snapshot: Any = copy.copy(table)
        snapshot.items = defaultdict(
            dict,
            {key: dict(row) if isinstance(row, dict) else row for key, row in table.items.items()},
        )
        return snapshot

    def copy(self, value: Any) -> Any:
        import copy

        return copy.copy(value)


@contextmanager
def table_snapshots_by_index(enabled: bool = True) -> Iterator[None]:
    if not enabled:
        yield
        return
    import moto.dynamodb.models as backend
    from moto.dynamodb.models.table import Table

    original = backend.copy
    backend.copy = _TableSnapshots(Table)  # type: ignore[assignment]
    try:
        yield
    finally:
        backend.copy = original


def storm_event(queues: Sequence[str], now: float, documents: int = 4) -> dict[str, Any]:
    """One Kinesis batch: per queue, one CloudWatch Logs record of ``documents`` EMF documents
    (ten calls each, four answered 429), the last second's telemetry."""
    from controller.model import Sample
    from load.recording import (
        RecordedLine,
        emf_line,
        kinesis_event,
        log_group_of,
        subscription_payload,
    )

    lines = []
    for index, queue in enumerate(queues):
        events = []
        for document in range(documents):
            at = now - 1.0 + document * 0.2
            sample = Sample(queue, at, requests=10, ok=6, throttled=4, invocation_ms=150.0)
            events.append((at, emf_line(sample)))
        data = subscription_payload(events, log_group_of(queue), f"{queue}/[$LATEST]0")
        lines.append(RecordedLine(now, "shardId-000000000000", str(index + 1), queue, data))
    return kinesis_event(lines)


class Stopwatch:
    """Accumulated seconds per phase, across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds: dict[str, float] = {}

    @contextmanager
    def timing(self, phase: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            with self._lock:
                self.seconds[phase] = self.seconds.get(phase, 0.0) + elapsed

    def get(self, phase: str) -> float:
        return self.seconds.get(phase, 0.0)


class TimedLedger:
    """The ledger, with the time spent in it accounted."""

    def __init__(self, inner: Any, watch: Stopwatch) -> None:
        self._inner = inner
        self._watch = watch
        self.commits = 0

    def get_configs(self, queues: Iterable[str]) -> dict[str, QueueConfig]:
        with self._watch.timing("ledger"):
            return dict(self._inner.get_configs(queues))

    def list_configs(self) -> list[QueueConfig]:
        with self._watch.timing("ledger"):
            return list(self._inner.list_configs())

    def put_config(self, config: QueueConfig) -> None:
        with self._watch.timing("ledger"):
            self._inner.put_config(config)

    def get_states(self, queues: Iterable[str]) -> dict[str, QueueState]:
        with self._watch.timing("ledger"):
            return dict(self._inner.get_states(queues))

    def list_states(self) -> list[QueueState]:
        with self._watch.timing("ledger"):
            return list(self._inner.list_states())

    def commit(self, state: QueueState, audit: AuditEntry) -> QueueState:
        self.commits += 1
        with self._watch.timing("ledger"), self._watch.timing("commit"):
            committed: QueueState = self._inner.commit(state, audit)
            return committed

    def audit_trail(self, queue: str, since: float | None = None) -> list[AuditEntry]:
        with self._watch.timing("ledger"):
            return list(self._inner.audit_trail(queue, since))


class TimedActuator:
    """The actuator, with the time spent in it (pacing included) accounted; ``on_apply``
    hears of each mapping update."""

    def __init__(
        self, inner: Any, watch: Stopwatch, on_apply: Callable[[], None] = lambda: None
    ) -> None:
        self._inner = inner
        self._watch = watch
        self._on_apply = on_apply

    def read(self, uuid: str, deadline: float) -> MappingView:
        with self._watch.timing("actuate"):
            view: MappingView = self._inner.read(uuid, deadline)
            return view

    def apply(self, uuid: str, max_concurrency: int, enabled: bool, deadline: float) -> MappingView:
        with self._watch.timing("actuate"):
            view: MappingView = self._inner.apply(uuid, max_concurrency, enabled, deadline)
        self._on_apply()
        return view


class CallLog:
    """Every Lambda control-plane call the controller makes, timestamped (botocore hook)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: list[tuple[float, str]] = []

    def attach(self, lambda_client: Any) -> None:
        lambda_client.meta.events.register("before-call.lambda", self._seen)

    def _seen(self, model: Any, **_: Any) -> None:
        with self._lock:
            self.calls.append((time.monotonic(), str(model.name)))

    def max_in_one_second(self, operation: str | None = None) -> int:
        times = sorted(t for t, name in self.calls if operation is None or name == operation)
        best, start = 0, 0
        for end, moment in enumerate(times):
            while moment - times[start] >= 1.0:
                start += 1
            best = max(best, end - start + 1)
        return best

    def count(self, operation: str | None = None) -> int:
        return sum(1 for _, name in self.calls if operation is None or name == operation)


def _best_of(repeats: int, work: Callable[[], object]) -> float:
    best = math.inf
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def _floor_decode(event: dict[str, Any]) -> int:
    """The least any decoder must do: base64, gunzip, parse the payload and every message."""
    documents = 0
    for record in event["Records"]:
        payload = json.loads(gzip.decompress(base64.b64decode(record["kinesis"]["data"])))
        for log_event in payload["logEvents"]:
            json.loads(log_event["message"])
            documents += 1
    return documents


def measure(
    queue_count: int,
    timeout_s: float,
    max_invocations: int,
    moto_deepcopy: bool = False,
    progress: ProgressCallback | None = None,
) -> dict[str, Any]:
    """Run the benchmark; ``progress`` hears of the setup and of each mapping update."""
    from controller.actuator import LambdaActuator
    from controller.app import ControllerApp
    from controller.engine import Controller
    from controller.ledger import DynamoLedger
    from controller.settings import PolicyParams
    from controller.telemetry import decode_kinesis_event

    queues = [f"fleet-{index:04d}" for index in range(queue_count)]
    from stack.emulator import EmbeddedAws

    with table_snapshots_by_index(not moto_deepcopy), EmbeddedAws() as aws:
        endpoint = aws.endpoint
        notify = progress or (lambda done, total, what: None)
        notify(0, queue_count, "setting up queues, mappings and registrations")
        setup_started = time.perf_counter()
        fleet = build_fleet(endpoint, queues, register=True)
        setup_s = time.perf_counter() - setup_started

        watch = Stopwatch()
        calls = CallLog()
        lambda_client = client(
            endpoint, "lambda", retries={"mode": "standard", "total_max_attempts": 1}
        )
        calls.attach(lambda_client)
        plain_ledger = DynamoLedger(fleet.table, client(endpoint, "dynamodb"))
        ledger = TimedLedger(plain_ledger, watch)
        updates = [0]

        def updated() -> None:
            updates[0] += 1
            notify(updates[0], queue_count, "mappings updated")

        actuator = TimedActuator(LambdaActuator(lambda_client), watch, updated)
        controller = Controller(ledger, actuator, PolicyParams())
        plan = controller.plan

        def timed_plan(now: float, deadline: float = math.inf) -> Any:
            # Deciding is the plan minus the ledger reads it makes (configs, states).
            ledger_before = watch.get("ledger")
            started = time.perf_counter()
            result = plan(now, deadline)
            spent = time.perf_counter() - started - (watch.get("ledger") - ledger_before)
            watch.seconds["decide"] = watch.get("decide") + spent
            return result

        controller.plan = timed_plan  # type: ignore[method-assign]
        virtual_now = [time.time() + 2.0]
        app = ControllerApp(
            controller, clock=lambda: virtual_now[0], emit=lambda _: None, logger=_quiet_logger()
        )

        event = storm_event(queues, virtual_now[0])
        decoded = decode_kinesis_event(event)
        documents = _floor_decode(event)
        # Best of a few: one pass over a thousand records is short enough for noise to show.
        decode_s = _best_of(DECODE_REPEATS, lambda: decode_kinesis_event(event))
        decode_floor_s = _best_of(DECODE_REPEATS, lambda: _floor_decode(event))

        invocations = []
        changed: dict[str, int] = {}
        all_started = time.monotonic()
        batch: dict[str, Any] = event
        for number in range(max_invocations):
            before = dict(watch.seconds)
            started = time.monotonic()
            outcome = app.process_kinesis(batch, started + timeout_s)
            elapsed = time.monotonic() - started
            for decision in outcome.decisions:
                if decision.target != decision.previous:
                    changed[decision.queue] = decision.target
            invocations.append(
                {
                    "invocation": number + 1,
                    "wall_s": round(elapsed, 3),
                    "decided_and_done": len(outcome.decisions),
                    "changes_applied_so_far": len(changed),
                    "ledger_s": round(watch.get("ledger") - before.get("ledger", 0.0), 3),
                    "actuate_s": round(watch.get("actuate") - before.get("actuate", 0.0), 3),
                    "fits_timeout": elapsed <= timeout_s,
                }
            )
            if len(changed) >= queue_count:
                break
            # The next invocation: a second later; the deferred queues are still pending in
            # this warm container (in AWS their next telemetry would make them pending again).
            virtual_now[0] += 1.0
            batch = {"Records": []}
        all_applied_s = time.monotonic() - all_started

        # Not timed: the read-back checks the run, it is no part of it.
        readback = _read_back(lambda_client, fleet, plain_ledger)
        floor_per_transaction_s = _transaction_floor(
            client(endpoint, "dynamodb"), fleet.table, FLOOR_TRANSACTIONS
        )

    first = invocations[0]
    commits = ledger.commits
    per_commit_s = watch.get("commit") / commits if commits else 0.0
    update_calls = calls.count("UpdateEventSourceMapping")
    control_calls = calls.count()
    return {
        "benchmark": "fleet",
        "queues": queue_count,
        "moto_transaction_snapshots": "whole-table deepcopy" if moto_deepcopy else "item index",
        "setup_s": round(setup_s, 2),
        "timeout_s": timeout_s,
        "records": len(event["Records"]),
        "samples": len(decoded.samples),
        "decode_s": round(decode_s, 4),
        "decode_floor_s": round(decode_floor_s, 4),
        "decode_floor_ratio": round(decode_s / decode_floor_s, 2) if decode_floor_s else None,
        "decide_s": round(watch.get("decide"), 4),
        "ledger_s": round(watch.get("ledger"), 3),
        "ledger_commits": commits,
        "ledger_ms_per_commit": round(per_commit_s * 1000, 2),
        "transaction_floor_ms": round(floor_per_transaction_s * 1000, 2),
        "commit_floor_ratio": round(per_commit_s / floor_per_transaction_s, 2),
        "actuate_s": round(watch.get("actuate"), 3),
        "control_plane_calls": control_calls,
        "update_calls": update_calls,
        "quota_floor_s": round(control_calls / 15.0, 2),
        "actuate_quota_ratio": round(watch.get("actuate") / (control_calls / 15.0), 2)
        if control_calls
        else None,
        "max_calls_in_any_1s": calls.max_in_one_second(),
        "max_updates_in_any_1s": calls.max_in_one_second("UpdateEventSourceMapping"),
        "first_invocation_s": first["wall_s"],
        "first_invocation_changes": first["changes_applied_so_far"],
        "invocations_until_all_applied": len(invocations),
        "all_applied_s": round(all_applied_s, 2),
        "invocations": invocations,
        "readback": readback,
        "documents": documents,
    }


def _quiet_logger() -> Any:
    import logging
    import sys

    from aws_lambda_powertools import Logger

    return Logger(
        service="queuemesh-bench", level="WARNING", logger_handler=logging.StreamHandler(sys.stderr)
    )


def _read_back(lambda_client: Any, fleet: LocalFleet, ledger: Any) -> dict[str, Any]:
    """Every mapping as Lambda reports it, against the value the ledger says was applied."""
    actual: dict[str, int | None] = {}
    for page in lambda_client.get_paginator("list_event_source_mappings").paginate():
        for mapping in page["EventSourceMappings"]:
            maximum = (mapping.get("ScalingConfig") or {}).get("MaximumConcurrency")
            actual[str(mapping["UUID"])] = None if maximum is None else int(maximum)
    states = {state.queue: state for state in ledger.list_states()}
    matching = cut = 0
    mismatched: list[str] = []
    for queue, uuid in fleet.mappings.items():
        state = states.get(queue)
        value = actual.get(uuid)
        if state is not None and value == state.concurrency:
            matching += 1
        else:
            mismatched.append(queue)
        if value is not None and value < START_CONCURRENCY:
            cut += 1
    return {
        "mappings": len(fleet.mappings),
        "matching_ledger": matching,
        "cut_below_start": cut,
        "mismatched": mismatched[:10],
    }


def _transaction_floor(dynamodb: Any, table: str, samples: int) -> float:
    """Seconds per bare two-item TransactWriteItems on the same table: the emulator's own
    cost of a transaction (moto copies the table for each), measured on scratch items."""
    started = time.perf_counter()
    for index in range(samples):
        dynamodb.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": table,
                        "Item": {"PK": {"S": f"FLOOR#{index}"}, "SK": {"S": sk}},
                    }
                }
                for sk in ("STATE#CURRENT", "AUDIT#floor")
            ]
        )
    return (time.perf_counter() - started) / samples


def register(bench_subparsers: Any) -> None:
    parser = bench_subparsers.add_parser(
        "fleet",
        help="one telemetry batch for a fleet of managed queues, on the local emulator",
        description=(
            "Time decoding, deciding, the ledger and ESM updates for one batch that moves "
            "every queue of a fleet, on moto; follow invocations until every mapping reads back "
            "at its decided value; count control-plane calls per second."
        ),
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--queues", type=int, default=1000, help="managed queues (default 1000)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="the controller invocation's time limit in seconds (template.yaml: 120)",
    )
    parser.add_argument(
        "--max-invocations", type=int, default=20, help="give up after this many invocations"
    )
    parser.add_argument(
        "--moto-deepcopy",
        action="store_true",
        help="keep moto's whole-table copy per DynamoDB transaction (slow: measures moto)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from stack.errors import CliError

    if not 1 <= args.queues <= 5000:
        raise CliError(f"--queues must be 1..5000, got {args.queues}")
    if not 5 <= args.timeout <= 900:
        raise CliError(f"--timeout must be 5..900 s (Lambda's range), got {args.timeout}")
    with Progress.for_command("bench fleet", json_output=args.json) as progress:
        report = measure(
            args.queues, args.timeout, args.max_invocations, args.moto_deepcopy, progress.update
        )
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"fleet of {report['queues']} queues, one batch of {report['records']} records "
        f"({report['samples']} samples):\n"
        f"  decode  {report['decode_s']:.3f} s ({report['decode_floor_ratio']}x the "
        "base64+gunzip+JSON floor)\n"
        f"  decide  {report['decide_s']:.3f} s\n"
        f"  ledger  {report['ledger_s']:.2f} s, {report['ledger_ms_per_commit']} ms per commit "
        f"({report['commit_floor_ratio']}x a bare two-item transaction on the same table)\n"
        f"  actuate {report['actuate_s']:.1f} s for {report['control_plane_calls']} control-plane "
        f"calls ({report['actuate_quota_ratio']}x the 15/s quota floor); at most "
        f"{report['max_calls_in_any_1s']} calls in any 1 s\n"
        f"  first invocation: {report['first_invocation_changes']} changes in "
        f"{report['first_invocation_s']:.1f} s of a {report['timeout_s']:.0f} s timeout; all "
        f"applied after {report['invocations_until_all_applied']} invocations, "
        f"{report['all_applied_s']:.1f} s\n"
        f"  read back: {report['readback']['matching_ledger']}/{report['readback']['mappings']} "
        f"mappings match the ledger, {report['readback']['cut_below_start']} cut"
    )
    return 0
