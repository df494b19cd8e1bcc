from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from load.downstream import Downstream, DownstreamSpec, Schedule


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


SPEC = DownstreamSpec.from_scenario(
    {"name": "payments", "capacity_rps": [[0, 3], [10, 1], [20, 3]], "latency_ms": 40}
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


@settings(max_examples=50, deadline=None)
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
def test_schedule_holds_the_last_step_at_or_before_t(
    later: list[tuple[int, int]], first: int, t: float
) -> None:
    steps = [(0, first), *later]
    schedule = Schedule.parse(steps, "capacity_rps")
    expected = max((step for step in steps if step[0] <= t), key=lambda step: step[0])[1]
    assert schedule.at(t) == expected
    for drop in schedule.drops():
        assert schedule.at(drop) < schedule.at(drop - 1e-9)


def test_schedule_rejects_what_is_not_a_schedule() -> None:
    with pytest.raises(ValueError, match="start at t=0"):
        Schedule.parse([[5, 1]], "capacity_rps")
    with pytest.raises(ValueError, match="pairs"):
        Schedule.parse([["x", 1]], "capacity_rps")
