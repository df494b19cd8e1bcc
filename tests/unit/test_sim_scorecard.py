"""The scorecard's message ages and goodput share on hand-computable runs, and `--seeds`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from load.scorecard import max_min_fair, percentile, scorecard, seed_summary
from load.sim.engine import simulate
from load.sim.policies import StaticPolicy
from load.sim.scenario import parse_scenario
from load.simulate import parse_seeds
from stack.cli import main
from tests.unit.test_sim import tiny

NEW_KEYS = {"calls_timed_out", "age_p50_s", "age_p99_s", "goodput_share"}


def lockstep(capacity: float) -> dict[str, Any]:
    """800 messages at t=0, two invocations of 8 calls of 125 ms each and no overhead.

    Every invocation lasts exactly one second: 16 calls a second, invocation k of each slot
    runs in [k, k+1), so 16 messages are done at each of t = 1..50.
    """
    card = scorecard(
        simulate(
            tiny(
                backlog=800,
                capacity_rps=[[0, capacity]],
                latency_ms=125,
                batch_size=8,
                max_concurrency=2,
                invocation_overhead_ms=0,
            ),
            StaticPolicy(),
        )
    )
    queue: dict[str, Any] = card["queues"]["q"]
    return queue


def test_message_ages_are_arrival_to_done_at_nearest_rank_percentiles() -> None:
    queue = lockstep(capacity=1000)
    assert queue["drain_s"] == 50.0
    # Ranks 385-400 are done at t=25 (rank 400 = p50); ranks 785-800 at t=50 (p99 is 792).
    assert (queue["age_p50_s"], queue["age_p99_s"]) == (25.0, 50.0)


def test_goodput_share_is_answered_over_what_could_have_been_answered_while_work_waited() -> None:
    # Capacity 100: while 100 or more messages wait (end of second s: 784 - 16 s waiting plus
    # 16 answered), the downstream could have answered 100 a second: seconds 0-43. Then the
    # demand is smaller than the capacity: 96, 80, 64, 48, 32 in seconds 44-48 and 16 in 49.
    queue = lockstep(capacity=100)
    assert queue["goodput_share"] == round(800 / (44 * 100 + 96 + 80 + 64 + 48 + 32 + 16), 4)
    # A queue that uses the whole capacity whenever work waits scores 1.
    assert lockstep(capacity=16)["goodput_share"] == 1.0


def test_a_downstream_that_could_answer_nothing_has_no_goodput_share() -> None:
    card = scorecard(simulate(tiny(backlog=50, capacity_rps=[[0, 0]]), StaticPolicy()))
    assert card["queues"]["q"]["goodput_share"] is None
    assert card["queues"]["q"]["age_p50_s"] is None


def test_the_new_keys_are_per_queue_and_in_total_on_a_shared_downstream() -> None:
    document = {
        "name": "two",
        "duration_s": 200,
        "seed": 5,
        "telemetry_delay_s": [1, 2],
        "downstreams": [{"name": "api", "capacity_rps": [[0, 120]], "latency_ms": 50}],
        "queues": [
            {
                "name": name,
                "downstream": "api",
                "backlog": backlog,
                "batch_size": 10,
                "visibility_timeout_s": 10,
                "max_receive_count": 10,
                "max_concurrency": 20,
            }
            for name, backlog in (("big", 6000), ("small", 600))
        ],
    }
    card = scorecard(simulate(parse_scenario(json.dumps(document), "two.json"), StaticPolicy()))
    for score in (*card["queues"].values(), card["totals"]):
        assert set(score) >= NEW_KEYS
        assert 0.0 < score["goodput_share"] <= 1.0
        assert score["age_p50_s"] <= score["age_p99_s"]
    queues = card["queues"]
    assert card["totals"]["calls_timed_out"] == 0
    # The pooled share weighs the queues' shares: never below the worse one.
    shares = [q["goodput_share"] for q in queues.values()]
    assert min(shares) <= card["totals"]["goodput_share"] <= 1.0
    assert card["totals"]["age_p99_s"] == max(q["age_p99_s"] for q in queues.values())


@given(
    st.floats(min_value=0, max_value=1000, allow_nan=False),
    st.lists(st.integers(min_value=0, max_value=500), min_size=1, max_size=6),
)
def test_max_min_fair_shares(capacity: float, demands: list[int]) -> None:
    shares = max_min_fair(capacity, demands)
    assert all(0 <= share <= demand + 1e-9 for share, demand in zip(shares, demands, strict=True))
    assert sum(shares) == pytest.approx(min(capacity, sum(demands)))
    # Nobody gets less than another unless its own demand is met.
    for share, demand in zip(shares, demands, strict=True):
        if share < demand - 1e-9:
            assert share >= max(shares) - 1e-9


def test_max_min_fair_by_hand() -> None:
    assert max_min_fair(100, [10, 80, 80]) == [10, 45, 45]
    assert max_min_fair(100, [30, 20]) == [30, 20]


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([float(n) for n in range(1, 101)], 0.99) == 99.0
    assert percentile([5.0], 0.99) == 5.0


# --- seeds -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "seeds"),
    [("1-10", list(range(1, 11))), ("3,5,8", [3, 5, 8]), ("1-3,7", [1, 2, 3, 7]), ("4", [4])],
)
def test_parse_seeds(text: str, seeds: list[int]) -> None:
    assert parse_seeds(text) == seeds


def test_seed_summary_mean_worst_and_nulls() -> None:
    runs = [
        (1, {"wasted_ratio": 0.1, "goodput_share": 0.9, "drain_ratio": 1.1, "dlq_messages": 0}),
        (2, {"wasted_ratio": 0.3, "goodput_share": 0.7, "drain_ratio": None, "dlq_messages": 4}),
    ]
    summary = seed_summary("s", "p", runs)
    assert summary["seeds"] == [1, 2]
    assert summary["mean"] == {
        "wasted_ratio": 0.2,
        "goodput_share": 0.8,
        "drain_ratio": None,
        "dlq_messages": 2.0,
    }
    assert summary["worst"] == {
        "wasted_ratio": 0.3,
        "goodput_share": 0.7,
        "drain_ratio": None,
        "dlq_messages": 4,
    }
    assert summary["runs"] == [{"seed": seed, "totals": totals} for seed, totals in runs]


@pytest.fixture
def tiny_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    document = {
        "name": "tiny",
        "duration_s": 60,
        "seed": 3,
        "telemetry_delay_s": [1, 2],
        "downstreams": [{"name": "api", "capacity_rps": [[0, 300], [15, 60]], "latency_ms": 50}],
        "queues": [
            {
                "name": "q",
                "downstream": "api",
                "backlog": 2000,
                "batch_size": 10,
                "visibility_timeout_s": 10,
                "max_receive_count": 3,
                "max_concurrency": 20,
            }
        ],
    }
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_seeds_json_has_one_object_per_scenario_and_policy(
    tiny_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--scenario", str(tiny_file), "--seeds", "1-2", "--json"]) == 0
    summaries = json.loads(capsys.readouterr().out)
    assert [summary["policy"] for summary in summaries] == [
        "static",
        "seed",
        "queuemesh",
        "netflix-aimd",
        "vegas",
        "gradient2",
    ]
    for summary in summaries:
        assert set(summary) == {"scenario", "policy", "seeds", "mean", "worst", "runs"}
        assert summary["scenario"] == "tiny" and summary["seeds"] == [1, 2]
        assert [run["seed"] for run in summary["runs"]] == [1, 2]
        totals = [run["totals"] for run in summary["runs"]]
        assert set(summary["mean"]) == set(summary["worst"]) == set(totals[0])
        assert set(summary["mean"]) >= NEW_KEYS
        wasted = [run["wasted_ratio"] for run in totals]
        assert summary["mean"]["wasted_ratio"] == round(sum(wasted) / 2, 4)
        assert summary["worst"]["wasted_ratio"] == max(wasted)
        assert summary["worst"]["goodput_share"] == min(run["goodput_share"] for run in totals)
    # Each run is the run of that seed alone.
    assert main(["simulate", "--scenario", str(tiny_file), "--seed", "2", "--policy", "seed"]) == 0
    capsys.readouterr()
    assert main(["simulate", "--scenario", str(tiny_file), "--seed", "2", "--json"]) == 0
    single = {card["policy"]: card["totals"] for card in json.loads(capsys.readouterr().out)}
    assert {summary["policy"]: summary["runs"][1]["totals"] for summary in summaries} == single


def test_seeds_table_prints_mean_and_worst_rows(
    tiny_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["simulate", "--scenario", str(tiny_file), "--seeds", "3,5", "--policy", "static"])
    out = capsys.readouterr().out
    assert code == 0
    assert "scenario tiny (seeds 3,5" in out
    rows = [line.split()[:2] for line in out.splitlines()[2:]]
    assert rows == [["static", "mean"], ["static", "worst"]]


@pytest.mark.parametrize(
    ("seeds", "complaint"),
    [
        ("", "'' is not a seed or a range of seeds"),
        ("x", "'x' is not a seed or a range of seeds"),
        ("1-", "'1-' is not a seed or a range of seeds"),
        ("-3", "'-3' is not a seed or a range of seeds"),
        ("5-2", "the range 5-2 runs backwards"),
        ("1-3,2", "seed 2 is named twice"),
        ("1-1000", "more than 100 seeds"),
    ],
)
def test_a_bad_seeds_value_is_one_line_and_exit_2(
    seeds: str, complaint: str, tiny_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--scenario", str(tiny_file), "--seeds", seeds]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"queuemesh simulate: error: --seeds {seeds!r}: {complaint}")
    assert captured.err.count("\n") == 1


def test_seeds_refuses_a_single_seed_plot_or_recording(
    tiny_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--scenario", str(tiny_file), "--seeds", "1-2", "--seed", "3"]) == 2
    assert "--seeds runs many seeds" in capsys.readouterr().err
