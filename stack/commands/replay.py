"""`queuemesh replay`: a recording through the real controller, on a virtual clock (see
``load.replay``); its one-line errors and its output."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from controller.planner import StepKind
from controller.policy import DEFAULT_ALGORITHM, memory_type
from load.progress import Progress, ProgressCallback
from load.recording import Recording, RecordingError, UnreadableRecording, read_recording
from load.replay import (
    ReplayConfig,
    ReplayedDecision,
    ReplayError,
    ReplayReport,
    compare,
    decisions_json,
    decisions_table,
    load_config,
    load_expected,
    replay,
)
from stack.errors import CliError


def load_recording(path: Path, skip_bad: bool) -> Recording:
    """The recording's records (see ``load.recording.read_recording``), errors as one line;
    a recording without a record to replay is one too."""
    try:
        recording = read_recording(path, skip_bad=skip_bad)
    except UnreadableRecording as error:
        raise CliError(str(error)) from error
    except RecordingError as error:
        raise CliError(f"{path}: {error}; fix it or pass --skip-bad") from error
    if not recording.records:
        bad = recording.bad_lines
        why = f" ({len(bad)} broken line(s) skipped, the first: {bad[0]})" if bad else ""
        raise CliError(
            f"{path} holds no record to replay{why}; record one with `queuemesh record` or "
            "`queuemesh simulate --record`"
        )
    return recording


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
        "--dry-run",
        action="store_true",
        help="print the controller's plans (update, record or hold per queue) and carry none "
        "out: with --endpoint-url the stack's ledger and mappings are only read",
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
    try:
        return _run(args)
    except ReplayError as error:
        raise CliError(str(error)) from error


def _run(args: argparse.Namespace) -> int:
    # Every input is read and checked before the replay runs.
    if args.dry_run and (args.expect or args.json):
        raise CliError("--dry-run prints plans; --expect and --json are for decisions")
    config = load_config(args.config) if args.config else ReplayConfig()
    if args.algorithm is not None:
        config = dataclasses.replace(config, algorithm=args.algorithm)
    expected = None if args.expect is None else load_expected(args.expect)
    recording = load_recording(args.file, args.skip_bad)
    with Progress.for_command("replay", json_output=args.json) as progress:
        if args.endpoint_url:
            report = _replay_on_stack(args, config, recording, progress.update)
        else:
            report = replay(
                recording.records, config, progress=progress.update, dry_run=args.dry_run
            )
    decisions = [d for d in report.decisions if d.changed or not args.changes]
    print(_summary(report, recording, decisions), file=sys.stderr)
    # After the replay: a replay that fails says so in its one line alone.
    if args.config is None and not args.endpoint_url:
        print(_defaults_note(config), file=sys.stderr)
    if args.dry_run:
        view = _plan_view(report, args.changes)
        if view:
            print(view)
        return 0
    if expected is not None:
        diff = compare(expected, decisions, str(args.expect))
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


def _defaults_note(config: ReplayConfig) -> str:
    """Without ``--config`` every queue in the recording is decided with the default policy,
    whatever it ran with when recorded: said, so a replay differing from the live run is not
    a surprise."""
    return (
        f"queuemesh replay: no --config: every queue decided with the default settings "
        f"(Cmin {config.params.cmin}, Cmax {config.params.cmax}, algorithm {config.algorithm}); "
        "pass the config the recording was made with (`queuemesh demo --record X.jsonl` "
        "writes X.config.json)"
    )


def _replay_on_stack(
    args: argparse.Namespace,
    config: ReplayConfig,
    recording: Recording,
    progress: ProgressCallback,
) -> ReplayReport:
    """The replay with the local stack's ledger and mappings; the table is read once up
    front, so an endpoint that is down or a table that is missing is one line, not a replay of
    failing batches."""
    from controller.actuator import LambdaActuator
    from controller.ledger import DynamoLedger
    from stack.aws import AwsTarget
    from stack.ops.commands import adapter_errors

    if config.queues is not None:
        raise CliError(
            "with --endpoint-url the ledger table says which queues are registered; drop "
            "'queues' from the config and use `queuemesh register` on the local stack"
        )
    if not args.table:
        raise CliError("no ledger table: pass --table or set QUEUEMESH_TABLE")
    target = AwsTarget.from_args(args)
    with adapter_errors(target, args.table):
        ledger = DynamoLedger(args.table, target.client("dynamodb"), memory_types=memory_type)
        actuator = LambdaActuator(target.client("lambda", retries=False))
        ledger.list_configs()
        return replay(
            recording.records,
            config,
            ledger=ledger,
            actuator=actuator,
            progress=progress,
            dry_run=args.dry_run,
        )


def _plan_view(report: ReplayReport, changes_only: bool) -> str:
    """Each plan's steps by time from the recording's start; ``changes_only``: no holds."""
    start = report.start or 0.0
    return "\n".join(
        f"{time - start:.1f}  {line}"
        for time, line in report.plan_lines
        if not (changes_only and line.startswith(f"{StepKind.HOLD} "))
    )


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
