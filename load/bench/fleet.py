"""`queuemesh bench fleet`: one telemetry batch for a fleet of managed queues, on moto.

Setup (not timed), on the moto endpoint it is given (the command starts moto's server in this
process on 127.0.0.1; see ``load.localfleet``): the ledger table, a worker function (a tiny
zip), and per queue an SQS queue, an event source mapping at MaximumConcurrency 100 and a
CONFIG item. Then one Kinesis batch carrying a 40% 429 storm for
every queue goes through the real ``ControllerApp`` with ``DynamoLedger`` and
``LambdaActuator`` (real boto3 clients), with a Lambda-sized deadline.

Measured: decode, decide (plan), ledger (conditional state + audit commits), actuate
(the drift check's ListEventSourceMappings and the UpdateEventSourceMapping calls, paced by the
actuator's call window), and the most control-plane calls seen in any one-second window.
``calls_ratio`` is the calls made over one update per change plus the list pages (moto answers
a listing in one page; AWS in pages of 100). The time until every change was applied is
compared with the least time those calls can take: at the account's 15/s quota
(``all_applied_quota_ratio``) and at the controller's ceiling of 12 in any second
(``all_applied_ceiling_ratio``); the second is what the pacing can reach, the first what no
code can beat. Lambda's control plane allows 15 requests/s per account, so 1,000 changes take
more than a minute whatever the code does:
the controller executes what fits before its deadline and leaves the rest pending, and the
next batches carry them out. The benchmark follows batches until every mapping reads back at
its decided value, and reports how many batches and how long that took.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from controller.constants import CONTROL_PLANE_CALLS_PER_S, CONTROL_PLANE_QUOTA_PER_S
from load.bench.fleet_watch import CallLog, Stopwatch, TimedActuator, TimedLedger
from load.localfleet import START_CONCURRENCY, LocalFleet, build_fleet, client
from load.progress import ProgressCallback

FLOOR_TRANSACTIONS = 50
DECODE_REPEATS = 5


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


def storm_event(
    queues: Sequence[str],
    now: float,
    documents: int = 4,
    calm: Sequence[str] = (),
    first_sequence: int = 1,
) -> dict[str, Any]:
    """One Kinesis batch: per queue, one CloudWatch Logs record of ``documents`` EMF documents
    (ten calls each, four answered 429; none for the ``calm`` queues), the last second's
    telemetry; sequence numbers from ``first_sequence`` (a later batch's must be higher, or
    the controller takes it for a redelivery)."""
    from controller.model import Sample
    from load.recording import (
        RecordedLine,
        emf_line,
        kinesis_event,
        log_group_of,
        subscription_payload,
    )

    lines = []
    storming = len(queues)
    for index, queue in enumerate([*queues, *calm]):
        throttled = 4 if index < storming else 0
        events = []
        for document in range(documents):
            at = now - 1.0 + document * 0.2
            sample = Sample(
                queue,
                at,
                requests=10,
                ok=10 - throttled,
                throttled=throttled,
                invocation_ms=150.0,
            )
            events.append((at, emf_line(sample)))
        data = subscription_payload(events, log_group_of(queue), f"{queue}/[$LATEST]0")
        lines.append(
            RecordedLine(now, "shardId-000000000000", str(first_sequence + index), queue, data)
        )
    return kinesis_event(lines)


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
    endpoint: str,
    queue_count: int,
    timeout_s: float,
    max_invocations: int,
    moto_deepcopy: bool = False,
    progress: ProgressCallback | None = None,
) -> dict[str, Any]:
    """The benchmark on a fresh moto served in this process at ``endpoint`` (the transaction
    snapshot shortcut patches this process's moto backend); ``progress`` hears of the setup and
    of each mapping update."""
    from controller.actuator import LambdaActuator
    from controller.app import ControllerApp
    from controller.ledger import DynamoLedger
    from controller.loop import ControlLoop
    from controller.policy import memory_type
    from controller.settings import PolicyParams
    from controller.telemetry import decode_kinesis_event

    queues = [f"fleet-{index:04d}" for index in range(queue_count)]
    with table_snapshots_by_index(not moto_deepcopy):
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
        plain_ledger = DynamoLedger(
            fleet.table, client(endpoint, "dynamodb"), memory_types=memory_type
        )
        ledger = TimedLedger(plain_ledger, watch)
        updates = [0]

        def updated() -> None:
            updates[0] += 1
            notify(updates[0], queue_count, "mappings updated")

        lambda_actuator = LambdaActuator(lambda_client)
        actuator = TimedActuator(lambda_actuator, watch, updated)
        loop = ControlLoop(ledger, actuator, PolicyParams())
        virtual_now = [time.time() + 2.0]
        app = ControllerApp(
            loop, clock=lambda: virtual_now[0], emit=lambda _: None, logger=quiet_logger()
        )

        event = storm_event(queues, virtual_now[0])
        decoded = decode_kinesis_event(event)
        documents = _floor_decode(event)
        # Best of a few: one pass over a thousand records is short enough for noise to show.
        decode_s = _best_of(DECODE_REPEATS, lambda: decode_kinesis_event(event))
        decode_floor_s = _best_of(DECODE_REPEATS, lambda: _floor_decode(event))

        invocations = []
        changed: dict[str, int] = {}
        with timed_planning(watch):
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

        # Not timed nor counted (a client of its own): the read-back checks the run, it is no
        # part of it.
        readback = _read_back(client(endpoint, "lambda"), fleet, plain_ledger)
        floor_per_transaction_s = _transaction_floor(
            client(endpoint, "dynamodb"), fleet.table, FLOOR_TRANSACTIONS
        )

    first = invocations[0]
    commits = ledger.commits
    per_commit_s = watch.get("commit") / commits if commits else 0.0
    update_calls = calls.count("UpdateEventSourceMapping")
    list_calls = calls.count("ListEventSourceMappings")
    control_calls = calls.count()
    # The least time these calls can take: at the account's quota, and at the controller's
    # ceiling under it.
    quota_floor_s = control_calls / CONTROL_PLANE_QUOTA_PER_S
    ceiling_floor_s = control_calls / CONTROL_PLANE_CALLS_PER_S
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
        "list_calls": list_calls,
        "get_calls": calls.count("GetEventSourceMapping"),
        "calls_ratio": _ratio(control_calls, update_calls + list_calls),
        "quota_floor_s": round(quota_floor_s, 2),
        "quota_per_s": CONTROL_PLANE_QUOTA_PER_S,
        "ceiling_per_s": CONTROL_PLANE_CALLS_PER_S,
        "ceiling_floor_s": round(ceiling_floor_s, 2),
        "pacing_per_s": round(lambda_actuator.rate_per_s, 2),
        "actuate_quota_ratio": _ratio(watch.get("actuate"), quota_floor_s),
        "all_applied_quota_ratio": _ratio(all_applied_s, quota_floor_s),
        "all_applied_ceiling_ratio": _ratio(all_applied_s, ceiling_floor_s),
        "calls_span_s": round(calls.span_s(), 2),
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


def _ratio(value: float, floor: float) -> float | None:
    return round(value / floor, 2) if floor else None


@contextmanager
def timed_planning(
    watch: Stopwatch, on_plan: Callable[[Any], None] | None = None
) -> Iterator[None]:
    """Times the controller's deciding as ``decide`` (and its CPU time as ``decide_cpu``):
    its pure planner, which makes no call (the reads that feed it are the ledger's and the
    actuator's time); ``on_plan`` sees each plan."""
    import controller.loop

    pure = controller.loop.plan

    def timed(*args: Any, **kwargs: Any) -> Any:
        started, cpu_started = time.perf_counter(), time.process_time()
        plan = pure(*args, **kwargs)
        watch.seconds["decide"] = watch.get("decide") + time.perf_counter() - started
        cpu_s = time.process_time() - cpu_started
        watch.seconds["decide_cpu"] = watch.get("decide_cpu") + cpu_s
        if on_plan is not None:
            on_plan(plan)
        return plan

    controller.loop.plan = timed
    try:
        yield
    finally:
        controller.loop.plan = pure


def quiet_logger() -> Any:
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
