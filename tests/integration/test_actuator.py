"""Actuators: retry, deadline and pacing policy (botocore Stubber, fake time), the in-memory
twin, and one round trip against moto's Lambda."""

from __future__ import annotations

import io
import json
import math
import random
import zipfile
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.stub import Stubber
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.actuator import (
    LIST_PAGE_SIZE,
    ActuationGaveUp,
    InMemoryActuator,
    LambdaActuator,
    UpdateCall,
    mapping_view,
)
from controller.aws import Backoff, CallAbandoned, CallWindow, PacedCaller
from controller.constants import CONTROL_PLANE_CALLS_PER_S
from controller.ports import ActuationError, MappingNotFound, MappingView
from tests.aws_fixtures import moto_client

UUID = "a1b2c3d4-0000-4000-8000-000000000001"
ARN = "arn:aws:sqs:us-east-1:123456789012:orders"


class FakeTime:
    """A clock that moves only when someone sleeps."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[tuple[float, float]] = []  # (when, how long)

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append((self.now, seconds))
        self.now += seconds


def lambda_client(**config: Any) -> Any:
    """A stubbed client whose attempts cost (almost) nothing against a deadline: these tests
    are about backoff and pacing; the attempt's own worst case is tested on its own."""
    config = {"connect_timeout": 0.01, "read_timeout": 0.01, **config}
    return boto3.client(
        "lambda",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"mode": "standard", "total_max_attempts": 1}, **config),
    )


def configuration(
    concurrency: int | None = 10, state: str = "Enabled", batch_size: int = 10
) -> dict[str, Any]:
    response: dict[str, Any] = {
        "UUID": UUID,
        "State": state,
        "EventSourceArn": ARN,
        "BatchSize": batch_size,
    }
    if concurrency is not None:
        response["ScalingConfig"] = {"MaximumConcurrency": concurrency}
    return response


def stubbed(
    time: FakeTime, *, calls_per_s: int = 1000, seed: int = 7
) -> tuple[LambdaActuator, Stubber]:
    """A stubbed actuator; pacing generous enough never to wait unless a test asks for it,
    so that every recorded sleep is a backoff sleep."""
    client = lambda_client()
    actuator = LambdaActuator(
        client,
        calls_per_s=calls_per_s,
        clock=time.clock,
        sleep=time.sleep,
        rng=random.Random(seed),
    )
    return actuator, Stubber(client)


def update_params(value: int, enabled: bool = True) -> dict[str, Any]:
    return {"UUID": UUID, "ScalingConfig": {"MaximumConcurrency": value}, "Enabled": enabled}


# Reading and applying.


@pytest.mark.parametrize(
    ("state", "enabled"),
    [
        ("Enabled", True),
        ("Enabling", True),
        ("Updating", True),
        ("Creating", True),
        ("Disabled", False),
        ("Disabling", False),
        ("Deleting", False),
    ],
)
def test_read_reports_the_true_values(state: str, enabled: bool) -> None:
    time = FakeTime()
    actuator, stubber = stubbed(time)
    stubber.add_response(
        "get_event_source_mapping", configuration(37, state, batch_size=5), {"UUID": UUID}
    )

    with stubber:
        view = actuator.read(UUID, deadline=time.now + 5)

    assert view == MappingView(UUID, 37, enabled, state, ARN, 5)


def test_a_mapping_without_scaling_config_has_no_maximum() -> None:
    assert mapping_view(configuration(None)).max_concurrency is None


def test_apply_sets_maximum_concurrency_and_enabled() -> None:
    time = FakeTime()
    actuator, stubber = stubbed(time)
    stubber.add_response(
        "update_event_source_mapping",
        configuration(25, "Disabling"),
        update_params(25, enabled=False),
    )

    with stubber:
        view = actuator.apply(UUID, 25, False, deadline=time.now + 5)

    assert (view.max_concurrency, view.enabled) == (25, False)
    stubber.assert_no_pending_responses()


@pytest.mark.parametrize("value", [0, 1, 1001])
def test_apply_refuses_values_aws_refuses_without_calling(value: int) -> None:
    time = FakeTime()
    actuator, stubber = stubbed(time)
    with stubber, pytest.raises(ActuationError, match=r"2\.\.1000"):
        actuator.apply(UUID, value, True, deadline=time.now + 5)


# Retries.


@pytest.mark.parametrize(
    "code",
    [
        "ResourceInUseException",
        "TooManyRequestsException",
        "ResourceConflictException",
        "ThrottlingException",
    ],
)
def test_transient_errors_are_retried(code: str) -> None:
    time = FakeTime()
    actuator, stubber = stubbed(time)
    stubber.add_client_error("update_event_source_mapping", service_error_code=code)
    stubber.add_response(
        "update_event_source_mapping", configuration(50, "Updating"), update_params(50)
    )

    with stubber:
        view = actuator.apply(UUID, 50, True, deadline=time.now + 5)

    assert view.max_concurrency == 50
    assert len(time.sleeps) == 1
    stubber.assert_no_pending_responses()


def test_server_errors_are_retried() -> None:
    time = FakeTime()
    actuator, stubber = stubbed(time)
    stubber.add_client_error(
        "get_event_source_mapping", service_error_code="ServiceException", http_status_code=500
    )
    stubber.add_client_error(
        "get_event_source_mapping", service_error_code="Unavailable", http_status_code=503
    )
    stubber.add_response("get_event_source_mapping", configuration(10))

    with stubber:
        assert actuator.read(UUID, deadline=time.now + 5).max_concurrency == 10
    assert len(time.sleeps) == 2


def test_connection_errors_are_retried() -> None:
    time = FakeTime()
    outcomes: list[Any] = [EndpointConnectionError(endpoint_url="http://x"), {"ok": True}]

    class Flaky:
        def ping(self) -> Any:
            outcome = outcomes.pop(0)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

    caller = PacedCaller(
        Flaky(), retryable=(), clock=time.clock, sleep=time.sleep, rng=random.Random(1)
    )

    assert caller.call("ping", deadline=time.now + 5) == {"ok": True}


def test_backoff_sleeps_are_full_jitter_under_the_exponential_cap() -> None:
    time = FakeTime()
    actuator, stubber = stubbed(time)
    for _ in range(6):
        stubber.add_client_error(
            "update_event_source_mapping", service_error_code="TooManyRequestsException"
        )
    stubber.add_response("update_event_source_mapping", configuration(40), update_params(40))

    with stubber:
        actuator.apply(UUID, 40, True, deadline=time.now + 60)

    backoff = Backoff(base_s=0.1, cap_s=2.0)  # the actuator's defaults
    sleeps = [seconds for _, seconds in time.sleeps]
    assert len(sleeps) == 6
    for attempt, seconds in enumerate(sleeps):
        assert 0 <= seconds <= backoff.ceiling(attempt)
    assert [backoff.ceiling(a) for a in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0]


def test_deadline_exhaustion_gives_up_with_the_cause_and_the_attempts() -> None:
    time = FakeTime()
    deadline = time.now + 1.0
    actuator, stubber = stubbed(time)
    for _ in range(50):
        stubber.add_client_error(
            "update_event_source_mapping", service_error_code="ResourceInUseException"
        )

    with stubber, pytest.raises(ActuationGaveUp) as caught:
        actuator.apply(UUID, 30, True, deadline=deadline)

    error = caught.value
    assert isinstance(error.__cause__, ClientError)
    assert error.__cause__.response["Error"]["Code"] == "ResourceInUseException"
    assert error.attempts >= 2
    assert f"{error.attempts} attempt" in str(error)
    assert all(when + seconds < deadline for when, seconds in time.sleeps)
    assert time.now < deadline


def test_attempts_are_bounded_even_when_time_stands_still() -> None:
    client = lambda_client()
    stubber = Stubber(client)
    for _ in range(3):
        stubber.add_client_error(
            "get_event_source_mapping", service_error_code="ThrottlingException"
        )
    actuator = LambdaActuator(
        client, clock=lambda: 0.0, sleep=lambda _: None, rng=random.Random(1), max_attempts=3
    )

    with stubber, pytest.raises(ActuationGaveUp) as caught:
        actuator.read(UUID, deadline=10.0)
    assert caught.value.attempts == 3


def test_a_passed_deadline_makes_no_call() -> None:
    time = FakeTime()
    actuator, stubber = stubbed(time)
    with stubber, pytest.raises(ActuationGaveUp, match="deadline passed") as caught:
        actuator.read(UUID, deadline=time.now)
    assert caught.value.attempts == 0


def test_missing_mapping_is_not_retried() -> None:
    time = FakeTime()
    actuator, stubber = stubbed(time)
    stubber.add_client_error(
        "get_event_source_mapping",
        service_error_code="ResourceNotFoundException",
        http_status_code=404,
    )

    with stubber, pytest.raises(MappingNotFound) as caught:
        actuator.read(UUID, deadline=time.now + 5)
    assert isinstance(caught.value.__cause__, ClientError)
    assert time.sleeps == []


def test_other_client_errors_fail_at_once() -> None:
    time = FakeTime()
    actuator, stubber = stubbed(time)
    stubber.add_client_error(
        "update_event_source_mapping",
        service_error_code="InvalidParameterValueException",
        http_status_code=400,
    )

    with stubber, pytest.raises(ActuationGaveUp) as caught:
        actuator.apply(UUID, 30, True, deadline=time.now + 5)
    assert not isinstance(caught.value, MappingNotFound)
    assert caught.value.attempts == 1
    assert isinstance(caught.value.__cause__, ClientError)
    assert time.sleeps == []


# Pacing.


def test_calls_fill_every_second_to_the_ceiling_and_never_past_it() -> None:
    time = FakeTime()
    actuator, stubber = stubbed(time, calls_per_s=CONTROL_PLANE_CALLS_PER_S)
    calls = 3 * CONTROL_PLANE_CALLS_PER_S + 1
    started = time.now
    stamps: list[float] = []
    for _ in range(calls):
        stubber.add_response("get_event_source_mapping", configuration(10))

    with stubber:
        for _ in range(calls):
            actuator.read(UUID, deadline=time.now + 5)
            stamps.append(time.now)

    assert _most_in_one_second(stamps) == CONTROL_PLANE_CALLS_PER_S
    assert [
        sum(1 for s in stamps if second <= s - started < second + 1) for second in range(3)
    ] == [CONTROL_PLANE_CALLS_PER_S] * 3
    assert time.now - started >= 3.0


def test_waiting_for_a_slot_respects_the_deadline() -> None:
    time = FakeTime()
    actuator, stubber = stubbed(time, calls_per_s=1)
    stubber.add_response("get_event_source_mapping", configuration(10))

    with stubber:
        actuator.read(UUID, deadline=time.now + 5)
        with pytest.raises(ActuationGaveUp, match="pacing"):
            actuator.read(UUID, deadline=time.now + 0.5)  # the next slot is 1 s away
    assert time.sleeps == []


def test_a_call_without_a_deadline_waits_its_turn() -> None:
    time = FakeTime()
    window = CallWindow(1, 1.0, clock=time.clock, sleep=time.sleep)
    assert window.acquire(deadline=math.inf)
    assert window.acquire(deadline=math.inf)
    assert time.sleeps == [(1000.0, 1.0)]


def test_a_caller_slowed_down_catches_up_within_the_window() -> None:
    time = FakeTime()
    window = CallWindow(4, 1.0, clock=time.clock, sleep=time.sleep)
    started = time.now
    assert window.acquire(deadline=started + 60)
    time.now += 0.9  # a slow step: a token bucket at 4/s would now allow one more call, not 3
    for _ in range(3):
        assert window.acquire(deadline=started + 60)
    assert time.sleeps == []
    assert window.acquire(deadline=started + 60)  # the fifth waits for the first to age out
    assert time.now == started + 1.0


def _most_in_one_second(stamps: list[float]) -> int:
    """The most calls in any half-open window [t, t + 1 s) (a tiny allowance for rounding)."""
    ordered = sorted(stamps)
    most = 0
    for i, start in enumerate(ordered):
        inside = [s for s in ordered[i:] if s < start + 1.0 - 1e-9]
        most = max(most, len(inside))
    return most


@settings(max_examples=50)
@given(
    calls=st.integers(1, 15),
    window_s=st.sampled_from([0.5, 1.0, 1.01]),
    gaps=st.lists(st.floats(0, 0.5), min_size=1, max_size=60),
)
def test_a_call_window_lets_each_call_go_as_soon_as_the_window_allows(
    calls: int, window_s: float, gaps: list[float]
) -> None:
    time = FakeTime()
    window = CallWindow(calls, window_s, clock=time.clock, sleep=time.sleep)
    stamps: list[float] = []
    for gap in gaps:
        time.now += gap  # the caller's own work between calls
        arrived = time.now
        assert window.acquire(deadline=time.now + 60)
        earliest = arrived if len(stamps) < calls else max(arrived, stamps[-calls] + window_s)
        assert time.now == earliest
        stamps.append(time.now)

    if window_s >= 1.0:
        assert _most_in_one_second(stamps) <= calls


@settings(max_examples=50)
@given(
    seed=st.integers(0, 2**32),
    failures=st.integers(0, 12),
    budget=st.floats(0.01, 20.0),
)
def test_retries_never_sleep_past_the_deadline(seed: int, failures: int, budget: float) -> None:
    time = FakeTime()
    remaining = [failures]

    class Busy:
        def update(self) -> dict[str, Any]:
            if remaining[0] > 0:
                remaining[0] -= 1
                raise ClientError(
                    {"Error": {"Code": "ResourceInUseException", "Message": "busy"}}, "Update"
                )
            return {"done": True}

    backoff = Backoff(base_s=0.1, cap_s=2.0)
    caller = PacedCaller(
        Busy(),
        retryable={"ResourceInUseException"},
        backoff=backoff,
        window=CallWindow(10, clock=time.clock, sleep=time.sleep),
        max_attempts=20,
        clock=time.clock,
        sleep=time.sleep,
        rng=random.Random(seed),
    )
    deadline = time.now + budget

    try:
        assert caller.call("update", deadline) == {"done": True}
        succeeded = True
    except CallAbandoned as abandoned:
        succeeded = False
        assert abandoned.attempts <= failures + 1
        assert isinstance(abandoned.__cause__, ClientError)

    assert time.now < deadline
    assert all(when + seconds < deadline for when, seconds in time.sleeps)
    if succeeded:
        assert remaining[0] == 0


@given(seed=st.integers(0, 2**32), attempt=st.integers(0, 200))
def test_backoff_is_full_jitter_under_a_capped_exponential(seed: int, attempt: int) -> None:
    backoff = Backoff(base_s=0.05, cap_s=3.0)
    delay = backoff.delay(attempt, random.Random(seed))
    assert 0.0 <= delay <= min(3.0, 0.05 * 2**attempt)
    assert backoff.ceiling(attempt) <= backoff.ceiling(attempt + 1) <= 3.0


# Listing in bulk.


def esm(name: str) -> str:
    """A mapping UUID (Lambda's 36 characters) that reads as ``name``."""
    return f"{name:0>8}-0000-4000-8000-000000000000"


A, B, X, Y = esm("a"), esm("b"), esm("x"), esm("y")


def listed(*uuids: str, concurrency: int = 10) -> list[dict[str, Any]]:
    return [{**configuration(concurrency), "UUID": uuid} for uuid in uuids]


def list_page(
    uuids: list[str], marker: str | None, next_marker: str | None, concurrency: int = 10
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A stubbed ListEventSourceMappings answer and the parameters it expects."""
    response: dict[str, Any] = {"EventSourceMappings": listed(*uuids, concurrency=concurrency)}
    if next_marker is not None:
        response["NextMarker"] = next_marker
    expected: dict[str, Any] = {"MaxItems": LIST_PAGE_SIZE}
    if marker is not None:
        expected["Marker"] = marker
    return response, expected


def test_read_many_follows_the_markers_and_stops_once_all_are_found() -> None:
    time = FakeTime()
    actuator, stubber = stubbed(time)
    stubber.add_response("list_event_source_mappings", *list_page([A, X], None, "m1"))
    stubber.add_response("list_event_source_mappings", *list_page([Y, B], "m1", "m2", 42))
    # A third page exists (NextMarker m2) but is never asked for: both were found.

    with stubber:
        views = actuator.read_many([A, B], deadline=time.now + 5)

    stubber.assert_no_pending_responses()
    assert {uuid: view.max_concurrency for uuid, view in views.items()} == {A: 10, B: 42}
    assert views[B] == MappingView(B, 42, True, "Enabled", ARN, 10)


def test_read_many_spends_at_most_a_page_per_wanted_mapping() -> None:
    time = FakeTime()
    actuator, stubber = stubbed(time)
    stubber.add_response("list_event_source_mappings", *list_page([X], None, "m1"))
    stubber.add_response("list_event_source_mappings", *list_page([A], "m1", "m2"))

    with stubber:
        views = actuator.read_many([A, B], deadline=time.now + 5)

    stubber.assert_no_pending_responses()
    assert set(views) == {A}  # B is left to a read of its own


def test_read_many_of_one_mapping_lists_nothing() -> None:
    time = FakeTime()
    actuator, stubber = stubbed(time)
    with stubber:
        assert actuator.read_many([UUID], deadline=time.now + 5) == {}
        assert actuator.read_many([], deadline=time.now + 5) == {}


def test_a_refused_listing_gives_up_without_retrying() -> None:
    time = FakeTime()
    actuator, stubber = stubbed(time)
    stubber.add_client_error(
        "list_event_source_mappings", "AccessDeniedException", http_status_code=403
    )

    with stubber, pytest.raises(ActuationGaveUp) as raised:
        actuator.read_many([A, B], deadline=time.now + 5)

    assert raised.value.operation == "list_event_source_mappings"
    assert raised.value.attempts == 1


@settings(max_examples=50)
@given(
    order=st.permutations(list(range(12))),
    page_size=st.integers(min_value=1, max_value=5),
    wanted=st.sets(st.integers(min_value=0, max_value=13), max_size=6),
)
def test_twin_listing_shows_what_it_read_within_its_page_budget(
    order: list[int], page_size: int, wanted: set[int]
) -> None:
    twin = InMemoryActuator(clock=lambda: 0.0, page_size=page_size)
    for index in order:
        twin.add_mapping(f"esm-{index}", index + 2)
    uuids = {f"esm-{index}" for index in wanted}

    views = twin.read_many(uuids, deadline=0.0)

    pages = [order[start : start + page_size] for start in range(0, len(order), page_size)]
    assert twin.list_pages <= (len(uuids) if len(uuids) > 1 else 0)
    shown = {f"esm-{index}" for page in pages[: twin.list_pages] for index in page}
    assert set(views) == uuids & shown
    assert all(views[uuid] == twin.read(uuid, deadline=0.0) for uuid in views)
    if len(uuids) > 1 and twin.list_pages < len(uuids):  # stopped early: all were found
        assert set(views) == uuids or twin.list_pages == len(pages)


# The in-memory twin.


def test_twin_applies_and_records_updates() -> None:
    now = [100.0]
    seen: list[tuple[MappingView, MappingView]] = []
    twin = InMemoryActuator(clock=lambda: now[0], on_change=lambda b, a: seen.append((b, a)))
    twin.add_mapping(UUID, 100, event_source_arn=ARN, batch_size=10)

    now[0] = 105.0
    after = twin.apply(UUID, 50, True, deadline=0.0)
    now[0] = 110.0
    twin.apply(UUID, 2, False, deadline=0.0)

    assert after == MappingView(UUID, 50, True, "Enabled", ARN, 10)
    assert twin.read(UUID, deadline=0.0) == MappingView(UUID, 2, False, "Disabled", ARN, 10)
    assert twin.calls == [UpdateCall(105.0, UUID, 50, True), UpdateCall(110.0, UUID, 2, False)]
    assert [(b.max_concurrency, a.max_concurrency) for b, a in seen] == [(100, 50), (50, 2)]
    assert twin.reads == 1


def test_twin_raises_injected_faults_in_order_then_recovers() -> None:
    twin = InMemoryActuator(clock=lambda: 0.0)
    twin.add_mapping(UUID, 100)
    twin.fail_next(ActuationError("busy"), MappingNotFound("gone"))

    with pytest.raises(ActuationError, match="busy"):
        twin.apply(UUID, 50, True, deadline=0.0)
    with pytest.raises(MappingNotFound):
        twin.read(UUID, deadline=0.0)
    assert twin.apply(UUID, 50, True, deadline=0.0).max_concurrency == 50
    assert len(twin.calls) == 1


def test_twin_behaves_like_lambda_on_bad_input() -> None:
    twin = InMemoryActuator(clock=lambda: 0.0)
    twin.add_mapping(UUID, 100)

    with pytest.raises(MappingNotFound):
        twin.read("nope", deadline=0.0)
    with pytest.raises(MappingNotFound):
        twin.apply("nope", 10, True, deadline=0.0)
    with pytest.raises(ActuationError, match=r"2\.\.1000"):
        twin.apply(UUID, 1, True, deadline=0.0)
    assert twin.calls == []


def test_a_hand_edit_shows_in_the_next_read() -> None:
    twin = InMemoryActuator(clock=lambda: 0.0)
    twin.add_mapping(UUID, 100)
    twin.apply(UUID, 50, True, deadline=0.0)

    twin.add_mapping(UUID, 80)  # someone changed the mapping in the console

    assert twin.read(UUID, deadline=0.0).max_concurrency == 80


# Against moto's Lambda.


def _function_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", "def handler(event, context):\n    return None\n")
    return buffer.getvalue()


def test_lambda_actuator_round_trip_on_moto(moto_endpoint: str) -> None:
    iam = moto_client("iam", moto_endpoint)
    role = iam.create_role(
        RoleName="worker-role",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "lambda.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )["Role"]["Arn"]
    lambda_api = moto_client(
        "lambda",
        moto_endpoint,
        config=Config(retries={"mode": "standard", "total_max_attempts": 1}),
    )
    lambda_api.create_function(
        FunctionName="worker",
        Runtime="python3.12",
        Role=role,
        Handler="app.handler",
        Code={"ZipFile": _function_zip()},
    )
    sqs = moto_client("sqs", moto_endpoint)
    queue_url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    uuid = lambda_api.create_event_source_mapping(
        EventSourceArn=queue_arn,
        FunctionName="worker",
        BatchSize=10,
        ScalingConfig={"MaximumConcurrency": 100},
    )["UUID"]
    actuator = LambdaActuator(lambda_api)
    deadline = actuator_deadline()

    before = actuator.read(uuid, deadline)
    applied = actuator.apply(uuid, 25, True, deadline)
    after = actuator.read(uuid, deadline)
    paused = actuator.apply(uuid, 25, False, deadline)

    assert (before.max_concurrency, before.enabled, before.event_source_arn) == (
        100,
        True,
        queue_arn,
    )
    assert before.batch_size == 10
    assert applied.max_concurrency == 25
    assert (after.max_concurrency, after.enabled) == (25, True)
    assert (paused.enabled, actuator.read(uuid, deadline).enabled) == (False, False)
    with pytest.raises(MappingNotFound):
        actuator.read("00000000-0000-4000-8000-000000000000", deadline)
    # moto answers a listing in one page (no MaxItems, no NextMarker): the paging itself is
    # covered with the Stubber above; here, a listed mapping reads as a fetched one.
    other_url = sqs.create_queue(QueueName="refunds")["QueueUrl"]
    other_arn = sqs.get_queue_attributes(QueueUrl=other_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    other = lambda_api.create_event_source_mapping(
        EventSourceArn=other_arn, FunctionName="worker", BatchSize=5
    )["UUID"]
    listed_views = actuator.read_many([uuid, other, "not-a-mapping"], deadline)
    assert listed_views == {
        uuid: actuator.read(uuid, deadline),
        other: actuator.read(other, deadline),
    }


def actuator_deadline() -> float:
    import time

    return time.monotonic() + 30.0
