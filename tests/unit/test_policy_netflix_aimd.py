"""netflix-aimd: AIMDLimit's rule, one windowed sample a decision (docs/algorithms.md)."""

from __future__ import annotations

import pytest

from controller.model import QueueStateName
from controller.policy.base import NoMemory
from controller.settings import PolicyParams
from controller.window import WindowStats
from tests.netflix_cases import evidence, judged

PARAMS = PolicyParams()
BUSY = {"busy_ms": 20_000.0}  # ten invocations of 20 s: about 6.9 in use
IDLE = {"busy_ms": 1_000.0}  # ten invocations of 1 s, one a second: 1.0 in use


def target(concurrency: int, stats: WindowStats, breaches: int = 0) -> tuple[int, str]:
    verdict = judged("netflix-aimd", stats, NoMemory(), concurrency, breaches)
    return verdict.target, verdict.state


@pytest.mark.parametrize(("limit", "cut"), [(100, 90), (10, 9), (5, 4), (3, 2)])
def test_a_drop_backs_off_by_the_ratio_and_at_least_one(limit: int, cut: int) -> None:
    assert target(limit, evidence(dropped=1, **BUSY)) == (cut, QueueStateName.THROTTLED)


def test_a_timeout_is_a_drop_and_cuts_follow_each_other_into_critical_backoff() -> None:
    stats = evidence(timed_out=2, **IDLE)
    assert target(90, stats, breaches=1) == (81, QueueStateName.CRITICAL_BACKOFF)


def test_a_round_trip_over_the_five_second_timeout_is_a_drop() -> None:
    assert target(10, evidence(rtt_ms=5001.0, **BUSY))[0] == 9
    assert target(10, evidence(rtt_ms=5000.0, **BUSY))[0] == 11


def test_clean_and_half_used_adds_one_else_holds() -> None:
    assert target(10, evidence(**BUSY)) == (11, QueueStateName.RECOVERING)
    assert target(10, evidence(**IDLE)) == (10, QueueStateName.HEALTHY)


def test_the_floor_is_cmin() -> None:
    # max(1, min(limit - 1, ...)) would go to 1; the bounds hold it at Cmin.
    assert target(2, evidence(dropped=5, **BUSY))[0] == PARAMS.cmin
