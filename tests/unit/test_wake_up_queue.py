"""The wake-up queue: the SQS scheduler on a stubbed boto3 client (ten wake-ups a call, each
held back its delay, what SQS does not take counted, never a raise), the message it sends read
back, and the controller's handling of a batch of them."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from botocore.stub import ANY, Stubber
from hypothesis import given
from hypothesis import strategies as st

from controller import handler
from controller.actuator import InMemoryActuator
from controller.app import ControllerApp
from controller.constants import (
    CONNECT_TIMEOUT_S,
    CONTROL_PLANE_CALLS_PER_S,
    READ_TIMEOUT_S,
    TICK_CALLS_PER_S,
    WAKE_UP_MAX_DELAY_S,
)
from controller.ledger import InMemoryLedger, encode_state
from controller.loop import ControlLoop
from controller.model import QueueState
from controller.policy import algorithm_named, memory_type
from controller.policy.adaptive import AdaptiveMemory
from controller.ports import WakeUpRequest
from controller.schema import CONTROLLER_NAMESPACE, CONTROLLER_SKIPPED, HealthMetric
from controller.settings import PolicyParams
from controller.wake_up_queue import (
    MAX_ENTRIES_PER_CALL,
    SCHEDULE_BUDGET_S,
    WAKE_UP_QUEUE_VARIABLE,
    SqsWakeUpScheduler,
)
from controller.wakeups import (
    WAKE_UP_UNREADABLE,
    delay_s,
    is_wake_up_batch,
    read_wake_up,
    wake_up_body,
)
from load.clock import HandClock
from tests.factories import config, health_count, mapped, state

URL = "https://sqs.eu-west-1.amazonaws.com/111122223333/queuemesh-wake-ups"
NOW = 1_790_000_000.0


def sqs_client() -> Any:
    # botocore's own retries off, as the controller's clients have them (controller.aws).
    return boto3.client(
        "sqs",
        region_name="eu-west-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(retries={"total_max_attempts": 1}),
    )


def scheduler(client: Any, clock: HandClock | None = None) -> SqsWakeUpScheduler:
    clock = clock or HandClock(100.0)
    return SqsWakeUpScheduler(URL, client, clock=clock, sleep=clock.sleep)


def requests(count: int, ahead_s: float = 15.0) -> list[WakeUpRequest]:
    return [WakeUpRequest(f"q{index:02d}", NOW + ahead_s + index) for index in range(count)]


def entries(chunk: list[WakeUpRequest]) -> list[dict[str, Any]]:
    return [
        {"Id": str(number), "MessageBody": wake_up_body(request), "DelaySeconds": delay}
        for number, request in enumerate(chunk)
        if (delay := delay_s(request.wake_at, NOW)) is not None
    ]


def sent(chunk: list[WakeUpRequest]) -> dict[str, Any]:
    return {
        "Successful": [
            {"Id": str(n), "MessageId": f"m{n}", "MD5OfMessageBody": "x"} for n in range(len(chunk))
        ],
        "Failed": [],
    }


def test_wake_ups_go_ten_a_call_each_held_back_its_delay() -> None:
    client = sqs_client()
    wanted = requests(23)
    with Stubber(client) as stub:
        for start in range(0, 23, MAX_ENTRIES_PER_CALL):
            chunk = wanted[start : start + MAX_ENTRIES_PER_CALL]
            stub.add_response(
                "send_message_batch", sent(chunk), {"QueueUrl": URL, "Entries": entries(chunk)}
            )
        assert scheduler(client).schedule(wanted, NOW, math.inf) == 0
        stub.assert_no_pending_responses()
    # Each delay is the shared rule's: never early, whole seconds.
    assert [entry["DelaySeconds"] for entry in entries(wanted[:3])] == [15, 16, 17]


def test_entries_sqs_reports_failed_are_not_taken() -> None:
    client = sqs_client()
    wanted = requests(3)
    answer = {
        "Successful": [{"Id": "1", "MessageId": "m1", "MD5OfMessageBody": "x"}],
        "Failed": [
            {"Id": "0", "SenderFault": False, "Code": "InternalError"},
            {"Id": "2", "SenderFault": True, "Code": "InvalidParameterValue"},
        ],
    }
    with Stubber(client) as stub:
        stub.add_response("send_message_batch", answer, {"QueueUrl": URL, "Entries": ANY})
        assert scheduler(client).schedule(wanted, NOW, math.inf) == 2


def test_a_call_that_fails_counts_its_wake_ups_and_the_next_call_goes_on() -> None:
    client = sqs_client()
    wanted = requests(12)
    with Stubber(client) as stub:
        stub.add_client_error("send_message_batch", "AccessDenied", http_status_code=403)
        stub.add_response(
            "send_message_batch", sent(wanted[10:]), {"QueueUrl": URL, "Entries": ANY}
        )
        assert scheduler(client).schedule(wanted, NOW, math.inf) == 10
        stub.assert_no_pending_responses()


def test_a_throttled_call_is_tried_once_more() -> None:
    client = sqs_client()
    wanted = requests(2)
    with Stubber(client) as stub:
        stub.add_client_error("send_message_batch", "RequestThrottled", http_status_code=400)
        stub.add_response("send_message_batch", sent(wanted), {"QueueUrl": URL, "Entries": ANY})
        assert scheduler(client).schedule(wanted, NOW, math.inf) == 0
        stub.assert_no_pending_responses()


def test_a_wake_up_past_the_longest_delay_is_not_sent_nor_counted() -> None:
    client = sqs_client()
    beyond = WakeUpRequest("far", NOW + WAKE_UP_MAX_DELAY_S + 1)
    near = WakeUpRequest("near", NOW + 0.2)
    with Stubber(client) as stub:
        stub.add_response(
            "send_message_batch",
            sent([near]),
            {"QueueUrl": URL, "Entries": [{"Id": "0", "MessageBody": ANY, "DelaySeconds": 1}]},
        )
        assert scheduler(client).schedule([beyond, near], NOW, math.inf) == 0
        assert scheduler(client).schedule([beyond], NOW, math.inf) == 0
        stub.assert_no_pending_responses()


def test_without_time_for_an_attempt_nothing_is_sent_and_all_is_counted() -> None:
    client = sqs_client()
    clock = HandClock(100.0)
    with Stubber(client) as stub:
        assert scheduler(client, clock).schedule(requests(12), NOW, clock.now + 1.0) == 12
        stub.assert_no_pending_responses()


class Unreachable:
    """A client whose every call fails as ``fault`` makes it fail, each attempt taking
    ``took_s`` of the clock (a hang: the read timeout)."""

    # The controller's client timeouts: no attempt starts that could not end in the budget.
    meta = SimpleNamespace(
        config=SimpleNamespace(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S)
    )

    def __init__(self, fault: str, clock: HandClock, took_s: float) -> None:
        self.fault = fault
        self.clock = clock
        self.took_s = took_s

    def send_message_batch(self, **_: Any) -> dict[str, Any]:
        self.clock.now += self.took_s
        if self.fault == "hang":
            raise ReadTimeoutError(endpoint_url=URL)
        if self.fault == "unreachable":
            raise EndpointConnectionError(endpoint_url=URL)
        status = 500 if self.fault == "InternalError" else 400
        error = {"Code": self.fault, "Message": "injected"}
        raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": status}}, "x")


@given(
    count=st.integers(0, 35),
    fault=st.sampled_from(
        ["hang", "unreachable", "InternalError", "RequestThrottled", "AccessDenied"]
    ),
    took_s=st.floats(0.0, READ_TIMEOUT_S),
)
def test_scheduling_never_raises_and_ends_within_its_budget(
    count: int, fault: str, took_s: float
) -> None:
    clock = HandClock(100.0)
    started = clock.now
    client = Unreachable(fault, clock, took_s)
    assert scheduler(client, clock).schedule(requests(count), NOW, math.inf) == count
    assert clock.now - started <= SCHEDULE_BUDGET_S


@given(
    queue=st.from_regex(r"[A-Za-z0-9_-]{1,75}(\.fifo)?", fullmatch=True),
    wake_at=st.floats(min_value=0, max_value=4e9, allow_nan=False),
)
def test_a_wake_up_reads_back_as_sent(queue: str, wake_at: float) -> None:
    request = WakeUpRequest(queue, wake_at)
    assert read_wake_up({"body": wake_up_body(request)}) == request


@pytest.mark.parametrize(
    "record",
    [
        {"body": "not json"},
        {"body": "[1, 2]"},
        {"body": json.dumps({"queue": "orders"})},
        {"body": json.dumps({"queue": "no spaces", "wake_at": 1.0})},
        {"body": json.dumps({"queue": "orders", "wake_at": "soon"})},
        {"body": json.dumps({"queue": "orders", "wake_at": True})},
        {"body": '{"queue": "orders", "wake_at": Infinity}'},
        {"body": None},
        {},
        "a string",
    ],
)
def test_anything_else_is_no_wake_up(record: object) -> None:
    with pytest.raises(ValueError):
        read_wake_up(record)


def sqs_record(body: str, message_id: str = "m1") -> dict[str, Any]:
    return {"messageId": message_id, "body": body, "eventSource": "aws:sqs"}


def test_only_an_sqs_batch_is_a_wake_up_batch() -> None:
    assert is_wake_up_batch({"Records": [sqs_record("{}")]})
    assert not is_wake_up_batch({"Records": [{"eventSource": "aws:kinesis"}]})
    assert not is_wake_up_batch({"Records": []})
    assert not is_wake_up_batch({"detail-type": "Scheduled Event"})


def paused_app(
    emitted: list[str], wake_at: float, ledger: InMemoryLedger | None = None
) -> tuple[ControllerApp, InMemoryActuator]:
    """A controller whose ledger (``ledger``, else an in-memory one) holds ``orders`` paused
    until ``wake_at``."""
    actuator = mapped(InMemoryActuator(), concurrency=2)
    ledger = ledger or InMemoryLedger(memory_types=memory_type)
    ledger.put_config(config("orders"))
    paused = state(2).evolve(
        enabled=False,
        wake_at=wake_at,
        paused_since=wake_at - 15.0,
        algorithm="adaptive",
        memory=AdaptiveMemory(paused_until=wake_at, pause_s=15.0),
    )
    ledger.put_item(encode_state(paused))
    actuator.apply("esm-orders", 2, enabled=False, deadline=math.inf)
    loop = ControlLoop(ledger, actuator, PolicyParams(), algorithm=algorithm_named("adaptive"))
    return ControllerApp(loop, clock=lambda: NOW, emit=emitted.append), actuator


def test_a_wake_up_runs_the_tick_and_resumes_the_due_queue() -> None:
    emitted: list[str] = []
    app, actuator = paused_app(emitted, wake_at=NOW - 0.5)
    body = wake_up_body(WakeUpRequest("orders", NOW - 0.5))
    answer = app.handle({"Records": [sqs_record(body)]}, None)
    assert answer == {"wake_ups": 1, "skipped": 0, "due": 1, "decided": 1}
    assert actuator.read("esm-orders", math.inf).enabled  # the pause's test of Cmin


def test_a_wake_up_resumes_its_queue_before_the_wake_ups_index_shows_it() -> None:
    """The index is eventually consistent: the queue a wake-up names is read directly."""

    class LaggingIndex(InMemoryLedger):
        def due_states(self, now: float) -> list[QueueState]:
            return []

    emitted: list[str] = []
    lagging = LaggingIndex(memory_types=memory_type)
    app, actuator = paused_app(emitted, wake_at=NOW - 0.5, ledger=lagging)
    assert app.tick(math.inf).due == 0  # the scheduled tick reads the index alone
    body = wake_up_body(WakeUpRequest("orders", NOW - 0.5))
    answer = app.handle({"Records": [sqs_record(body)]}, None)
    assert answer == {"wake_ups": 1, "skipped": 0, "due": 1, "decided": 1}
    assert actuator.read("esm-orders", math.inf).enabled


def test_a_message_that_is_no_wake_up_is_skipped_counted_and_never_fails_the_batch() -> None:
    emitted: list[str] = []
    app, actuator = paused_app(emitted, wake_at=NOW - 0.5)
    junk = {"Records": [sqs_record("hello", "m1"), sqs_record("{}", "m2")]}
    assert app.handle(junk, None) == {"wake_ups": 0, "skipped": 2, "due": 0, "decided": 0}
    assert not actuator.read("esm-orders", math.inf).enabled  # no tick ran for junk alone
    documents = [json.loads(line) for line in emitted]
    skipped = [
        d
        for d in documents
        if d.get("Reason") == WAKE_UP_UNREADABLE
        and d["_aws"]["CloudWatchMetrics"][0]["Namespace"] == CONTROLLER_NAMESPACE
    ]
    assert [d[CONTROLLER_SKIPPED] for d in skipped] == [[2]]
    # Beside a wake-up, the tick runs for it.
    body = wake_up_body(WakeUpRequest("orders", NOW - 0.5))
    mixed = {"Records": [sqs_record("hello", "m3"), sqs_record(body, "m4")]}
    assert app.handle(mixed, None) == {"wake_ups": 1, "skipped": 1, "due": 1, "decided": 1}


def test_wake_ups_the_scheduler_refuses_are_a_health_count() -> None:
    class Refusing:
        def schedule(self, wanted: Any, now: float, deadline: float) -> int:
            return len(wanted)

    emitted: list[str] = []
    app, _ = paused_app(emitted, wake_at=NOW - 0.5)
    app.loop.wake_ups = Refusing()
    app.handle({"detail-type": "Scheduled Event"}, None)  # the test pulse asks for its end
    documents = [json.loads(line) for line in emitted]
    assert health_count(documents, HealthMetric.WAKE_UPS_UNSCHEDULED) == 1


def test_the_controller_schedules_wake_ups_where_its_environment_names_the_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The AWS clients are built (never called) at the cold start.
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    env = {"QUEUEMESH_TABLE": "ledger"}
    assert handler.build_app(env).loop.wake_ups is None
    wired = handler.build_app({**env, WAKE_UP_QUEUE_VARIABLE: URL}).loop.wake_ups
    assert isinstance(wired, SqsWakeUpScheduler) and wired.queue_url == URL


@given(st.integers(1, 10), st.integers(1, 10), st.booleans())
def test_every_invocation_that_may_run_at_once_keeps_the_account_within_its_ceiling(
    shards: int, factor: int, wake_up_queue: bool
) -> None:
    env = {
        "QUEUEMESH_REDUCED_SHARDS": str(shards),
        "QUEUEMESH_CONTROLLER_PARALLELIZATION": str(factor),
    }
    if wake_up_queue:
        env[WAKE_UP_QUEUE_VARIABLE] = URL
    wake_up = {"Records": [sqs_record("{}")]}
    rate = {
        name: calls / per_s
        for name, (calls, per_s) in {
            "lane": handler.invocation_pace({"Records": []}, env),
            "tick": handler.invocation_pace({"detail-type": "Scheduled Event"}, env),
            "wake_up": handler.invocation_pace(wake_up, env),
        }.items()
    }
    # A wake-up invocation runs the tick and paces as one of the tick's runners.
    assert rate["wake_up"] == rate["tick"]
    tick_runners = handler.tick_runners(env)
    assert tick_runners == (3 if wake_up_queue else 1)
    assert tick_runners * rate["tick"] == pytest.approx(TICK_CALLS_PER_S)
    total = shards * factor * rate["lane"] + tick_runners * rate["tick"]
    assert total <= CONTROL_PLANE_CALLS_PER_S + 1e-9
