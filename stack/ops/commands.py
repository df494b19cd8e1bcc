"""`queuemesh register | status | audit | pin | unpin | mode`: the operator's actions
(``stack.ops.FleetOps``) on the ledger table and account the arguments name, their output,
and their failures as one line."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

from controller.constants import (
    DEFAULT_PRIORITY,
    DEFAULT_WEIGHT,
    MAX_CONCURRENCY,
    MAX_PRIORITY,
    MAX_WEIGHT,
    MIN_CONCURRENCY,
    MIN_WEIGHT,
)
from controller.model import AuditEntry, Mode
from controller.ports import ActuationError, LedgerError
from controller.registration import (
    OperatorError,
    check_mapping_id,
    check_standing,
    concurrency_text,
)
from stack.aws import AwsTarget, add_target_arguments, aws_errors, explain, root_cause
from stack.errors import CliError, quoted
from stack.ops.fleet import FleetOps, StatusRow, iso_time, reports_of

MODE_NAMES = {"active": Mode.ACTIVE, "dry-run": Mode.DRY_RUN}
POLICY_FLAGS = ("t1", "t2", "beta", "alpha", "cmin", "cmax")
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


# --- times ----------------------------------------------------------------------------------


def parse_since(raw: str, now: float) -> float:
    """``--since``: ISO-8601 (UTC when no offset is given) or relative (``90s``, ``30m``,
    ``1h``, ``2d``: that long before ``now``); between 1970-01-01 and ``now``."""
    shown = quoted(raw)
    relative = _RELATIVE.match(raw.strip().lower())
    if relative:
        since = now - float(relative.group(1)) * _UNIT_S[relative.group(2)]
    else:
        try:
            moment = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
        except ValueError as error:
            raise CliError(
                f"--since {shown} is neither ISO-8601 (2026-11-29T18:00:00Z) nor relative "
                "(30m, 1h, 2d)"
            ) from error
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        since = moment.timestamp()
    # float() of a long digit string is inf, and inf - inf is nan: neither passes.
    if not 0.0 <= since <= now:
        raise CliError(
            f"--since {shown} is {'in the future' if since > now else 'before 1970'}; give a "
            "time between 1970-01-01T00:00:00Z and now, or an age (30m, 1h, 2d)"
        )
    return since


def _finite(raw: str) -> float:
    """A policy override: a finite number (``PolicyParams`` checks its range and wholeness)."""
    try:
        value = float(raw)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a number: {quoted(raw)}") from error
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {quoted(raw)}")
    return value


# --- rendering ------------------------------------------------------------------------------


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to fit; the last column (a reason) runs free."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def _percent(rate: float | None) -> str:
    return "-" if rate is None else f"{rate * 100:.1f}%"


def status_table(rows: Sequence[StatusRow]) -> str:
    header = ("queue", "mode", "state", "concurrency", "pressure", "last change", "last reason")
    body = [
        (
            row.queue,
            row.mode,
            row.state,
            _level(row),
            _percent(row.pressure_rate),
            iso_time(row.last_change) or "-",
            row.last_reason,
        )
        for row in rows
    ]
    return _table(header, body)


def _level(row: StatusRow) -> str:
    """The level, and a pause with when the controller looks at the queue again."""
    if row.concurrency is None:
        return "-"
    if row.enabled is not False:
        return str(row.concurrency)
    until = iso_time(row.wake_at)
    return f"{row.concurrency} (paused" + (f" until {until})" if until else ")")


def group_tables(rows: Sequence[StatusRow]) -> str:
    """Each group the queues are in, by name: its capacity estimate, then each member's
    share, level and whether it is paused to share (empty when no queue is in a group)."""
    sections = []
    for report in reports_of(rows):
        capacity = (
            "not known yet" if report.capacity_rps is None else f"{report.capacity_rps:.1f} calls/s"
        )
        header = ("queue", "share (calls/s)", "level", "paused to share")
        body = [
            (m.queue, f"{m.share_rps:.1f}", str(m.level), "yes" if m.paused else "no")
            for m in report.members
        ]
        title = f"group {report.group}: capacity {capacity} (decided {iso_time(report.at)})"
        sections.append(title + "\n" + _table(header, body))
    return "\n\n".join(sections)


def audit_json(entry: AuditEntry) -> dict[str, Any]:
    return {
        "time": iso_time(entry.timestamp),
        "timestamp": entry.timestamp,
        "event_type": entry.event_type.value,
        "action": entry.action,
        "previous": entry.previous_value,
        "new": entry.new_value,
        "error_rate": entry.error_rate,
        "success_rate": entry.success_rate,
        "control_loop_latency_ms": entry.control_loop_latency_ms,
        "reason": entry.reason,
    }


def audit_table(entries: Sequence[AuditEntry]) -> str:
    header = ("time", "event", "action", "concurrency", "pressure", "reason")
    body = [
        (
            iso_time(entry.timestamp) or "-",
            entry.event_type.value,
            entry.action,
            f"{entry.previous_value} -> {entry.new_value}",
            _percent(entry.error_rate),
            entry.reason,
        )
        for entry in entries
    ]
    return _table(header, body)


# --- command line ---------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def command(name: str, help_text: str, func: Callable[[argparse.Namespace], int]) -> Any:
        parser = subparsers.add_parser(name, help=help_text, description=help_text)
        parser.add_argument(
            "--table",
            default=os.environ.get("QUEUEMESH_TABLE"),
            help="ledger table (default: QUEUEMESH_TABLE)",
        )
        add_target_arguments(parser)
        parser.set_defaults(func=func)
        return parser

    parser = command("register", "put a queue's event source mapping under control", _register)
    parser.add_argument("queue", help="SQS queue name")
    parser.add_argument("--esm", required=True, help="UUID of the queue's event source mapping")
    for flag in POLICY_FLAGS:
        parser.add_argument(f"--{flag}", type=_finite, help=f"policy override {flag.upper()}")
    parser.add_argument("--mode", default="active", help="active (default) or dry-run")
    parser.add_argument(
        "--group",
        help="the group of queues decided together as one downstream (default: the "
        "Downstream its telemetry names)",
    )
    parser.add_argument(
        "--weight",
        help=f"its weight in its group's fair share, {MIN_WEIGHT:g}..{MAX_WEIGHT:g} "
        f"(default {DEFAULT_WEIGHT:g})",
    )
    parser.add_argument(
        "--priority",
        help=f"who runs first when its group must time-share, 0..{MAX_PRIORITY} "
        f"(default {DEFAULT_PRIORITY})",
    )

    parser = command(
        "status", "every managed queue: state, concurrency, pressure; each group's shares", _status
    )
    parser.add_argument("--json", action="store_true", help="print JSON")

    parser = command("audit", "a queue's audit trail, oldest first", _audit)
    parser.add_argument("queue")
    parser.add_argument("--since", help="ISO-8601 time or relative (30m, 1h, 2d)")
    parser.add_argument("--json", action="store_true", help="print JSON")

    parser = command("pin", "set a queue's mapping to N now and hold it there", _pin)
    parser.add_argument("queue")
    parser.add_argument(
        "concurrency", metavar="N", help=f"MaximumConcurrency, {MIN_CONCURRENCY}..{MAX_CONCURRENCY}"
    )

    parser = command("unpin", "hand a pinned queue back to the controller", _unpin)
    parser.add_argument("queue")

    parser = command("mode", "let the controller act (active) or only decide (dry-run)", _mode)
    parser.add_argument("queue")
    parser.add_argument("mode", help="active or dry-run")


def _mode_named(name: str) -> Mode:
    # Checked here rather than by argparse, so a bad value is a CliError (status 2, one line)
    # however the CLI is invoked.
    try:
        return MODE_NAMES[name.lower()]
    except KeyError:
        raise CliError(
            f"mode must be one of {', '.join(sorted(MODE_NAMES))}, got {name!r} "
            "(to hold a value, use `queuemesh pin`)"
        ) from None


def _concurrency(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError as error:
        raise CliError(f"N must be a whole number, got {raw!r}") from error
    if not MIN_CONCURRENCY <= value <= MAX_CONCURRENCY:
        raise CliError(
            f"N must be {MIN_CONCURRENCY}..{MAX_CONCURRENCY} (AWS' MaximumConcurrency range), "
            f"got {value}"
        )
    return value


@contextlib.contextmanager
def fleet(args: argparse.Namespace) -> Iterator[FleetOps]:
    """FleetOps on the table and account the arguments name; its ``OperatorError``s and AWS
    failures as one line."""
    from controller.actuator import LambdaActuator
    from controller.ledger import DynamoLedger
    from controller.policy import memory_type

    if not args.table:
        raise CliError("no ledger table: pass --table or set QUEUEMESH_TABLE")
    target = AwsTarget.from_args(args)
    with adapter_errors(target, args.table):
        try:
            ledger = DynamoLedger(args.table, target.client("dynamodb"), memory_types=memory_type)
            actuator = LambdaActuator(target.client("lambda", retries=False))
            yield FleetOps(ledger, actuator)
        except OperatorError as error:
            raise CliError(str(error)) from error


@contextlib.contextmanager
def adapter_errors(target: AwsTarget, table: str) -> Iterator[None]:
    """The ledger's and actuator's failures on ``target`` (and AWS' own: no credentials,
    endpoint down) as one line; a missing ``table`` is named."""
    from botocore.exceptions import ParamValidationError

    with aws_errors(target):
        try:
            yield
        except (LedgerError, ActuationError) as error:
            cause = root_cause(error)
            code = getattr(cause, "response", {}).get("Error", {}).get("Code", "")
            if isinstance(error, LedgerError) and code == "ResourceNotFoundException":
                raise CliError(
                    f"ledger table {table!r} not found at {target.describe()}; deploy the "
                    "stack or name the right table (--table, QUEUEMESH_TABLE)"
                ) from error
            raise CliError(explain(cause, target) or str(error)) from error
        except ParamValidationError as error:
            # botocore's own check of a value the ledger holds (a hand-edited EsmUuid, say).
            raise CliError(
                f"AWS refused a value before sending it ({' '.join(str(error).split())}); "
                "check the queue's registration (`queuemesh register QUEUE --esm UUID`)"
            ) from error


def _standing(args: argparse.Namespace) -> dict[str, Any]:
    """``--group``, ``--weight``, ``--priority`` as ``register_queue``'s keywords, checked
    before any call."""
    weight = DEFAULT_WEIGHT if args.weight is None else _number("--weight", args.weight)
    priority = DEFAULT_PRIORITY
    if args.priority is not None:
        try:
            priority = int(args.priority)
        except ValueError as error:
            raise CliError(
                f"--priority must be a whole number 0..{MAX_PRIORITY}, got {quoted(args.priority)}"
            ) from error
    try:
        check_standing(args.group, weight, priority)
    except OperatorError as error:
        raise CliError(f"--{error}") from error
    return {"group": args.group, "weight": weight, "priority": priority}


def _number(flag: str, raw: str) -> float:
    try:
        return _finite(raw)
    except argparse.ArgumentTypeError as error:
        raise CliError(f"{flag}: {error}") from error


def _register(args: argparse.Namespace) -> int:
    overrides = {flag: value for flag in POLICY_FLAGS if (value := getattr(args, flag)) is not None}
    mode = _mode_named(args.mode)
    try:
        esm_uuid = check_mapping_id(args.esm)
    except OperatorError as error:
        raise CliError(f"--esm: {error}") from error
    standing = _standing(args)
    with fleet(args) as ops:
        config, view = ops.register(args.queue, esm_uuid, overrides, mode, **standing)
    print(
        f"registered {config.queue}: mapping {config.esm_uuid} ({view.state}, "
        f"MaximumConcurrency {concurrency_text(view)}), mode {config.mode.value}"
        + ("" if config.group is None else f", group {config.group}")
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    with fleet(args) as ops:
        rows = ops.status()
    if args.json:
        print(json.dumps([row.to_json() for row in rows], indent=2))
    elif rows:
        print(status_table(rows))
        groups = group_tables(rows)
        if groups:
            print(f"\n{groups}")
    else:
        print(f"no registered queues in {args.table}", file=sys.stderr)
    return 0


def _audit(args: argparse.Namespace) -> int:
    since = None if args.since is None else parse_since(args.since, time.time())
    with fleet(args) as ops:
        entries = ops.audit(args.queue, since)
    if args.json:
        print(json.dumps([audit_json(entry) for entry in entries], indent=2))
    elif entries:
        print(audit_table(entries))
    else:
        print(f"no audit entries for {args.queue}" + (f" since {args.since}" if since else ""))
    return 0


def _pin(args: argparse.Namespace) -> int:
    concurrency = _concurrency(args.concurrency)
    with fleet(args) as ops:
        was, now = ops.pin(args.queue, concurrency)
    print(
        f"pinned {args.queue} at {now} (was {'unset' if was is None else was}); "
        "the controller holds it until `queuemesh unpin`"
    )
    return 0


def _unpin(args: argparse.Namespace) -> int:
    with fleet(args) as ops:
        before, _ = ops.set_mode(args.queue, Mode.ACTIVE)
    if before is not Mode.PINNED:
        print(f"{args.queue} was not pinned (mode {before.value}); it is now ACTIVE")
    else:
        print(f"unpinned {args.queue}: the controller adjusts it again")
    return 0


def _mode(args: argparse.Namespace) -> int:
    mode = _mode_named(args.mode)
    with fleet(args) as ops:
        before, after = ops.set_mode(args.queue, mode)
    print(f"{args.queue}: mode {before.value} -> {after.value}")
    return 0
