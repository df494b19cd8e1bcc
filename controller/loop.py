"""The control loop: telemetry in, one plan for every queue, then its execution.

``ControlLoop.run_batch`` is the one entry point the Lambda (``controller.app``), the simulator
and replay share: window the batch's samples in the book, learn what the plan needs (configs,
states; ledger and mapping reads), plan (pure, :mod:`controller.planner`), read the backlog of
each queue the plan would raise and plan those again knowing it, execute
(:mod:`controller.executor`) and let the book remember what was done.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from controller.backlog import BacklogReadings
from controller.book import Count, QueueBook
from controller.cache import LruCache
from controller.constants import (
    CACHED_QUEUES,
    CONFIG_TTL_S,
    MAX_CLOCK_SKEW_S,
    QUOTA_SHARED_FOR_S,
    WINDOW_RETENTION_S,
)
from controller.executor import STEP_BUDGET_S, AwsExecutor, Executor
from controller.group_reports import GroupReportWriter
from controller.model import AuditEvent, Backlog, Decision, GroupReport, QueueConfig, QueueState
from controller.planner import (
    Plan,
    governed,
    group_named,
    groups_of,
    plan,
    probing,
    reading_backlog,
    revised,
    step_for,
)
from controller.policy import DEFAULT_ALGORITHM, LimitAlgorithm, algorithm_named, evaluate_manually
from controller.ports import (
    ActuationError,
    Actuator,
    InvalidConfig,
    Ledger,
    LedgerError,
    MappingNotFound,
    Notice,
    QueueBacklog,
    VersionConflict,
    WakeUpRequest,
    WakeUpScheduler,
)
from controller.settings import PolicyParams, SettingsError
from controller.window import Evidence

# How long after a complete sweep for paused queues without a wake-up (``ControlLoop.tick``)
# a container sweeps again: such items are left over from before the WakeUps index, so after
# the first sweep a new one is rare (a restored backup, a hand edit).
WAKE_UP_SWEEP_INTERVAL_S = 3600.0

# What Lambda accepts in an event source mapping's URI path: a UUID, or a test double's id.
ESM_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")


@dataclass(slots=True)
class BatchResult:
    """What one batch (or scheduled tick) did.

    ``planned``: every decision of the plan; ``done``: those that took effect (HOLDs
    included); ``dropped``: samples not windowed, by reason. A ledger fault stops the batch
    (``fault``); ``windowed`` says whether its samples were windowed before it did.
    """

    plan: Plan | None = None
    done: list[Decision] = field(default_factory=list)
    dropped: Counter[Count] = field(default_factory=Counter)
    due: int = 0
    windowed: bool = False
    fault: LedgerError | None = None

    @property
    def planned(self) -> list[Decision]:
        return [] if self.plan is None else self.plan.decisions

    @property
    def groups(self) -> tuple[GroupReport, ...]:
        """What the plan decided for each group of queues sharing a downstream."""
        return () if self.plan is None else self.plan.groups


@dataclass(frozen=True, slots=True)
class ManualResult:
    """The operator's manual evaluation: the decision, and whether the mapping moved."""

    decision: Decision
    config: QueueConfig
    esm_updated: bool


class ControlLoop:
    """One warm container's controller: the book, the planner and an executor (AWS unless
    told otherwise: a ``DisplayExecutor`` makes it a dry run). Without ``backlog`` no queue's
    backlog is ever known (replay: a recording has none). Without ``wake_ups`` a wake-up
    waits for the scheduled tick (``tick``). ``monotonic`` is the clock of the deadlines,
    ``clock`` the epoch clock the AWS executor dates its claims' ends by (``AwsExecutor``):
    where ``now`` is virtual (a simulator), both are."""

    def __init__(
        self,
        ledger: Ledger,
        actuator: Actuator,
        params: PolicyParams,
        *,
        algorithm: LimitAlgorithm[Any] | None = None,
        config_ttl_s: float = CONFIG_TTL_S,
        retention_s: float = WINDOW_RETENTION_S,
        capacity: int = CACHED_QUEUES,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], float] = time.time,
        executor: Executor | None = None,
        backlog: QueueBacklog | None = None,
        wake_ups: WakeUpScheduler | None = None,
    ) -> None:
        self.ledger = ledger
        self.actuator = actuator
        self.backlogs = None if backlog is None else BacklogReadings(backlog)
        self.params = params
        # A queue's parameters are read several times a batch; its overrides rarely change.
        self._params_by_overrides: LruCache[tuple[tuple[str, float], ...], PolicyParams] = LruCache(
            capacity
        )
        self.algorithm = algorithm or algorithm_named(DEFAULT_ALGORITHM)
        self.book = QueueBook(capacity, retention_s)
        self.executor = executor or AwsExecutor(ledger, actuator, monotonic, clock)
        self.group_reports = GroupReportWriter(capacity)
        self.wake_ups = wake_ups
        self._config_ttl_s = config_ttl_s
        self._monotonic = monotonic
        # The wake-up sweep (``tick``): when the next one starts (a cold container's first
        # tick), and where an unfinished one goes on.
        self._next_sweep_at = -math.inf
        self._sweep_resume: object | None = None

    @property
    def counters(self) -> Counter[Count]:
        """Everything counted since the container started (read only)."""
        return self.book.counters

    @property
    def retention_s(self) -> float:
        """How far back from now an event time is still evidence."""
        return self.book.retention_s

    def take_notices(self) -> list[Notice]:
        """What the operator should hear of since the last call, each once."""
        return self.book.take_notices()

    # -- the entry points -----------------------------------------------------------------
    def run_batch(
        self,
        evidence: Iterable[Evidence],
        now: float,
        deadline: float = math.inf,
        *,
        history: Iterable[Evidence] = (),
        restarted: Iterable[str] = (),
    ) -> BatchResult:
        """Window ``evidence`` (worker documents, or the reducer's per-second totals of them)
        and decide every queue with new evidence (or due, or left from
        an earlier batch), then carry the plan out before ``deadline`` (``time.monotonic()``).

        First caught up (``controller.evidence``): ``history``, what other containers were
        handed, is windowed, not decided; ``restarted`` queues start afresh.

        A ledger fault does not raise: it ends the batch and is in the result, the queues not
        yet done kept waiting, so a retried batch decides them again."""
        result = BatchResult()
        try:
            self.book.restart(restarted)
            result.dropped = self._ingest(evidence, now, history)
            result.windowed = True
            self._decide(now, deadline, result)
        except LedgerError as fault:
            result.fault = fault
        return result

    def tick(
        self, now: float, deadline: float = math.inf, woken: Collection[str] = ()
    ) -> BatchResult:
        """The scheduled wake-up: learn the due states from the ledger and decide them with
        whatever else waits. A paused mapping sends no telemetry, so nothing else would wake
        it; the tick lands in whatever container it lands in.

        ``woken``: the queues whose wake-up messages run this tick. Their states are read
        too, consistently: the ``WakeUps`` index is eventually consistent, and a wake-up that
        came a second after its state's commit would otherwise find the queue not due yet and
        leave it to the next scheduled tick, a minute late."""
        result = BatchResult()
        try:
            self._sweep_wake_ups(now)
            for state in self.ledger.due_states(now):
                self.book.learn(state)
            if woken:
                for state in self.ledger.get_states(woken).values():
                    self.book.learn(state)
            result.due = len(self.book.due(now))
            self._decide(now, deadline, result)
        except LedgerError as fault:
            result.fault = fault
        return result

    def _sweep_wake_ups(self, now: float) -> None:
        """Find paused queues the ``WakeUps`` index cannot show, and give them their wake-up.

        A STATE item written before the index (or in the old flat layout) has no ``WakeUp``
        until its next commit, and a paused mapping sends no telemetry to cause one: without
        this, such a queue stays disabled for good. Reading the index cannot find them, so
        the first tick of every cold container, then one every ``WAKE_UP_SWEEP_INTERVAL_S``,
        sweeps the table (``Ledger.sweep_wake_ups``: bounded reads per tick, going on at the
        next tick) and writes the missing ``WakeUp`` with a conditional write. A write, not
        just a read into this book: from then on the index serves every container's tick,
        and the sweep finds nothing more. The swept states are learned at once, so a wake-up
        already past is decided by this very tick (the index is eventually consistent).
        A failed sweep is counted and tried again at the next tick; it never stops the tick.
        """
        if now < self._next_sweep_at:
            return
        try:
            sweep = self.ledger.sweep_wake_ups(now, self._sweep_resume)
        except LedgerError:
            self.book.count(Count.WAKE_UP_SWEEP_FAILURES)
            return
        for state in sweep.woken:
            self.book.learn(state)
            self.book.note_wake_up_repaired(state)
        self._sweep_resume = sweep.resume
        if sweep.resume is None:
            self._next_sweep_at = now + WAKE_UP_SWEEP_INTERVAL_S

    def evaluate(
        self, queue: str, pressure_rate: float, success_rate: float, now: float, deadline: float
    ) -> ManualResult | None:
        """The operator's manual evaluation: the original rule once on the given rates, no
        window, no settling. ``None`` for an unregistered queue; a ledger fault raises."""
        config = self.configs([queue], now).get(queue)
        if config is None:
            return None
        state = self.states([config], now, deadline).get(queue)
        if state is None:
            raise ActuationError(f"mapping {config.esm_uuid} of {queue} could not be read")
        params = self.params_for(config)
        decision = evaluate_manually(state, config, pressure_rate, success_rate, now, params)
        unsettled = self.book.is_unsettled(queue)
        step = step_for(config, decision, state, None, now, unsettled, AuditEvent.MANUAL_EVALUATION)
        execution = self.executor.execute(Plan(now, (step,)), self.book, deadline)
        self.book.apply(execution.effects)
        if execution.fault is not None:
            raise execution.fault
        done = bool(execution.done)
        return ManualResult(execution.done[0] if done else decision, config, done and step.actuates)

    # -- telemetry ------------------------------------------------------------------------
    def _ingest(
        self, evidence: Iterable[Evidence], now: float, history: Iterable[Evidence] = ()
    ) -> Counter[Count]:
        """Window the evidence of registered queues; returns how many worker documents of the
        rest were dropped, by reason (also counted). ``history`` is windowed without either
        (counted where it was handed), its configs read with the batch's: no ledger fault
        stops the batch once it is windowed (a retry would window it again).

        Only event times from one retention before ``now`` to ``MAX_CLOCK_SKEW_S`` after it
        are evidence: one document stamped in the future would otherwise become its window's
        newest time and make every real sample after it look too old.
        """
        dropped: Counter[Count] = Counter()
        earliest, latest = now - self.book.retention_s, now + MAX_CLOCK_SKEW_S
        by_queue: dict[str, list[Evidence]] = {}
        for item in evidence:
            if item.event_time > latest:
                dropped[Count.SAMPLES_FROM_FUTURE] += item.documents
            elif item.event_time < earliest:
                dropped[Count.SAMPLES_TOO_OLD] += item.documents
            else:
                by_queue.setdefault(item.queue, []).append(item)
        kept = [item for item in history if earliest <= item.event_time <= latest]
        configs = self.configs({*by_queue, *(item.queue for item in kept)}, now)
        book = self.book
        for item in kept:
            if item.queue in configs:
                book.add_history(item)
        for queue, items in by_queue.items():
            documents = sum(item.documents for item in items)
            if queue not in configs:
                if book.reported_invalid(queue):
                    book.count(Count.SAMPLES_CONFIG_INVALID, documents)
                else:
                    dropped[Count.SAMPLES_UNREGISTERED] += documents
                continue
            for item in items:
                if book.add_sample(item):
                    book.count(Count.SAMPLES_WINDOWED, item.documents)
                else:
                    dropped[Count.SAMPLES_TOO_OLD] += item.documents
        book.counters.update(dropped)
        return dropped

    # -- what the plan needs --------------------------------------------------------------
    def configs(self, queues: Iterable[str], now: float) -> dict[str, QueueConfig]:
        """Registered, usable configs, cached for ``config_ttl_s`` so a batch costs no ledger
        reads."""
        known: dict[str, QueueConfig | None] = {}
        stale = []
        for queue in set(queues):
            fresh, config = self.book.cached_config(queue, now, self._config_ttl_s)
            if fresh:
                known[queue] = config
            else:
                stale.append(queue)
        if stale:
            fetched = self.ledger.read_configs(stale)
            for queue in stale:
                config = fetched.valid.get(queue)
                invalid = fetched.invalid.get(queue) or self._invalid(config)
                if invalid is not None:
                    self.book.note_invalid(invalid)
                    config = None
                known[queue] = config
                self.book.remember_config(queue, config, now)
        return {q: config for q, config in known.items() if config is not None}

    def _invalid(self, config: QueueConfig | None) -> InvalidConfig | None:
        """Validate a decoded config before any AWS call depends on it."""
        if config is None:
            return None
        problem = None
        if not ESM_ID_PATTERN.fullmatch(config.esm_uuid):
            problem = f"EsmUuid {config.esm_uuid!r} is not an event source mapping id"
        else:
            try:
                self.params_for(config)
            except SettingsError as error:
                problem = f"policy overrides do not validate: {error}"
        if problem is None:
            return None
        return InvalidConfig(config.queue, problem, repr(config))

    def params_for(self, config: QueueConfig) -> PolicyParams:
        """The policy parameters of ``config``'s queue: the defaults with its overrides (which
        raise ``SettingsError`` where they do not validate)."""
        if not config.overrides:
            return self.params
        key = tuple(sorted(config.overrides.items()))
        params = self._params_by_overrides.get(key)
        if params is None:
            params = self.params.with_overrides(config.overrides)
            self._params_by_overrides[key] = params
        return params

    def states(
        self, configs: Iterable[QueueConfig], now: float, deadline: float = math.inf
    ) -> dict[str, QueueState]:
        """Current state per queue: the book's, else the ledger's, else learned from the
        mapping.

        A mapping that cannot be read (or not before ``deadline``) is left out and counted
        rather than blocking the rest. ``queuemesh register`` writes the first state, so this
        read is only for queues registered by other means.
        """
        configs = list(configs)
        book = self.book
        # With more queues than the book holds, learning some states forgets others: each
        # state is taken as the book held it or as just read, never looked for on the
        # mapping (a paced control-plane call each) because the book forgot it meanwhile.
        held = {config.queue: book.state(config.queue) for config in configs}
        missing = [queue for queue, state in held.items() if state is None]
        stored = {
            queue: book.learn(read)
            for queue, read in (self.ledger.get_states(missing) if missing else {}).items()
        }
        known: dict[str, QueueState] = {}
        for config in configs:
            state = (
                held[config.queue]
                or stored.get(config.queue)
                or self._first_state(config, now, deadline)
            )
            if state is not None:
                known[config.queue] = state
        return known

    def _first_state(self, config: QueueConfig, now: float, deadline: float) -> QueueState | None:
        """A queue never decided before starts from its mapping's actual setting."""
        if self._monotonic() + STEP_BUDGET_S > deadline:
            self.book.count(Count.STATES_DEFERRED)
            return None
        try:
            view = self.actuator.read(config.esm_uuid, deadline)
        except MappingNotFound:
            self.book.set_aside(config.queue, config.esm_uuid, now)
            return None
        except ActuationError:
            self.book.count(Count.MAPPINGS_UNREADABLE)
            return None
        cmax = self.params_for(config).cmax
        concurrency = view.max_concurrency if view.max_concurrency is not None else cmax
        state = QueueState.first(
            config.queue, config.esm_uuid, concurrency, enabled=view.enabled, at=now
        )
        self.book.first_state(state)
        return state

    # -- deciding and acting --------------------------------------------------------------
    def _decide(self, now: float, deadline: float, result: BatchResult) -> None:
        """Plan every waiting or due queue, execute the plan, remember what was done. A
        ledger fault while learning keeps the queues waiting; one while executing keeps
        those not yet done."""
        book = self.book
        waiting = book.pending() | book.due(now)
        queues = sorted(q for q in waiting if not book.is_set_aside(q, now))
        # The queues sharing a downstream or a CONFIG group with a waiting one are decided
        # with it, as a group: those whose telemetry this container holds, and those the
        # ledger lists in the group. A queue whose telemetry it does not hold is grouped by
        # the downstream its STATE names.
        downstreams = book.downstreams()
        known = self.configs(set(downstreams) | set(queues), now)
        downstreams.update(self._stored_downstreams(queues, known, downstreams))
        listed = self.configs(self._listed_group_members(queues, known, downstreams, now), now)
        known.update(listed)
        downstreams.update(self._stored_downstreams(listed, known, downstreams))
        groups = groups_of(known, downstreams)
        touched = {groups[queue] for queue in queues if queue in groups}
        if touched:
            members = [q for q, group in groups.items() if group in touched]
            queues = sorted(set(queues).union(q for q in members if not book.is_set_aside(q, now)))
        configs = self.configs(queues, now)
        # Each state decided names the downstream its queue's telemetry names now, so a
        # transition stores it with the rest; a step without one where it differs from the
        # stored one records it alone (``AwsExecutor._hold``: once per change).
        states = {
            queue: state
            if downstreams.get(queue, state.downstream) == state.downstream
            else state.evolve(downstream=downstreams[queue])
            for queue, state in self.states(configs.values(), now, deadline).items()
        }
        windows = {queue: book.window(queue) for queue in queues if queue in states}
        sharing = book.announcing(now - QUOTA_SHARED_FOR_S)

        def planned_for(names: list[str], backlogs: Mapping[str, Backlog] | None = None) -> Plan:
            return plan(
                now,
                names,
                configs,
                states,
                windows,
                book.is_unsettled,
                self.algorithm,
                self.params_for,
                backlogs,
                sharing=sharing,
            )

        planned = planned_for(queues)
        # A raise, or a hold that asks for it, is decided again once its queue's backlog is
        # known (one SQS read each, kept while it holds: ``BacklogReadings``).
        # With less than a step's time left none is read: the plan's execution comes first.
        read_by = deadline - STEP_BUDGET_S
        backlogs: dict[str, Backlog] = {}
        if self.backlogs is not None and self._monotonic() < read_by:
            backlogs, failed = self.backlogs.read(reading_backlog(planned), now, read_by)
            if failed:
                book.count(Count.BACKLOG_READ_FAILURES, failed)
            if backlogs:
                again = planned_for(sorted(backlogs), backlogs)
                planned = revised(planned, again)
        if touched:
            # A queue sized from an announced quota takes its share of it by demand (the
            # announced law); the group's blind estimate governs the others, so a group whose
            # members all announce has no memory to read.
            announcing = {queue for shared in sharing.values() for queue in shared}
            blind = {queue: group for queue, group in groups.items() if queue not in announcing}
            self._read_group_memories(touched.intersection(blind.values()))
            planned = governed(
                planned,
                blind,
                windows,
                self.params_for,
                book.is_unsettled,
                book.group_memory(),
                backlogs,
            )
            book.remember_groups(planned.group_memory)
        if self.backlogs is not None:  # a raise that goes ahead is read for again next time
            self.backlogs.forget(probing(planned))
        # Every queue that waited is done waiting (set aside, unregistered or planned) but
        # those whose state could not be learned in time.
        book.planned(sorted(waiting.difference(planned.undecided)))
        result.plan = planned
        execution = self.executor.execute(planned, book, deadline)
        book.apply(execution.effects)
        result.done = execution.done
        if execution.fault is not None:
            raise execution.fault
        if self.executor.carries_out:
            self._schedule_wake_ups(execution.done, states, now, deadline)
            self._store_group_memories(deadline)
            self._write_group_reports(planned, deadline)

    def _schedule_wake_ups(
        self,
        done: Iterable[Decision],
        decided_from: Mapping[str, QueueState],
        now: float,
        deadline: float,
    ) -> None:
        """Ask for a run at each wake-up time a decision set anew (a pause's or a test's end),
        so a paused queue is decided then, not at the next scheduled tick (up to its period
        later, the test running on meanwhile). A wake-up already asked for is not asked again;
        one the scheduler does not take is counted, and the tick still wakes its queue.

        Only a queue the controller paused (its test pulses included) asks: a running queue's
        wake-up (a probe's end) is its telemetry's to serve, batch by batch, and a tick run
        for it decided it beside its lane's batch, in another container: a version conflict,
        or a step left undone while the lane's claim is in flight (its update waiting for its
        pace: ``Count.CLAIMS_IN_FLIGHT``)."""
        if self.wake_ups is None:
            return
        requests = [
            WakeUpRequest(decision.queue, wake_at)
            for decision in done
            if (wake_at := decision.new_state.wake_at) > now
            and decision.new_state.paused_since > 0
            and (before := decided_from.get(decision.queue)) is not None
            and before.wake_at != wake_at
        ]
        if requests:
            unscheduled = self.wake_ups.schedule(requests, now, deadline)
            if unscheduled:
                self.book.count(Count.WAKE_UPS_UNSCHEDULED, unscheduled)

    def _stored_downstreams(
        self,
        queues: Iterable[str],
        configs: Mapping[str, QueueConfig],
        held: Mapping[str, str | None],
    ) -> dict[str, str | None]:
        """The downstream each of ``queues`` named when it was last decided (its STATE),
        where this container holds none of its telemetry (``held``: a paused queue sends
        none) and no CONFIG ``Group`` makes its group. From the book, else the ledger (one
        BatchGetItem; a queue without a STATE item names none, its mapping is not read)."""
        book = self.book
        wanted = [q for q in queues if q in configs and q not in held and not configs[q].group]
        missing = [queue for queue in wanted if book.state(queue) is None]
        if missing:
            for read in self.ledger.get_states(missing).values():
                book.learn(read)
        return {q: state.downstream for q in wanted if (state := book.state(q)) is not None}

    def _listed_group_members(
        self,
        queues: Iterable[str],
        configs: Mapping[str, QueueConfig],
        downstreams: Mapping[str, str | None],
        now: float,
    ) -> set[str]:
        """The members of the groups of ``queues`` that ``configs`` lacks: a container holds
        the configs of the queues it windows or finds due, so a cold one (the tick) would
        decide a due member alone. Listed by the ledger's ``Groups`` index (the queues whose
        CONFIG ``Group`` or STATE downstream names the group), one Query per group not listed
        within the config TTL; a group the ledger does not list costs only itself (decided
        with the members held), counted."""
        named = sorted(
            {
                group
                for queue in queues
                if (config := configs.get(queue))
                and (group := group_named(config, downstreams.get(queue))) is not None
            }
        )
        members: set[str] = set()
        for group in named:
            listed = self.book.cached_group_members(group, now, self._config_ttl_s)
            if listed is None:
                try:
                    listed = tuple(self.ledger.group_members(group))
                except LedgerError:
                    self.book.count(Count.GROUP_MEMBERS_UNREAD)
                    continue
                self.book.remember_group_members(group, listed, now)
            members.update(listed)
        return members.difference(configs)

    def _read_group_memories(self, groups: Iterable[str]) -> None:
        """Take the groups' memory from the ledger before deciding them (one strongly
        consistent BatchGetItem): any container may have decided a group since this one did
        (another lane's batch, the tick), and nothing else would tell. A read that fails is
        counted and the container's own copy decides."""
        try:
            stored = self.ledger.get_group_memories(sorted(groups))
        except LedgerError:
            self.book.count(Count.GROUP_MEMORIES_UNREAD)
            return
        for group, memory in stored.items():
            self.book.learn_group(group, memory)

    def _store_group_memories(self, deadline: float) -> None:
        """Store each group's memory that changed, conditioned on the version it derives from,
        each write started with a step's time in hand. Another container's write first is a
        conflict: this copy is dropped (the ledger's decides next). A write that fails or is
        not started is counted, tried again with this container's next batch, and never the
        batch's failure; after one fails, the rest are not tried."""
        book = self.book
        failed = False
        for group, copy in sorted(book.unstored_groups().items()):
            if failed or self._monotonic() + STEP_BUDGET_S > deadline:
                book.count(Count.GROUP_MEMORIES_UNSTORED)
                continue
            try:
                book.group_stored(
                    group, self.ledger.put_group_memory(group, copy.memory, copy.version)
                )
            except VersionConflict:
                book.forget_group(group)
            except LedgerError:
                book.count(Count.GROUP_MEMORIES_UNSTORED)
                failed = True

    def _write_group_reports(self, planned: Plan, deadline: float) -> None:
        """Each group's report into the ledger where it changed (``queuemesh status`` reads
        it), each write started with a step's time in hand; a write that fails or is not
        started is counted, never the batch's failure."""
        unwritten = self.group_reports.write(
            planned.groups,
            self.ledger,
            lambda: self._monotonic() + STEP_BUDGET_S <= deadline,
        )
        if unwritten:
            self.book.count(Count.GROUP_REPORTS_UNWRITTEN, unwritten)
