from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import Sample
from controller.window import QueueWindow, Quota, calls_per_invocation_second
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


@settings(max_examples=60)
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


@settings(max_examples=60)
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
    start, end = 100 + since, 100 + since + span
    every = snapshot.seconds(-1e9, 1e9)
    assert snapshot.seconds(start, end) == tuple(b for b in every if start <= b[0] < end)
    # The newest report, read without adding every bucket up.
    assert snapshot.newest_event_time() == window.stats(-1e9, 1e9).newest_event_time
    assert snapshot.newest_event_time(start, end) == window.stats(start, end).newest_event_time
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


# --- announced quotas -------------------------------------------------------------------------
def announcing(at: float, remaining: float, limit: float = 600.0, reset_s: float = 30.0) -> Sample:
    return dataclasses.replace(
        sample(at=at),
        downstream="api",
        quota_remaining=remaining,
        quota_limit=limit,
        quota_window_s=60.0,
        quota_reset_s=reset_s,
    )


def test_the_window_keeps_the_newest_quota_by_event_time_not_arrival() -> None:
    window = QueueWindow()
    window.add(announcing(1002.0, remaining=100.0))
    window.add(announcing(1001.0, remaining=300.0))
    assert window.quota is not None
    assert (window.quota.remaining, window.quota.reset_at) == (100.0, 1032.0)
    window.add(sample(at=1003.0))
    assert window.quota.event_time == 1002.0


def test_a_quota_sustains_its_remaining_until_the_reset_then_its_steady_rate() -> None:
    quota = Quota.announced_by(announcing(1000.0, remaining=30.0, reset_s=60.0))
    assert quota is not None and quota.steady_rate == 10.0
    # 30 calls over the 60 s left: 0.5 a second until the reset, the quota's 10 after it.
    assert quota.sustained_rate(1010.0) == 0.5
    assert quota.resets_after(1010.0)
    assert quota.sustained_rate(1060.0) == 10.0
    assert not quota.resets_after(1060.0)
    # Plenty left: the steady rate binds.
    plenty = Quota.announced_by(announcing(1000.0, remaining=590.0, reset_s=10.0))
    assert plenty is not None and plenty.sustained_rate(1001.0) == 10.0
    assert Quota.announced_by(sample()) is None


def test_a_quota_older_than_the_retention_is_forgotten() -> None:
    window = QueueWindow(retention_s=60.0)
    window.add(announcing(1000.0, remaining=10.0))
    window.add(sample(at=1100.0))
    assert window.quota is None


def test_the_kinds_of_429s_add_up_with_the_rest() -> None:
    window = QueueWindow()
    window.add(dataclasses.replace(sample(at=1000.5, ok=6, throttled=4), throttled_rate=3))
    window.add(dataclasses.replace(sample(at=1000.7, ok=8, throttled=2), throttled_concurrency=2))
    stats = window.stats(0, 2000)
    assert (stats.throttled, stats.throttled_rate, stats.throttled_concurrency) == (6, 3, 2)


def test_the_pace_is_calls_per_invocation_over_the_timed_invocations_mean_duration() -> None:
    window = QueueWindow()
    window.add(sample(at=100.8, ok=10, invocation_ms=800))  # 12.5 calls a second
    window.add(sample(at=101.4, ok=4, throttled=6, invocation_ms=400))  # 25: refused calls count
    # A document without its duration adds its calls and invocation, not a duration.
    window.add(sample(at=102.5, ok=10, invocation_ms=None))
    stats = window.stats(100.0, 103.0)
    # 30 calls over 3 invocations, each 0.6 s on average.
    assert stats.invocation_pace == pytest.approx(10 / 0.6)
    assert calls_per_invocation_second(30, 3, 1200.0, 2) == stats.invocation_pace
    untimed = QueueWindow()
    untimed.add(sample(at=100.5, invocation_ms=None))
    assert untimed.stats(100.0, 101.0).invocation_pace is None
    assert QueueWindow().stats(100.0, 101.0).invocation_pace is None
