"""Fleet operations: `queuemesh register | status | audit | pin | unpin | mode`.

Everything goes through the controller's own ports (``Ledger``, ``Actuator``), so the CLI
writes exactly the items the controller reads, under the same conditional-write rules: an
operator's change and the controller's next decision cannot silently overwrite each other
(the loser of a race on ``Version`` re-reads and decides again).

Every operator action on a queue leaves an ``OPERATOR`` audit item next to the controller's
own, committed together with the state it changes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from controller.constants import MAX_CONCURRENCY, MIN_CONCURRENCY
from controller.model import (
    Action,
    AuditEntry,
    AuditEvent,
    Mode,
    QueueConfig,
    QueueState,
    QueueStateName,
)
from controller.ports import (
    ActuationError,
    Actuator,
    Ledger,
    LedgerError,
    MappingNotFound,
    MappingView,
    VersionConflict,
)
from controller.settings import PolicyParams, SettingsError
from stack.errors import CliError

# One operator command makes a handful of control-plane calls; this bounds their retries.
CALL_BUDGET_S = 30.0
COMMIT_ATTEMPTS = 5
STATUS_THREADS = 8
MODE_NAMES = {"active": Mode.ACTIVE, "dry-run": Mode.DRY_RUN}
POLICY_FLAGS = ("t1", "t2", "beta", "alpha", "cmin", "cmax")
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


# --- the operations -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StatusRow:
    queue: str
    esm_uuid: str
    mode: str
    state: str
    concurrency: int | None
    enabled: bool | None
    pressure_rate: float | None
    last_action: str
    last_reason: str
    last_change: float | None
    last_evaluated: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "esm_uuid": self.esm_uuid,
            "mode": self.mode,
            "state": self.state,
            "concurrency": self.concurrency,
            "enabled": self.enabled,
            "pressure_rate": self.pressure_rate,
            "last_action": self.last_action,
            "last_reason": self.last_reason,
            "last_change": _iso(self.last_change),
            "last_evaluated": _iso(self.last_evaluated),
        }


class FleetOps:
    """The operator's actions on registered mappings, against any Ledger and Actuator."""

    def __init__(
        self,
        ledger: Ledger,
        actuator: Actuator,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ledger = ledger
        self.actuator = actuator
        self._clock = clock
        self._monotonic = monotonic

    # -- reading ------------------------------------------------------------------------
    def config(self, queue: str) -> QueueConfig:
        config = self.ledger.get_configs([queue]).get(queue)
        if config is None:
            raise CliError(
                f"queue {queue!r} is not registered; register it with "
                f"`queuemesh register {queue} --esm UUID`"
            )
        return config

    def status(self) -> list[StatusRow]:
        configs = sorted(self.ledger.list_configs(), key=lambda c: c.queue)
        states = {state.queue: state for state in self.ledger.list_states()}
        # One small query per queue for its last pressure: in parallel, as a fleet is large.
        with ThreadPoolExecutor(STATUS_THREADS) as pool:
            return list(pool.map(lambda c: self._status_row(c, states.get(c.queue)), configs))

    def _status_row(self, config: QueueConfig, state: QueueState | None) -> StatusRow:
        if state is None:
            return StatusRow(
                queue=config.queue,
                esm_uuid=config.esm_uuid,
                mode=config.mode.value,
                state="-",
                concurrency=None,
                enabled=None,
                pressure_rate=None,
                last_action="-",
                last_reason="no decision yet",
                last_change=None,
                last_evaluated=None,
            )
        # The pressure that drove the last recorded transition: its audit item, written with
        # the state, carries it (the state item does not).
        last = self.ledger.audit_trail(config.queue, since=state.last_evaluated_at - 0.001)
        return StatusRow(
            queue=config.queue,
            esm_uuid=config.esm_uuid,
            mode=config.mode.value,
            state=state.state.value,
            concurrency=state.concurrency,
            enabled=state.enabled,
            pressure_rate=last[-1].error_rate if last else None,
            last_action=state.last_action.value,
            last_reason=state.last_reason,
            last_change=state.last_change_at or None,
            last_evaluated=state.last_evaluated_at or None,
        )

    def audit(self, queue: str, since: float | None) -> list[AuditEntry]:
        self.config(queue)
        return self.ledger.audit_trail(queue, since)

    # -- changing -----------------------------------------------------------------------
    def register(
        self, queue: str, esm_uuid: str, overrides: Mapping[str, float], mode: Mode
    ) -> tuple[QueueConfig, MappingView]:
        try:
            params = PolicyParams.from_env().with_overrides(overrides)
        except SettingsError as error:
            raise CliError(f"bad policy for {queue}: {error}") from error
        view = self._read(esm_uuid)
        if not view.event_source_arn.endswith(f":{queue}"):
            raise CliError(
                f"mapping {esm_uuid} reads from {view.event_source_arn or 'an unknown source'}, "
                f"not from queue {queue!r}; check --esm (`aws lambda list-event-source-mappings`)"
            )
        config = QueueConfig(queue=queue, esm_uuid=esm_uuid, mode=mode, overrides=dict(overrides))
        self.ledger.put_config(config)
        view, capped = self._ensure_cap(config, view, params.cmax)
        summary = ", ".join(f"{name}={value:g}" for name, value in sorted(overrides.items()))
        self._record(
            config,
            view,
            action="REGISTER",
            reason=(
                f"Registered by operator: mapping {esm_uuid}, mode {mode.value}"
                + (f", overrides {summary}" if summary else "")
                + f"; MaximumConcurrency {capped or 'is'} {_value(view)}."
            ),
            concurrency=view.max_concurrency,
        )
        return config, view

    def pin(self, queue: str, concurrency: int) -> tuple[int | None, int]:
        """Set the mapping to ``concurrency`` now and hold it there (mode PINNED)."""
        _check_concurrency(concurrency)
        before = self.config(queue)
        view = self._read(before.esm_uuid)
        pinned = QueueConfig(
            queue=queue,
            esm_uuid=before.esm_uuid,
            mode=Mode.PINNED,
            pinned_concurrency=concurrency,
            overrides=dict(before.overrides),
        )
        # Pinned first, so the controller stops deciding before the mapping moves.
        self.ledger.put_config(pinned)
        try:
            after = self.actuator.apply(before.esm_uuid, concurrency, True, self._deadline())
        except ActuationError as error:
            self.ledger.put_config(before)
            raise CliError(f"could not update mapping {before.esm_uuid}: {error}") from error
        self._record(
            pinned,
            view,
            action="PIN",
            reason=f"Pinned by operator at {concurrency} (was {_value(view)}).",
            concurrency=after.max_concurrency,
            enabled=after.enabled,
            changed=True,
        )
        return view.max_concurrency, concurrency

    def set_mode(self, queue: str, mode: Mode) -> tuple[Mode, Mode]:
        """``ACTIVE`` on a pinned queue unpins it: the controller resumes from where it is."""
        before = self.config(queue)
        after = QueueConfig(
            queue=queue,
            esm_uuid=before.esm_uuid,
            mode=mode,
            pinned_concurrency=None,
            overrides=dict(before.overrides),
        )
        self.ledger.put_config(after)
        view = self._read(before.esm_uuid)
        if mode is Mode.ACTIVE:
            cmax = PolicyParams.from_env().with_overrides(before.overrides).cmax
            view, _ = self._ensure_cap(after, view, cmax)
        verb = "Unpinned" if before.mode is Mode.PINNED else "Mode set"
        self._record(
            after,
            view,
            action="UNPIN" if before.mode is Mode.PINNED else "MODE",
            reason=(
                f"{verb} by operator: mode {before.mode.value} -> {mode.value}; the controller "
                f"resumes from {_value(view)}."
                if mode is Mode.ACTIVE
                else f"{verb} by operator: mode {before.mode.value} -> {mode.value}."
            ),
            concurrency=view.max_concurrency,
        )
        return before.mode, mode

    def _ensure_cap(
        self, config: QueueConfig, view: MappingView, cmax: int
    ) -> tuple[MappingView, str]:
        """An active queue's mapping must have a MaximumConcurrency: with none set, Lambda's
        own scaler is the only limit and the controller has no value to move from (its drift
        check would find "unset" forever). Such a mapping is set to the queue's Cmax."""
        if config.mode is not Mode.ACTIVE or view.max_concurrency is not None:
            return view, ""
        try:
            after = self.actuator.apply(config.esm_uuid, cmax, view.enabled, self._deadline())
        except ActuationError as error:
            raise CliError(
                f"mapping {config.esm_uuid} has no MaximumConcurrency and setting it to {cmax} "
                f"failed: {error}"
            ) from error
        return after, "was unset; set to"

    def _record(
        self,
        config: QueueConfig,
        view: MappingView,
        *,
        action: str,
        reason: str,
        concurrency: int | None,
        enabled: bool | None = None,
        changed: bool = False,
    ) -> QueueState:
        """Commit the queue's state with an OPERATOR audit item, re-reading on a race."""
        for _ in range(COMMIT_ATTEMPTS):
            now = self._clock()
            current = self.ledger.get_states([config.queue]).get(config.queue)
            value = concurrency if concurrency is not None else _fallback(current, view)
            if current is None:
                current = QueueState(
                    queue=config.queue,
                    esm_uuid=config.esm_uuid,
                    state=QueueStateName.HEALTHY,
                    concurrency=value,
                    previous_concurrency=value,
                    enabled=view.enabled,
                )
            previous_value = view.max_concurrency or current.concurrency
            state = current.evolve(
                esm_uuid=config.esm_uuid,
                concurrency=value,
                previous_concurrency=previous_value if changed else current.concurrency,
                enabled=view.enabled if enabled is None else enabled,
                last_action=Action.HOLD,
                last_reason=reason,
                last_evaluated_at=now,
                last_change_at=now if changed else current.last_change_at,
                # The controller's next scheduled tick looks at the queue, telemetry or not:
                # a newly registered mapping is attached before any storm builds up.
                wake_at=now,
            )
            audit = AuditEntry(
                queue=config.queue,
                timestamp=now,
                event_type=AuditEvent.OPERATOR,
                previous_value=previous_value,
                new_value=value,
                action=action,
                reason=reason,
            )
            try:
                return self.ledger.commit(state, audit)
            except VersionConflict:
                continue
        raise CliError(
            f"queue {config.queue}: the controller kept changing its state; the change is "
            "applied but its audit item is not written, try the command again"
        )

    def _read(self, esm_uuid: str) -> MappingView:
        try:
            return self.actuator.read(esm_uuid, self._deadline())
        except MappingNotFound as error:
            raise CliError(
                f"event source mapping {esm_uuid} not found; check the UUID "
                "(`aws lambda list-event-source-mappings`) and --region/--endpoint-url"
            ) from error

    def _deadline(self) -> float:
        return self._monotonic() + CALL_BUDGET_S


def _fallback(state: QueueState | None, view: MappingView) -> int:
    if view.max_concurrency is not None:
        return view.max_concurrency
    return state.concurrency if state is not None else PolicyParams.from_env().cmax


def _value(view: MappingView) -> str:
    return "unset" if view.max_concurrency is None else str(view.max_concurrency)


def _check_concurrency(value: int) -> None:
    if not MIN_CONCURRENCY <= value <= MAX_CONCURRENCY:
        raise CliError(
            f"concurrency must be {MIN_CONCURRENCY}..{MAX_CONCURRENCY} "
            f"(AWS' MaximumConcurrency range), got {value}"
        )


# --- times ----------------------------------------------------------------------------------


def parse_since(raw: str, now: float) -> float:
    """``--since``: ISO-8601 (UTC when no offset is given) or relative (``90s``, ``30m``,
    ``1h``, ``2d``: that long before ``now``)."""
    relative = _RELATIVE.match(raw.strip().lower())
    if relative:
        return now - float(relative.group(1)) * _UNIT_S[relative.group(2)]
    try:
        moment = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError as error:
        raise CliError(
            f"--since {raw!r} is neither ISO-8601 (2026-11-29T18:00:00Z) nor relative (30m, 1h, 2d)"
        ) from error
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


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
            "-"
            if row.concurrency is None
            else f"{row.concurrency}" + ("" if row.enabled is not False else " (paused)"),
            _percent(row.pressure_rate),
            _iso(row.last_change) or "-",
            row.last_reason,
        )
        for row in rows
    ]
    return _table(header, body)


def audit_json(entry: AuditEntry) -> dict[str, Any]:
    return {
        "time": _iso(entry.timestamp),
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
            _iso(entry.timestamp) or "-",
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
        from stack.aws import add_target_arguments

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
    for flag, kind in zip(POLICY_FLAGS, (float, float, float, int, int, int), strict=True):
        parser.add_argument(f"--{flag}", type=kind, help=f"policy override {flag.upper()}")
    parser.add_argument("--mode", default="active", help="active (default) or dry-run")

    parser = command("status", "every managed queue: state, concurrency, pressure", _status)
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
    """FleetOps on the table and account the arguments name; AWS failures as one line."""
    from controller.actuator import LambdaActuator
    from controller.ledger import DynamoLedger
    from stack.aws import AwsTarget, aws_errors, explain, root_cause

    if not args.table:
        raise CliError("no ledger table: pass --table or set QUEUEMESH_TABLE")
    target = AwsTarget.from_args(args)
    with aws_errors(target):
        try:
            ledger = DynamoLedger(args.table, target.client("dynamodb"))
            actuator = LambdaActuator(target.client("lambda", retries=False))
            yield FleetOps(ledger, actuator)
        except (LedgerError, ActuationError) as error:
            cause = root_cause(error)
            code = getattr(cause, "response", {}).get("Error", {}).get("Code", "")
            if isinstance(error, LedgerError) and code == "ResourceNotFoundException":
                raise CliError(
                    f"ledger table {args.table!r} not found at {target.describe()}; deploy the "
                    "stack or name the right table (--table, QUEUEMESH_TABLE)"
                ) from error
            raise CliError(explain(cause, target) or str(error)) from error


def _register(args: argparse.Namespace) -> int:
    overrides = {
        flag: float(value) for flag in POLICY_FLAGS if (value := getattr(args, flag)) is not None
    }
    mode = _mode_named(args.mode)
    with fleet(args) as ops:
        config, view = ops.register(args.queue, args.esm, overrides, mode)
    print(
        f"registered {config.queue}: mapping {config.esm_uuid} ({view.state}, "
        f"MaximumConcurrency {_value(view)}), mode {config.mode.value}"
    )
    return 0


def _status(args: argparse.Namespace) -> int:
    with fleet(args) as ops:
        rows = ops.status()
    if args.json:
        print(json.dumps([row.to_json() for row in rows], indent=2))
    elif rows:
        print(status_table(rows))
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
