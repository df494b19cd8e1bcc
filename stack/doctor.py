"""`queuemesh doctor`: what is wrong with a deployed stack, each problem with its fix.

The checks are pure functions over ``StackReport``, plain facts that one adapter
(``stack.doctor_aws.StackReader``) gathers from AWS or the local stack, so each check is
tested on hand-made facts. A check returns ``Finding``s: a ``PROBLEM`` fails the command, a
``NOTE`` is worth knowing but does not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from controller.model import Mode, QueueConfig

# AWS' advice for an SQS event source: a visibility timeout of at least six times the
# function's timeout (plus the batching window), so a message is not redelivered while a
# throttled or retried invocation still holds it.
VISIBILITY_TIMEOUT_FACTOR = 6
# The mapping states in which Lambda polls the queue (``Enabling``: about to).
POLLING_STATES = frozenset({"Enabled", "Enabling", "Updating", "Creating"})
THROTTLE_WINDOW_S = 3600


class Severity(StrEnum):
    PROBLEM = "problem"
    NOTE = "note"


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing wrong (or worth knowing) about ``subject``, and what to do about it."""

    severity: Severity
    subject: str
    problem: str
    fix: str

    def line(self) -> str:
        return f"{self.severity.value}: {self.subject}: {self.problem}; fix: {self.fix}"

    def to_json(self) -> dict[str, str]:
        return {
            "severity": self.severity.value,
            "subject": self.subject,
            "problem": self.problem,
            "fix": self.fix,
        }


# -- facts -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MappingFacts:
    """An event source mapping as Lambda reports it."""

    uuid: str
    state: str
    max_concurrency: int | None
    function_name: str
    event_source_arn: str = ""
    batching_window_s: int = 0
    report_batch_item_failures: bool = False
    provisioned_pollers: bool = False


@dataclass(frozen=True, slots=True)
class FunctionFacts:
    """A worker function: its timeout, reserved concurrency (``None``: none reserved) and
    the log group it writes to."""

    name: str
    timeout_s: int
    reserved_concurrency: int | None
    log_group: str


@dataclass(frozen=True, slots=True)
class QueueFacts:
    """The SQS queue a mapping reads (``exists`` False: the queue is gone)."""

    name: str
    visibility_timeout_s: int
    has_dead_letter_queue: bool
    exists: bool = True


@dataclass(frozen=True, slots=True)
class RegisteredQueue:
    """A queue with a CONFIG item, with what AWS says of its mapping, function and queue
    (``None``: not found). ``cmax`` is the queue's policy cap (``None``: its policy does not
    hold); ``paused`` whether the ledger says the controller disabled the mapping;
    ``policy_problem`` why its overrides do not validate (out of range: the controller leaves
    the queue alone), empty when they do."""

    config: QueueConfig
    cmax: int | None
    paused: bool
    mapping: MappingFacts | None
    function: FunctionFacts | None = None
    queue: QueueFacts | None = None
    policy_problem: str = ""

    @property
    def cap(self) -> int | None:
        """The most concurrency the controller may give the mapping."""
        if self.config.mode is Mode.PINNED and self.config.pinned_concurrency is not None:
            return self.config.pinned_concurrency
        return self.cmax


@dataclass(frozen=True, slots=True)
class Subscription:
    destination_arn: str
    filter_pattern: str


@dataclass(frozen=True, slots=True)
class LogGroupFacts:
    """A worker log group and its subscription filters (``exists`` False: no such group)."""

    name: str
    exists: bool
    subscriptions: tuple[Subscription, ...] = ()


@dataclass(frozen=True, slots=True)
class StateItemFacts:
    """A ledger STATE item as stored: whether the controller paused the mapping, and whether
    the item lacks the ``WakeUp`` its pause needs (the key of the sparse ``WakeUps`` index the
    tick queries; the ledger's own rule, ``wake_up_repair``, says which items do)."""

    queue: str
    paused: bool
    needs_wake_up: bool


@dataclass(frozen=True, slots=True)
class WakeUpQueueFacts:
    """The queue the controller sends its wake-ups to (its ``QUEUEMESH_WAKE_UP_QUEUE``):
    whether it exists, and the states of the controller's event source mappings that read it
    (none: nothing delivers the wake-ups)."""

    name: str
    exists: bool
    mapping_states: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StackReport:
    """Everything the checks look at."""

    stack: str
    table: str
    stream_name: str
    stream_arn: str
    filter_pattern: str
    queues: tuple[RegisteredQueue, ...] = ()
    invalid_configs: tuple[tuple[str, str], ...] = ()
    log_groups: tuple[LogGroupFacts, ...] = ()
    states: tuple[StateItemFacts, ...] = ()
    controller: str = ""
    # None: the controller has no wake-up queue (deployed from a template before it).
    wake_up_queue: WakeUpQueueFacts | None = None
    # Sum of AWS/Kinesis WriteProvisionedThroughputExceeded over the last hour.
    throttled_writes: float = 0.0


# -- checks ----------------------------------------------------------------------------------


def _problem(subject: str, problem: str, fix: str) -> Finding:
    return Finding(Severity.PROBLEM, subject, problem, fix)


def check_configs(report: StackReport) -> list[Finding]:
    """CONFIG items the controller cannot read, or whose overrides are out of range, leave
    their queue unmanaged."""
    undecodable = [
        _problem(
            f"queue {queue}",
            f"its CONFIG item does not decode ({problem}); the controller leaves it alone",
            f"register it again: `queuemesh register {queue} --esm UUID`",
        )
        for queue, problem in report.invalid_configs
    ]
    out_of_range = [
        _problem(
            f"queue {registered.config.queue}",
            f"its policy overrides do not validate ({registered.policy_problem}); the "
            "controller leaves it alone (counted in ConfigsInvalid)",
            f"register it again with overrides in their ranges (docs/deploy.md): `queuemesh "
            f"register {registered.config.queue} --esm {registered.config.esm_uuid} ...`",
        )
        for registered in report.queues
        if registered.policy_problem
    ]
    return undecodable + out_of_range


def check_mappings(report: StackReport) -> list[Finding]:
    """Each registered queue's mapping exists, polls (unless the controller paused it), is
    on demand, and has a MaximumConcurrency to move."""
    findings = []
    for registered in report.queues:
        config, mapping = registered.config, registered.mapping
        subject = f"queue {config.queue}"
        if mapping is None:
            findings.append(
                _problem(
                    subject,
                    f"its mapping {config.esm_uuid} does not exist",
                    f"register the queue's current mapping (`queuemesh register {config.queue} "
                    "--esm UUID`), or delete its CONFIG item if the queue is gone",
                )
            )
            continue
        if mapping.state not in POLLING_STATES and not registered.paused:
            findings.append(
                _problem(
                    subject,
                    f"mapping {mapping.uuid} is {mapping.state}, and not by QueueMesh (the "
                    "ledger has it enabled): the queue is not consumed",
                    f"enable it: `aws lambda update-event-source-mapping --uuid {mapping.uuid} "
                    "--enabled`",
                )
            )
        if mapping.provisioned_pollers:
            findings.append(
                _problem(
                    subject,
                    f"mapping {mapping.uuid} is in provisioned mode (ProvisionedPollerConfig), "
                    "where AWS allows no MaximumConcurrency: QueueMesh cannot steer it",
                    "switch the mapping to on-demand polling (remove ProvisionedPollerConfig), "
                    "or delete the queue's CONFIG item",
                )
            )
        elif mapping.max_concurrency is None:
            findings.append(
                _problem(
                    subject,
                    f"mapping {mapping.uuid} has no MaximumConcurrency: Lambda's own scaler is "
                    "the only limit and the controller has no value to move",
                    f"`queuemesh mode {config.queue} active` sets it to the queue's Cmax",
                )
            )
        if mapping.report_batch_item_failures:
            findings.append(
                Finding(
                    Severity.NOTE,
                    subject,
                    f"mapping {mapping.uuid} reports batch item failures: Lambda then does "
                    "not scale its polling down when invocations fail, so QueueMesh is the "
                    "only brake on pressure",
                    "keep the controller ACTIVE on this queue (not DRY_RUN)",
                )
            )
    return findings


def check_functions(report: StackReport) -> list[Finding]:
    """Reserved concurrency at least the cap; visibility timeout at least six times the
    function's timeout; a dead-letter queue."""
    findings = []
    for registered in report.queues:
        function, queue, mapping = registered.function, registered.queue, registered.mapping
        subject = f"queue {registered.config.queue}"
        cap = registered.cap
        reserved = function.reserved_concurrency if function is not None else None
        if function is not None and reserved is not None and cap and reserved < cap:
            findings.append(
                _problem(
                    subject,
                    f"function {function.name} reserves {reserved} concurrent executions, "
                    f"below the queue's cap {cap}: past it Lambda throttles the invocations, "
                    "which the controller does not see as pressure",
                    f"reserve at least {cap} (`aws lambda put-function-concurrency`), or lower "
                    f"the queue's cap (`queuemesh register {registered.config.queue} --esm "
                    f"{registered.config.esm_uuid} --cmax {max(reserved, 2)}`)",
                )
            )
        if queue is not None and not queue.exists:
            findings.append(
                _problem(
                    subject,
                    f"its mapping reads queue {queue.name}, which does not exist",
                    "delete the mapping and the queue's CONFIG item, or register the queue's "
                    "new mapping",
                )
            )
            continue
        if function is not None and queue is not None:
            window = mapping.batching_window_s if mapping is not None else 0
            wanted = VISIBILITY_TIMEOUT_FACTOR * function.timeout_s + window
            if queue.visibility_timeout_s < wanted:
                findings.append(
                    _problem(
                        subject,
                        f"visibility timeout {queue.visibility_timeout_s} s is under six times "
                        f"function {function.name}'s timeout ({function.timeout_s} s"
                        + (f", plus the {window} s batching window" if window else "")
                        + "): messages of throttled or retried invocations come back early",
                        f"set the queue's VisibilityTimeout to at least {wanted} s",
                    )
                )
        if queue is not None and not queue.has_dead_letter_queue:
            findings.append(
                _problem(
                    subject,
                    "its queue has no dead-letter queue (RedrivePolicy): a message that always "
                    "fails is retried until it expires",
                    "give it a RedrivePolicy (deadLetterTargetArn, maxReceiveCount 5)",
                )
            )
    return findings


def check_subscriptions(report: StackReport) -> list[Finding]:
    """Every worker log group sends its QueueMesh documents, and only those, to the stream."""
    findings = []
    fix = (
        f"put a subscription filter to {report.stream_arn} with the template's pattern "
        f"'{report.filter_pattern}' (the stack's WorkerLogGroups parameter does it)"
    )
    for group in report.log_groups:
        subject = f"log group {group.name}"
        if not group.exists:
            findings.append(
                _problem(subject, "does not exist, so its worker's telemetry goes nowhere", fix)
            )
            continue
        to_stream = [s for s in group.subscriptions if s.destination_arn == report.stream_arn]
        if not to_stream:
            findings.append(
                _problem(
                    subject,
                    "is not subscribed to the telemetry stream: its queues are steered blind",
                    fix,
                )
            )
        elif all(s.filter_pattern != report.filter_pattern for s in to_stream):
            findings.append(
                _problem(
                    subject,
                    f"is subscribed with the pattern '{to_stream[0].filter_pattern}', not the "
                    "template's: the stream carries other lines, or misses QueueMesh's",
                    fix,
                )
            )
    return findings


def check_stream(report: StackReport) -> list[Finding]:
    """The telemetry stream takes every write."""
    if report.throttled_writes <= 0:
        return []
    return [
        _problem(
            f"stream {report.stream_name}",
            f"refused {report.throttled_writes:g} writes in the last hour "
            "(WriteProvisionedThroughputExceeded): telemetry reaches the controller late",
            "add shards (the stack's TelemetryShardCount parameter)",
        )
    ]


def check_wake_ups(report: StackReport) -> list[Finding]:
    """A paused queue's STATE item must be in the WakeUps index, or no tick resumes it."""
    return [
        _problem(
            f"queue {state.queue}",
            "paused, but its STATE item has no WakeUp (written before the WakeUps index): "
            "the one-minute tick never finds it, and a paused mapping sends no telemetry",
            "`queuemesh doctor --fix` adds WakeUp to the item",
        )
        for state in missing_wake_ups(report)
    ]


def check_wake_up_queue(report: StackReport) -> list[Finding]:
    """The controller's wake-up queue exists and a polling mapping delivers it: else a paused
    queue's pause and test end at the one-minute tick, not when the controller asked."""
    subject = f"controller {report.controller}"
    late = "a paused queue's pause and test end at the one-minute tick, not when it asked"
    wake_ups = report.wake_up_queue
    if wake_ups is None:
        return [
            Finding(
                Severity.NOTE,
                subject,
                f"has no wake-up queue (QUEUEMESH_WAKE_UP_QUEUE): {late}",
                "deploy the current template (its WakeUpQueue and WakeUpMessages)",
            )
        ]
    if not wake_ups.exists:
        return [
            _problem(
                subject,
                f"sends its wake-ups to queue {wake_ups.name}, which does not exist: each is "
                f"counted in WakeUpsUnscheduled, and {late}",
                "redeploy the stack (its WakeUpQueue), or point QUEUEMESH_WAKE_UP_QUEUE at the "
                "queue it creates",
            )
        ]
    if not POLLING_STATES.intersection(wake_ups.mapping_states):
        states = ", ".join(wake_ups.mapping_states) or "none"
        return [
            _problem(
                subject,
                f"no enabled event source mapping delivers its wake-up queue {wake_ups.name} "
                f"to it (mappings: {states}): the wake-ups wait there until they expire, and "
                f"{late}",
                "enable the mapping (`aws lambda update-event-source-mapping --uuid U "
                "--enabled`), or redeploy the stack (its WakeUpMessages)",
            )
        ]
    return []


def missing_wake_ups(report: StackReport) -> list[StateItemFacts]:
    """The STATE items ``queuemesh doctor --fix`` repairs (as the controller's sweep would)."""
    return [state for state in report.states if state.needs_wake_up]


def with_wake_ups(report: StackReport, queues: Sequence[str]) -> StackReport:
    """``report`` once ``queues``' STATE items were given their ``WakeUp``."""
    states = tuple(
        dataclasses.replace(state, needs_wake_up=False) if state.queue in queues else state
        for state in report.states
    )
    return dataclasses.replace(report, states=states)


CHECKS: tuple[Callable[[StackReport], list[Finding]], ...] = (
    check_configs,
    check_mappings,
    check_functions,
    check_subscriptions,
    check_stream,
    check_wake_ups,
    check_wake_up_queue,
)


def diagnose(report: StackReport) -> list[Finding]:
    """Every check's findings, problems first."""
    findings = [finding for check in CHECKS for finding in check(report)]
    return sorted(findings, key=lambda finding: finding.severity is not Severity.PROBLEM)


def has_problems(findings: Sequence[Finding]) -> bool:
    return any(finding.severity is Severity.PROBLEM for finding in findings)
