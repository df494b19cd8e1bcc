from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError
from hypothesis import given, settings
from hypothesis import strategies as st

from load.announce import HeaderStyle
from load.downstream import Downstream
from load.sim.scenario import DownstreamSpec, Schedule
from tests.worker_support import (  # noqa: F401 (fixtures)
    decoded,
    instrumentation,
    load_event,
    worker_output,
)
from worker import wrapper


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def call(url: str) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, data=b"{}", timeout=5) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers)


SPEC = DownstreamSpec(
    name="payments", capacity_rps=((0, 3), (10, 1), (20, 3)), latency_ms=((0, 40),)
)
# A legacy database: latency grows with the calls in progress, never a 429.
SLOW_DATABASE = DownstreamSpec(
    name="legacy-db",
    capacity_rps=((0, 10),),
    latency_ms=((0, 40),),
    latency_model="queueing",
    answers_429=False,
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def downstream(clock: FakeClock, sleeps: list[float]) -> Iterator[Downstream]:
    with Downstream(SPEC, clock=clock, sleep=sleeps.append) as server:
        yield server


def test_admits_capacity_per_second_then_answers_429_with_retry_after(
    downstream: Downstream, clock: FakeClock
) -> None:
    clock.now = 4.25
    statuses = [call(downstream.url) for _ in range(5)]
    assert [status for status, _ in statuses] == [200, 200, 200, 429, 429]
    assert statuses[3][1]["Retry-After"] == "1"
    clock.now = 5.0
    assert call(downstream.url)[0] == 200
    counters = downstream.counters()
    assert (counters.per_second[4].ok, counters.per_second[4].rejected) == (3, 2)
    assert (counters.ok, counters.rejected, counters.total) == (4, 2, 6)


def test_capacity_follows_the_schedule_and_records_first_rejection_after_a_drop(
    downstream: Downstream, clock: FakeClock
) -> None:
    clock.now = 10.5
    assert [call(downstream.url)[0] for _ in range(2)] == [200, 429]
    clock.now = 20.2
    assert [call(downstream.url)[0] for _ in range(4)] == [200, 200, 200, 429]
    assert downstream.counters().first_rejection_after_drop == {10.0: 10.5}


def test_every_answer_takes_the_configured_latency(
    downstream: Downstream, clock: FakeClock, sleeps: list[float]
) -> None:
    clock.now = 10.0
    call(downstream.url)
    call(downstream.url)
    assert sleeps == [0.04, 0.04]


def test_answers_json_and_concurrent_calls_are_counted_exactly(
    downstream: Downstream, clock: FakeClock
) -> None:
    clock.now = 30.0
    results: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        status, _ = call(downstream.url)
        with lock:
            results.append(status)

    threads = [threading.Thread(target=worker) for _ in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(results) == [200] * 3 + [429] * 9
    with pytest.raises(urllib.error.HTTPError) as rejected:
        urllib.request.urlopen(downstream.url, timeout=5)
    assert json.loads(rejected.value.read()) == {"ok": False, "error": "over capacity"}
    rejected.value.close()


def test_stop_releases_the_port_and_the_threads() -> None:
    before = set(threading.enumerate())
    server = Downstream(SPEC).start()
    port = server.port
    assert call(server.url)[0] == 200
    server.stop()
    assert set(threading.enumerate()) <= before
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 1):
        pass


@settings(max_examples=50)
@given(
    st.lists(
        st.tuples(st.integers(1, 100), st.integers(0, 50)),
        min_size=0,
        max_size=6,
        unique_by=lambda s: s[0],
    ),
    st.integers(0, 50),
    st.floats(0, 120),
)
def test_capacity_holds_the_last_step_at_or_before_t(
    later: list[tuple[int, int]], first: int, t: float
) -> None:
    steps: Schedule = tuple(
        sorted((float(start), float(value)) for start, value in [(0, first), *later])
    )
    server = Downstream(DownstreamSpec(name="api", capacity_rps=steps, latency_ms=((0, 1),)))
    expected = max((step for step in steps if step[0] <= t), key=lambda step: step[0])[1]
    assert server.capacity_at(t) == expected


def test_queueing_latency_grows_with_the_calls_in_progress_and_falls_as_they_end(
    clock: FakeClock, sleeps: list[float]
) -> None:
    with Downstream(SLOW_DATABASE, clock=clock, sleep=sleeps.append) as server:
        clock.now = 1.0
        for _ in range(4):
            assert call(server.url)[0] == 200
        # no-load + in progress / capacity: 40 ms, then 100 ms more per call still being served.
        assert sleeps == pytest.approx([0.04, 0.14, 0.24, 0.34])
        clock.now = 1.5  # every one of them is done by now
        call(server.url)
        assert sleeps[-1] == pytest.approx(0.04)


def test_latency_grows_with_concurrent_load_over_real_http() -> None:
    held: list[float] = []
    lock = threading.Lock()

    def hold(seconds: float) -> None:
        with lock:
            held.append(seconds)
        time.sleep(seconds)

    callers = 8
    start = threading.Barrier(callers)
    statuses: list[int] = []

    with Downstream(SLOW_DATABASE, sleep=hold) as server:

        def caller() -> None:
            start.wait(timeout=10)
            status, _ = call(server.url)
            with lock:
                statuses.append(status)

        threads = [threading.Thread(target=caller) for _ in range(callers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=20)

    assert statuses == [200] * callers
    assert min(held) == pytest.approx(0.04)
    # Calls that overlap wait behind each other (each served call is 40 ms or longer, so at
    # least a few of eight simultaneous callers overlap however the machine schedules them).
    assert max(held) >= 0.04 + 3 / 10


def test_a_downstream_that_never_answers_429_serves_every_call_beyond_its_capacity(
    clock: FakeClock, sleeps: list[float]
) -> None:
    with Downstream(SLOW_DATABASE, clock=clock, sleep=sleeps.append) as server:
        clock.now = 2.0
        statuses = [call(server.url)[0] for _ in range(25)]
        counters = server.counters()
    assert statuses == [200] * 25
    assert (counters.ok, counters.rejected, counters.timed_out) == (25, 0, 0)
    # Beyond capacity it is slow instead: the 25th call waits behind 24.
    assert sleeps[-1] == pytest.approx(0.04 + 24 / 10)


def _wait_for(condition: Callable[[], bool]) -> None:
    for _ in range(100):
        if condition():
            return
        time.sleep(0.05)


SLOW = DownstreamSpec(name="slow", capacity_rps=((0, 100),), latency_ms=((0, 400),))


def test_a_client_that_gives_up_before_the_answer_is_counted_as_timed_out() -> None:
    with Downstream(SLOW) as server:
        with pytest.raises(TimeoutError):
            urllib.request.urlopen(server.url, data=b"{}", timeout=0.05)
        _wait_for(lambda: server.counters().total == 1)
        counters = server.counters()
    assert (counters.ok, counters.rejected, counters.timed_out) == (0, 0, 1)


def test_the_example_worker_times_out_at_its_timeout_and_reports_a_downstream_timeout(
    monkeypatch: pytest.MonkeyPatch,
    instrumentation: None,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    event = load_event("sqs_mixed_answers.json")
    event["Records"] = event["Records"][:1]
    with Downstream(SLOW) as server:
        monkeypatch.setenv("QUEUEMESH_HANDLER", "worker.example.app.handler")
        monkeypatch.setenv("DOWNSTREAM_URL", server.url)
        monkeypatch.setenv("DOWNSTREAM_TIMEOUT_MS", "50")
        monkeypatch.setattr(wrapper, "_app_handler", None)

        # Every record of the batch failed: powertools fails the whole batch, so it returns.
        with pytest.raises(BatchProcessingError, match="Read timed out"):
            wrapper.handler(event, None)

        _wait_for(lambda: server.counters().total == 1)
        counters = server.counters()
    (sample,) = decoded(worker_output(capsys))
    assert (sample.requests, sample.ok, sample.timed_out) == (1, 0, 1)
    assert counters.timed_out == 1


def _sample_of_calls(url: str, calls: int, capsys: pytest.CaptureFixture[str]) -> Any:
    """The decoded sample of an invocation of the worker making ``calls`` calls to ``url``."""
    event = load_event("sqs_mixed_answers.json")
    wrapper.invoke(lambda e, c: [call(url) for _ in range(calls)], event, None)
    (sample,) = decoded(worker_output(capsys))
    return sample


# The window each style announces (X-RateLimit has no field for it), and the most its reset,
# rounded up to whole seconds, may lie past the window's end.
ANNOUNCED_WINDOW = {
    HeaderStyle.IETF: 1.0,
    HeaderStyle.IETF_LEGACY: 1.0,
    HeaderStyle.X_RATELIMIT: None,
    HeaderStyle.GITHUB: None,
}


@pytest.mark.usefixtures("instrumentation")
@pytest.mark.parametrize("style", list(ANNOUNCED_WINDOW))
def test_the_announced_limit_reaches_the_worker_over_http_in_every_style(
    style: HeaderStyle, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    clock.now = 4.25  # capacity 3 a second: the window ends in 0.75 s
    with Downstream(SPEC, clock=clock, sleep=lambda _: None, announce=style) as server:
        sample = _sample_of_calls(server.url, 2, capsys)

    assert (sample.ok, sample.quota_remaining, sample.quota_limit) == (2, 1, 3)
    assert sample.quota_window_s == ANNOUNCED_WINDOW[style]
    # Whole seconds, rounded up: the window's end, at most a second later.
    assert 0.0 < sample.quota_reset_s <= 2.001  # the timestamp is in whole ms


@pytest.mark.usefixtures("instrumentation")
def test_a_longer_window_announces_and_admits_capacity_times_window(
    clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    clock.now = 4.25  # the window of 2 s from 4 to 6: 1.75 s left, announced as 2
    with Downstream(
        SPEC, clock=clock, sleep=lambda _: None, announce=HeaderStyle.IETF, window_s=2
    ) as server:
        sample = _sample_of_calls(server.url, 8, capsys)

    assert (sample.ok, sample.throttled) == (6, 2)
    assert (sample.quota_remaining, sample.quota_limit, sample.quota_window_s) == (0, 6, 2)
    assert sample.quota_reset_s is not None
    assert 1.0 < sample.quota_reset_s <= 2.001  # the timestamp is in whole ms


@pytest.mark.usefixtures("instrumentation")
def test_the_stripe_style_names_a_rate_limit_on_each_429(
    clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    clock.now = 4.25
    with Downstream(SPEC, clock=clock, sleep=lambda _: None, announce=HeaderStyle.STRIPE) as s:
        assert "Stripe-Rate-Limited-Reason" not in call(s.url)[1]
        sample = _sample_of_calls(s.url, 4, capsys)

    assert (sample.ok, sample.throttled) == (2, 2)
    assert (sample.throttled_rate, sample.throttled_concurrency) == (2, 0)
    assert sample.quota_remaining is None


def test_a_window_must_be_a_whole_number_of_seconds() -> None:
    with pytest.raises(ValueError, match="window_s"):
        Downstream(SPEC, announce=HeaderStyle.IETF, window_s=0)
