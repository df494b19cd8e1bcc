"""Event source mapping actuators: Lambda's control plane, and an in-memory twin."""

from __future__ import annotations

import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, NamedTuple

from controller.aws import Backoff, CallAbandoned, CallWindow, Clock, PacedCaller, Sleep
from controller.aws import client as aws_client
from controller.constants import (
    CONTROL_PLANE_CALLS_PER_S,
    CONTROL_PLANE_WINDOW_MARGIN_S,
    MAX_CONCURRENCY,
    MIN_CONCURRENCY,
    TICK_CALLS_PER_S,
)
from controller.ports import ActuationError, MappingNotFound, MappingView

# States in which the mapping polls, or is about to. AWS reports a change to an enabled
# mapping's settings as Updating (a disable goes through Disabling), so Updating counts as on.
ENABLED_STATES = frozenset({"Enabled", "Enabling", "Creating", "Updating"})

RETRYABLE_CODES = frozenset(
    {
        "ResourceInUseException",
        "TooManyRequestsException",
        "ResourceConflictException",
        "ThrottlingException",
        "ServiceException",
    }
)


# ListEventSourceMappings answers at most 100 mappings per page, whatever MaxItems asks for.
LIST_PAGE_SIZE = 100


class ActuationGaveUp(ActuationError):
    """A mapping call failed for good; ``attempts`` says how many were made."""

    def __init__(self, message: str, *, operation: str, attempts: int) -> None:
        super().__init__(message)
        self.operation = operation
        self.attempts = attempts


def check_concurrency(max_concurrency: int) -> None:
    if not MIN_CONCURRENCY <= max_concurrency <= MAX_CONCURRENCY:
        raise ActuationError(
            f"MaximumConcurrency must be {MIN_CONCURRENCY}..{MAX_CONCURRENCY}, "
            f"got {max_concurrency}"
        )


def pick_listed(
    pages: Iterable[Iterable[MappingView]], uuids: Collection[str]
) -> dict[str, MappingView]:
    """The wanted mappings from pages of a listing, read only until all are found and never
    more pages than mappings wanted: a listing must not cost more calls than the reads it
    replaces, and one mapping alone is not listed at all. Those not found are left out (the
    caller reads them one by one)."""
    wanted = set(uuids)
    found: dict[str, MappingView] = {}
    if len(wanted) < 2:
        return found
    for budget, page in enumerate(pages, start=1):
        found.update((view.uuid, view) for view in page if view.uuid in wanted)
        if len(found) == len(wanted) or budget >= len(wanted):
            break
    return found


def mapping_view(configuration: Mapping[str, Any]) -> MappingView:
    """A MappingView from a Get/UpdateEventSourceMapping response or a listed mapping."""
    scaling = configuration.get("ScalingConfig") or {}
    maximum = scaling.get("MaximumConcurrency")
    state = str(configuration.get("State", ""))
    return MappingView(
        uuid=str(configuration["UUID"]),
        max_concurrency=None if maximum is None else int(maximum),
        enabled=state in ENABLED_STATES,
        state=state,
        event_source_arn=str(configuration.get("EventSourceArn", "")),
        batch_size=int(configuration.get("BatchSize") or 0),
        provisioned_pollers=bool(configuration.get("ProvisionedPollerConfig")),
    )


class LambdaActuator:
    """Reads and sets ESM ``MaximumConcurrency`` through Lambda's control-plane API.

    All calls of one instance share one window of at most ``calls_per_s`` calls in any second
    (default 12: the account's 15 requests/s are shared with every other tool in the account),
    and are retried with full-jitter backoff within the caller's deadline. A client passed in
    should have botocore's retries off (``controller.aws.client`` does that), or they multiply
    with these.
    """

    def __init__(
        self,
        client: Any = None,
        calls_per_s: int = CONTROL_PLANE_CALLS_PER_S,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        rng: random.Random | None = None,
        *,
        backoff: Backoff | None = None,
        max_attempts: int = 8,
    ) -> None:
        self._caller = PacedCaller(
            client if client is not None else aws_client("lambda"),
            retryable=RETRYABLE_CODES,
            backoff=backoff or Backoff(base_s=0.1, cap_s=2.0),
            window=CallWindow(
                calls_per_s, 1.0 + CONTROL_PLANE_WINDOW_MARGIN_S, clock=clock, sleep=sleep
            ),
            max_attempts=max_attempts,
            clock=clock,
            sleep=sleep,
            rng=rng or random.Random(),
        )
        self._clock = clock
        self._sleep = sleep

    def pace(self, calls: int, window_s: float = 1.0) -> None:
        """From now on, at most ``calls`` calls in any ``window_s`` seconds: the share of the
        account's quota of the invocation about to run (``lane_pace``, ``tick_pace``).
        A container runs one invocation at a time, so the window starts afresh."""
        window = self._caller.window
        if window is not None and (window.calls, window.window_s) == (
            calls,
            window_s + CONTROL_PLANE_WINDOW_MARGIN_S,
        ):
            return
        self._caller.window = CallWindow(
            calls, window_s + CONTROL_PLANE_WINDOW_MARGIN_S, clock=self._clock, sleep=self._sleep
        )

    @property
    def rate_per_s(self) -> float:
        """The pace of this actuator's control-plane calls, retries included."""
        window = self._caller.window
        return math.inf if window is None else window.rate_per_s

    def read(self, uuid: str, deadline: float) -> MappingView:
        return mapping_view(self._call(uuid, "get_event_source_mapping", deadline, UUID=uuid))

    def read_many(self, uuids: Collection[str], deadline: float) -> dict[str, MappingView]:
        """Pages through ListEventSourceMappings, unfiltered (the controller knows its
        mappings by UUID, not by function), each page one paced call."""
        return pick_listed(self._pages(deadline), uuids)

    def _pages(self, deadline: float) -> Iterable[list[MappingView]]:
        marker: str | None = None
        while True:  # bounded by the caller, which stops after a page per wanted mapping
            paging: dict[str, Any] = {"MaxItems": LIST_PAGE_SIZE}
            if marker is not None:
                paging["Marker"] = marker
            page = self._call("listing", "list_event_source_mappings", deadline, **paging)
            yield [mapping_view(item) for item in page.get("EventSourceMappings", [])]
            marker = page.get("NextMarker")
            if not marker:
                return

    def apply(self, uuid: str, max_concurrency: int, enabled: bool, deadline: float) -> MappingView:
        check_concurrency(max_concurrency)
        response = self._call(
            uuid,
            "update_event_source_mapping",
            deadline,
            UUID=uuid,
            ScalingConfig={"MaximumConcurrency": max_concurrency},
            Enabled=enabled,
        )
        return mapping_view(response)

    def _call(self, subject: str, operation: str, deadline: float, **params: Any) -> dict[str, Any]:
        """One paced call; ``subject`` names what it concerns in errors (a mapping's UUID)."""
        try:
            return self._caller.call(operation, deadline, **params)
        except CallAbandoned as abandoned:
            cause = abandoned.__cause__ or abandoned
            if abandoned.code == "ResourceNotFoundException":
                raise MappingNotFound(f"event source mapping {subject} does not exist") from cause
            raise ActuationGaveUp(
                f"mapping {subject}: {abandoned}", operation=operation, attempts=abandoned.attempts
            ) from cause


def lane_pace(lanes: int) -> tuple[int, float]:
    """(calls, per seconds) one of ``lanes`` concurrent batch invocations may make, so that
    all of them and the tick keep to ``CONTROL_PLANE_CALLS_PER_S`` together: one lane alone
    paces 10 a second, two 5 each, four 2 every 0.8 s (2.5 a second), twenty 1 every 2 s."""
    return _even_share(CONTROL_PLANE_CALLS_PER_S - TICK_CALLS_PER_S, lanes)


def tick_pace(runners: int) -> tuple[int, float]:
    """(calls, per seconds) one of ``runners`` invocations that may run the tick at once may
    make, so that together they keep to the tick's ``TICK_CALLS_PER_S``: the scheduled tick
    alone paces 2 a second; beside the wake-up queue's invocations (the scheduled one and
    ``WAKE_UP_CONCURRENCY`` = 2 of them), each 1 every 1.5 s."""
    return _even_share(TICK_CALLS_PER_S, runners)


def _even_share(calls_per_s: int, runners: int) -> tuple[int, float]:
    """(calls, per seconds) each of ``runners`` may make so that all of them together keep to
    ``calls_per_s``: whole calls, at least one, over a window stretched to fit."""
    calls = max(1, calls_per_s // runners)
    return calls, calls * runners / calls_per_s


class UpdateCall(NamedTuple):
    time: float
    uuid: str
    value: int
    enabled: bool


ChangeHook = Callable[[MappingView, MappingView], None]


class InMemoryActuator:
    """The twin: mappings in a dict, every applied update recorded, faults injectable.

    ``calls`` holds the updates that took effect, ``(time, uuid, value, enabled)``; ``reads``
    counts single reads and ``list_pages`` the pages listed, ``page_size`` mappings each, in
    the order the mappings were added. ``fail_next`` queues exceptions raised by the next
    calls (read, list page or apply), in order. ``on_change(before, after)`` runs after each
    update, outside the lock, so a simulator can follow the mapping.
    """

    def __init__(
        self,
        clock: Clock = time.monotonic,
        on_change: ChangeHook | None = None,
        page_size: int = LIST_PAGE_SIZE,
    ) -> None:
        self._clock = clock
        self._page_size = page_size
        self._on_change = on_change
        self._lock = threading.Lock()
        self._mappings: dict[str, MappingView] = {}
        self._faults: deque[Exception] = deque()
        self.calls: list[UpdateCall] = []
        self.reads = 0
        self.list_pages = 0

    def add_mapping(
        self,
        uuid: str,
        max_concurrency: int | None,
        enabled: bool = True,
        event_source_arn: str = "arn:aws:sqs:us-east-1:000000000000:queue",
        batch_size: int = 10,
    ) -> MappingView:
        view = MappingView(
            uuid=uuid,
            max_concurrency=max_concurrency,
            enabled=enabled,
            state="Enabled" if enabled else "Disabled",
            event_source_arn=event_source_arn,
            batch_size=batch_size,
        )
        with self._lock:
            self._mappings[uuid] = view
        return view

    def fail_next(self, *errors: Exception) -> None:
        with self._lock:
            self._faults.extend(errors)

    def read(self, uuid: str, deadline: float) -> MappingView:
        with self._lock:
            self._raise_fault()
            self.reads += 1
            return self._mapping(uuid)

    def read_many(self, uuids: Collection[str], deadline: float) -> dict[str, MappingView]:
        return pick_listed(self._pages(), uuids)

    def listing(self) -> list[MappingView]:
        """Every mapping, in the order added: the order a listing pages through them."""
        with self._lock:
            return list(self._mappings.values())

    def _pages(self) -> Iterable[list[MappingView]]:
        listing = self.listing()
        for start in range(0, len(listing), self._page_size):
            with self._lock:
                self._raise_fault()
                self.list_pages += 1
            yield listing[start : start + self._page_size]

    def apply(self, uuid: str, max_concurrency: int, enabled: bool, deadline: float) -> MappingView:
        with self._lock:
            self._raise_fault()
            check_concurrency(max_concurrency)
            before = self._mapping(uuid)
            after = MappingView(
                uuid=uuid,
                max_concurrency=max_concurrency,
                enabled=enabled,
                state="Enabled" if enabled else "Disabled",
                event_source_arn=before.event_source_arn,
                batch_size=before.batch_size,
            )
            self._mappings[uuid] = after
            self.calls.append(UpdateCall(self._clock(), uuid, max_concurrency, enabled))
        if self._on_change is not None:
            self._on_change(before, after)
        return after

    def _raise_fault(self) -> None:
        if self._faults:
            raise self._faults.popleft()

    def _mapping(self, uuid: str) -> MappingView:
        try:
            return self._mappings[uuid]
        except KeyError:
            raise MappingNotFound(f"event source mapping {uuid} does not exist") from None
