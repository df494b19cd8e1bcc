"""vegas: VegasLimit's rule, one windowed sample a decision (docs/algorithms.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controller.policy.base import Verdict
from controller.policy.netflix import log10_root
from controller.policy.vegas import VegasMemory, _probe_jitter
from controller.settings import PolicyParams
from controller.window import WindowStats
from tests.netflix_cases import evidence, judged

PARAMS = PolicyParams()
BUSY = {"busy_ms": 20_000.0}  # about 6.9 in use
IDLE = {"busy_ms": 1_000.0}  # 1.0 in use
# A limit of 10 that knows its no-load round trip (100 ms).
KNOWN = VegasMemory(estimated_limit=10.0, rtt_noload_ms=100.0)


def vegas(
    stats: WindowStats, memory: VegasMemory = KNOWN, concurrency: int = 10
) -> Verdict[VegasMemory]:
    return judged("vegas", stats, memory, concurrency)


def test_the_first_round_trip_is_the_no_load_one_and_holds() -> None:
    verdict = vegas(evidence(rtt_ms=80.0, **BUSY), VegasMemory(), concurrency=40)
    assert verdict.target == 40
    assert verdict.memory == VegasMemory(40.0, 80.0, probe_count=1)


def test_a_shorter_round_trip_replaces_the_no_load_one() -> None:
    verdict = vegas(evidence(rtt_ms=50.0, **BUSY))
    assert (verdict.target, verdict.memory.rtt_noload_ms) == (10, 50.0)


@pytest.mark.parametrize(
    ("rtt_ms", "limit"),
    [
        (100.0, 16),  # queue 0 <= threshold 1: + beta (6)
        (125.0, 11),  # queue 2 < alpha 3: + log10 (1)
        (200.0, 10),  # queue 5 within alpha..beta: hold
        (1000.0, 9),  # queue 9 > beta 6: - log10 (1)
    ],
)
def test_the_queue_it_builds_moves_the_limit(rtt_ms: float, limit: int) -> None:
    verdict = vegas(evidence(rtt_ms=rtt_ms, **BUSY))
    assert verdict.target == limit
    assert verdict.memory.estimated_limit == limit


def test_a_drop_takes_off_log10_of_the_limit() -> None:
    assert vegas(evidence(dropped=1, **BUSY)).target == 9
    memory = replace(KNOWN, estimated_limit=100.0)
    assert vegas(evidence(timed_out=1, **IDLE), memory, concurrency=100).target == 98


def test_under_half_in_use_and_clean_it_holds() -> None:
    assert vegas(evidence(rtt_ms=100.0, **IDLE)).target == 10


def test_the_probe_takes_the_current_round_trip_as_no_load_and_restarts_counting() -> None:
    memory = replace(KNOWN, probe_count=10 * 30)  # past any jitter x 30 x limit
    verdict = vegas(evidence(rtt_ms=400.0, **BUSY), memory)
    assert verdict.target == 10
    assert verdict.memory == replace(KNOWN, rtt_noload_ms=400.0, probe_count=0, probes=1)


def test_the_probe_jitter_is_in_range_and_the_same_for_the_same_queue_and_probe() -> None:
    draws = [_probe_jitter("orders", probe) for probe in range(50)]
    assert all(0.5 <= draw < 1.0 for draw in draws)
    assert draws == [_probe_jitter("orders", probe) for probe in range(50)]
    assert len(set(draws)) > 1


def test_without_latency_it_holds() -> None:
    verdict = vegas(evidence(rtt_ms=None, **BUSY))
    assert (verdict.target, verdict.memory) == (10, KNOWN)


def test_a_limit_the_mapping_no_longer_has_restarts_from_the_mapping() -> None:
    verdict = vegas(evidence(rtt_ms=100.0, busy_ms=200_000.0), KNOWN, concurrency=15)
    assert verdict.target == 15 + 6 * log10_root(15)
