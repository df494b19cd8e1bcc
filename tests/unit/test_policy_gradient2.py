"""gradient2: Gradient2Limit's rule, one windowed sample a decision (docs/algorithms.md)."""

from __future__ import annotations

import pytest

from controller.model import QueueStateName
from controller.policy.base import Verdict
from controller.policy.gradient2 import Gradient2Memory
from controller.settings import PolicyParams
from controller.window import WindowStats
from tests.netflix_cases import evidence, judged

PARAMS = PolicyParams()
BUSY = {"busy_ms": 20_000.0}  # about 6.9 in use
IDLE = {"busy_ms": 1_000.0}  # 1.0 in use
# A limit of 10 whose long round trip (100 ms) is warm.
WARM = Gradient2Memory(estimated_limit=10.0, long_rtt_ms=100.0, long_count=10, long_sum_ms=1000.0)
FACTOR = 2.0 / 601


def gradient2(
    stats: WindowStats, memory: Gradient2Memory = WARM, concurrency: int = 10
) -> Verdict[Gradient2Memory]:
    return judged("gradient2", stats, memory, concurrency)


def test_steady_latency_grows_the_limit_by_a_fifth_of_the_queue_size() -> None:
    first = gradient2(evidence(rtt_ms=100.0, **BUSY))
    assert first.memory.estimated_limit == pytest.approx(10.8)
    assert first.target == 10
    second = gradient2(evidence(rtt_ms=100.0, **BUSY), first.memory)
    assert (second.target, second.state) == (11, QueueStateName.RECOVERING)


def test_a_doubled_round_trip_cuts_by_the_gradient_smoothed() -> None:
    verdict = gradient2(evidence(rtt_ms=200.0, **BUSY))
    long = 100.0 * (1 - FACTOR) + 200.0 * FACTOR
    gradient = long / 200.0
    expected = 10 * 0.8 + (10 * gradient + 4) * 0.2
    assert verdict.memory.long_rtt_ms == pytest.approx(long)
    assert verdict.memory.estimated_limit == pytest.approx(expected)
    assert (verdict.target, verdict.state) == (9, QueueStateName.THROTTLED)


def test_the_gradient_is_never_below_a_half() -> None:
    verdict = gradient2(evidence(rtt_ms=10_000.0, **BUSY))
    assert verdict.memory.estimated_limit == pytest.approx(10 * 0.8 + (10 * 0.5 + 4) * 0.2)


def test_the_long_round_trip_warms_up_as_a_plain_average() -> None:
    verdict = gradient2(evidence(rtt_ms=300.0, **BUSY), Gradient2Memory(), concurrency=10)
    assert verdict.memory.long_rtt_ms == 300.0
    second = gradient2(evidence(rtt_ms=100.0, **BUSY), verdict.memory)
    assert (second.memory.long_count, second.memory.long_rtt_ms) == (2, 200.0)


def test_a_long_round_trip_over_twice_the_short_one_decays_by_a_tenth() -> None:
    memory = Gradient2Memory(10.0, long_rtt_ms=500.0, long_count=10, long_sum_ms=5000.0)
    verdict = gradient2(evidence(rtt_ms=100.0, **IDLE), memory)
    expected = (500.0 * (1 - FACTOR) + 100.0 * FACTOR) * 0.9
    assert verdict.memory.long_rtt_ms == pytest.approx(expected)
    assert verdict.target == 10  # under half in use: the limit holds


def test_it_never_raises_on_pressure_at_or_above_t1() -> None:
    # Gradient2 reads no drops: fast 429s alone would let it grow (docs/algorithms.md).
    memory = Gradient2Memory(10.9, long_rtt_ms=100.0, long_count=10, long_sum_ms=1000.0)
    verdict = gradient2(evidence(rtt_ms=100.0, dropped=1, **BUSY), memory)
    assert verdict.target == 10
    assert verdict.memory.estimated_limit == 10.9


def test_without_latency_it_holds() -> None:
    verdict = gradient2(evidence(rtt_ms=None, **BUSY))
    assert (verdict.target, verdict.memory) == (10, WARM)
