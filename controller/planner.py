"""Deciding: every queue's next step from what the book knows, as plain data.

Planning is pure. It reads configs, states and windows handed to it and returns a ``Plan``;
nothing is written, actuated or remembered. A batch's decisions therefore never depend on the
order the AWS calls happen to take, and showing a plan (``describe``) is a dry run.

A plan is also the order the control plane's budget is spent in (Lambda answers 15 calls a
second per account; the executor carries steps out in plan order, paced, until its deadline):
cuts first (a healthy queue's first cut before a further one; the most pressed, then the
largest first), then raises (a probe is a raise), then the steps that move no mapping. One
step per queue: never more than one change per batch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from controller.groups import GroupMemory, Member, govern
from controller.model import (
    AuditEvent,
    Backlog,
    Decision,
    GroupReport,
    Mode,
    QueueConfig,
    QueueState,
    QueueStateName,
)
from controller.policy import LimitAlgorithm, decide
from controller.settings import PolicyParams
from controller.transitions import Transition
from controller.window import QueueWindow


class StepKind(StrEnum):
    """What carrying out a step takes: moving the mapping (after claiming it in the ledger),
    only recording a transition, or nothing beyond the warm container's memory."""

    UPDATE = "update"
    RECORD = "record"
    HOLD = "hold"


@dataclass(frozen=True, slots=True)
class Step:
    """One queue's decision, what it was decided from, and what carrying it out writes."""

    config: QueueConfig
    decision: Decision
    decided_from: QueueState
    # Read the mapping before acting: the step moves it, or the queue's last claim may be
    # stranded (never for a dry-run queue, whose ledger disagrees with its mapping by design).
    checks_mapping: bool
    # The transition to claim in the ledger; ``None``: a steady queue costs no write.
    claim: Transition | None

    @property
    def queue(self) -> str:
        return self.config.queue

    @property
    def kind(self) -> StepKind:
        if self.config.mode is Mode.ACTIVE and self.decision.changes_mapping:
            return StepKind.UPDATE
        return StepKind.HOLD if self.claim is None else StepKind.RECORD

    @property
    def actuates(self) -> bool:
        return self.kind is StepKind.UPDATE

    @property
    def cuts(self) -> bool:
        """Whether the step lowers what the mapping lets run: a lower cap, or a pause."""
        decision = self.decision
        before = decision.previous if decision.previous_enabled else 0
        after = decision.target if decision.enabled else 0
        return self.actuates and after < before

    @property
    def urgency(self) -> tuple[int, float, int]:
        """The step's place in its plan (smallest first): the first cuts of queues still
        healthy (nothing was done yet for them, and they run at their full level), then further
        cuts, each by pressure, then by size; then raises; then steps that move no mapping."""
        decision = self.decision
        if self.cuts:
            after = decision.target if decision.enabled else 0
            first = self.decided_from.state is QueueStateName.HEALTHY
            return (0 if first else 1, -decision.pressure_rate, after - decision.previous)
        return (2, 0.0, 0) if self.actuates else (3, 0.0, 0)


@dataclass(frozen=True, slots=True)
class Plan:
    """The steps of one batch, decided at ``now``; ``undecided`` queues had no state in time
    and wait for the next batch. ``groups``: what was decided for each group of queues sharing
    a downstream; ``group_memory``: what the container keeps of each group for the next batch
    (``governed``)."""

    now: float
    steps: tuple[Step, ...] = ()
    undecided: tuple[str, ...] = ()
    groups: tuple[GroupReport, ...] = ()
    group_memory: Mapping[str, GroupMemory] = field(default_factory=dict)

    @property
    def decisions(self) -> list[Decision]:
        return [step.decision for step in self.steps]


def plan(
    now: float,
    queues: Sequence[str],
    configs: Mapping[str, QueueConfig],
    states: Mapping[str, QueueState],
    windows: Mapping[str, QueueWindow],
    unsettled: Callable[[str], bool],
    algorithm: LimitAlgorithm[Any],
    params_for: Callable[[QueueConfig], PolicyParams],
    backlogs: Mapping[str, Backlog] | None = None,
    *,
    sharing: Mapping[str, Mapping[str, float]] | None = None,
) -> Plan:
    """Decide ``queues`` with their windows and, where known, their backlogs (the messages
    waiting), the steps in order of urgency (``Step.urgency``, then the order of ``queues``);
    a queue without a config is not managed, one without a state is left undecided.
    ``sharing``: the queues that report each downstream with an announced quota, and the
    calls a second each may want of it (``QueueBook.announcing``)."""
    backlogs = backlogs or {}
    steps = []
    undecided = []
    for queue in queues:
        config, state = configs.get(queue), states.get(queue)
        if config is None:
            continue
        if state is None:
            undecided.append(queue)
            continue
        window = windows[queue]
        decision = decide(
            algorithm,
            state,
            config,
            window,
            now,
            params_for(config),
            backlogs.get(queue),
            sharing=sharing,
        )
        steps.append(
            step_for(config, decision, state, window.newest_event_time, now, unsettled(queue))
        )
    steps.sort(key=lambda step: step.urgency)
    return Plan(now, tuple(steps), tuple(undecided))


def probing(plan: Plan) -> list[str]:
    """The queues whose planned decision probes (raises a polling mapping)."""
    return [step.queue for step in plan.steps if step.decision.probes]


def reading_backlog(plan: Plan) -> list[str]:
    """The queues whose planned decision should know their backlog: those that probe, and
    those whose hold asks for it (``Decision.asks_backlog``)."""
    return [step.queue for step in plan.steps if step.decision.probes or step.decision.asks_backlog]


def revised(plan: Plan, revisions: Plan) -> Plan:
    """``plan`` with the steps of the queues ``revisions`` decided again replaced by theirs,
    in order of urgency again (a raise held for an empty queue moves no mapping)."""
    again = {step.queue: step for step in revisions.steps}
    steps = sorted((again.get(step.queue, step) for step in plan.steps), key=lambda s: s.urgency)
    return Plan(plan.now, tuple(steps), plan.undecided, plan.groups, plan.group_memory)


def groups_of(
    configs: Mapping[str, QueueConfig], downstreams: Mapping[str, str | None]
) -> dict[str, str]:
    """The group of each queue that shares one (``docs/algorithms.md``, "Groups"): its CONFIG
    ``Group``, else the ``Downstream`` its telemetry names; a group of one queue, a pinned
    queue and a queue naming neither are decided alone, and left out."""
    named = {}
    for queue, config in configs.items():
        group = group_named(config, downstreams.get(queue))
        if group is not None:
            named[queue] = group
    sizes = Counter(named.values())
    return {queue: group for queue, group in named.items() if sizes[group] > 1}


def group_named(config: QueueConfig, downstream: str | None) -> str | None:
    """The group a queue joins: its CONFIG ``Group``, else the ``downstream`` its telemetry
    names; ``None`` for a pinned queue (decided alone) or one naming neither."""
    if config.mode is Mode.PINNED:
        return None
    return config.group or downstream


def governed(
    plan: Plan,
    groups: Mapping[str, str],
    windows: Mapping[str, QueueWindow],
    params_for: Callable[[QueueConfig], PolicyParams],
    unsettled: Callable[[str], bool],
    memory: Mapping[str, GroupMemory],
    backlogs: Mapping[str, Backlog] | None = None,
) -> Plan:
    """``plan`` with the steps of the queues in ``groups`` (queue -> group, ``groups_of``)
    decided by their group's law (``controller.groups``) around each one's own decision, and
    what each group decided and remembers; in order of urgency again. A queue the operator
    disabled (paused, but not by the controller) stays out of its group."""
    backlogs = backlogs or {}
    members: dict[str, list[Member]] = {}
    for step in plan.steps:
        group = groups.get(step.queue)
        state = step.decided_from
        if group is None or (not state.enabled and state.paused_since == 0):
            continue
        window = windows[step.queue].snapshot()
        member = Member(
            step.config,
            state,
            step.decision,
            params_for(step.config),
            window,
            backlogs.get(step.queue),
        )
        members.setdefault(group, []).append(member)
    changed: dict[str, Decision] = {}
    reports = []
    memories = dict(memory)
    for group, sharing in sorted(members.items()):
        if len(sharing) < 2:
            continue
        decided = govern(group, sharing, memory.get(group, GroupMemory()), plan.now)
        changed.update(decided.decisions)
        reports.append(decided.report)
        memories[group] = decided.memory
    steps = []
    for step in plan.steps:
        decision = changed.get(step.queue)
        if decision is not None:
            evidence_time = windows[step.queue].newest_event_time
            step = step_for(
                step.config,
                decision,
                step.decided_from,
                evidence_time,
                plan.now,
                unsettled(step.queue),
            )
        steps.append(step)
    steps.sort(key=lambda step: step.urgency)
    return Plan(plan.now, tuple(steps), plan.undecided, tuple(reports), memories)


def step_for(
    config: QueueConfig,
    decision: Decision,
    decided_from: QueueState,
    evidence_time: float | None,
    now: float,
    unsettled: bool,
    event: AuditEvent = AuditEvent.TRANSITION,
) -> Step:
    """The step carrying out ``decision``. Only transitions reach the ledger: memory changed
    without one stays in the warm container, and a cold one re-learns it, unless the memory
    is one a HOLD that changes it writes (``written_when_held``)."""
    moves = decision.changes_mapping
    # A decision that wants no more wake-up ends the stored one: written, or the item stays in
    # the WakeUps index, read by every tick, until the queue's next transition.
    ends_wake_up = decided_from.wake_at > 0 and decision.new_state.wake_at <= 0
    memory, held = decision.new_state.memory, decided_from.memory
    # Against a fresh record where the queue had none of this kind: a first HOLD writes nothing.
    before = held if type(held) is type(memory) else type(memory)()
    remembers = memory != before and getattr(memory, "written_when_held", False)
    claim = None
    if moves or decision.state != decided_from.state or ends_wake_up or remembers:
        dry_run = config.mode is Mode.DRY_RUN and (moves or remembers)
        latency_s = 0.0 if evidence_time is None else max(0.0, now - evidence_time)
        claim = Transition(
            decision.new_state.evolve(version=decided_from.version),
            at=now,
            event=event,
            previous_value=decision.previous,
            action=decision.action.value,
            reason=f"[dry-run] {decision.reason}" if dry_run else decision.reason,
            error_rate=decision.pressure_rate,
            success_rate=decision.success_rate,
            control_loop_latency_ms=latency_s * 1000,
        )
    active = config.mode is Mode.ACTIVE
    checks_mapping = active and (moves or unsettled)
    return Step(config, decision, decided_from, checks_mapping, claim)


def describe(plan: Plan) -> list[str]:
    """The plan as an operator reads it: one line per step, what would be done and why."""
    lines = []
    for step in plan.steps:
        decision = step.decision
        lines.append(
            f"{step.kind} {decision.queue} ({step.config.esm_uuid}): {decision.previous} -> "
            f"{decision.target} [{decision.action}] {decision.reason}"
        )
    return lines
