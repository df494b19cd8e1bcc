"""A queue's transition: its new state and the audit item that says how it got there.

Every writer of queue state (the engine's decisions, drift adoptions and failed actuations,
and the operator's commands) records one of these. Both items are written together or not at
all, conditional on the version the writer read.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.model import AuditEntry, AuditEvent, QueueState
from controller.ports import Ledger


@dataclass(frozen=True, slots=True)
class Transition:
    """``state`` (at the version it was read at) and why: the audit item's fields. The audit's
    queue and new value are the state's, so the two cannot disagree."""

    state: QueueState
    at: float
    event: AuditEvent
    previous_value: int
    action: str
    reason: str
    error_rate: float = 0.0
    success_rate: float = 1.0
    control_loop_latency_ms: float = 0.0

    @property
    def audit(self) -> AuditEntry:
        return AuditEntry(
            queue=self.state.queue,
            timestamp=self.at,
            event_type=self.event,
            previous_value=self.previous_value,
            new_value=self.state.concurrency,
            action=self.action,
            reason=self.reason,
            error_rate=self.error_rate,
            success_rate=self.success_rate,
            control_loop_latency_ms=self.control_loop_latency_ms,
        )

    def commit(self, ledger: Ledger) -> QueueState:
        """Write state and audit together; returns the stored state (next version). Raises
        ``VersionConflict`` when another writer moved the queue first."""
        return ledger.commit(self.state, self.audit)
