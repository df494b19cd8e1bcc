"""The control loop: telemetry in, one plan for every queue, then its execution.

Deciding is pure and happens for all queues before anything is written or actuated, so a
batch's decisions never depend on the order the AWS calls happen to take. Execution claims each
transition in the ledger with a conditional write, then moves the mapping; a display-only
executor (``describe``) gives a dry run for free.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from controller.cache import LruCache
from controller.constants import (
    ATTEMPT_TIMEOUT_S,
    CACHED_QUEUES,
    MAX_CLOCK_SKEW_S,
    WINDOW_RETENTION_S,
)
from controller.model import (
    Action,
    AuditEvent,
    Decision,
    Mode,
    QueueConfig,
    QueueState,
    QueueStateName,
    Sample,
)
from controller.policy import DEFAULT_ALGORITHM, LimitAlgorithm, aimd_step, algorithm_named, decide
from controller.ports import (
    ActuationError,
    Actuator,
    InvalidConfig,
    Ledger,
    LedgerError,
    MappingNotFound,
    MappingView,
    Notice,
    VersionConflict,
)
from controller.settings import PolicyParams, SettingsError
from controller.transitions import Transition
from controller.window import QueueWindow

# Time kept in hand for one step (read, claim, update) before the invocation's deadline.
STEP_BUDGET_S = 3.0
# A deleted mapping is looked for again after this long; until then its queue costs no call.
MAPPING_RECHECK_S = 900.0
# What Lambda accepts in an event source mapping's URI path: a UUID, or a test double's id.
ESM_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")


@dataclass(frozen=True, slots=True)
class Step:
    config: QueueConfig
    decision: Decision
    decided_from: QueueState
    evidence_time: float | None
    event_type: AuditEvent = AuditEvent.TRANSITION

    @property
    def actuates(self) -> bool:
        return self.config.mode is Mode.ACTIVE and self.decision.changes_mapping

    @property
    def records(self) -> bool:
        """Only transitions reach the ledger: a steady queue costs no writes. Memory changed
        without a transition stays in the warm container; a cold one re-learns it."""
        decision = self.decision
        return decision.changes_mapping or decision.state != self.decided_from.state

    @property
    def base_version(self) -> int:
        return self.decided_from.version


@dataclass(slots=True)
class Plan:
    now: float
    steps: list[Step] = field(default_factory=list)

    @property
    def decisions(self) -> list[Decision]:
        return [step.decision for step in self.steps]

    def describe(self) -> list[str]:
        """The display-only executor: what would be done, one line per step."""
        lines = []
        for step in self.steps:
            verb = "update" if step.actuates else "record" if step.records else "hold"
            decision = step.decision
            lines.append(
                f"{verb} {decision.queue} ({step.config.esm_uuid}): {decision.previous} -> "
                f"{decision.target} [{decision.action}] {decision.reason}"
            )
        return lines


class Controller:
    """Keeps windows and cached ledger state across batches of one warm container."""

    def __init__(
        self,
        ledger: Ledger,
        actuator: Actuator,
        params: PolicyParams,
        *,
        algorithm: LimitAlgorithm[Any] | None = None,
        config_ttl_s: float = 60.0,
        retention_s: float = WINDOW_RETENTION_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ledger = ledger
        self.actuator = actuator
        self.params = params
        self.algorithm = algorithm or algorithm_named(DEFAULT_ALGORITHM)
        self.counters: Counter[str] = Counter()
        self._config_ttl_s = config_ttl_s
        self._retention_s = retention_s
        self._monotonic = monotonic
        self._windows: LruCache[str, QueueWindow] = LruCache(CACHED_QUEUES)
        self._configs: LruCache[str, tuple[float, QueueConfig | None]] = LruCache(CACHED_QUEUES)
        self._states: LruCache[str, QueueState] = LruCache(CACHED_QUEUES)
        self._pending: set[str] = set()
        # Last reported broken CONFIG content per queue: each version is reported once.
        self._reported_invalid: LruCache[str, str] = LruCache(CACHED_QUEUES)
        # Queues whose mapping is gone, and when to look for it again.
        self._mapping_missing: LruCache[str, float] = LruCache(CACHED_QUEUES)
        # Queues whose last claim may disagree with their mapping (a ledger fault mid-step):
        # their next step reads the mapping, even a HOLD, and reconciles the ledger to it.
        self._unsettled: LruCache[str, bool] = LruCache(CACHED_QUEUES)
        # What the operator should hear of, since the application last took it (logged once).
        self.notices: list[Notice] = []

    @property
    def retention_s(self) -> float:
        """How far back from now an event time is still evidence."""
        return self._retention_s

    # -- telemetry ------------------------------------------------------------------------
    def ingest(self, samples: Iterable[Sample], now: float) -> Counter[str]:
        """Window the samples of registered queues; returns how many of the others were
        dropped, by reason (also added to ``counters``).

        Only event times from one retention before ``now`` to ``MAX_CLOCK_SKEW_S`` after it
        are evidence: one document stamped in the future would otherwise become its window's
        newest time and make every real sample after it look too old.
        """
        dropped: Counter[str] = Counter()
        earliest, latest = now - self._retention_s, now + MAX_CLOCK_SKEW_S
        by_queue: dict[str, list[Sample]] = {}
        for sample in samples:
            if sample.event_time > latest:
                dropped["samples_from_future"] += 1
            elif sample.event_time < earliest:
                dropped["samples_too_old"] += 1
            else:
                by_queue.setdefault(sample.queue, []).append(sample)
        configs = self.configs(by_queue, now)
        for queue, queue_samples in by_queue.items():
            if queue in self._reported_invalid and queue not in configs:
                self.counters["samples_config_invalid"] += len(queue_samples)
                continue
            if queue not in configs:
                dropped["samples_unregistered"] += len(queue_samples)
                continue
            window = self._windows.get(queue)
            if window is None:
                window = self._windows[queue] = QueueWindow(self._retention_s)
            for sample in queue_samples:
                if window.add(sample):
                    self.counters["samples_windowed"] += 1
                else:
                    dropped["samples_too_old"] += 1
            self._pending.add(queue)
        self.counters.update(dropped)
        return dropped

    def configs(self, queues: Iterable[str], now: float) -> dict[str, QueueConfig]:
        """Registered configs, cached for ``config_ttl_s`` so a batch costs no ledger reads."""
        known: dict[str, QueueConfig | None] = {}
        stale = []
        for queue in set(queues):
            cached = self._configs.get(queue)
            if cached is None or now - cached[0] > self._config_ttl_s:
                stale.append(queue)
            else:
                known[queue] = cached[1]
        if stale:
            fetched = self.ledger.read_configs(stale)
            for queue in stale:
                config = fetched.valid.get(queue)
                invalid = fetched.invalid.get(queue) or self._invalid(config)
                if invalid is not None:
                    self._note_invalid(invalid)
                    config = None
                elif config is not None:
                    self._reported_invalid.pop(queue)
                known[queue] = config
                self._configs[queue] = (now, config)
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

    def _note_invalid(self, invalid: InvalidConfig) -> None:
        """Skip the queue (counted); report each broken version of its config once."""
        self.counters["configs_invalid"] += 1
        if self._reported_invalid.get(invalid.queue) != invalid.fingerprint:
            self._reported_invalid[invalid.queue] = invalid.fingerprint
            message = (
                f"CONFIG of {invalid.queue} is invalid; the queue is not controlled until it "
                f"is fixed: {invalid.problem}"
            )
            self.notices.append(Notice(invalid.queue, message, "configs_invalid"))

    def _set_aside(self, queue: str, uuid: str, state: QueueState | None, now: float) -> None:
        """The mapping is gone: leave the queue alone (no call per batch) until a re-check;
        audited and reported once, however many re-checks find it still gone."""
        first = queue not in self._mapping_missing
        self._mapping_missing[queue] = now + MAPPING_RECHECK_S
        self._pending.discard(queue)
        if not first:
            return
        self.counters["mappings_missing"] += 1
        message = (
            f"event source mapping {uuid} of {queue} does not exist; the queue is set aside "
            f"and looked for again every {MAPPING_RECHECK_S:.0f}s (re-register it to resume)"
        )
        self.notices.append(Notice(queue, message, "mappings_missing"))
        if state is None:
            return
        self._commit(
            Transition(
                state.evolve(last_reason=message, last_evaluated_at=now),
                at=now,
                event=AuditEvent.MAPPING_MISSING,
                previous_value=state.concurrency,
                action=Action.HOLD.value,
                reason=message,
            )
        )

    def _is_set_aside(self, queue: str, now: float) -> bool:
        recheck_at = self._mapping_missing.get(queue)
        return recheck_at is not None and recheck_at > now

    def wake_due(self, now: float) -> int:
        """Learn the due states from the ledger, so the next plan decides those whose
        wake-up time has come; returns how many are due.

        A paused mapping sends no telemetry, so nothing else would wake it; a scheduled tick
        calls this, in whatever container it lands.
        """
        for state in self.ledger.due_states(now):
            cached = self._states.get(state.queue)
            # Equal versions: the cache holds the same transition plus unwritten memory.
            if cached is None or cached.version < state.version:
                self._learn(state)
        return len(self._due(now))

    # -- deciding -------------------------------------------------------------------------
    def plan(self, now: float, deadline: float = math.inf) -> Plan:
        """Decide every queue with new evidence; nothing is written or actuated here.

        A ledger fault propagates with the pending queues kept, so a retried batch decides
        them again. A queue whose state could not be learned in time stays pending.
        """
        queues = sorted(q for q in self._pending | self._due(now) if not self._is_set_aside(q, now))
        configs = self.configs(queues, now)
        states = self.states(configs.values(), now, deadline)
        self._pending.clear()
        plan = Plan(now=now)
        for queue in queues:
            config, state = configs.get(queue), states.get(queue)
            if config is None:
                continue
            if state is None:
                self._pending.add(queue)
                continue
            window = self._windows.get(queue) or QueueWindow(self._retention_s)
            decision = decide(self.algorithm, state, config, window, now, self.params_for(config))
            plan.steps.append(Step(config, decision, state, window.newest_event_time))
        return plan

    def _due(self, now: float) -> set[str]:
        """Queues whose state asked to be looked at again by now (a paused mapping sends no
        telemetry): decided with the next plan, evidence or not."""
        return {queue for queue, state in self._states.items() if 0 < state.wake_at <= now}

    def evaluate(
        self, queue: str, pressure_rate: float, success_rate: float, now: float, deadline: float
    ) -> tuple[Decision, bool] | None:
        """The operator's manual evaluation: the original rule once on the given rates, no
        window, no settling. ``None`` for an unregistered queue; else the decision and whether
        the mapping was updated."""
        config = self.configs([queue], now).get(queue)
        if config is None:
            return None
        state = self.states([config], now, deadline).get(queue)
        if state is None:
            raise ActuationError(f"mapping {config.esm_uuid} of {queue} could not be read")
        if config.mode is Mode.PINNED:
            decision = decide(self.algorithm, state, config, QueueWindow(), now, self.params)
        else:
            decision = aimd_step(state, pressure_rate, success_rate, self.params_for(config), now)
        step = Step(config, decision, state, None, AuditEvent.MANUAL_EVALUATION)
        done = self.execute(Plan(now, [step]), deadline)
        return (done[0] if done else decision), bool(done) and step.actuates

    def params_for(self, config: QueueConfig) -> PolicyParams:
        return self.params.with_overrides(config.overrides) if config.overrides else self.params

    def states(
        self, configs: Iterable[QueueConfig], now: float, deadline: float = math.inf
    ) -> dict[str, QueueState]:
        """Current state per queue: cached, else the ledger's, else learned from the mapping.

        A mapping that cannot be read (or not before ``deadline``) is left out and counted
        rather than blocking the rest. ``queuemesh register`` writes the first state, so this
        read is only for queues registered by other means.
        """
        configs = list(configs)
        cached = {c.queue: self._states.get(c.queue) for c in configs}
        known = {queue: state for queue, state in cached.items() if state is not None}
        missing = [c.queue for c in configs if c.queue not in known]
        if missing:
            for queue, state in self.ledger.get_states(missing).items():
                known[queue] = self._learn(state)
        for config in configs:
            if config.queue in known:
                continue
            if self._monotonic() + STEP_BUDGET_S > deadline:
                self.counters["states_deferred"] += 1
                continue
            try:
                state = self._initial_state(config, now, deadline)
            except MappingNotFound:
                self._set_aside(config.queue, config.esm_uuid, None, now)
                continue
            except ActuationError:
                self.counters["mappings_unreadable"] += 1
                continue
            self._mapping_missing.pop(config.queue)
            known[config.queue] = self._states[config.queue] = state
        return known

    def _learn(self, state: QueueState) -> QueueState:
        """Take a state read from the ledger. One whose last write claimed a move may have
        been stranded by another container (its update or revert failed, or its answer was
        lost): its next step checks the mapping first."""
        if state.last_action is not Action.HOLD:
            self._unsettled[state.queue] = True
        self._states[state.queue] = state
        return state

    def _initial_state(self, config: QueueConfig, now: float, deadline: float) -> QueueState:
        """A queue never decided before starts from its mapping's actual setting."""
        params = self.params_for(config)
        view = self.actuator.read(config.esm_uuid, deadline)
        concurrency = view.max_concurrency if view.max_concurrency is not None else params.cmax
        return QueueState(
            queue=config.queue,
            esm_uuid=config.esm_uuid,
            state=QueueStateName.HEALTHY,
            concurrency=concurrency,
            previous_concurrency=concurrency,
            last_evaluated_at=now,
            enabled=view.enabled,
        )

    # -- acting ---------------------------------------------------------------------------
    def execute(self, plan: Plan, deadline: float = math.inf) -> list[Decision]:
        """Carry out the plan; returns the decisions that took effect (HOLDs included).

        Steps that would not fit before ``deadline`` are left undone and their queues decided
        again with the next batch: nothing is recorded that was not done.
        """
        done: list[Decision] = []
        listed = self._list_mappings(plan, deadline)
        for index, step in enumerate(plan.steps):
            if step.records and self._monotonic() + STEP_BUDGET_S > deadline:
                self.counters["steps_deferred"] += len(plan.steps) - index
                self._pending.update(s.config.queue for s in plan.steps[index:])
                break
            try:
                decision = self._run(step, plan.now, deadline, listed)
            except LedgerError:
                if step.actuates:
                    self._unsettled[step.config.queue] = True
                self._pending.update(s.config.queue for s in plan.steps[index:])
                raise
            except MappingNotFound:
                queue = step.config.queue
                self._set_aside(queue, step.config.esm_uuid, self._states.get(queue), plan.now)
                continue
            except ActuationError:
                # The mapping could not even be read: try again with the next batch.
                self.counters["actuation_failures"] += 1
                self._pending.add(step.config.queue)
                continue
            if decision is not None:
                done.append(decision)
        return done

    def run_batch(
        self, samples: Iterable[Sample], now: float, deadline: float = math.inf
    ) -> list[Decision]:
        self.ingest(samples, now)
        return self.execute(self.plan(now, deadline), deadline)

    def _list_mappings(self, plan: Plan, deadline: float) -> dict[str, MappingView]:
        """The mappings this plan moves, listed in bulk for the drift check: a page covers a
        hundred mappings where a read covers one, and the control plane allows 15 calls/s per
        account. Listed once per execution; a failed listing leaves every step its own read."""
        uuids = {step.config.esm_uuid for step in plan.steps if self._checks_mapping(step)}
        if not uuids or self._monotonic() + STEP_BUDGET_S > deadline:
            return {}  # nothing to move, or no time to move it: no call
        try:
            return self.actuator.read_many(uuids, deadline)
        except ActuationError:
            self.counters["mapping_list_failures"] += 1
            return {}

    def _checks_mapping(self, step: Step) -> bool:
        """A step that moves the mapping, or an active queue's whose claim may be stranded
        (a dry run's ledger disagrees with its mapping by design)."""
        unsettled = step.config.mode is Mode.ACTIVE and step.config.queue in self._unsettled
        return step.actuates or unsettled

    def _run(
        self, step: Step, now: float, deadline: float, listed: dict[str, MappingView]
    ) -> Decision | None:
        decision, config = step.decision, step.config
        if self._checks_mapping(step):
            view = listed.get(config.esm_uuid) or self.actuator.read(config.esm_uuid, deadline)
            self._mapping_missing.pop(config.queue)
            if (
                view.max_concurrency != decision.previous
                or view.enabled != decision.previous_enabled
            ):
                self._adopt_drift(step, view.max_concurrency, view.enabled, now)
                return None
        if not step.records:
            self._unsettled.pop(config.queue)
            self._states[config.queue] = decision.new_state
            return decision
        committed = self._commit(self._transition(step, now))
        if committed is None:
            return None
        if not step.actuates:
            return decision
        try:
            # Time for the revert's ledger write is kept back, should the update fail.
            apply_by = deadline - ATTEMPT_TIMEOUT_S
            self.actuator.apply(config.esm_uuid, decision.target, decision.enabled, apply_by)
        except ActuationError as error:
            self._revert(step, committed, now, error)
            if isinstance(error, MappingNotFound):
                raise
            return None
        self.counters["esm_updates"] += 1
        return decision

    def _transition(self, step: Step, now: float) -> Transition:
        decision = step.decision
        dry_run = step.config.mode is Mode.DRY_RUN and decision.changes_mapping
        latency_ms = (
            0.0 if step.evidence_time is None else max(0.0, now - step.evidence_time) * 1000
        )
        return Transition(
            decision.new_state.evolve(version=step.base_version),
            at=now,
            event=step.event_type,
            previous_value=decision.previous,
            action=decision.action.value,
            reason=f"[dry-run] {decision.reason}" if dry_run else decision.reason,
            error_rate=decision.pressure_rate,
            success_rate=decision.success_rate,
            control_loop_latency_ms=latency_ms,
        )

    def _adopt_drift(self, step: Step, actual: int | None, enabled: bool, now: float) -> None:
        """Documented rule: an operator's change to the mapping wins. The controller adopts the
        actual value, records the drift, and judges fresh evidence under it before acting.

        A mapping still at the value the ledger's last claim moved from is that claim not
        carried out (its update or revert failed, or its answer was lost): the same repair,
        audited as ``ACTUATION_RECONCILED``, not as an operator's drift."""
        decision = step.decision
        value = decision.previous if actual is None else actual
        claimed = step.decided_from
        if (
            claimed.last_action is not Action.HOLD
            and value == claimed.previous_concurrency != claimed.concurrency
        ):
            event, counter = AuditEvent.ACTUATION_RECONCILED, "actuations_reconciled"
            reason = (
                f"Reconciled: the ledger claimed {decision.previous} but the mapping stayed at "
                f"{value} (enabled={enabled}); the update never happened, adopting the mapping."
            )
        else:
            event, counter = AuditEvent.DRIFT_DETECTED, "drift_detected"
            reason = (
                f"Drift: mapping is at {value} (enabled={enabled}) but the ledger said "
                f"{decision.previous}; adopting the mapping's value."
            )
        state = step.decided_from.evolve(
            concurrency=value,
            previous_concurrency=decision.previous,
            enabled=enabled,
            last_action=Action.HOLD,
            last_reason=reason,
            last_evaluated_at=now,
            last_change_at=now,
            version=step.base_version,
        )
        self.counters[counter] += 1
        self._commit(
            Transition(
                state,
                at=now,
                event=event,
                previous_value=decision.previous,
                action=Action.HOLD.value,
                reason=reason,
            )
        )

    def _revert(self, step: Step, committed: QueueState, now: float, error: ActuationError) -> None:
        """The claim stands in the ledger but the mapping did not move: put the ledger back."""
        decision = step.decision
        reason = f"Actuation failed ({error}); mapping stays at {decision.previous}."
        state = step.decided_from.evolve(
            version=committed.version, last_reason=reason, last_evaluated_at=now
        )
        self.counters["actuation_failures"] += 1
        self._pending.add(decision.queue)
        self._commit(
            Transition(
                state,
                at=now,
                event=AuditEvent.ACTUATION_FAILED,
                previous_value=decision.target,
                action=Action.HOLD.value,
                reason=reason,
            )
        )

    def _commit(self, transition: Transition) -> QueueState | None:
        """Write the transition; ``None`` when another invocation moved the queue first, whose
        state is then re-read and judged afresh with the next batch."""
        queue = transition.state.queue
        try:
            committed = transition.commit(self.ledger)
        except VersionConflict:
            self.counters["version_conflicts"] += 1
            self._states.pop(queue)
            self._pending.add(queue)
            return None
        # Written on top of what the ledger holds: the queue's claim is settled (a claim's own
        # failed update marks it again).
        self._unsettled.pop(queue)
        self._states[queue] = committed
        return committed
