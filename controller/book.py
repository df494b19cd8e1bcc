"""The book: everything a warm controller container remembers about its queues.

Windows of evidence, cached configs and states, the queues waiting to be decided, configs
reported broken, mappings found missing, claims that may be stranded and claims this container
gave up on: all of it lives here, behind typed methods, and nothing else holds per-queue memory.
Deciding reads the book; executing returns effects (:mod:`controller.executor`) that the book
applies.

Memory is bounded by ``capacity`` queues per kind, least recently used forgotten first, with one
exception: a queue waiting to be decided keeps its window until it has been planned, however
many queues one batch names. A window forgotten is counted and reported, never silent.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from controller.cache import LruCache
from controller.constants import CACHED_QUEUES, QUOTA_USE_S, WINDOW_RETENTION_S
from controller.groups import GroupMemory
from controller.groups.law import HEADROOM
from controller.model import Action, QueueConfig, QueueState
from controller.ports import InvalidConfig, Notice, StoredGroupMemory
from controller.window import Evidence, QueueWindow

# A deleted mapping is looked for again after this long; until then its queue costs no call.
MAPPING_RECHECK_S = 900.0


class Count(StrEnum):
    """What the controller counts. The values are the names its logs, the replay report and
    the health document's sources use: a contract, never renamed."""

    SAMPLES_WINDOWED = "samples_windowed"
    SAMPLES_FROM_FUTURE = "samples_from_future"
    SAMPLES_TOO_OLD = "samples_too_old"
    SAMPLES_UNREGISTERED = "samples_unregistered"
    SAMPLES_CONFIG_INVALID = "samples_config_invalid"
    CONFIGS_INVALID = "configs_invalid"
    MAPPINGS_MISSING = "mappings_missing"
    MAPPINGS_UNREADABLE = "mappings_unreadable"
    MAPPING_LIST_FAILURES = "mapping_list_failures"
    STATES_DEFERRED = "states_deferred"
    STEPS_DEFERRED = "steps_deferred"
    ESM_UPDATES = "esm_updates"
    ACTUATION_FAILURES = "actuation_failures"
    ACTUATIONS_RECONCILED = "actuations_reconciled"
    # Steps that found their queue's mapping still where the ledger's last claim moved it from
    # before the claim's end (``QueueState.apply_by``): another invocation's update still on
    # its way, left to it; the queue is decided again with the next batch.
    CLAIMS_IN_FLIGHT = "claims_in_flight"
    DRIFT_DETECTED = "drift_detected"
    VERSION_CONFLICTS = "version_conflicts"
    # Idle queues' windows forgotten because more queues had evidence than the book holds.
    WINDOWS_FORGOTTEN = "windows_forgotten"
    # Queues started afresh because their shard could not be read back (the catch-up).
    WINDOWS_RESTARTED = "windows_restarted"
    # Paused queues' STATE items given the WakeUp they lacked (``ControlLoop.tick``'s sweep).
    WAKE_UPS_REPAIRED = "wake_ups_repaired"
    WAKE_UP_SWEEP_FAILURES = "wake_up_sweep_failures"
    # Wake-ups the scheduler did not take (``WakeUpScheduler``): the scheduled tick wakes
    # those queues instead, up to its period late.
    WAKE_UPS_UNSCHEDULED = "wake_ups_unscheduled"
    # Backlogs (SQS GetQueueAttributes) that could not be read before a raise: the raise was
    # decided as without one.
    BACKLOG_READ_FAILURES = "backlog_read_failures"
    # Groups' reports (``Plan.groups``) the ledger did not take: tried again with the next.
    GROUP_REPORTS_UNWRITTEN = "group_reports_unwritten"
    # Groups' memories: not read back (the container's copy decided), not stored (tried again
    # with the container's next batch), stored first by another container (the copy
    # dropped), or not decodable (learned afresh).
    GROUP_MEMORIES_UNREAD = "group_memories_unread"
    GROUP_MEMORIES_UNSTORED = "group_memories_unstored"
    GROUP_MEMORY_CONFLICTS = "group_memory_conflicts"
    GROUP_MEMORIES_UNREADABLE = "group_memories_unreadable"
    # Groups whose members the ledger did not list: decided with the members the
    # container holds (a cold one: the queue alone), listed again with the next decision.
    GROUP_MEMBERS_UNREAD = "group_members_unread"
    # Downstreams a queue's telemetry names anew, recorded on its STATE item without a
    # transition (``Ledger.record_downstream``); not recorded (the ledger failing, or no time
    # left: tried again with the queue's next decision); or not needed, a transition having
    # come first (it stores its own).
    DOWNSTREAMS_RECORDED = "downstreams_recorded"
    DOWNSTREAMS_UNRECORDED = "downstreams_unrecorded"
    DOWNSTREAM_CONFLICTS = "downstream_conflicts"


@dataclass(frozen=True, slots=True)
class GroupCopy:
    """This container's copy of a group's memory: ``version``, the ledger's version it
    derives from (0: none stored); ``unstored``, changed since (the ledger's is older)."""

    memory: GroupMemory
    version: int
    unstored: bool


# -- effects: what executing a plan did, for the book to remember ----------------------------
@dataclass(frozen=True, slots=True)
class Learned:
    """``state`` is the queue's state now, written on top of what the ledger holds (or an
    unchanged HOLD): its claim, if it had one, is settled."""

    state: QueueState


class Mark(StrEnum):
    """What executing a plan learned about a queue, beyond its state."""

    # Another writer moved the queue first: re-read its state and decide it again.
    CONFLICTED = "conflicted"
    # Decide the queue again with the next batch or tick.
    RETRY = "retry"
    # The queue's claim may disagree with its mapping: its next step reads the mapping.
    UNSETTLED = "unsettled"
    # The queue's mapping was read: it exists.
    MAPPING_FOUND = "mapping_found"
    # Another writer moved the queue since its state was read, which the step (it wrote no
    # transition) did not need: read the state again before the queue's next decision.
    STALE = "stale"


@dataclass(frozen=True, slots=True)
class Marked:
    queue: str
    mark: Mark


@dataclass(frozen=True, slots=True)
class MappingGone:
    """The queue's mapping does not exist: set it aside until ``recheck_at``."""

    queue: str
    uuid: str
    recheck_at: float


@dataclass(frozen=True, slots=True)
class Counted:
    count: Count
    times: int = 1


@dataclass(frozen=True, slots=True)
class ClaimOver:
    """This container's claim of the queue that ends at ``apply_by`` will not be carried out
    (its invocation gave up on it): wherever the book holds that claim, it holds it as over."""

    queue: str
    apply_by: float


Effect = Learned | Marked | MappingGone | Counted | ClaimOver


class BookView(Protocol):
    """What executing a plan may ask of the book (it changes the book only through effects)."""

    def state(self, queue: str) -> QueueState | None:
        """The queue's state as its STATE item stores it (the version last read or written,
        its downstream included) plus the memory a HOLD did not write (a dry run's: as the
        steps shown would leave it); ``None``: not held."""
        ...

    def mapping_known_missing(self, queue: str) -> bool: ...


class QueueBook:
    """Per-queue memory of one warm container; see the module's docstring."""

    def __init__(
        self, capacity: int = CACHED_QUEUES, retention_s: float = WINDOW_RETENTION_S
    ) -> None:
        self.capacity = capacity
        self.retention_s = retention_s
        self.counters: Counter[Count] = Counter()
        self._notices: list[Notice] = []
        # Windows of queues not waiting to be decided; those waiting hold theirs in _held.
        self._windows: LruCache[str, QueueWindow] = LruCache(capacity)
        self._held: dict[str, QueueWindow] = {}
        self._pending: set[str] = set()
        self._configs: LruCache[str, tuple[float, QueueConfig | None]] = LruCache(capacity)
        self._states: LruCache[str, QueueState] = LruCache(capacity)
        # Last reported broken CONFIG content per queue: each version is reported once.
        self._reported_invalid: LruCache[str, str] = LruCache(capacity)
        # Queues whose mapping is gone, and when to look for it again.
        self._mapping_missing: LruCache[str, float] = LruCache(capacity)
        # Queues whose last claim may disagree with their mapping (a ledger fault mid-step):
        # their next step reads the mapping, even a HOLD, and reconciles the ledger to it.
        self._unsettled: LruCache[str, bool] = LruCache(capacity)
        # The end (``QueueState.apply_by``) of each queue's claim that this container made and
        # gave up on: it is over here at once, not at its end, as it must be to others.
        self._claims_over: LruCache[str, float] = LruCache(capacity)
        self._forgetting_reported = False
        # What the container learned of each group of queues sharing a downstream, and the
        # version of the ledger's copy it derives from.
        self._groups: LruCache[str, GroupCopy] = LruCache(capacity)
        # The queues of each group as the ledger's Groups index listed them, and when.
        self._group_members: LruCache[str, tuple[float, tuple[str, ...]]] = LruCache(capacity)

    # -- counting and telling -------------------------------------------------------------
    def count(self, count: Count, times: int = 1) -> None:
        self.counters[count] += times

    def take_notices(self) -> list[Notice]:
        """What the operator should hear of since the last call (each logged once)."""
        notices, self._notices = self._notices, []
        return notices

    # -- evidence -------------------------------------------------------------------------
    def add_sample(self, evidence: Evidence) -> bool:
        """Window ``evidence`` for its queue, which then waits to be decided; ``False`` when
        it is older than the window's retention (counted as such by the caller)."""
        self.mark_pending([evidence.queue])
        window = self._held.get(evidence.queue)
        if window is None:
            window = self._held[evidence.queue] = QueueWindow(self.retention_s)
        return window.add(evidence)

    def add_history(self, evidence: Evidence) -> None:
        """Window ``evidence`` another container was handed (and decided): the queue does not
        wait to be decided for it, and its cached state may be older than the ledger's, so it
        is read again before the queue's next decision."""
        queue = evidence.queue
        window = self._held.get(queue)
        if window is None:
            window = self._windows.get(queue)
        if window is None:
            window = self._windows[queue] = QueueWindow(self.retention_s)
        window.add(evidence)
        self._states.pop(queue)

    def restart(self, queues: Iterable[str]) -> None:
        """Forget these queues' windows and states: this container may have missed part of
        their evidence, so it starts them afresh, as a cold container would."""
        for queue in queues:
            self.count(Count.WINDOWS_RESTARTED)
            self._windows.pop(queue)
            self._held.pop(queue, None)
            self._states.pop(queue)

    def announcing(self, since: float) -> dict[str, dict[str, float]]:
        """The queues that share each downstream's announced quota now (those whose newest
        quota was announced at ``since`` or later), and the calls a second each may want of
        it: ``HEADROOM`` over what it sent in the ``QUOTA_USE_S`` seconds of invocation starts
        up to its newest announcement (a queue younger than that, since its first). Calls
        started after it are left out as the span is: an API that stopped announcing must not
        read as a queue wanting more."""
        shared: dict[str, dict[str, float]] = {}
        for queue, window in itertools.chain(self._held.items(), self._windows.items()):
            quota = window.quota
            if quota is None or quota.downstream is None or quota.event_time < since:
                continue
            sent = window.stats(quota.event_time - QUOTA_USE_S, quota.event_time)
            started = max(sent.since, sent.first_second or sent.since)
            span_s = max(1.0, quota.event_time - started)
            shared.setdefault(quota.downstream, {})[queue] = HEADROOM * sent.requests / span_s
        return shared

    def downstreams(self) -> dict[str, str | None]:
        """The downstream each queue with a window kept last named (``None``: none named)."""
        return {
            queue: window.downstream
            for queue, window in itertools.chain(self._held.items(), self._windows.items())
        }

    # -- groups ---------------------------------------------------------------------------
    def group_memory(self) -> dict[str, GroupMemory]:
        """What the container remembers of each group (``controller.groups``)."""
        return {group: copy.memory for group, copy in self._groups.items()}

    def remember_groups(self, memory: Mapping[str, GroupMemory]) -> None:
        """The groups' memory after a plan: one that changed waits to be stored."""
        for group, remembered in memory.items():
            copy = self._groups.get(group)
            if copy is None:
                self._groups[group] = GroupCopy(remembered, 0, unstored=True)
            elif copy.memory != remembered:
                self._groups[group] = GroupCopy(remembered, copy.version, unstored=True)

    def learn_group(self, group: str, stored: StoredGroupMemory) -> None:
        """Take the group's memory as the ledger holds it, unless this copy derives from that
        very version (it is then as new, or newer: changed and not stored yet). A memory that
        does not decode is learned afresh (counted), to be replaced at the next write."""
        copy = self._groups.get(group)
        if copy is not None and copy.version == stored.version:
            return
        memory = stored.memory
        if memory is None:
            self.count(Count.GROUP_MEMORIES_UNREADABLE)
            memory = GroupMemory()
        self._groups[group] = GroupCopy(memory, stored.version, unstored=False)

    def unstored_groups(self) -> dict[str, GroupCopy]:
        """The groups whose memory changed since the version it derives from was read or
        stored."""
        return {group: copy for group, copy in self._groups.items() if copy.unstored}

    def group_stored(self, group: str, version: int) -> None:
        copy = self._groups.get(group)
        if copy is not None:
            self._groups[group] = GroupCopy(copy.memory, version, unstored=False)

    def forget_group(self, group: str) -> None:
        """Another container stored the group's memory first: this copy is stale (counted);
        the next decision of the group takes the ledger's."""
        self.count(Count.GROUP_MEMORY_CONFLICTS)
        self._groups.pop(group)

    def window(self, queue: str) -> QueueWindow:
        """The queue's evidence (an empty window when none is kept); read, never changed."""
        window = self._held.get(queue)
        if window is None:
            window = self._windows.get(queue)
        return window if window is not None else QueueWindow(self.retention_s)

    # -- waiting to be decided ------------------------------------------------------------
    def pending(self) -> set[str]:
        return set(self._pending)

    def mark_pending(self, queues: Iterable[str]) -> None:
        """These queues are decided with the next plan; their windows are kept until then."""
        for queue in queues:
            if queue in self._pending:
                continue
            self._pending.add(queue)
            window = self._windows.pop(queue)
            if window is not None:
                self._held[queue] = window

    def planned(self, queues: Iterable[str]) -> None:
        """These queues were planned: their windows go back among the bounded ones, where
        the least recently used beyond ``capacity`` are forgotten (counted, reported once)."""
        evictions = self._windows.evictions
        first_forgotten = None
        for queue in queues:
            self._pending.discard(queue)
            window = self._held.pop(queue, None)
            if window is None:
                continue
            oldest = next((key for key, _ in self._windows.items()), None)
            self._windows[queue] = window
            if first_forgotten is None and self._windows.evictions > evictions:
                first_forgotten = oldest
        forgotten = self._windows.evictions - evictions
        if not forgotten:
            return
        self.count(Count.WINDOWS_FORGOTTEN, forgotten)
        if not self._forgetting_reported and first_forgotten is not None:
            self._forgetting_reported = True
            message = (
                f"more queues have telemetry than this container keeps windows for "
                f"({self.capacity}); the least recently decided ones' evidence is forgotten "
                f"and re-learned (counter {Count.WINDOWS_FORGOTTEN})"
            )
            self._notices.append(Notice(first_forgotten, message, Count.WINDOWS_FORGOTTEN))

    # -- configs --------------------------------------------------------------------------
    def cached_config(
        self, queue: str, now: float, ttl_s: float
    ) -> tuple[bool, QueueConfig | None]:
        """(whether a config read within ``ttl_s`` is cached, that config or ``None`` for an
        unregistered or broken queue)."""
        cached = self._configs.get(queue)
        if cached is None or now - cached[0] > ttl_s:
            return False, None
        return True, cached[1]

    def remember_config(self, queue: str, config: QueueConfig | None, now: float) -> None:
        """The config read at ``now`` (``None``: unregistered or broken). A usable one ends
        any report of a broken version."""
        if config is not None:
            self._reported_invalid.pop(queue)
        self._configs[queue] = (now, config)

    def cached_group_members(self, group: str, now: float, ttl_s: float) -> tuple[str, ...] | None:
        """The group's members listed within ``ttl_s``; ``None`` when none were."""
        cached = self._group_members.get(group)
        if cached is None or now - cached[0] > ttl_s:
            return None
        return cached[1]

    def remember_group_members(self, group: str, members: Iterable[str], now: float) -> None:
        """The group's members as the ledger listed them at ``now``."""
        self._group_members[group] = (now, tuple(members))

    def note_invalid(self, invalid: InvalidConfig) -> None:
        """Skip the queue (counted); report each broken version of its config once."""
        self.count(Count.CONFIGS_INVALID)
        if self._reported_invalid.get(invalid.queue) != invalid.fingerprint:
            self._reported_invalid[invalid.queue] = invalid.fingerprint
            message = (
                f"CONFIG of {invalid.queue} is invalid; the queue is not controlled until it "
                f"is fixed: {invalid.problem}"
            )
            self._notices.append(Notice(invalid.queue, message, Count.CONFIGS_INVALID))

    def note_wake_up_repaired(self, state: QueueState) -> None:
        """A paused queue's STATE item was given the ``WakeUp`` it lacked: counted, and said
        once (it happens once per item)."""
        self.count(Count.WAKE_UPS_REPAIRED)
        message = (
            f"STATE of {state.queue} is paused but had no WakeUp (written before the WakeUps "
            f"index): given one, the queue is decided from {state.wake_at:.0f} (epoch s)"
        )
        self._notices.append(Notice(state.queue, message, Count.WAKE_UPS_REPAIRED))

    def reported_invalid(self, queue: str) -> bool:
        return queue in self._reported_invalid

    # -- states ---------------------------------------------------------------------------
    def state(self, queue: str) -> QueueState | None:
        return self._states.get(queue)

    def learn(self, state: QueueState) -> QueueState:
        """Take a state read from the ledger, unless the book holds that version or a newer
        one (equal versions: the book's is the same transition plus unwritten memory); the
        state as the book holds it.

        A state whose last write claimed a move may have been stranded by another container
        (its update or revert failed, or its answer was lost): its next step checks the
        mapping first."""
        cached = self._states.get(state.queue)
        if cached is not None and cached.version >= state.version:
            return cached
        if state.last_action is not Action.HOLD:
            self._unsettled[state.queue] = True
        learned = self._states[state.queue] = self._without_claim_over(state)
        return learned

    def first_state(self, state: QueueState) -> None:
        """A state learned from the queue's mapping (never decided before): the mapping is
        there."""
        self._mapping_missing.pop(state.queue)
        self._states[state.queue] = state

    def due(self, now: float) -> set[str]:
        """Queues whose state asked to be looked at again by now (a paused mapping sends no
        telemetry): decided with the next plan, evidence or not."""
        return {queue for queue, state in self._states.items() if 0 < state.wake_at <= now}

    def is_unsettled(self, queue: str) -> bool:
        return queue in self._unsettled

    # -- mappings gone --------------------------------------------------------------------
    def is_set_aside(self, queue: str, now: float) -> bool:
        recheck_at = self._mapping_missing.get(queue)
        return recheck_at is not None and recheck_at > now

    def mapping_known_missing(self, queue: str) -> bool:
        return queue in self._mapping_missing

    def set_aside(self, queue: str, uuid: str, now: float) -> None:
        """The mapping is gone: leave the queue alone (no call per batch) until a re-check;
        counted and reported once, however many re-checks find it still gone."""
        self.apply([MappingGone(queue, uuid, now + MAPPING_RECHECK_S)])

    # -- effects --------------------------------------------------------------------------
    def apply(self, effects: Iterable[Effect]) -> None:
        """Remember what executing a plan did."""
        for effect in effects:
            match effect:
                case Learned(state):
                    self._unsettled.pop(state.queue)
                    self._states[state.queue] = self._without_claim_over(state)
                case Marked(queue, mark):
                    self._mark(queue, mark)
                case MappingGone(queue, uuid, recheck_at):
                    self._mapping_gone(queue, uuid, recheck_at)
                case Counted(count, times):
                    self.count(count, times)
                case ClaimOver(queue, apply_by):
                    self._claims_over[queue] = apply_by
                    held = self._states.get(queue)
                    if held is not None:
                        self._states[queue] = self._without_claim_over(held)

    def _without_claim_over(self, state: QueueState) -> QueueState:
        """``state``, its claim's end cleared where the claim is one this container gave up
        on: the mapping found at the value the claim moved from is then that claim not carried
        out, reconciled at once (``controller.executor``), where another container waits for
        the end in case its claimant is still at it."""
        if state.apply_by and self._claims_over.get(state.queue) == state.apply_by:
            return state.evolve(apply_by=0.0)
        return state

    def _mark(self, queue: str, mark: Mark) -> None:
        if mark is Mark.CONFLICTED:
            self.count(Count.VERSION_CONFLICTS)
        if mark in (Mark.CONFLICTED, Mark.STALE):
            self._states.pop(queue)
        if mark in (Mark.CONFLICTED, Mark.RETRY):
            self.mark_pending([queue])
        elif mark is Mark.UNSETTLED:
            self._unsettled[queue] = True
        elif mark is Mark.MAPPING_FOUND:
            self._mapping_missing.pop(queue)

    def _mapping_gone(self, queue: str, uuid: str, recheck_at: float) -> None:
        first = queue not in self._mapping_missing
        self._mapping_missing[queue] = recheck_at
        self.planned([queue])
        if not first:
            return
        self.count(Count.MAPPINGS_MISSING)
        self._notices.append(
            Notice(queue, mapping_missing_message(queue, uuid), Count.MAPPINGS_MISSING)
        )


def mapping_missing_message(queue: str, uuid: str) -> str:
    """What the operator hears, and the audit says, of a queue whose mapping is gone."""
    return (
        f"event source mapping {uuid} of {queue} does not exist; the queue is set aside "
        f"and looked for again every {MAPPING_RECHECK_S:.0f}s (re-register it to resume)"
    )
