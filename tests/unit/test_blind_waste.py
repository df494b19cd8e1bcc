"""The split of a family's waste into what no reacting law can avoid and the rest
(load/blind_waste.py): the blind seconds follow the changes that hurt, and the split is the
run's own waste."""

from __future__ import annotations

from dataclasses import replace

from load import blind_waste as bw
from load.scorecard import scorecard
from load.sim.engine import simulate
from load.sim.families import draw_scenario
from load.simulate import make_policy

# mixed seed 101 draw 26: a drop of capacity and a slowdown, each followed by a return.
DRAW = ("mixed", 101, 26)


def test_blind_seconds_follow_the_start_a_fall_of_capacity_and_a_change_of_latency() -> None:
    drawn = draw_scenario(*DRAW)
    [api] = drawn.downstreams
    api = replace(
        api,
        capacity_rps=((0.0, 100.0), (50.0, 20.0), (100.0, 100.0)),
        latency_ms=((0.0, 50.0), (30.5, 200.0), (60.0, 50.0)),
    )
    scenario = replace(
        drawn, downstreams=(api,), telemetry_delay_s=(3.0, 9.0), kinesis_batch_window_s=1.0
    )
    # Known 1 + 3 + 1 s after each: the return of capacity is not blind; the return of
    # latency is, on an API that refuses calls over its capacity (each invocation calls faster).
    assert bw.blind_seconds(scenario) == frozenset(
        [*range(0, 5), *range(30, 36), *range(50, 55), *range(60, 65)]
    )
    silent = replace(scenario, downstreams=(replace(api, answers_429=False),))
    assert bw.blind_seconds(silent) == frozenset([*range(0, 5), *range(30, 36), *range(50, 55)])


def test_a_draws_waste_is_its_runs_and_the_blind_part_is_within_it() -> None:
    split = bw.draw_waste(DRAW)
    totals = scorecard(simulate(draw_scenario(*DRAW), make_policy("queuemesh", "adaptive")))[
        "totals"
    ]
    assert (split.calls, split.wasted) == (totals["calls_total"], totals["calls_rejected"])
    assert round(split.wasted_share, 4) == totals["wasted_ratio"]
    assert 0 < split.blind < split.wasted


def test_the_report_splits_the_mean_and_lists_the_draws_wasting_most_outside() -> None:
    rows = [
        bw.DrawWaste(1, "a", 1000, 100, 90),
        bw.DrawWaste(2, "b", 1000, 60, 10),
        bw.DrawWaste(3, "c", 1000, 0, 0),
    ]
    report = bw.render("mixed", 101, rows, most=2)
    assert "mean wasted 0.0533 = blind 0.0333 + the rest 0.0200" in report
    assert report.splitlines()[2:] == ["     2: 0.060 / 0.010  b", "     1: 0.100 / 0.090  a"]
