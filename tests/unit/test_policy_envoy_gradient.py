"""envoy-gradient: Envoy's adaptive concurrency gradient controller, one windowed sample a
decision (docs/algorithms.md)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from controller.model import QueueStateName
from controller.policy.base import Verdict
from controller.policy.envoy_gradient import EnvoyGradientMemory, _jitter
from controller.window import WindowStats
from tests.netflix_cases import evidence, judged

NOW = 2000.0  # when tests.netflix_cases judges
# A minRTT of 100 ms, measured once, the next measurement a while off.
MEASURED = EnvoyGradientMemory(min_rtt_ms=100.0, next_measure_at=NOW + 30.0, measurements=1)
MEASURING = EnvoyGradientMemory(deferred_limit=40)


def envoy(
    stats: WindowStats, memory: EnvoyGradientMemory = MEASURED, concurrency: int = 10
) -> Verdict[EnvoyGradientMemory]:
    return judged("envoy-gradient", stats, memory, concurrency)


class TestEnvoyGradient:
    @pytest.mark.parametrize(
        ("rtt_ms", "expected"),
        [
            (125.0, math.floor(10 + math.sqrt(10))),  # at minRTT + buffer: gradient 1
            (250.0, math.floor(5 + math.sqrt(5))),  # twice that: 0.5
            (10_000.0, math.floor(5 + math.sqrt(5))),  # never under 0.5
            (50.0, math.floor(20 + math.sqrt(20))),  # never over 2
        ],
    )
    def test_the_limit_scales_by_the_gradient_plus_its_square_root(
        self, rtt_ms: float, expected: int
    ) -> None:
        verdict = envoy(evidence(rtt_ms=rtt_ms))
        assert verdict.target == expected
        assert verdict.memory == MEASURED

    def test_the_first_decision_measures_the_min_rtt_at_the_probe_concurrency(self) -> None:
        verdict = envoy(evidence(), EnvoyGradientMemory(), concurrency=40)
        assert (verdict.target, verdict.state) == (3, QueueStateName.THROTTLED)
        assert verdict.memory == EnvoyGradientMemory(deferred_limit=40)

    def test_the_measurement_waits_for_its_calls_then_goes_back(self) -> None:
        waiting = envoy(evidence(rtt_ms=80.0, calls=4), MEASURING, concurrency=3)
        assert (waiting.target, waiting.memory) == (3, MEASURING)
        done = envoy(evidence(rtt_ms=80.0), MEASURING, concurrency=3)
        assert (done.target, done.state) == (40, QueueStateName.RECOVERING)
        assert (done.memory.min_rtt_ms, done.memory.deferred_limit) == (80.0, 0)
        wait = 60.0 * (1 + _jitter("orders", 1))
        assert done.memory.next_measure_at == pytest.approx(NOW + wait)

    def test_it_measures_again_once_the_interval_has_passed(self) -> None:
        due = replace(MEASURED, next_measure_at=NOW)
        verdict = envoy(evidence(), due, concurrency=25)
        assert (verdict.target, verdict.memory.deferred_limit) == (3, 25)

    def test_the_measurement_jitter_is_within_fifteen_percent_and_repeatable(self) -> None:
        draws = [_jitter("orders", measurement) for measurement in range(50)]
        assert all(0.0 <= draw < 0.15 for draw in draws)
        assert draws == [_jitter("orders", measurement) for measurement in range(50)]
        assert len(set(draws)) == len(draws)

    def test_it_never_raises_on_pressure_at_or_above_t1(self) -> None:
        # The controller reads no drops: fast 429s alone would let it grow (docs/algorithms.md).
        verdict = envoy(evidence(rtt_ms=100.0, dropped=2))
        assert verdict.target == 10
        back = envoy(evidence(rtt_ms=80.0, dropped=2), MEASURING, concurrency=3)
        assert (back.target, back.memory.min_rtt_ms) == (3, 80.0)

    def test_without_latency_it_holds_and_measures_nothing(self) -> None:
        assert envoy(evidence(rtt_ms=None)).target == 10
        fresh = envoy(evidence(rtt_ms=None), EnvoyGradientMemory(), concurrency=40)
        assert (fresh.target, fresh.memory) == (40, EnvoyGradientMemory())
        waiting = envoy(evidence(rtt_ms=None), MEASURING, concurrency=3)
        assert (waiting.target, waiting.memory) == (3, MEASURING)
