"""Registering a queue, and recording an operator's change to it, as the controller reads them.

There is one registration path, used by ``queuemesh register`` and by the simulator alike: the
queue's CONFIG item, a mapping with a MaximumConcurrency to move from, and the queue's state
committed with an ``OPERATOR`` audit item. The operator's other actions (pin, mode) record
their changes with ``record_operator_change`` too, under the same conditional-write rules as
the controller's own decisions: the loser of a race on ``Version`` re-reads and tries again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from controller.constants import (
    DEFAULT_PRIORITY,
    DEFAULT_WEIGHT,
    MAX_PRIORITY,
    MAX_WEIGHT,
    MIN_WEIGHT,
    is_queue_name,
)
from controller.model import (
    Action,
    AuditEvent,
    Mode,
    QueueConfig,
    QueueState,
)
from controller.ports import (
    ActuationError,
    Actuator,
    DeployedConfigs,
    Ledger,
    MappingNotFound,
    MappingView,
    VersionConflict,
)
from controller.settings import PolicyParams, SettingsError
from controller.transitions import Transition

COMMIT_ATTEMPTS = 5
# A group's name becomes a ledger key (GROUP#<name>) and a metric's dimension value (at most
# 1,024 characters): bounded well inside both.
MAX_GROUP_NAME_LENGTH = 256
# An event source mapping's id as Lambda issues it: a UUID, 8-4-4-4-12 hexadecimal digits.
MAPPING_ID = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")


class OperatorError(Exception):
    """An operator's action on a queue could not be carried out; the message says why and
    what to do about it."""


def check_mapping_id(esm_uuid: str) -> str:
    """``esm_uuid`` when it has the shape of a Lambda mapping id, else ``OperatorError``:
    checked before any call, so a typo is named as one instead of surfacing as AWS' parameter
    validation or a "not found"."""
    if not MAPPING_ID.fullmatch(esm_uuid):
        shown = esm_uuid if len(esm_uuid) <= 40 else f"{esm_uuid[:40]}..."
        raise OperatorError(
            f"{shown!r} is not an event source mapping id (a UUID such as "
            "14e0db71-2b8c-4d2a-9e7f-0123456789ab); find it with "
            "`aws lambda list-event-source-mappings --event-source-arn <queue ARN>`"
        )
    return esm_uuid


def check_standing(group: str | None, weight: float, priority: int) -> None:
    """A queue's standing in its downstream's group as the controller reads it back
    (``QueueConfig.group``, ``weight``, ``priority``), else ``OperatorError`` naming the value:
    a name of 1..256 characters without surrounding blanks, a weight in 0.01..100, a priority
    that is a whole number 0..9."""
    if group is not None and not (
        0 < len(group) <= MAX_GROUP_NAME_LENGTH and group == group.strip() and group.isprintable()
    ):
        raise OperatorError(
            f"group must be 1..{MAX_GROUP_NAME_LENGTH} printable characters without leading or "
            f"trailing blanks, got {group[:40]!r}"
        )
    if not MIN_WEIGHT <= weight <= MAX_WEIGHT:
        raise OperatorError(f"weight must be {MIN_WEIGHT:g}..{MAX_WEIGHT:g}, got {weight:g}")
    if not 0 <= priority <= MAX_PRIORITY:
        raise OperatorError(f"priority must be a whole number 0..{MAX_PRIORITY}, got {priority}")


def register_queue(
    ledger: Ledger,
    actuator: Actuator,
    queue: str,
    esm_uuid: str,
    overrides: Mapping[str, float],
    mode: Mode,
    *,
    clock: Callable[[], float],
    deadline: Callable[[], float],
    group: str | None = None,
    weight: float = DEFAULT_WEIGHT,
    priority: int = DEFAULT_PRIORITY,
) -> tuple[QueueConfig, MappingView]:
    """Put ``queue``'s mapping under control: its CONFIG item (with its standing in its
    downstream's group: ``group``, ``weight``, ``priority``), a MaximumConcurrency on an
    active queue's mapping, and a first state committed with the operator's audit item.

    ``clock`` gives epoch seconds for the ledger; ``deadline`` a fresh ``time.monotonic()``
    deadline for each control-plane call.
    """
    try:
        params = PolicyParams.from_env().with_overrides(overrides)
    except SettingsError as error:
        raise OperatorError(f"bad policy for {queue}: {error}") from error
    check_standing(group, weight, priority)
    view = read_mapping(actuator, esm_uuid, deadline())
    if not view.event_source_arn.endswith(f":{queue}"):
        raise OperatorError(
            f"mapping {esm_uuid} reads from {view.event_source_arn or 'an unknown source'}, "
            f"not from queue {queue!r}; check --esm (`aws lambda list-event-source-mappings`)"
        )
    if view.provisioned_pollers:
        # A poller drives up to 10 concurrent invocations: MaximumPollers is too coarse a
        # knob for AIMD, and MaximumConcurrency is not allowed beside it.
        raise OperatorError(
            f"mapping {esm_uuid} is in provisioned mode (ProvisionedPollerConfig), where AWS "
            "allows no MaximumConcurrency; QueueMesh steers on-demand mappings only: remove "
            "the ProvisionedPollerConfig, then register"
        )
    config = QueueConfig(
        queue=queue,
        esm_uuid=esm_uuid,
        mode=mode,
        overrides=dict(overrides),
        group=group,
        weight=weight,
        priority=priority,
    )
    ledger.put_config(config)
    view, capped = ensure_cap(actuator, config, view, params.cmax, deadline())
    summary = ", ".join(f"{name}={value:g}" for name, value in sorted(overrides.items()))
    standing = "".join(
        f", {name} {value}"
        for name, value, default in (
            ("group", group, None),
            ("weight", f"{weight:g}", f"{DEFAULT_WEIGHT:g}"),
            ("priority", priority, DEFAULT_PRIORITY),
        )
        if value != default
    )
    record_operator_change(
        ledger,
        config,
        view,
        clock=clock,
        action="REGISTER",
        reason=(
            f"Registered by operator: mapping {esm_uuid}, mode {mode.value}"
            + (f", overrides {summary}" if summary else "")
            + standing
            + f"; MaximumConcurrency {capped or 'is'} {concurrency_text(view)}."
        ),
        concurrency=view.max_concurrency,
    )
    return config, view


def register_deployed(
    ledger: DeployedConfigs, queue: object, esm_uuid: object, mode: object
) -> QueueConfig:
    """A deploy's registration (the template's registrar): the CONFIG item of ``queue`` points
    at ``esm_uuid``; a new item takes ``mode``, an existing one keeps the mode, pin and
    overrides an operator gave it. The values come from a template, so each is checked here
    and a bad one is an ``OperatorError`` naming it."""
    if not is_queue_name(queue):
        raise OperatorError(f"QueueName {queue!r} is not an SQS queue name")
    if not isinstance(esm_uuid, str):
        raise OperatorError(f"EsmUuid {esm_uuid!r} is not an event source mapping id")
    try:
        chosen = Mode(str(mode))
    except ValueError as error:
        known = ", ".join(m.value for m in Mode)
        raise OperatorError(f"Mode {mode!r} is not one of {known}") from error
    config = QueueConfig(queue=queue, esm_uuid=check_mapping_id(esm_uuid), mode=chosen)
    ledger.merge_config(config)
    return config


def read_mapping(actuator: Actuator, esm_uuid: str, deadline: float) -> MappingView:
    try:
        return actuator.read(esm_uuid, deadline)
    except MappingNotFound as error:
        raise OperatorError(
            f"event source mapping {esm_uuid} not found; check the UUID "
            "(`aws lambda list-event-source-mappings`) and --region/--endpoint-url"
        ) from error


def ensure_cap(
    actuator: Actuator, config: QueueConfig, view: MappingView, cmax: int, deadline: float
) -> tuple[MappingView, str]:
    """An active queue's mapping must have a MaximumConcurrency: with none set, Lambda's
    own scaler is the only limit and the controller has no value to move from (its drift
    check would find "unset" forever). Such a mapping is set to the queue's Cmax."""
    if config.mode is not Mode.ACTIVE or view.max_concurrency is not None:
        return view, ""
    try:
        after = actuator.apply(config.esm_uuid, cmax, view.enabled, deadline)
    except ActuationError as error:
        raise OperatorError(
            f"mapping {config.esm_uuid} has no MaximumConcurrency and setting it to {cmax} "
            f"failed: {error}"
        ) from error
    return after, "was unset; set to"


def record_operator_change(
    ledger: Ledger,
    config: QueueConfig,
    view: MappingView,
    *,
    clock: Callable[[], float],
    action: str,
    reason: str,
    concurrency: int | None,
    enabled: bool | None = None,
    changed: bool = False,
) -> QueueState:
    """Commit the queue's state with an OPERATOR audit item, re-reading on a race."""
    for _ in range(COMMIT_ATTEMPTS):
        now = clock()
        current = ledger.get_states([config.queue]).get(config.queue)
        value = concurrency if concurrency is not None else _fallback(current, view)
        if current is None:
            current = QueueState.first(config.queue, config.esm_uuid, value, enabled=view.enabled)
        previous_value = view.max_concurrency or current.concurrency
        enabled_now = view.enabled if enabled is None else enabled
        state = current.evolve(
            esm_uuid=config.esm_uuid,
            concurrency=value,
            previous_concurrency=previous_value if changed else current.concurrency,
            enabled=enabled_now,
            last_action=Action.HOLD,
            last_reason=reason,
            last_evaluated_at=now,
            last_change_at=now if changed else current.last_change_at,
            # The state's own wake-up stays (a pause's test, say): the operator adds none, so
            # an enabled mapping stays out of the WakeUps index every tick reads (its
            # telemetry decides it). A pinned queue is not decided: it wants none.
            wake_at=0.0 if config.mode is Mode.PINNED else current.wake_at,
            paused_since=0.0 if enabled_now else current.paused_since,
            apply_by=0.0,  # the operator's write is no claim
        )
        transition = Transition(
            state,
            at=now,
            event=AuditEvent.OPERATOR,
            previous_value=previous_value,
            action=action,
            reason=reason,
        )
        try:
            return transition.commit(ledger)
        except VersionConflict:
            continue
    raise OperatorError(
        f"queue {config.queue}: the controller kept changing its state; the change is "
        "applied but its audit item is not written, try the command again"
    )


def concurrency_text(view: MappingView) -> str:
    """The mapping's MaximumConcurrency as reasons and messages spell it."""
    return "unset" if view.max_concurrency is None else str(view.max_concurrency)


def _fallback(state: QueueState | None, view: MappingView) -> int:
    if view.max_concurrency is not None:
        return view.max_concurrency
    return state.concurrency if state is not None else PolicyParams.from_env().cmax
