"""`queuemesh replay`: a recording through the real controller, on a virtual clock.

The records are grouped into Kinesis batches the way a Kinesis event source mapping forms them
(per shard, a batching window and a maximum batch size; see ``kinesis_batches``), each batch is
handed to ``ControllerApp.process_kinesis`` with the clock reading the batch's delivery time,
and every decision the controller takes is reported. Nothing reads the wall clock, and the
in-memory adapters have no randomness in what they decide: the same file and configuration
give the same decisions, which is what golden decision logs (``--expect``) rely on.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
import os
import sys
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.constants import MAX_CONCURRENCY, MIN_CONCURRENCY
from controller.model import Decision, Mode, QueueConfig, QueueStateName
from controller.policy import DEFAULT_ALGORITHM
from controller.schema import NAMESPACE
from controller.settings import PolicyParams, SettingsError
from load.recording import (
    RecordedLine,
    Recording,
    RecordingError,
    UnreadableRecording,
    kinesis_event,
    read_recording,
)
from stack.errors import CliError

# The controller's Kinesis mapping in template.yaml: BatchSize 1000, a 1 s batching window.
DEFAULT_BATCH_SIZE = 1000
DEFAULT_BATCH_WINDOW_S = 1.0
MAX_BATCH_SIZE = 10_000
MAX_BATCH_WINDOW_S = 300.0
REPLAY_ACCOUNT = "000000000000"
REPLAY_REGION = "us-east-1"
STREAM_ARN = f"arn:aws:kinesis:{REPLAY_REGION}:{REPLAY_ACCOUNT}:stream/queuemesh-replay"
MODES = {"active": Mode.ACTIVE, "dry-run": Mode.DRY_RUN, "pinned": Mode.PINNED}
CONFIG_KEYS = {"params", "queues", "batching", "namespace", "algorithm", "schedule_s"}
MIN_SCHEDULE_S = 1.0
# template.yaml's wake-up schedule for the controller: rate(1 minute).
DEFAULT_SCHEDULE_S = 60.0
QUEUE_KEYS = {"esm_uuid", "mode", "overrides", "concurrency"}
BATCHING_KEYS = {"batch_size", "window_s"}


# --- recordings -----------------------------------------------------------------------------


def load_recording(path: Path, skip_bad: bool) -> Recording:
    """The recording's records (see ``load.recording.read_recording``), errors as one line."""
    try:
        return read_recording(path, skip_bad=skip_bad)
    except UnreadableRecording as error:
        raise CliError(str(error)) from error
    except RecordingError as error:
        raise CliError(f"{path}: {error}; fix it or pass --skip-bad") from error


# --- replay configuration -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueSetup:
    """How a queue starts in a replay: registered, in a mode, with its mapping at a value."""

    esm_uuid: str | None = None
    mode: Mode = Mode.ACTIVE
    overrides: Mapping[str, float] = field(default_factory=dict)
    concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """``queues is None``: every queue seen in the recording, registered with the defaults."""

    params: PolicyParams = field(default_factory=PolicyParams)
    queues: Mapping[str, QueueSetup] | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    batch_window_s: float = DEFAULT_BATCH_WINDOW_S
    namespace: str = NAMESPACE
    algorithm: str = DEFAULT_ALGORITHM
    schedule_s: float | None = DEFAULT_SCHEDULE_S


def load_config(path: Path) -> ReplayConfig:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise CliError(f"cannot read replay config {path}: {error.strerror}") from error
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CliError(f"replay config {path} is not JSON: {error}") from error
    try:
        return parse_config(raw)
    except (SettingsError, ValueError, TypeError) as error:
        raise CliError(f"replay config {path}: {error}") from error


def parse_config(raw: object) -> ReplayConfig:
    """The replay configuration from its JSON form (docs/operations.md describes it)."""
    from controller.policy import ALGORITHMS

    table = _object(raw, "the configuration", CONFIG_KEYS)
    params = PolicyParams().with_overrides(_object(table.get("params", {}), "'params'", None))
    batching = _object(table.get("batching", {}), "'batching'", BATCHING_KEYS)
    batch_size = batching.get("batch_size", DEFAULT_BATCH_SIZE)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise ValueError(f"'batching.batch_size' must be a whole number, got {batch_size!r}")
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ValueError(f"'batching.batch_size' must be 1..{MAX_BATCH_SIZE}, got {batch_size}")
    window = batching.get("window_s", DEFAULT_BATCH_WINDOW_S)
    if isinstance(window, bool) or not isinstance(window, int | float):
        raise ValueError(f"'batching.window_s' must be seconds, got {window!r}")
    if not 0 <= window <= MAX_BATCH_WINDOW_S:
        raise ValueError(f"'batching.window_s' must be 0..{MAX_BATCH_WINDOW_S:g}, got {window}")
    namespace = table.get("namespace", NAMESPACE)
    if not isinstance(namespace, str) or not namespace:
        raise ValueError(f"'namespace' must be a non-empty string, got {namespace!r}")
    algorithm = table.get("algorithm", DEFAULT_ALGORITHM)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"'algorithm' must be one of {sorted(ALGORITHMS)}, got {algorithm!r}")
    schedule_s = table.get("schedule_s", DEFAULT_SCHEDULE_S)
    if schedule_s is not None and (
        isinstance(schedule_s, bool)
        or not isinstance(schedule_s, int | float)
        or not MIN_SCHEDULE_S <= schedule_s <= 3600
    ):
        raise ValueError(f"'schedule_s' must be seconds in 1..3600 or null, got {schedule_s!r}")
    queues = None
    if "queues" in table:
        queues = {
            str(name): _queue_setup(str(name), spec, params)
            for name, spec in _object(table["queues"], "'queues'", None).items()
        }
    return ReplayConfig(
        params,
        queues,
        batch_size,
        float(window),
        namespace,
        algorithm,
        None if schedule_s is None else float(schedule_s),
    )


def _queue_setup(name: str, raw: object, params: PolicyParams) -> QueueSetup:
    spec = _object(raw, f"queue {name!r}", QUEUE_KEYS)
    mode_name = spec.get("mode", "active")
    if mode_name not in MODES:
        raise ValueError(f"queue {name!r}: 'mode' must be one of {sorted(MODES)}")
    overrides = _object(spec.get("overrides", {}), f"queue {name!r} 'overrides'", None)
    # Checked now, so a typo fails before the replay rather than in the middle of it.
    params.with_overrides(overrides)
    concurrency = spec.get("concurrency")
    if concurrency is not None and (
        isinstance(concurrency, bool)
        or not isinstance(concurrency, int)
        or not MIN_CONCURRENCY <= concurrency <= MAX_CONCURRENCY
    ):
        raise ValueError(
            f"queue {name!r}: 'concurrency' must be a whole number in "
            f"{MIN_CONCURRENCY}..{MAX_CONCURRENCY}"
        )
    esm_uuid = spec.get("esm_uuid")
    if esm_uuid is not None and not isinstance(esm_uuid, str):
        raise ValueError(f"queue {name!r}: 'esm_uuid' must be a string")
    return QueueSetup(
        esm_uuid=esm_uuid,
        mode=MODES[mode_name],
        overrides={key: float(value) for key, value in overrides.items()},
        concurrency=concurrency,
    )


def _object(raw: object, what: str, allowed: set[str] | None) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"{what} must be a JSON object")
    if allowed is not None:
        unknown = sorted(set(raw) - allowed)
        if unknown:
            raise ValueError(f"{what}: unknown key(s) {unknown}; known: {sorted(allowed)}")
    return raw


# --- batching -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Batch:
    time: float
    shard: str
    records: tuple[RecordedLine, ...]


def kinesis_batches(
    records: Iterable[RecordedLine], batch_size: int, window_s: float
) -> list[Batch]:
    """Group records into the batches a Kinesis ESM would deliver, in delivery order.

    Per shard, in sequence order: a batch opens with the first record not yet delivered and
    closes when it holds
    ``batch_size`` records (delivered at that record's arrival) or when ``window_s`` has passed
    since it opened (delivered then). Shards are independent; batches of different shards are
    delivered in time order (shard id breaks ties). A shard's next batch opens only after the
    previous one was delivered, as Lambda processes one batch per shard at a time.
    """
    by_shard: dict[str, list[RecordedLine]] = {}
    for record in records:
        by_shard.setdefault(record.shard, []).append(record)
    batches: list[Batch] = []
    for shard, shard_records in by_shard.items():
        # A shard delivers in sequence order, whatever the approximate arrival stamps say.
        ordered = sorted(shard_records, key=lambda r: int(r.sequence))
        index = 0
        while index < len(ordered):
            opened = ordered[index].arrival
            closes = opened + window_s
            end = index + 1
            while end < len(ordered) and end - index < batch_size:
                if ordered[end].arrival > closes:
                    break
                end += 1
            chunk = tuple(ordered[index:end])
            delivered = chunk[-1].arrival if len(chunk) == batch_size else closes
            batches.append(Batch(delivered, shard, chunk))
            index = end
    batches.sort(key=lambda batch: (batch.time, batch.shard, int(batch.records[0].sequence)))
    return batches


# --- replay ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplayedDecision:
    time: float
    queue: str
    action: str
    state: str
    previous: int
    target: int
    reason: str
    pressure_rate: float
    success_rate: float
    enabled: bool
    changed: bool

    @classmethod
    def of(cls, time: float, decision: Decision, changed: bool) -> ReplayedDecision:
        return cls(
            time=time,
            queue=decision.queue,
            action=decision.action.value,
            state=decision.state.value,
            previous=decision.previous,
            target=decision.target,
            reason=decision.reason,
            pressure_rate=decision.pressure_rate,
            success_rate=decision.success_rate,
            enabled=decision.enabled,
            changed=changed,
        )

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReplayedDecision:
        return cls(
            time=float(raw["time"]),
            queue=str(raw["queue"]),
            action=str(raw["action"]),
            state=str(raw["state"]),
            previous=int(raw["previous"]),
            target=int(raw["target"]),
            reason=str(raw["reason"]),
            pressure_rate=float(raw.get("pressure_rate", 0.0)),
            success_rate=float(raw.get("success_rate", 0.0)),
            enabled=bool(raw.get("enabled", True)),
            changed=bool(raw.get("changed", raw["previous"] != raw["target"])),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "time": round(self.time, 6),
            "queue": self.queue,
            "action": self.action,
            "state": self.state,
            "previous": self.previous,
            "target": self.target,
            "reason": self.reason,
            "pressure_rate": round(self.pressure_rate, 6),
            "success_rate": round(self.success_rate, 6),
            "enabled": self.enabled,
            "changed": self.changed,
        }

    def render(self) -> str:
        """One line per decision: what golden comparisons diff."""
        paused = "" if self.enabled else " (paused)"
        return (
            f"{self.time:.3f} {self.queue} {self.action} {self.state} "
            f"{self.previous}->{self.target}{paused} | {self.reason}"
        )


@dataclass(slots=True)
class ReplayReport:
    decisions: list[ReplayedDecision] = field(default_factory=list)
    records: int = 0
    batches: int = 0
    samples: int = 0
    ticks: int = 0
    redelivered: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    counters: Counter[str] = field(default_factory=Counter)
    queues: list[str] = field(default_factory=list)
    start: float | None = None


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def queues_in(records: Iterable[RecordedLine], namespace: str) -> list[str]:
    """Every queue some record of the recording carries telemetry for."""
    from controller.telemetry import DecodeResult, decode_record_data

    seen: set[str] = set()
    for record in records:
        result = decode_record_data(record.data, namespace=namespace, into=DecodeResult())
        seen.update(sample.queue for sample in result.samples)
    return sorted(seen)


def in_memory_adapters(
    config: ReplayConfig, queues: Sequence[str], clock: VirtualClock
) -> tuple[Any, Any]:
    """The in-memory ledger and actuator, with the replayed queues registered."""
    from controller.actuator import InMemoryActuator
    from controller.ledger import InMemoryLedger

    ledger = InMemoryLedger()
    actuator = InMemoryActuator(clock=clock)
    setups = config.queues if config.queues is not None else dict.fromkeys(queues, QueueSetup())
    for queue, setup in sorted(setups.items()):
        esm_uuid = setup.esm_uuid or f"replay-{queue}"
        cmax = config.params.with_overrides(setup.overrides).cmax
        concurrency = setup.concurrency if setup.concurrency is not None else cmax
        actuator.add_mapping(
            esm_uuid,
            concurrency,
            event_source_arn=f"arn:aws:sqs:{REPLAY_REGION}:{REPLAY_ACCOUNT}:{queue}",
        )
        ledger.put_config(
            QueueConfig(
                queue=queue,
                esm_uuid=esm_uuid,
                mode=setup.mode,
                pinned_concurrency=concurrency if setup.mode is Mode.PINNED else None,
                overrides=dict(setup.overrides),
            )
        )
    return ledger, actuator


def replay(
    records: Sequence[RecordedLine],
    config: ReplayConfig,
    *,
    ledger: Any = None,
    actuator: Any = None,
) -> ReplayReport:
    """Feed ``records`` through a fresh ``ControllerApp``; in-memory adapters unless given."""
    import logging

    from aws_lambda_powertools import Logger

    from controller.app import ControllerApp
    from controller.engine import Controller
    from controller.policy import ALGORITHMS

    clock = VirtualClock()
    report = ReplayReport(records=len(records))
    report.queues = queues_in(records, config.namespace)
    if ledger is None or actuator is None:
        ledger, actuator = in_memory_adapters(config, report.queues, clock)
    controller = Controller(
        ledger, actuator, config.params, algorithm=ALGORITHMS[config.algorithm]()
    )
    # The controller's logs are for CloudWatch; here only its warnings matter, on stderr.
    logger = Logger(
        service="queuemesh-replay",
        level="WARNING",
        logger_handler=logging.StreamHandler(sys.stderr),
    )
    app = ControllerApp(
        controller, clock=clock, namespace=config.namespace, emit=_discard, logger=logger
    )
    last_state: dict[str, str] = {}

    def keep(time: float, executed: Sequence[Decision]) -> None:
        for decision in executed:
            before = last_state.get(decision.queue, QueueStateName.HEALTHY.value)
            changed = decision.changes_mapping or decision.state.value != before
            last_state[decision.queue] = decision.state.value
            report.decisions.append(ReplayedDecision.of(time, decision, changed))

    batches = kinesis_batches(records, config.batch_size, config.batch_window_s)
    report.batches = len(batches)
    report.start = records[0].arrival if records else None
    for invocation in _invocations(batches, config.schedule_s):
        clock.now = invocation.time
        if invocation.batch is None:
            outcome = app.tick(math.inf)
            report.ticks += 1
        else:
            event = kinesis_event(invocation.batch.records, STREAM_ARN)
            outcome = app.process_kinesis(event, math.inf)
            report.samples += outcome.samples
            report.redelivered += outcome.redelivered
            report.skipped.update(outcome.skipped)
        keep(invocation.time, outcome.decisions)
    report.counters = Counter(controller.counters)
    return report


@dataclass(frozen=True, slots=True)
class Invocation:
    time: float
    batch: Batch | None  # None: a scheduled tick


def _invocations(batches: Sequence[Batch], schedule_s: float | None) -> list[Invocation]:
    """The batches, and scheduled ticks every ``schedule_s`` from the first batch to the last
    (a tick at the same moment as a batch runs after it)."""
    invocations = [Invocation(batch.time, batch) for batch in batches]
    if schedule_s is None or not batches:
        return invocations
    first, last = batches[0].time, batches[-1].time
    ticks = math.floor((last - first) / schedule_s)
    invocations += [Invocation(first + n * schedule_s, None) for n in range(1, ticks + 1)]
    return sorted(invocations, key=lambda invocation: (invocation.time, invocation.batch is None))


def _discard(_: str) -> None:
    """The controller's dashboard metrics have no CloudWatch to go to in a replay."""


# --- output ---------------------------------------------------------------------------------


def decisions_json(decisions: Sequence[ReplayedDecision]) -> str:
    """A JSON list, one decision per line, so golden files diff well in review."""
    if not decisions:
        return "[]"
    lines = ",\n".join(json.dumps(d.to_json(), sort_keys=True) for d in decisions)
    return f"[\n{lines}\n]"


def decisions_table(decisions: Sequence[ReplayedDecision], start: float | None) -> str:
    header = ("t (s)", "queue", "action", "state", "concurrency", "reason")
    rows = [
        (
            f"{d.time - (start or 0.0):.1f}",
            d.queue,
            d.action,
            d.state,
            f"{d.previous} -> {d.target}" + ("" if d.enabled else " (paused)"),
            d.reason,
        )
        for d in decisions
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def load_expected(path: Path) -> list[ReplayedDecision]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise CliError(f"cannot read expected decisions {path}: {error.strerror}") from error
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CliError(f"expected decisions {path} are not JSON: {error}") from error
    if not isinstance(raw, list):
        raise CliError(f"expected decisions {path}: want a JSON list (`replay --json` output)")
    try:
        return [ReplayedDecision.from_json(item) for item in raw]
    except (KeyError, TypeError, ValueError) as error:
        raise CliError(f"expected decisions {path}: a decision lacks {error}") from error


def compare(
    expected: Sequence[ReplayedDecision],
    actual: Sequence[ReplayedDecision],
    expected_name: str,
) -> list[str]:
    """A unified diff of the one-line renderings; empty when they agree."""
    return list(
        difflib.unified_diff(
            [d.render() for d in expected],
            [d.render() for d in actual],
            fromfile=expected_name,
            tofile="replay",
            lineterm="",
        )
    )


# --- command --------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from stack.aws import add_target_arguments

    parser = subparsers.add_parser(
        "replay",
        help="replay a recording through the controller and print its decisions",
        description=(
            "Feed a recording (from `queuemesh record` or `queuemesh simulate --record`) "
            "through the real controller on a virtual clock, with in-memory adapters (or the "
            "local stack's with --endpoint-url), and print the decisions."
        ),
    )
    parser.add_argument("file", type=Path, help="recording (JSON Lines)")
    parser.add_argument(
        "--config", type=Path, help="replay configuration (JSON; see docs/operations.md)"
    )
    parser.add_argument("--json", action="store_true", help="print the decisions as JSON")
    parser.add_argument(
        "--changes",
        action="store_true",
        help="only decisions that move a mapping or change a queue's state (no HOLDs)",
    )
    parser.add_argument(
        "--expect",
        type=Path,
        help="compare with a golden decision log (`replay --json` output); exit 1 on a diff",
    )
    parser.add_argument(
        "--skip-bad", action="store_true", help="skip broken lines (counted) instead of failing"
    )
    parser.add_argument(
        "--algorithm",
        choices=sorted(_algorithms()),
        help="the controller's limit algorithm (default: the config's, else "
        f"'{DEFAULT_ALGORITHM}', as deployed)",
    )
    parser.add_argument(
        "--table",
        default=os.environ.get("QUEUEMESH_TABLE"),
        help="ledger table with --endpoint-url (default: QUEUEMESH_TABLE)",
    )
    add_target_arguments(parser, endpoint_from_env=False)
    parser.set_defaults(func=run)


def _algorithms() -> list[str]:
    from controller.policy import ALGORITHMS

    return list(ALGORITHMS)


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config) if args.config else ReplayConfig()
    if args.algorithm is not None:
        config = dataclasses.replace(config, algorithm=args.algorithm)
    recording = load_recording(args.file, args.skip_bad)
    ledger = actuator = None
    if args.endpoint_url:
        ledger, actuator = _stack_adapters(args, config)
    report = replay(recording.records, config, ledger=ledger, actuator=actuator)
    decisions = [d for d in report.decisions if d.changed or not args.changes]
    print(_summary(report, recording, decisions), file=sys.stderr)
    if args.expect is not None:
        diff = compare(load_expected(args.expect), decisions, str(args.expect))
        if diff:
            print("\n".join(diff))
            print(f"replay differs from {args.expect}", file=sys.stderr)
            return 1
        print(f"replay matches {args.expect} ({len(decisions)} decisions)", file=sys.stderr)
        return 0
    if args.json:
        print(decisions_json(decisions))
    elif decisions:
        print(decisions_table(decisions, report.start))
    return 0


def _stack_adapters(args: argparse.Namespace, config: ReplayConfig) -> tuple[Any, Any]:
    from controller.actuator import LambdaActuator
    from controller.ledger import DynamoLedger
    from stack.aws import AwsTarget

    if config.queues is not None:
        raise CliError(
            "with --endpoint-url the ledger table says which queues are registered; drop "
            "'queues' from the config and use `queuemesh register` on the local stack"
        )
    if not args.table:
        raise CliError("no ledger table: pass --table or set QUEUEMESH_TABLE")
    target = AwsTarget.from_args(args)
    ledger = DynamoLedger(args.table, target.client("dynamodb"))
    return ledger, LambdaActuator(target.client("lambda", retries=False))


def _summary(report: ReplayReport, recording: Recording, shown: Sequence[ReplayedDecision]) -> str:
    changes = sum(1 for d in report.decisions if d.changed)
    parts = [
        f"replayed {report.records} records in {report.batches} batches"
        + (f" and {report.ticks} scheduled ticks" if report.ticks else ""),
        f"{report.samples} samples, {len(report.queues)} queue(s)",
        f"{len(report.decisions)} decisions ({changes} changes; {len(shown)} shown)",
    ]
    if recording.bad_lines:
        parts.append(f"{len(recording.bad_lines)} broken line(s) skipped")
    if recording.duplicates:
        parts.append(f"{recording.duplicates} duplicate record(s) left out")
    skipped = sum(report.skipped.values())
    if skipped:
        reasons = ", ".join(f"{name} {count}" for name, count in sorted(report.skipped.items()))
        parts.append(f"{skipped} telemetry item(s) skipped ({reasons})")
    if report.redelivered:
        parts.append(f"{report.redelivered} records ignored by the controller as redeliveries")
    unregistered = report.counters.get("samples_unregistered", 0)
    if unregistered:
        parts.append(f"{unregistered} samples of unregistered queues ignored")
    return "; ".join(parts)
