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
from load.sim.trace import QueueTrace, SimResult
from load.simulate import parse_seeds
from stack.cli import main
from tests.factories import SIMULATED_POLICIES
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
    assert [summary["policy"] for summary in summaries] == SIMULATED_POLICIES
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


# --- the fleet's keys: the lowest goodput share, the longest pause -----------------------------


def hand_built(
    ok: dict[str, list[int]], waiting: dict[str, list[int]], enabled: dict[str, list[bool]]
) -> dict[str, Any]:
    """The scorecard of a hand-built run: queues a and b on one downstream of 10 calls a
    second, each second's 2xx calls, messages left waiting and mapping state as given."""
    document = {
        "name": "hand",
        "duration_s": 3,
        "seed": 1,
        "telemetry_delay_s": [1, 2],
        "downstreams": [{"name": "api", "capacity_rps": [[0, 10]], "latency_ms": 100}],
        "queues": [
            {
                "name": name,
                "downstream": "api",
                "backlog": sum(ok[name]),
                "batch_size": 1,
                "visibility_timeout_s": 10,
                "max_receive_count": 3,
                "max_concurrency": 5,
            }
            for name in ok
        ],
    }
    scenario = parse_scenario(json.dumps(document), "hand.json")
    traces = {
        name: QueueTrace(
            name=name,
            downstream="api",
            messages_total=sum(ok[name]),
            messages_done=sum(ok[name]),
            calls_total=sum(ok[name]),
            last_done_at=3.0,
            calls_per_s=ok[name],
            rejected_per_s=[0] * 3,
            ok_per_s=ok[name],
            enabled_per_s=enabled[name],
            waiting_end_per_s=waiting[name],
            ages_s=[1.0] * sum(ok[name]),
        )
        for name in ok
    }
    return scorecard(SimResult(scenario, "hand", 1, 3.0, traces, {"a": 0, "b": 0}, []))


def test_the_fleets_lowest_goodput_share_and_longest_pause() -> None:
    # Demands (2xx + waiting): a 15, 15, 5; b 2, 2, 0. Max-min fair shares of 10 a second:
    # b gets its 2 and a the other 8 in seconds 0 and 1; a gets its 5 in second 2.
    card = hand_built(
        ok={"a": [5, 5, 5], "b": [2, 2, 0]},
        waiting={"a": [10, 10, 0], "b": [0, 0, 0]},
        enabled={"a": [True, False, False], "b": [False, True, False]},
    )
    queues, totals = card["queues"], card["totals"]
    assert queues["a"]["goodput_share"] == round(15 / 21, 4)
    assert queues["b"]["goodput_share"] == 1.0
    assert totals["goodput_share_min"] == round(15 / 21, 4)
    # The pooled share beside it: 19 answered of the 25 the downstream could have answered.
    assert totals["goodput_share"] == 0.76
    assert (queues["a"]["longest_pause_s"], queues["b"]["longest_pause_s"]) == (2, 1)
    assert totals["longest_pause_s"] == 2
    assert "goodput_share_min" not in queues["a"]


def test_a_queue_its_downstream_could_serve_nothing_has_no_share_in_the_minimum() -> None:
    # b never had work: no fair share, no goodput share, so the minimum is a's alone.
    card = hand_built(
        ok={"a": [5, 5, 5], "b": [0, 0, 0]},
        waiting={"a": [10, 10, 0], "b": [0, 0, 0]},
        enabled={"a": [True] * 3, "b": [True] * 3},
    )
    assert card["queues"]["b"]["goodput_share"] is None
    assert card["totals"]["goodput_share_min"] == card["queues"]["a"]["goodput_share"]
    assert card["totals"]["longest_pause_s"] == 0


def test_the_fleets_keys_are_in_the_table_and_their_worst_over_seeds() -> None:
    summary = seed_summary(
        "s",
        "p",
        [
            (1, {"goodput_share_min": 0.4, "longest_pause_s": 30}),
            (2, {"goodput_share_min": 0.6, "longest_pause_s": 10}),
        ],
    )
    assert summary["worst"] == {"goodput_share_min": 0.4, "longest_pause_s": 30}
    assert summary["mean"] == {"goodput_share_min": 0.5, "longest_pause_s": 20.0}


def test_the_run_table_shows_the_lowest_share_on_the_total_row_only(
    tiny_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(tiny_file.read_text(encoding="utf-8"))
    document["queues"].append({**document["queues"][0], "name": "r"})
    tiny_file.write_text(json.dumps(document), encoding="utf-8")
    assert main(["simulate", "--scenario", str(tiny_file), "--policy", "static"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()[1:]
    assert header.split()[-4:] == ["goodput", "gp_min", "pause_s", "wall_s"]
    cells = {row.split()[1]: row.split() for row in rows}
    # A queue's row has no gp_min cell: its goodput is third from the end, as the total's
    # lowest share is; nothing paused.
    assert len(cells["q"]) == len(cells["(total)"]) - 1
    assert cells["(total)"][-3] == min(cells["q"][-3], cells["r"][-3])
    assert cells["(total)"][-2] == cells["q"][-2] == "0"


# --- the priority measure: a queue in its fleet and alone --------------------------------------


def test_a_queue_alone_keeps_its_downstream_and_settings() -> None:
    scenario = parse_scenario(
        json.dumps(
            {
                "name": "pair",
                "duration_s": 30,
                "seed": 1,
                "telemetry_delay_s": [1, 2],
                "downstreams": [
                    {"name": "api", "capacity_rps": [[0, 50]], "latency_ms": 50},
                    {"name": "other", "capacity_rps": [[0, 20]], "latency_ms": 10},
                ],
                "queues": [
                    {
                        "name": name,
                        "downstream": downstream,
                        "backlog": 100,
                        "batch_size": 5,
                        "visibility_timeout_s": 10,
                        "max_receive_count": 3,
                        "max_concurrency": 4,
                        "priority": 3,
                    }
                    for name, downstream in (("a", "api"), ("b", "api"), ("c", "other"))
                ],
            }
        ),
        "pair.json",
    )
    lone = scenario.alone("b")
    assert lone.name == "pair-alone-b"
    assert lone.queues == (scenario.queues[1],)
    assert lone.downstreams == (scenario.downstream("api"),)
    assert (lone.duration_s, lone.seed) == (scenario.duration_s, scenario.seed)
    with pytest.raises(ValueError, match=r"no queue 'z' \(its queues: a, b, c\)"):
        scenario.alone("z")


def test_alone_prints_the_queues_age_in_the_fleet_alone_and_their_ratio(
    tiny_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(tiny_file.read_text(encoding="utf-8"))
    document["queues"].append({**document["queues"][0], "name": "r"})
    tiny_file.write_text(json.dumps(document), encoding="utf-8")
    args = ["simulate", "--scenario", str(tiny_file), "--alone", "q", "--policy", "static"]
    assert main([*args, "--seeds", "1-2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["scenario"], summary["queue"], summary["policy"]) == ("tiny", "q", "static")
    assert [run["seed"] for run in summary["runs"]] == [1, 2]
    for run in summary["runs"]:
        # Two queues on the capacity one had alone: its messages wait longer in the fleet.
        assert run["fleet_age_p99_s"] > run["alone_age_p99_s"] > 0
        assert run["ratio"] == round(run["fleet_age_p99_s"] / run["alone_age_p99_s"], 3)
    ratios = [run["ratio"] for run in summary["runs"]]
    assert summary["ratio"] == {"mean": round(sum(ratios) / 2, 3), "worst": max(ratios)}
    # The fleet's run is the scenario's own run of that seed.
    assert main([*args[:3], "--seed", "2", "--policy", "static", "--json"]) == 0
    card = json.loads(capsys.readouterr().out)
    assert summary["runs"][1]["fleet_age_p99_s"] == card["queues"]["q"]["age_p99_s"]
    assert main([*args, "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("queue q of tiny: p99 message age (s)")
    assert out.splitlines()[2].split()[:2] == ["static", "2"]


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--alone", "nope"], "--alone: scenario tiny has no queue 'nope' (its queues: q)"),
        (["--alone", "q", "--plot", "x.png"], "--alone compares message ages: leave out --plot"),
        (["--alone", "q", "--seeds", "1-2", "--seed", "3"], "--seeds runs many seeds"),
        (["--alone", "q", "--seeds", "2-1"], "--seeds '2-1': the range 2-1 runs backwards"),
    ],
)
def test_alone_refuses_bad_arguments_in_one_line(
    args: list[str], complaint: str, tiny_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--scenario", str(tiny_file), *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert complaint in captured.err and captured.err.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--scenario", "all", "--alone", "q"], "--plot, --record and --alone take one scenario"),
        (["--family", "fleet", "--draws", "1", "--alone", "q"], "leave out --seeds, --plot"),
    ],
)
def test_alone_takes_one_named_scenario(
    args: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", *args]) == 2
    err = capsys.readouterr().err
    assert complaint in err and err.count("\n") == 1
