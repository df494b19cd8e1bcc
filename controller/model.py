"""The controller's domain vocabulary: samples in, decisions and ledger records out."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum

from controller.constants import DEFAULT_PRIORITY, DEFAULT_WEIGHT


@dataclass(slots=True)
class Sample:
    """What one worker telemetry document says about one queue's downstream calls.

    ``event_time`` is the document's ``_aws.Timestamp`` (epoch seconds). ``invocation_ms`` lets
    the controller place the invocation's start (and so judge it against the last change) and
    estimate the concurrency really in use.

    A value: nothing changes a sample once decoded. It is not a frozen dataclass only because
    the decoder makes one per document and a frozen one costs four times as much to build
    (``queuemesh bench decode``).
    """

    queue: str
    event_time: float
    requests: int = 0
    ok: int = 0
    throttled: int = 0
    server_errors: int = 0
    overloaded: int | None = None
    client_errors: int = 0
    latency_ms_sum: float = 0.0
    latency_count: int = 0
    retry_after_s: float = 0.0
    invocation_ms: float | None = None
    downstream: str | None = None
    timed_out: int = 0
    # What the downstream announced (rate-limit headers), when it did: the smallest remaining
    # quota, its quota and window, and the seconds from ``event_time`` to the quota's reset.
    quota_remaining: float | None = None
    quota_limit: float | None = None
    quota_window_s: float | None = None
    quota_reset_s: float | None = None
    # The 429s (among ``throttled``) that named a concurrency limit, or a rate limit.
    throttled_concurrency: int = 0
    throttled_rate: int = 0
    # An aggregated document (docs/telemetry.md, "Aggregated documents") sums ``invocations``
    # of one execution environment that all started in the second at ``started`` (epoch
    # seconds); ``invocation_ms`` is then their durations' sum.
    invocations: int = 1
    started: float | None = None

    @property
    def pressure(self) -> int:
        """Calls that say "slow down": 429s, plus 503s (all 5xx when 503s are not broken out),
        plus client-side timeouts (a downstream that slows down instead of refusing)."""
        overload = self.server_errors if self.overloaded is None else self.overloaded
        return self.throttled + overload + self.timed_out

    @property
    def documents(self) -> int:
        """Worker documents this evidence stands for, counted in invocations: an aggregated
        document stands for each invocation it sums, as the documents it replaces did."""
        return self.invocations

    @property
    def started_at(self) -> float:
        """When the invocation began (an aggregated document's: the second they all began in);
        the emission time when its duration is unknown."""
        if self.started is not None:
            return self.started
        if self.invocation_ms is None:
            return self.event_time
        return self.event_time - self.invocation_ms / 1000.0


class Action(StrEnum):
    """What a decision does to the mapping, as the ledger's audit trail records it."""

    MULTIPLICATIVE_DECREASE = "MULTIPLICATIVE_DECREASE"
    ADDITIVE_INCREASE = "ADDITIVE_INCREASE"
    HOLD = "HOLD"
    PAUSE = "PAUSE"
    RESUME = "RESUME"
    # A probe's raised level taken back to the level it probed from when its pulse is over:
    # lower (or higher, where a group cut the queue during the pulse), but neither a cut nor a
    # raise (nothing was refused; the probe is judged after it).
    PROBE_END = "PROBE_END"


class QueueStateName(StrEnum):
    HEALTHY = "HEALTHY"
    THROTTLED = "THROTTLED"
    CRITICAL_BACKOFF = "CRITICAL_BACKOFF"
    RECOVERING = "RECOVERING"


class Mode(StrEnum):
    ACTIVE = "ACTIVE"
    DRY_RUN = "DRY_RUN"
    PINNED = "PINNED"


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """A registered (managed) mapping. Only queues with a config are ever actuated."""

    queue: str
    esm_uuid: str
    mode: Mode = Mode.ACTIVE
    pinned_concurrency: int | None = None
    overrides: dict[str, float] = field(default_factory=dict)
    # The queues deciding one downstream together (issue 33): ``group`` names the queue's
    # group (``None``: the ``Downstream`` its telemetry names); ``weight`` is its weight in the
    # group's max-min fair share, ``priority`` its rank when the group must time-share (the
    # higher runs first). Bounds: ``controller.constants``.
    group: str | None = None
    weight: float = DEFAULT_WEIGHT
    priority: int = DEFAULT_PRIORITY


@dataclass(frozen=True, slots=True)
class QueueState:
    """The ledger's STATE#CURRENT item.

    The contract's fields, then the guards every algorithm shares, then the deciding
    algorithm's own memory: a typed record private to the algorithm named ``algorithm``
    (``None`` until it first decides the queue). The ledger stores each by name
    (docs/ledger.md).
    """

    queue: str
    esm_uuid: str
    state: QueueStateName
    concurrency: int
    previous_concurrency: int
    consecutive_breaches: int = 0
    last_action: Action = Action.HOLD
    last_reason: str = ""
    last_evaluated_at: float = 0.0
    version: int = 0
    last_change_at: float = 0.0
    # No raise before this time: the largest Retry-After seen at the last cut.
    hold_until: float = 0.0
    enabled: bool = True
    # Ask the engine to decide this queue again at this time even without new telemetry (a
    # paused mapping sends none); 0: no wake-up wanted.
    wake_at: float = 0.0
    # When the controller's pause of the mapping began (the first disabling, its test pulses
    # included, until the queue runs free again); 0: not paused.
    paused_since: float = 0.0
    # A claim's end (epoch s): by then its claimant has moved the mapping or put the ledger
    # back, so until then a mapping still where the claim moved from is the claim waiting for
    # its update (``controller.executor``), not one never carried out; 0: no claim in flight.
    apply_by: float = 0.0
    algorithm: str = ""
    memory: object = None
    # The downstream the queue's telemetry named when it was last decided (``None``: none):
    # a container that holds no telemetry of it (a paused queue sends none) groups it by this.
    downstream: str | None = None

    @classmethod
    def first(
        cls, queue: str, esm_uuid: str, concurrency: int, *, enabled: bool = True, at: float = 0.0
    ) -> QueueState:
        """A queue never decided before: healthy, at its mapping's ``concurrency`` (the
        mapping ``enabled`` or not), evaluated ``at`` (epoch seconds; 0: never)."""
        return cls(
            queue=queue,
            esm_uuid=esm_uuid,
            state=QueueStateName.HEALTHY,
            concurrency=concurrency,
            previous_concurrency=concurrency,
            last_evaluated_at=at,
            enabled=enabled,
        )

    def evolve(self, **changes: object) -> QueueState:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Decision:
    """One verdict for one queue, with the state to record if it is carried out."""

    queue: str
    action: Action
    previous: int
    target: int
    state: QueueStateName
    reason: str
    pressure_rate: float
    success_rate: float
    new_state: QueueState
    previous_enabled: bool = True
    enabled: bool = True
    # The raise puts back a level the evidence shows fits (a cut's correction on the rest of
    # its storm's reports): not a probe for capacity.
    restores: bool = False
    # A hold that the queue's backlog, once read, may turn into a step down: decided again
    # with it (``planner.reading_backlog``).
    asks_backlog: bool = False

    @property
    def changes_mapping(self) -> bool:
        return self.target != self.previous or self.enabled != self.previous_enabled

    @property
    def probes(self) -> bool:
        """Whether it raises a mapping that polls and keeps polling to a level no evidence
        shows fits: a probe for capacity, which only a queue with messages waiting can
        answer."""
        return (
            self.target > self.previous
            and self.previous_enabled
            and self.enabled
            and not self.restores
        )


@dataclass(frozen=True, slots=True)
class GroupShare:
    """One queue's part of its group's capacity: the calls a second it may send, the
    ``MaximumConcurrency`` that share comes to, and whether it is paused so that the group's
    running set fits the downstream (time-sharing below the group's floor)."""

    queue: str
    share_rps: float
    level: int
    paused: bool = False


@dataclass(frozen=True, slots=True)
class GroupReport:
    """What one batch decided for a group of queues sharing one downstream: the calls a second
    the pooled evidence says the downstream accepts (``None``: not known yet, nothing refused)
    and each member's share. The dashboard and ``queuemesh status`` show it."""

    group: str
    at: float
    capacity_rps: float | None
    members: tuple[GroupShare, ...] = ()


class AuditEvent(StrEnum):
    TRANSITION = "TRANSITION"
    DRIFT_DETECTED = "DRIFT_DETECTED"
    ACTUATION_FAILED = "ACTUATION_FAILED"
    # A claim whose mapping update never happened (or was never confirmed), repaired: the
    # ledger takes the mapping's value.
    ACTUATION_RECONCILED = "ACTUATION_RECONCILED"
    MANUAL_EVALUATION = "MANUAL_EVALUATION"
    # The mapping no longer exists: the queue is set aside and re-checked rarely.
    MAPPING_MISSING = "MAPPING_MISSING"
    OPERATOR = "OPERATOR"


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One ledger AUDIT# item: what changed for a queue, when and why."""

    queue: str
    timestamp: float
    event_type: AuditEvent
    previous_value: int
    new_value: int
    action: str
    reason: str
    error_rate: float = 0.0
    success_rate: float = 1.0
    control_loop_latency_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class Backlog:
    """A queue's backlog as one SQS ``GetQueueAttributes`` answers it: ``visible``, the
    messages waiting (``ApproximateNumberOfMessagesVisible``: not in flight, not delayed), and
    ``visibility_timeout_s``, how long a received message stays hidden (the queue's
    ``VisibilityTimeout``): a message whose call was refused comes back that much later."""

    visible: int
    visibility_timeout_s: float
