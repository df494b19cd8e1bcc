from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.window import QueueWindow
from tests.factories import sample


def test_samples_land_by_invocation_start_not_arrival_order() -> None:
    window = QueueWindow()
    window.add(sample(at=110.5, ok=5, invocation_ms=500))  # started at 110.0
    window.add(sample(at=101.2, ok=0, throttled=4, invocation_ms=1200))  # late, started 100.0
    early = window.stats(100.0, 101.0)
    assert (early.requests, early.throttled) == (4, 4)
    late = window.stats(110.0, 111.0)
    assert (late.requests, late.ok) == (5, 5)


def test_a_bucket_straddling_since_is_left_out() -> None:
    window = QueueWindow()
    window.add(sample(at=100.9, invocation_ms=100))  # started at 100.8
    assert window.stats(100.5, 200.0).samples == 0
    assert window.stats(100.0, 200.0).samples == 1


def test_in_use_is_busy_time_over_elapsed_time() -> None:
    window = QueueWindow()
    for second in range(10):
        for _ in range(3):
            window.add(sample(at=100 + second + 0.9, invocation_ms=900))
    stats = window.stats(100.0, 110.0)
    in_use = stats.in_use(10.0)
    assert in_use is not None
    assert abs(in_use - 2.7) < 1e-9


def test_samples_older_than_retention_are_dropped_and_counted() -> None:
    window = QueueWindow(retention_s=60)
    window.add(sample(at=1000.0))
    assert not window.add(sample(at=900.0))
    assert window.dropped_too_old == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=5000, allow_nan=False), max_size=300))
def test_memory_stays_bounded_by_retention(times: list[float]) -> None:
    window = QueueWindow(retention_s=30)
    for at in times:
        window.add(sample(at=at, invocation_ms=None))
    newest = max(times, default=0.0)
    assert len(window) <= 32
    assert window.stats(-1e9, newest - 31).samples == 0
    kept = window.stats(-1e9, 1e9).samples
    assert kept + window.dropped_too_old <= len(times)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 60, allow_nan=False), st.integers(0, 9)), max_size=80),
    st.floats(-5, 65, allow_nan=False),
    st.floats(0, 70, allow_nan=False),
)
def test_a_snapshot_reads_as_the_window_did_when_it_was_taken(
    found: list[tuple[float, int]], since: float, span: float
) -> None:
    window = QueueWindow()
    for at, throttled in found:
        window.add(sample(at=100 + at, ok=9 - throttled, throttled=throttled))
    snapshot = window.snapshot()
    assert snapshot.stats(100 + since, 100 + since + span) == window.stats(
        100 + since, 100 + since + span
    )
    seconds = [second for second, _ in snapshot.seconds(-1e9, 1e9)]
    assert seconds == sorted(seconds) and len(seconds) == len(window)
    for second, bucket in snapshot.seconds(-1e9, 1e9):
        assert bucket == window.stats(second, second + 1)
    window.add(sample(at=100 + span, ok=0, throttled=10))
    assert snapshot.stats(-1e9, 1e9).requests == 9 * len(found)
    assert window.stats(-1e9, 1e9).requests == 9 * len(found) + 10


def test_stats_and_their_seconds_are_frozen() -> None:
    window = QueueWindow()
    window.add(sample(at=100.9, ok=10))
    stats = window.stats(100.0, 101.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.ok = 0  # type: ignore[misc]
    ((_, bucket),) = window.snapshot().seconds(100.0, 101.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        bucket.ok = 0  # type: ignore[misc]
    assert window.stats(100.0, 101.0).ok == 10
