"""The simulator's latency: schedules, the queueing model, heavy tails and client timeouts."""

from __future__ import annotations

from controller.model import Sample
from load.latency import MAX_QUEUEING_FACTOR
from load.scorecard import scorecard
from load.sim.engine import simulate
from load.sim.policies import StaticPolicy
from load.sim.scenario import load_scenario
from load.sim.trace import SimResult
from tests.unit.test_sim import tiny


def samples(result: SimResult) -> list[Sample]:
    return [delivery.sample for delivery in result.telemetry]


def mean_latency_ms(batch: list[Sample]) -> float:
    return sum(s.latency_ms_sum for s in batch) / sum(s.latency_count for s in batch)


def queueing(**changes: object) -> SimResult:
    """A queueing downstream: 50 ms without load, 100 calls/s."""
    scenario = tiny(
        **{
            "backlog": 3000,
            "latency_model": "queueing",
            "capacity_rps": [[0, 100]],
            "latency_ms": 50,
            **changes,
        }
    )
    return simulate(scenario, StaticPolicy())


def test_a_latency_schedule_sets_each_calls_latency() -> None:
    result = simulate(
        tiny(backlog=4000, latency_ms=[[0, 50], [10, 100]], max_concurrency=5), StaticPolicy()
    )
    early = [s for s in samples(result) if s.started_at - 1_767_225_600.0 < 9.0]
    late = [s for s in samples(result) if s.started_at - 1_767_225_600.0 >= 10.0]
    assert early and late
    assert {s.latency_ms_sum / s.latency_count for s in early} == {50.0}
    assert {s.latency_ms_sum / s.latency_count for s in late} == {100.0}


def test_queueing_latency_rises_with_the_load() -> None:
    # Two invocations: each call waits behind at most the other one (10 ms at 100/s).
    light = mean_latency_ms(samples(queueing(max_concurrency=2)))
    assert 50.0 <= light <= 60.0 + 1e-9
    # Twenty: about 20 calls in progress, 0.2 s of queueing in front of each.
    heavy = mean_latency_ms(samples(queueing(max_concurrency=20)))
    assert heavy > 150.0
    assert heavy <= 50.0 * MAX_QUEUEING_FACTOR


def test_a_queueing_downstream_with_429s_still_rejects_above_its_capacity() -> None:
    result = queueing(max_concurrency=20, capacity_rps=[[0, 100], [10, 20]])
    assert result.queues["q"].calls_rejected > 0
    assert sum(s.throttled for s in samples(result)) == result.queues["q"].calls_rejected


def test_calls_beyond_the_client_timeout_time_out_and_no_429_when_it_never_answers_429() -> None:
    # 20 callers against 20 queries/s: about a second of queueing, against a 300 ms timeout.
    result = queueing(
        max_concurrency=20,
        capacity_rps=[[0, 20]],
        answers_429=False,
        timeout_ms=300,
        max_receive_count=5,
        duration_s=300,
    )
    trace = result.queues["q"]
    assert trace.calls_timed_out > 0
    assert trace.calls_rejected == trace.calls_timed_out
    batch = samples(result)
    assert sum(s.throttled for s in batch) == 0
    assert sum(s.server_errors for s in batch) == 0
    # A timed-out call lasts the timeout for the worker, and is reported with that latency.
    assert all(s.latency_ms_sum <= s.latency_count * 300.0 + 1e-6 for s in batch)
    assert any(s.requests > s.ok for s in batch)
    card = scorecard(result)["totals"]
    assert card["calls_timed_out"] == trace.calls_timed_out
    assert card["wasted_ratio"] == round(trace.calls_rejected / trace.calls_total, 4)


def test_a_timed_out_message_fails_like_a_429_and_is_dead_lettered_in_the_end() -> None:
    # Every call takes 50 ms and the client waits 40: nothing is ever done.
    result = simulate(
        tiny(backlog=100, timeout_ms=40, max_receive_count=3, duration_s=200), StaticPolicy()
    )
    trace = result.queues["q"]
    assert trace.messages_done == 0
    assert trace.dlq_messages == 100
    assert trace.calls_total == trace.calls_timed_out == trace.calls_rejected == 300
    assert {s.latency_ms_sum / s.latency_count for s in samples(result)} == {40.0}


def test_a_heavy_tail_keeps_the_mean_and_does_not_depend_on_load() -> None:
    def latencies(concurrency: int) -> list[float]:
        result = simulate(
            tiny(backlog=20000, latency_tail=2, max_concurrency=concurrency, duration_s=600),
            StaticPolicy(),
        )
        return [s.latency_ms_sum / s.latency_count for s in samples(result)]

    few, many = latencies(2), latencies(20)
    for per_invocation in (few, many):
        assert 0.85 * 50.0 <= sum(per_invocation) / len(per_invocation) <= 1.15 * 50.0
    # Some invocations are far slower than the mean (one slow call among ten is enough).
    assert max(many) > 3 * 50.0
    assert min(many) < 50.0


def test_slow_database_shows_overload_as_timeouts_only() -> None:
    result = simulate(load_scenario("slow-database"), StaticPolicy())
    trace = result.queues["billing"]
    assert trace.calls_timed_out > 0
    assert trace.calls_rejected == trace.calls_timed_out
    assert sum(s.throttled + s.server_errors for s in samples(result)) == 0
