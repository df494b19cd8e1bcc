"""Carrying out a plan: on AWS, or only showing it.

``AwsExecutor`` claims each transition in the ledger with a conditional write, then moves the
mapping; an operator's change to the mapping wins (drift adoption), a failed update is put back
in the ledger, a claim another invocation is still carrying out is left to it, a deleted
mapping's queue is set aside. ``DisplayExecutor`` does nothing but show the plan: the dry run.
Both return an ``Execution``: the decisions that took effect and the effects for the book
(:class:`controller.book.QueueBook`) to remember; neither changes the book itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from controller.book import (
    MAPPING_RECHECK_S,
    BookView,
    ClaimOver,
    Count,
    Counted,
    Effect,
    Learned,
    MappingGone,
    Mark,
    Marked,
    mapping_missing_message,
)
from controller.constants import ATTEMPT_TIMEOUT_S
from controller.model import Action, AuditEntry, AuditEvent, Decision, QueueState
from controller.planner import Plan, Step, describe
from controller.ports import (
    ActuationError,
    Actuator,
    Ledger,
    LedgerError,
    MappingNotFound,
    MappingView,
    VersionConflict,
)
from controller.transitions import Transition

# Time kept in hand for one step (read, claim) before the invocation's deadline.
STEP_BUDGET_S = 3.0
# What a step that moves a mapping needs in hand when it claims: an attempt's worst case each
# for the claim, the update and the revert should the update fail (the update's own deadline
# keeps the revert's back). With less, the update would be refused before any attempt: the
# step waits for the next batch, unclaimed.
CLAIM_BUDGET_S = 3 * ATTEMPT_TIMEOUT_S
# A claim's end (``QueueState.apply_by``) is its claimant's deadline, and this much more for
# the clocks of the containers that read it: Lambda hosts keep time to milliseconds.
CLAIM_CLOCK_MARGIN_S = 1.0
# The longest a Lambda invocation runs: what bounds a claimant given no deadline (the CLI,
# tests; an invocation always has one).
LONGEST_INVOCATION_S = 900.0


@dataclass(slots=True)
class Execution:
    """What carrying out a plan did: the decisions that took effect (HOLDs included), the
    effects for the book, and the ledger fault that stopped it, if one did."""

    done: list[Decision] = field(default_factory=list)
    effects: list[Effect] = field(default_factory=list)
    fault: LedgerError | None = None
    # A downstream's record failed (``AwsExecutor._hold``): the ledger's retries spent their
    # time, so the rest of the plan's records are not tried.
    records_failed: bool = False


class Executor(Protocol):
    # False for a dry run: nothing is written, neither the plan's steps nor what the loop
    # writes beside them (groups' memory and reports).
    carries_out: bool

    def execute(self, plan: Plan, book: BookView, deadline: float) -> Execution:
        """Carry out ``plan``; steps that would not fit before ``deadline`` (a
        ``time.monotonic()`` value) are left for the next batch."""
        ...


class DisplayExecutor:
    """The dry run: every step shown (``show``, one line each), none carried out. The book
    then remembers each step as done, so a replay shows what the controller would do next."""

    carries_out = False

    def __init__(self, show: Callable[[str], None] = print) -> None:
        self._show = show

    def execute(self, plan: Plan, book: BookView, deadline: float) -> Execution:
        for line in describe(plan):
            self._show(line)
        return Execution(
            done=plan.decisions,
            effects=[Learned(step.decision.new_state) for step in plan.steps],
        )


class _OutOfTime(Exception):
    """The step could not be started or claimed before the deadline."""


class AwsExecutor:
    """Carries out plans with the ledger and the actuator (see the module's docstring);
    ``on_commit`` hears of every audit item it writes. ``monotonic`` is the clock of the
    deadlines, ``clock`` the epoch clock of the plans' and the ledger's times (a simulator's
    virtual time for both)."""

    carries_out = True

    def __init__(
        self,
        ledger: Ledger,
        actuator: Actuator,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], float] = time.time,
        on_commit: Callable[[AuditEntry], None] | None = None,
    ) -> None:
        self.ledger = ledger
        self.actuator = actuator
        self._monotonic = monotonic
        self._clock = clock
        # Told of every audit item written (the events to publish: controller.events).
        self._on_commit = on_commit

    def execute(self, plan: Plan, book: BookView, deadline: float) -> Execution:
        """Nothing is recorded that was not done. A ledger fault stops the execution: the
        rest of the plan waits for the next batch and the fault is in the ``Execution``."""
        execution = Execution()
        listed = self._list_mappings(plan, deadline, execution)
        effects = execution.effects
        # A cut the control plane refused waits for the next batch: no raise after it (the
        # plan puts cuts first) spends the calls it needs.
        cut_waits = False
        for index, step in enumerate(plan.steps):
            try:
                if cut_waits and step.actuates and not step.cuts:
                    effects += [Counted(Count.STEPS_DEFERRED), _retry(step)]
                    continue
                if step.claim is not None and not self._fits(STEP_BUDGET_S, deadline):
                    raise _OutOfTime
                try:
                    waits = self._run(step, plan.now, deadline, listed, book, execution)
                    cut_waits = cut_waits or (waits and step.cuts)
                except MappingNotFound:
                    self._set_aside(step, book, plan.now, execution)
            except _OutOfTime:
                rest = plan.steps[index:]
                effects += [Counted(Count.STEPS_DEFERRED, len(rest)), *map(_retry, rest)]
                break
            except LedgerError as fault:
                if step.actuates:
                    effects.append(Marked(step.queue, Mark.UNSETTLED))
                effects += map(_retry, plan.steps[index:])
                execution.fault = fault
                break
            except ActuationError:
                # The mapping could not even be read: try again with the next batch.
                effects += [Counted(Count.ACTUATION_FAILURES), _retry(step)]
                cut_waits = cut_waits or step.cuts
        return execution

    def _fits(self, budget_s: float, deadline: float) -> bool:
        return self._monotonic() + budget_s <= deadline

    def _list_mappings(
        self, plan: Plan, deadline: float, execution: Execution
    ) -> dict[str, MappingView]:
        """The mappings this plan checks, listed in bulk for the drift check: a page covers a
        hundred mappings where a read covers one, and the control plane allows 15 calls/s per
        account. A failed listing leaves every step its own read."""
        uuids = {step.config.esm_uuid for step in plan.steps if step.checks_mapping}
        if not uuids or not self._fits(STEP_BUDGET_S, deadline):
            return {}  # nothing to check, or no time to move anything: no call
        try:
            return self.actuator.read_many(uuids, deadline)
        except ActuationError:
            execution.effects.append(Counted(Count.MAPPING_LIST_FAILURES))
            return {}

    def _run(
        self,
        step: Step,
        now: float,
        deadline: float,
        listed: dict[str, MappingView],
        book: BookView,
        execution: Execution,
    ) -> bool:
        """Carry ``step`` out; ``True`` when its update failed and it waits for the next
        batch (the ledger put back)."""
        decision, config, effects = step.decision, step.config, execution.effects
        if step.checks_mapping:
            view = listed.get(config.esm_uuid) or self.actuator.read(config.esm_uuid, deadline)
            effects.append(Marked(step.queue, Mark.MAPPING_FOUND))
            if (
                view.max_concurrency != decision.previous
                or view.enabled != decision.previous_enabled
            ):
                if _claim_in_flight(step.decided_from, view, now):
                    # Its claimant's update is on its way (waiting for its pace, say): judged
                    # by the next batch, once it landed or was put back.
                    effects += [Counted(Count.CLAIMS_IN_FLIGHT), _retry(step)]
                    return False
                self._commit(self._adopted(step, view, now, effects), execution)
                return False
        if step.claim is None:
            self._hold(step, book, deadline, execution)
            execution.done.append(decision)
            return False
        if step.actuates and not self._fits(CLAIM_BUDGET_S, deadline):
            raise _OutOfTime
        claim = self._with_end(step, step.claim, deadline)
        try:
            committed = self._commit(claim, execution)
            if committed is None:
                _given_up(claim, effects)
                return False
            if not step.actuates:
                execution.done.append(decision)
                return False
            try:
                # Time for the revert's ledger write is kept back, should the update fail.
                apply_by = deadline - ATTEMPT_TIMEOUT_S
                self.actuator.apply(config.esm_uuid, decision.target, decision.enabled, apply_by)
            except ActuationError as error:
                self._revert(step, committed, now, error, execution)
                if isinstance(error, MappingNotFound):
                    raise
                return True
        except LedgerError:
            _given_up(claim, effects)
            raise
        effects.append(Counted(Count.ESM_UPDATES))
        execution.done.append(decision)
        return False

    def _with_end(self, step: Step, claim: Transition, deadline: float) -> Transition:
        """``claim`` with its end (``QueueState.apply_by``): for a step that moves the mapping,
        the time by which this invocation has updated it or put the ledger back (both end by
        ``deadline``); none (0) for a claim that only records."""
        apply_by = 0.0
        if step.actuates:
            # The deadline is on the monotonic clock, the ledger's times on the epoch clock:
            # the time left on the one, read now, from now on the other. Not from the plan's
            # ``now``: taken before the plan was made (reads, earlier steps' paced updates),
            # it would set the end early by all that time.
            left_s = min(deadline - self._monotonic(), LONGEST_INVOCATION_S)
            apply_by = self._clock() + left_s + CLAIM_CLOCK_MARGIN_S
        return replace(claim, state=claim.state.evolve(apply_by=apply_by))

    def _hold(self, step: Step, book: BookView, deadline: float, execution: Execution) -> None:
        """A step that writes no transition: its decision's state is remembered. Where the
        queue's telemetry names another downstream than its STATE item stores (the book's
        state), that downstream is recorded on the item alone (``Ledger.record_downstream``),
        so a container without the queue's telemetry (a paused member's tick) groups it by
        it: once per change, as the book then holds it stored. Started with a step's time in
        hand, after the plan's moves (the plan puts them first). A transition that came first
        stored its own downstream: nothing to record (counted), and the state is read again.
        A record that fails or is not started is counted, never the plan's failure: the book
        keeps the stored downstream, so the queue's next decision tries again. After one
        fails (the ledger's retries spent their time), the plan's other records wait for
        their queues' next decisions too, and its steps go on."""
        decision, effects = step.decision, execution.effects
        held, stored = decision.new_state, book.state(step.queue)
        if (
            stored is None
            or stored.version == 0  # no STATE item yet: its first transition stores it
            or stored.version != step.decided_from.version
            or stored.downstream == held.downstream
        ):
            effects.append(Learned(held))
            return
        unrecorded: list[Effect] = [
            Counted(Count.DOWNSTREAMS_UNRECORDED),
            Learned(held.evolve(downstream=stored.downstream)),
        ]
        if execution.records_failed or not self._fits(STEP_BUDGET_S, deadline):
            effects += unrecorded
            return
        try:
            self.ledger.record_downstream(step.queue, held.downstream, stored.version)
        except VersionConflict:
            effects += [Counted(Count.DOWNSTREAM_CONFLICTS), Marked(step.queue, Mark.STALE)]
            return
        except LedgerError:
            execution.records_failed = True
            effects += unrecorded
            return
        effects += [Counted(Count.DOWNSTREAMS_RECORDED), Learned(held)]

    def _adopted(
        self, step: Step, view: MappingView, now: float, effects: list[Effect]
    ) -> Transition:
        """Documented rule: an operator's change to the mapping wins. The controller adopts the
        actual value, records the drift, and judges fresh evidence under it before acting.

        A mapping still at the value the ledger's last claim moved from, once the claim's end
        has passed (``_claim_in_flight``), is that claim not carried out (its update or revert
        failed, or its answer was lost): the same repair, audited as ``ACTUATION_RECONCILED``,
        not as an operator's drift."""
        decision, claimed = step.decision, step.decided_from
        value = decision.previous if view.max_concurrency is None else view.max_concurrency
        enabled = view.enabled
        if (
            claimed.last_action is not Action.HOLD
            and value == claimed.previous_concurrency != claimed.concurrency
        ):
            event, count = AuditEvent.ACTUATION_RECONCILED, Count.ACTUATIONS_RECONCILED
            reason = (
                f"Reconciled: the ledger claimed {decision.previous} but the mapping stayed at "
                f"{value} (enabled={enabled}); the update never happened, adopting the mapping."
            )
        else:
            event, count = AuditEvent.DRIFT_DETECTED, Count.DRIFT_DETECTED
            reason = (
                f"Drift: mapping is at {value} (enabled={enabled}) but the ledger said "
                f"{decision.previous}; adopting the mapping's value."
            )
        effects.append(Counted(count))
        state = claimed.evolve(
            concurrency=value,
            previous_concurrency=decision.previous,
            enabled=enabled,
            last_action=Action.HOLD,
            last_reason=reason,
            last_evaluated_at=now,
            last_change_at=now,
        )
        return _holding(state, now, event, decision.previous, reason)

    def _revert(
        self,
        step: Step,
        committed: QueueState,
        now: float,
        error: ActuationError,
        execution: Execution,
    ) -> None:
        """The claim stands in the ledger but the mapping did not move: put the ledger back."""
        decision = step.decision
        reason = f"Actuation failed ({error}); mapping stays at {decision.previous}."
        state = step.decided_from.evolve(
            version=committed.version, last_reason=reason, last_evaluated_at=now
        )
        execution.effects += [Counted(Count.ACTUATION_FAILURES), _retry(step)]
        event = AuditEvent.ACTUATION_FAILED
        self._commit(_holding(state, now, event, decision.target, reason), execution)

    def _set_aside(self, step: Step, book: BookView, now: float, execution: Execution) -> None:
        """The mapping is gone: the book sets the queue aside; the first time, a queue with a
        state has it audited (with whatever this execution last wrote for it)."""
        queue, uuid = step.queue, step.config.esm_uuid
        first = not book.mapping_known_missing(queue)
        state = _latest_state(queue, book, execution.effects)
        execution.effects.append(MappingGone(queue, uuid, now + MAPPING_RECHECK_S))
        if not first or state is None:
            return
        message = mapping_missing_message(queue, uuid)
        audited = state.evolve(last_reason=message, last_evaluated_at=now)
        event = AuditEvent.MAPPING_MISSING
        self._commit(_holding(audited, now, event, state.concurrency, message), execution)

    def _commit(self, transition: Transition, execution: Execution) -> QueueState | None:
        """Write the transition; ``None`` when another invocation moved the queue first, whose
        state is then re-read and judged afresh with the next batch."""
        try:
            committed = transition.commit(self.ledger)
        except VersionConflict:
            execution.effects.append(Marked(transition.state.queue, Mark.CONFLICTED))
            return None
        execution.effects.append(Learned(committed))
        if self._on_commit is not None:
            self._on_commit(transition.audit)
        return committed


def _holding(
    state: QueueState, now: float, event: AuditEvent, previous: int, reason: str
) -> Transition:
    """A transition that records ``state`` without moving the mapping: no claim in flight."""
    return Transition(
        state.evolve(apply_by=0.0),
        at=now,
        event=event,
        previous_value=previous,
        action=Action.HOLD.value,
        reason=reason,
    )


def _claim_in_flight(claimed: QueueState, view: MappingView, now: float) -> bool:
    """Whether the ledger's last claim is still being carried out: its end not reached, the
    mapping still at the value the claim moved from. The ledger keeps no enabled flag the
    claim moved from, so either flag at that value waits: an operator's toggle meanwhile is
    judged as drift once the end has passed, unless the claim's update overwrote it."""
    return (
        now < claimed.apply_by
        and claimed.last_action is not Action.HOLD
        and view.max_concurrency == claimed.previous_concurrency
    )


def _given_up(claim: Transition, effects: list[Effect]) -> None:
    """This invocation will not update the mapping for ``claim``, which may yet stand in the
    ledger: its commit's answer was lost (the ledger's retry then meets it as a conflict, or
    the retries ran out), or its update failed and so did the revert. Where the claim moves
    the mapping, this container knows it is over and reconciles it with its next step,
    without waiting for its end as other containers must (they cannot tell it from an update
    waiting for its pace). A conflict with another writer's claim costs nothing: that claim's
    end is another."""
    if claim.state.apply_by:
        effects.append(ClaimOver(claim.state.queue, claim.state.apply_by))


def _retry(step: Step) -> Marked:
    return Marked(step.queue, Mark.RETRY)


def _latest_state(queue: str, book: BookView, effects: list[Effect]) -> QueueState | None:
    """The queue's state as the book will hold it once ``effects`` are applied."""
    state = book.state(queue)
    for effect in effects:
        if isinstance(effect, Learned) and effect.state.queue == queue:
            state = effect.state
        elif effect in (Marked(queue, Mark.CONFLICTED), Marked(queue, Mark.STALE)):
            state = None
    return state
