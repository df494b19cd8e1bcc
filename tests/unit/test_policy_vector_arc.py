"""vector-arc: Vector's adaptive request concurrency, one windowed sample a decision
(docs/algorithms.md)."""

from __future__ import annotations

import pytest

from controller.model import QueueStateName
from controller.policy.base import Verdict
from controller.policy.vector_arc import ArcMemory
from controller.window import WindowStats
from tests.netflix_cases import evidence, judged

BUSY = {"busy_ms": 20_000.0}  # about 6.9 in use: a limit of 7 is reached
IDLE = {"busy_ms": 1_000.0}  # 1.0 in use
# A past round trip of 100 ms give or take 4 (a deviation threshold of 10 ms).
STEADY = ArcMemory(rtt_mean_ms=100.0, rtt_variance=16.0)


def arc(stats: WindowStats, memory: ArcMemory = STEADY, concurrency: int = 7) -> Verdict[ArcMemory]:
    return judged("vector-arc", stats, memory, concurrency)


class TestVectorArc:
    def test_the_first_round_trip_only_starts_the_average(self) -> None:
        verdict = arc(evidence(rtt_ms=80.0, **BUSY), ArcMemory())
        assert (verdict.target, verdict.memory) == (7, ArcMemory(80.0, 0.0))

    def test_a_reached_limit_answered_fast_and_clean_grows_by_one(self) -> None:
        verdict = arc(evidence(rtt_ms=100.0, **BUSY))
        assert (verdict.target, verdict.state) == (8, QueueStateName.RECOVERING)

    def test_a_limit_not_reached_is_no_evidence_for_more(self) -> None:
        assert arc(evidence(rtt_ms=90.0, **IDLE)).target == 7
        assert arc(evidence(rtt_ms=90.0, **BUSY), concurrency=10).target == 10

    @pytest.mark.parametrize(("limit", "cut"), [(100, 90), (7, 6), (3, 2)])
    def test_back_pressure_cuts_by_the_decrease_ratio(self, limit: int, cut: int) -> None:
        verdict = arc(evidence(rtt_ms=90.0, dropped=1, **BUSY), concurrency=limit)
        assert (verdict.target, verdict.state) == (cut, QueueStateName.THROTTLED)
        timed_out = arc(evidence(rtt_ms=90.0, timed_out=1, **BUSY), concurrency=limit)
        assert timed_out.target == cut

    def test_any_server_error_is_back_pressure_as_vector_retries_it(self) -> None:
        # A 500 is no drop to the shared sample (only 503s are), but Vector retries every 5xx.
        verdict = arc(evidence(rtt_ms=90.0, failed=1, **BUSY), concurrency=10)
        assert (verdict.target, verdict.state) == (9, QueueStateName.THROTTLED)

    def test_a_round_trip_past_the_deviation_threshold_cuts(self) -> None:
        assert arc(evidence(rtt_ms=110.0, **IDLE)).target == 6
        assert arc(evidence(rtt_ms=109.0, **IDLE)).target == 7

    def test_the_past_round_trip_is_an_exponential_mean_and_variance(self) -> None:
        verdict = arc(evidence(rtt_ms=150.0, **IDLE), ArcMemory(100.0, 0.0))
        # West's recurrence with alpha 0.4: the difference 50, the increment 20.
        assert verdict.memory == ArcMemory(120.0, pytest.approx(0.6 * 50 * 20))

    def test_without_latency_only_back_pressure_moves_it(self) -> None:
        assert arc(evidence(rtt_ms=None, **BUSY)).target == 7
        assert arc(evidence(rtt_ms=None, **BUSY)).memory == STEADY
        assert arc(evidence(rtt_ms=None, dropped=1, **BUSY)).target == 6
