"""The account's Lambda control plane in the simulator, and its quota.

Lambda answers at most ``CONTROL_PLANE_QUOTA_PER_S`` control-plane requests a second per
account, shared by every API (Get-, List- and UpdateEventSourceMapping among them) and so by
every queue of a scenario. ``SimControlPlane`` stands in for the boto3 Lambda client the
controller's real ``LambdaActuator`` calls, over the in-memory twin's mappings, and refuses a
request over the quota as AWS does: ``TooManyRequestsException`` (HTTP 429, reason
``CallerRateLimitExceeded``), which the actuator retries with backoff within its deadline and
then gives up on (the executor puts the ledger back). A refused request takes no part of the
quota.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from controller.actuator import LIST_PAGE_SIZE, InMemoryActuator
from controller.constants import CONTROL_PLANE_QUOTA_PER_S
from controller.ports import MappingNotFound, MappingView

if TYPE_CHECKING:
    from load.sim.trace import MappingSetting, QueueTrace, SimResult

QUOTA_WINDOW_S = 1.0


@dataclass(frozen=True, slots=True)
class ControllerRun:
    """A controller invocation that took virtual time or asked to be run again: when it ended
    (epoch), the mapping changes it made after it started, ``(epoch time, queue, setting)`` in
    time order, and the epoch times its wake-ups are delivered at (each a run of its own)."""

    ended_at: float
    later_changes: tuple[tuple[float, str, MappingSetting], ...] = ()
    wake_ups: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class ControlPlaneUse:
    """What a run asked of the control plane: requests answered and refused, and the most
    answered in any ``QUOTA_WINDOW_S``."""

    requests: int
    refused: int
    most_in_one_second: int


def _configuration(view: MappingView) -> dict[str, Any]:
    """The mapping as Lambda's API answers it."""
    return {
        "UUID": view.uuid,
        "State": view.state,
        "EventSourceArn": view.event_source_arn,
        "BatchSize": view.batch_size,
        "ScalingConfig": {"MaximumConcurrency": view.max_concurrency},
    }


def _error(code: str, status: int, message: str, operation: str) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    if code == "TooManyRequestsException":
        response["Reason"] = "CallerRateLimitExceeded"
    return ClientError(response, operation)


class SimControlPlane:
    """A boto3-shaped Lambda client on ``mappings`` (the twin), on the simulator's ``clock``,
    with the account's quota: at most ``quota_per_s`` answered requests in any second."""

    def __init__(
        self,
        mappings: InMemoryActuator,
        clock: Callable[[], float],
        quota_per_s: int = CONTROL_PLANE_QUOTA_PER_S,
    ) -> None:
        self._mappings = mappings
        self._clock = clock
        self.quota_per_s = quota_per_s
        self._answered: deque[float] = deque()
        self._requests = self._refused = self._most = 0

    @property
    def use(self) -> ControlPlaneUse:
        return ControlPlaneUse(self._requests, self._refused, self._most)

    def _admit(self, operation: str) -> None:
        now, answered = self._clock(), self._answered
        while answered and answered[0] <= now - QUOTA_WINDOW_S:
            answered.popleft()
        if len(answered) >= self.quota_per_s:
            self._refused += 1
            raise _error("TooManyRequestsException", 429, "Rate exceeded", operation)
        answered.append(now)
        self._requests += 1
        self._most = max(self._most, len(answered))

    def get_event_source_mapping(self, UUID: str) -> dict[str, Any]:  # boto3's names
        self._admit("GetEventSourceMapping")
        try:
            return _configuration(self._mappings.read(UUID, 0.0))
        except MappingNotFound as missing:
            raise _error(
                "ResourceNotFoundException", 404, str(missing), "GetEventSourceMapping"
            ) from None

    def list_event_source_mappings(
        self,
        MaxItems: int = LIST_PAGE_SIZE,
        Marker: str | None = None,
    ) -> dict[str, Any]:
        self._admit("ListEventSourceMappings")
        listing = self._mappings.listing()
        start = int(Marker or 0)
        end = start + min(MaxItems, LIST_PAGE_SIZE)
        page: dict[str, Any] = {
            "EventSourceMappings": [_configuration(view) for view in listing[start:end]]
        }
        if end < len(listing):
            page["NextMarker"] = str(end)
        return page

    def update_event_source_mapping(
        self,
        UUID: str,
        ScalingConfig: dict[str, int],
        Enabled: bool,
    ) -> dict[str, Any]:
        self._admit("UpdateEventSourceMapping")
        concurrency = ScalingConfig["MaximumConcurrency"]
        try:
            return _configuration(self._mappings.apply(UUID, concurrency, Enabled, 0.0))
        except MappingNotFound as missing:
            raise _error(
                "ResourceNotFoundException", 404, str(missing), "UpdateEventSourceMapping"
            ) from None


@dataclass(frozen=True, slots=True)
class BudgetCheck:
    """Issue 31.3's targets on one run, from its traces: each queue with a 429 report from its
    first such report to its first cut (whole seconds: the cut is seen in the cap of the second
    after it, so an upper bound), the raises made while a reported queue waited for its cut,
    and what the control plane answered."""

    cut_after_report_s: dict[str, float]
    uncut: tuple[str, ...]
    raises_while_a_cut_waits: int
    control_plane: ControlPlaneUse | None


def budget_check(result: SimResult) -> BudgetCheck:
    """``BudgetCheck`` of ``result``."""
    reported: dict[str, float] = {}
    for delivery in result.telemetry:
        sample = delivery.sample
        if sample.throttled and delivery.arrival <= result.ended_at:
            reported.setdefault(sample.queue, delivery.arrival)
    cut_at: dict[str, int] = {}
    for queue, first in reported.items():
        trace = result.queues[queue]
        before = trace.cap_per_s[int(first)]
        cut_at[queue] = next(
            (
                second
                for second in range(int(first) + 1, len(trace.cap_per_s))
                if trace.cap_per_s[second] < before or not trace.enabled_per_s[second]
            ),
            -1,
        )
    raises = 0
    for trace in result.queues.values():
        for second in range(1, len(trace.cap_per_s)):
            level, earlier = _allowed(trace, second), _allowed(trace, second - 1)
            waiting = any(
                reported[queue] <= second - 1 and (cut < 0 or cut > second)
                for queue, cut in cut_at.items()
            )
            raises += level > earlier and waiting
    return BudgetCheck(
        cut_after_report_s={
            queue: cut - reported[queue] for queue, cut in cut_at.items() if cut >= 0
        },
        uncut=tuple(sorted(queue for queue, cut in cut_at.items() if cut < 0)),
        raises_while_a_cut_waits=raises,
        control_plane=result.control_plane,
    )


def _allowed(trace: QueueTrace, second: int) -> int:
    return trace.cap_per_s[second] if trace.enabled_per_s[second] else 0
