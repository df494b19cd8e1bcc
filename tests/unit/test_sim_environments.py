"""The simulator's aggregated telemetry (load/sim/environments.py): execution environments that
write one document per queue and second of invocation starts, as the worker does."""

from __future__ import annotations

import math

from controller.model import Sample
from load.bench.telemetry import first_difference
from load.sim.engine import SIM_EPOCH, simulate
from load.sim.environments import Environments, as_aggregated
from load.sim.policies import QueueMeshPolicy, StaticPolicy
from load.sim.trace import TelemetryDelivery
from tests.unit.test_sim import tiny


def invocation(end: float, duration_ms: float, **counts: int) -> Sample:
    return Sample(
        "q",
        SIM_EPOCH + end,
        requests=counts.get("requests", 10),
        ok=counts.get("ok", 10),
        throttled=counts.get("throttled", 0),
        overloaded=0,
        latency_ms_sum=duration_ms,
        latency_count=counts.get("requests", 10),
        invocation_ms=duration_ms,
    )


def test_an_environment_sums_its_invocations_of_a_second_and_writes_them_once_it_is_over() -> None:
    environments = Environments()
    first = environments.take("q")
    assert environments.ended(first, invocation(0.2, 100.0), SIM_EPOCH + 0.2) == [
        invocation(0.2, 100.0)
    ]  # the first after an idle spell: at once
    for end in (0.4, 0.7):
        assert environments.take("q") == first  # the one free environment, reused
        assert environments.ended(first, invocation(end, 100.0, throttled=2), SIM_EPOCH + end) == []
    assert environments.take("q") == first
    [document] = environments.ended(first, invocation(1.5, 400.0), SIM_EPOCH + 1.5)
    assert (document.invocations, document.started, document.event_time) == (
        2,
        SIM_EPOCH,
        SIM_EPOCH + 0.7,
    )
    assert (document.requests, document.throttled, document.invocation_ms) == (20, 4, 200.0)
    [last] = environments.drain()
    assert (last.invocations, math.floor(last.started_at)) == (1, SIM_EPOCH + 1)


def test_a_busy_environment_takes_another_number() -> None:
    environments = Environments()
    assert [environments.take("q") for _ in range(3)] == [0, 1, 2]
    environments.ended(1, invocation(0.5, 100.0), SIM_EPOCH + 0.5)
    assert environments.take("q") == 1


def test_aggregated_telemetry_reports_every_call_once_in_fewer_documents() -> None:
    scenario = tiny(duration_s=60)
    per_invocation = simulate(scenario, QueueMeshPolicy(), seed=1)
    aggregated = simulate(scenario, QueueMeshPolicy(), seed=1, aggregated_telemetry=True)
    documents = [delivery.sample for delivery in aggregated.telemetry]
    assert sum(document.requests for document in documents) == sum(
        trace.calls_total for trace in aggregated.queues.values()
    )
    assert len(documents) < sum(document.invocations for document in documents)
    assert len(per_invocation.telemetry) == sum(
        document.invocations for document in (d.sample for d in per_invocation.telemetry)
    )


def _in_order(deliveries: list[TelemetryDelivery]) -> list[TelemetryDelivery]:
    return sorted(deliveries, key=lambda d: (d.arrival, d.sample.started_at, d.sample.event_time))


def test_an_aggregated_document_arrives_with_the_delay_drawn_where_it_was_written() -> None:
    # The same traffic both ways (a static cap decides nothing): one delay is drawn per
    # invocation end in either encoding, so the aggregated run's documents are the
    # per-invocation run's invocations summed, each arriving when the report of the
    # invocation that wrote it arrived, and the rest at the end.
    scenario = tiny(duration_s=60, telemetry_delay_s=[1, 5])
    per_invocation = simulate(scenario, StaticPolicy(), seed=1)
    aggregated_run = simulate(scenario, StaticPolicy(), seed=1, aggregated_telemetry=True)
    reencoded = as_aggregated(per_invocation.telemetry, per_invocation.ended_at)
    assert _in_order(reencoded) == _in_order(aggregated_run.telemetry)
    assert len(reencoded) < len(per_invocation.telemetry)
    arrivals = {delivery.arrival for delivery in per_invocation.telemetry}
    assert {d.arrival for d in reencoded} - arrivals == {per_invocation.ended_at}


def test_changes_are_the_same_only_in_order_and_within_a_second() -> None:
    changes = {"q": [(4, (14, True)), (9, (7, True))]}
    assert first_difference(changes, {"q": [(5, (14, True)), (9, (7, True))]}) is None
    assert first_difference(changes, {"q": [(4, (14, True)), (11, (7, True))]}) == 9
    assert first_difference(changes, {"q": [(4, (14, True)), (9, (8, True))]}) == 9
    assert first_difference(changes, {"q": [(4, (14, True))]}) == 9
