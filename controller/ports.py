"""The controller's ports. Adapters: DynamoDB / Lambda / EventBridge / SQS for AWS, in-memory
twins for the simulator, replay and unit tests. Only adapters import boto3."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from controller.groups import GroupMemory
from controller.model import AuditEntry, Backlog, GroupReport, QueueConfig, QueueState

if TYPE_CHECKING:
    from controller.telemetry.reduced import ReducedRecord


class LedgerError(Exception):
    """The ledger could not be read or written (the cause is chained)."""


class VersionConflict(LedgerError):
    """Another writer changed the queue's state (or the group's memory) first; re-read and
    decide again."""


class ActuationError(Exception):
    """A mapping could not be read or updated within the retries and time allowed."""


class MappingNotFound(ActuationError):
    """The event source mapping does not exist."""


@dataclass(frozen=True, slots=True)
class InvalidConfig:
    """A CONFIG item that cannot be used: its queue is left alone until the item is fixed.

    ``fingerprint`` identifies the item's content, so one broken version is reported once."""

    queue: str
    problem: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class Notice:
    """Something an operator should hear of once (one log line): a broken config, a mapping
    gone. ``counter`` names the controller counter that keeps counting it."""

    queue: str
    message: str
    counter: str


@dataclass(frozen=True, slots=True)
class ConfigRead:
    """The CONFIG items found: decoded ones, and those that failed to decode."""

    valid: dict[str, QueueConfig] = field(default_factory=dict)
    invalid: dict[str, InvalidConfig] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WakeUpSweep:
    """One bounded step of the sweep for paused queues whose STATE item lacks ``WakeUp``.

    ``woken``: the states given their wake-up (as stored now); ``resume``: where the next step
    goes on (opaque to the caller), ``None`` once the whole table was swept."""

    woken: list[QueueState] = field(default_factory=list)
    resume: object | None = None


@dataclass(frozen=True, slots=True)
class StoredGroupMemory:
    """A group's memory as the ledger holds it: ``version`` (1 after the first write, +1 on
    each), and the memory (``None``: the item does not decode, a hand edit; the group
    learns afresh and the next write replaces it)."""

    version: int
    memory: GroupMemory | None


class Ledger(Protocol):
    def get_configs(self, queues: Iterable[str]) -> dict[str, QueueConfig]:
        """Configs of those queues that are registered; unregistered ones are absent."""
        ...

    def read_configs(self, queues: Iterable[str]) -> ConfigRead:
        """Like ``get_configs``, but an item that does not decode is reported, not raised, so
        one hand-edited item never stops the other queues."""
        ...

    def list_configs(self) -> list[QueueConfig]: ...

    def group_members(self, group: str) -> list[str]:
        """The queues whose CONFIG ``Group`` is ``group``, and those whose STATE names it as
        the downstream their telemetry named when last decided, read without a scan (the
        ledger's ``Groups`` index, eventually consistent: an item written a moment ago may be
        missing, or still show its old group). A queue listed by its STATE may be in another
        CONFIG group: its CONFIG item says. A name no index key can hold (empty, over 2,048
        bytes) lists none."""
        ...

    def set_deadline(self, deadline: float) -> None:
        """Every later call (retries included) ends by ``deadline``, a ``time.monotonic()``
        value: the invocation's own; ``math.inf`` lifts it."""
        ...

    def put_config(self, config: QueueConfig) -> None: ...

    def get_states(self, queues: Iterable[str]) -> dict[str, QueueState]: ...

    def list_states(self) -> list[QueueState]: ...

    def due_states(self, now: float) -> list[QueueState]:
        """The states whose wake-up time (``wake_at`` > 0) has come by ``now`` (epoch
        seconds), read without going over the rest of the table."""
        ...

    def sweep_wake_ups(self, now: float, resume: object | None = None) -> WakeUpSweep:
        """Give every paused queue's STATE item written without ``WakeUp`` (before the index,
        or in the old flat layout) its wake-up, so ``due_states`` finds it: at its own
        wake-up time, else at ``now``. Each write is conditional on the item's version and on
        ``WakeUp`` still missing. Reads a bounded part of the table per call: go on from
        ``resume`` (the last call's) until it comes back ``None``."""
        ...

    def commit(self, state: QueueState, audit: AuditEntry) -> QueueState:
        """Write ``state`` and ``audit`` together, or neither.

        The write is conditional: the stored version must equal ``state.version`` (0: no state
        item yet). The stored state carries ``version + 1`` and is returned. Raises
        ``VersionConflict`` when another writer got there first.
        """
        ...

    def record_downstream(self, queue: str, downstream: str | None, version: int) -> None:
        """Store ``downstream``, the one the queue's telemetry names now, as its STATE item's
        ``Group`` (removed for none, or a name no index key can hold) and nothing else: no
        audit item, ``Version`` unchanged, so a transition read before it still commits (and
        stores its own downstream). Only while the stored version is ``version``: raises
        ``VersionConflict`` otherwise (a transition came first, or there is no STATE item)."""
        ...

    def audit_trail(self, queue: str, since: float | None = None) -> list[AuditEntry]:
        """The queue's audit entries, oldest first, from ``since`` (epoch seconds) on."""
        ...

    def put_group_report(self, report: GroupReport) -> None:
        """Store ``report`` as its group's one GROUP item, replacing the one before (no
        condition: the newest batch's word stands)."""
        ...

    def group_reports(self) -> list[GroupReport]:
        """Every group's stored report, by group name: a Scan, for fleet operations
        (``queuemesh status``), not for every evaluation."""
        ...

    def get_group_memories(self, groups: Iterable[str]) -> dict[str, StoredGroupMemory]:
        """The stored memory of those groups that have one, read strongly consistent."""
        ...

    def put_group_memory(self, group: str, memory: GroupMemory, version: int) -> int:
        """Store the group's memory on top of ``version`` (0: none stored yet); returns the
        version stored (``version + 1``). Raises ``VersionConflict`` when another writer
        stored one since."""
        ...


class ConfigSource(Protocol):
    """What the reducer needs of the ledger (``Ledger`` has it): the CONFIG items of the
    queues it keys by their group (docs/architecture.md, "A group on one lane")."""

    def read_configs(self, queues: Iterable[str]) -> ConfigRead: ...

    def set_deadline(self, deadline: float) -> None: ...


class DeployedConfigs(Protocol):
    """What a deploy's registration (the template's registrar) needs of a ledger; both
    ledgers have it, the controller itself never uses it."""

    def merge_config(self, config: QueueConfig) -> None:
        """Point the queue's CONFIG item at ``config.esm_uuid``; its other attributes are
        written only where the stored item has none (a deploy's registration: an operator's
        mode, pin and overrides survive it)."""
        ...

    def delete_config(self, queue: str) -> None:
        """Remove the queue's CONFIG item (none: nothing to do); its state and audit stay."""
        ...


@dataclass(frozen=True, slots=True)
class MappingView:
    uuid: str
    max_concurrency: int | None
    enabled: bool
    state: str
    event_source_arn: str
    batch_size: int
    # Provisioned mode (ProvisionedPollerConfig): AWS allows no MaximumConcurrency there.
    provisioned_pollers: bool = False


class Actuator(Protocol):
    def read(self, uuid: str, deadline: float) -> MappingView:
        """The mapping as Lambda reports it. ``deadline`` is a ``time.monotonic()`` value by
        which every retry must be over."""
        ...

    def read_many(self, uuids: Collection[str], deadline: float) -> dict[str, MappingView]:
        """Those of the mappings ``uuids`` that one listing of the account's mappings shows,
        in far fewer control-plane calls than a ``read`` each. A mapping the listing did not
        show (it spent its page budget first) is absent: ``read`` it on its own."""
        ...

    def apply(self, uuid: str, max_concurrency: int, enabled: bool, deadline: float) -> MappingView:
        """Set ``ScalingConfig.MaximumConcurrency`` and ``Enabled``; returns the mapping after."""
        ...


@dataclass(frozen=True, slots=True)
class BusEvent:
    """One event for the operators' event bus: its detail-type and its detail (a JSON
    object, encoded)."""

    detail_type: str
    detail: str


@dataclass(frozen=True, slots=True)
class Unpublished:
    """What a publication could not deliver: how many events, and why (empty when none)."""

    count: int = 0
    reason: str = ""


class BacklogUnavailable(Exception):
    """A queue's backlog could not be read (the cause is chained): it is unknown."""


class QueueBacklog(Protocol):
    def read(self, queue: str, deadline: float) -> Backlog:
        """``queue``'s backlog. ``deadline`` is a ``time.monotonic()`` value by which every
        retry must be over; raises ``BacklogUnavailable`` when no answer comes by then."""
        ...


@dataclass(frozen=True, slots=True)
class WakeUpRequest:
    """A controller run wanted at ``wake_at`` (epoch s) for ``queue``: the end of a pause or
    of a test pulse, which no telemetry of a paused mapping would come to announce."""

    queue: str
    wake_at: float


class WakeUpScheduler(Protocol):
    def schedule(self, requests: Sequence[WakeUpRequest], now: float, deadline: float) -> int:
        """Ask for a controller run at each request's time (``now``: epoch s; ``deadline``: a
        ``time.monotonic()`` value by which every retry must be over). Never raises: returns
        how many could not be asked for, which the scheduled tick wakes in its time."""
        ...


class EventPublisher(Protocol):
    def publish(self, events: Sequence[BusEvent], deadline: float) -> Unpublished:
        """Put ``events`` on the bus before ``deadline`` (a ``time.monotonic()`` value).
        Never raises: what could not be published is counted in the answer."""
        ...


class ReducedSink(Protocol):
    """Where the reducer puts its records: the reduced stream (``controller.stream``)."""

    def put(self, records: Sequence[ReducedRecord], deadline: float) -> set[str]:
        """Put ``records`` by ``deadline`` (``time.monotonic()``); the queues of those that
        could not be put."""
        ...


@dataclass(frozen=True, slots=True)
class StreamStart:
    """Where to read a shard back from: at a sequence number, else at an epoch time."""

    sequence: int | None = None
    time: float = 0.0


@dataclass(frozen=True, slots=True)
class HistoryRead:
    """A shard read back: its records below the asked sequence number, in the shard's order
    and shaped as a Lambda event's; ``complete`` when every one of them was read."""

    records: list[dict[str, Any]]
    complete: bool


class StreamHistory(Protocol):
    """The reduced stream read back by a controller container, to window the records other
    containers were handed (``controller.stream``; docs/architecture.md, "Scaling out the
    controller")."""

    def read(self, shard: str, start: StreamStart, below: int, deadline: float) -> HistoryRead:
        """``shard``'s records from ``start`` up to (not including) sequence number ``below``,
        as far as bounded calls get by ``deadline`` (``time.monotonic()``)."""
        ...
