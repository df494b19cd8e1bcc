from __future__ import annotations

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
