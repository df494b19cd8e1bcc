"""Fleet operations: the operator's actions behind `queuemesh register | status | audit | pin |
unpin | mode` (the commands themselves: stack/commands/ops.py).

Everything goes through the controller's own ports (``Ledger``, ``Actuator``) and its
registration path (``controller.registration``), so the CLI writes exactly the items the
controller reads, under the same conditional-write rules: an operator's change and the
controller's next decision cannot silently overwrite each other (the loser of a race on
``Version`` re-reads and decides again).

Every operator action on a queue leaves an ``OPERATOR`` audit item next to the controller's
own, committed together with the state it changes. Failures the operator can act on raise
``OperatorError``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from controller.constants import (
    DEFAULT_PRIORITY,
    DEFAULT_WEIGHT,
    MAX_CONCURRENCY,
    MIN_CONCURRENCY,
)
from controller.model import AuditEntry, GroupReport, GroupShare, Mode, QueueConfig, QueueState
from controller.ports import ActuationError, Actuator, Ledger, MappingView
from controller.registration import (
    OperatorError,
    concurrency_text,
    ensure_cap,
    read_mapping,
    record_operator_change,
    register_queue,
)
from controller.settings import PolicyParams

# One operator command makes a handful of control-plane calls; this bounds their retries.
CALL_BUDGET_S = 30.0
STATUS_THREADS = 8


@dataclass(frozen=True, slots=True)
class GroupPart:
    """A queue's part in the last report of its group (the ledger's GROUP item)."""

    report: GroupReport
    share: GroupShare

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.report.group,
            "capacity_rps": self.report.capacity_rps,
            "share_rps": self.share.share_rps,
            "level": self.share.level,
            "paused_to_share": self.share.paused,
            "decided_at": iso_time(self.report.at),
        }


def reports_of(rows: Iterable[StatusRow]) -> list[GroupReport]:
    """The reports of the groups the rows' queues are in, by group name."""
    reports = {row.group.report.group: row.group.report for row in rows if row.group is not None}
    return [reports[name] for name in sorted(reports)]


def report_json(report: GroupReport) -> dict[str, Any]:
    """A group's report as ``queuemesh dashboard``'s ledger panel reads it."""
    return {
        "group": report.group,
        "capacity_rps": report.capacity_rps,
        "decided_at": iso_time(report.at),
        "members": [
            {
                "queue": member.queue,
                "share_rps": member.share_rps,
                "level": member.level,
                "paused_to_share": member.paused,
            }
            for member in report.members
        ],
    }


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
    # Its part in its group's last report (None: in no group's report).
    group: GroupPart | None = None
    # When the controller decides it again without telemetry (a paused mapping's pause or
    # test end; None: it asked for no wake-up).
    wake_at: float | None = None

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
            "last_change": iso_time(self.last_change),
            "last_evaluated": iso_time(self.last_evaluated),
            "group": None if self.group is None else self.group.to_json(),
            "wake_at": iso_time(self.wake_at),
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
            raise OperatorError(
                f"queue {queue!r} is not registered; register it with "
                f"`queuemesh register {queue} --esm UUID`"
            )
        return config

    def status(self) -> list[StatusRow]:
        """Every registered queue, by name, with its part in its group's last report."""
        configs = sorted(self.ledger.list_configs(), key=lambda c: c.queue)
        states = {state.queue: state for state in self.ledger.list_states()}
        parts = {
            share.queue: GroupPart(report, share)
            for report in self.ledger.group_reports()
            for share in report.members
        }
        # One small query per queue for its last pressure: in parallel, as a fleet is large.
        with ThreadPoolExecutor(STATUS_THREADS) as pool:
            rows = pool.map(lambda c: self._status_row(c, states.get(c.queue)), configs)
            return [dataclasses.replace(row, group=parts.get(row.queue)) for row in rows]

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
            wake_at=state.wake_at or None,
        )

    def audit(self, queue: str, since: float | None) -> list[AuditEntry]:
        self.config(queue)
        return self.ledger.audit_trail(queue, since)

    # -- changing -----------------------------------------------------------------------
    def register(
        self,
        queue: str,
        esm_uuid: str,
        overrides: Mapping[str, float],
        mode: Mode,
        *,
        group: str | None = None,
        weight: float = DEFAULT_WEIGHT,
        priority: int = DEFAULT_PRIORITY,
    ) -> tuple[QueueConfig, MappingView]:
        """See ``controller.registration.register_queue``: the one registration path (the
        queue's standing in its downstream's group included)."""
        return register_queue(
            self.ledger,
            self.actuator,
            queue,
            esm_uuid,
            overrides,
            mode,
            clock=self._clock,
            deadline=self._deadline,
            group=group,
            weight=weight,
            priority=priority,
        )

    def pin(self, queue: str, concurrency: int) -> tuple[int | None, int]:
        """Set the mapping to ``concurrency`` now and hold it there (mode PINNED)."""
        _check_concurrency(concurrency)
        before = self.config(queue)
        view = read_mapping(self.actuator, before.esm_uuid, self._deadline())
        # Everything else the operator set (overrides, group standing) stays.
        pinned = dataclasses.replace(before, mode=Mode.PINNED, pinned_concurrency=concurrency)
        # Pinned first, so the controller stops deciding before the mapping moves.
        self.ledger.put_config(pinned)
        try:
            after = self.actuator.apply(before.esm_uuid, concurrency, True, self._deadline())
        except ActuationError as error:
            self.ledger.put_config(before)
            raise OperatorError(f"could not update mapping {before.esm_uuid}: {error}") from error
        record_operator_change(
            self.ledger,
            pinned,
            view,
            clock=self._clock,
            action="PIN",
            reason=f"Pinned by operator at {concurrency} (was {concurrency_text(view)}).",
            concurrency=after.max_concurrency,
            enabled=after.enabled,
            changed=True,
        )
        return view.max_concurrency, concurrency

    def set_mode(self, queue: str, mode: Mode) -> tuple[Mode, Mode]:
        """``ACTIVE`` on a pinned queue unpins it: the controller resumes from where it is."""
        before = self.config(queue)
        after = dataclasses.replace(before, mode=mode, pinned_concurrency=None)
        self.ledger.put_config(after)
        view = read_mapping(self.actuator, before.esm_uuid, self._deadline())
        if mode is Mode.ACTIVE:
            cmax = PolicyParams.from_env().with_overrides(before.overrides).cmax
            view, _ = ensure_cap(self.actuator, after, view, cmax, self._deadline())
        verb = "Unpinned" if before.mode is Mode.PINNED else "Mode set"
        record_operator_change(
            self.ledger,
            after,
            view,
            clock=self._clock,
            action="UNPIN" if before.mode is Mode.PINNED else "MODE",
            reason=(
                f"{verb} by operator: mode {before.mode.value} -> {mode.value}; the controller "
                f"resumes from {concurrency_text(view)}."
                if mode is Mode.ACTIVE
                else f"{verb} by operator: mode {before.mode.value} -> {mode.value}."
            ),
            concurrency=view.max_concurrency,
        )
        return before.mode, mode

    def _deadline(self) -> float:
        return self._monotonic() + CALL_BUDGET_S


def _check_concurrency(value: int) -> None:
    if not MIN_CONCURRENCY <= value <= MAX_CONCURRENCY:
        raise OperatorError(
            f"concurrency must be {MIN_CONCURRENCY}..{MAX_CONCURRENCY} "
            f"(AWS' MaximumConcurrency range), got {value}"
        )


def iso_time(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
