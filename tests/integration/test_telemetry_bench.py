"""`queuemesh bench telemetry`: bytes per invocation before and after aggregation, the evidence
both give the controller, and the simulator's decisions with either."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from load.bench.telemetry import (
    SCORECARD_KEYS,
    compare_decisions,
    outcome_moves,
    within_delay_noise,
)
from stack.cli import main
from tests.unit.test_sim import tiny, tiny_file  # noqa: F401 (fixture)


def test_the_report_measures_both_forms_in_one_run(
    tiny_file: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["bench", "telemetry", "--json", "--rate", "5", "--rate", "1", "--seconds", "30"]
    assert main([*argv, "--scenario", str(tiny_file), "--seeds", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["rate"] for row in report["rates"]] == [1, 5]
    at_five = report["rates"][1]
    assert report["bytes_per_invocation"] == at_five["after"] <= 150
    assert at_five["ratio"] == pytest.approx(at_five["after"] / at_five["before"], abs=1e-3)
    assert report["evidence_equal"] and report["recording_equal"]
    [run] = report["decisions"]
    assert run["documents_aggregated"] < run["documents"]
    assert report["decisions_equal"] == (run["first_difference_s"] is None)
    assert report["replay_decisions_equal"] == (run["replay_first_difference_s"] is None)
    assert run["replay_changes"] > 0 and run["replay_changes_aggregated"] > 0
    assert set(run["scorecard_other_delays"]) == set(SCORECARD_KEYS)
    assert report["outcome_moves"] == outcome_moves(report["decisions"])
    assert report["outcomes_within_delay_noise"] == within_delay_noise(report["outcome_moves"])


def _run(per_invocation: float | None, aggregated: float | None, other: float | None) -> dict:
    """A decision run whose every scorecard figure is these three values."""
    return {
        "scorecard": {key: [per_invocation, aggregated] for key in SCORECARD_KEYS},
        "scorecard_other_delays": dict.fromkeys(SCORECARD_KEYS, other),
    }


def test_aggregation_is_judged_against_the_delays_own_noise() -> None:
    # Aggregation moves the figures by 0.2 and 0.0 (mean 0.1); other delays by 0.1 and 0.3
    # (mean 0.2): within the noise. A run without a value (no reaction) is left out.
    quiet = [_run(1.0, 1.2, 1.1), _run(2.0, 2.0, 2.3), _run(None, 1.0, 1.0)]
    assert outcome_moves(quiet)["wasted_ratio"] == {
        "aggregated": 0.1,
        "other_delays": 0.2,
        "excess_se": 0.2,  # the paired differences 0.1 and -0.3
    }
    assert within_delay_noise(outcome_moves(quiet))
    # Aggregation moves a figure further than the delays do, every run by the same 0.1: no
    # chance explains it (a standard error of 0), so not within the noise.
    loud = [_run(1.0, 1.5, 1.4), _run(2.0, 2.2, 2.1)]
    assert outcome_moves(loud)["drain_ratio"] == {
        "aggregated": 0.35,
        "other_delays": 0.25,
        "excess_se": 0.0,
    }
    assert not within_delay_noise(outcome_moves(loud))


def test_a_move_further_than_the_delays_by_chance_is_within_the_noise() -> None:
    # Paired differences 0.5 and -0.3: aggregation moves 0.1 further on average, within two
    # standard errors (one is 0.4) of a difference that swings both ways from run to run.
    swinging = [_run(1.0, 1.6, 1.1), _run(2.0, 2.0, 2.3)]
    moves = outcome_moves(swinging)
    assert moves["goodput_share"]["aggregated"] > moves["goodput_share"]["other_delays"]
    assert moves["goodput_share"]["excess_se"] == 0.4
    assert within_delay_noise(moves)
    # One run measures no noise: the comparison is strict.
    assert not within_delay_noise(outcome_moves(swinging[:1]))
    assert outcome_moves(swinging[:1])["goodput_share"]["excess_se"] is None


def test_both_encodings_decide_alike_where_the_first_reports_say_the_same() -> None:
    # A queue over its downstream's capacity from the start: cut on the first reports, then
    # corrected and probed; either encoding's evidence leads to the same changes, in the
    # simulator and through replay (open loop: the same invocations, re-encoded).
    run = compare_decisions(tiny(duration_s=60, capacity_rps=[[0, 150]]), seed=1)
    assert run["changes"] >= 3 and run["replay_changes"] >= 3
    assert run["documents_aggregated"] < run["documents"]
    assert run["decisions_equal"] and run["replay_decisions_equal"]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (["--rate", "0"], "--rate must be 0.1..1000 invocations a second; got [0.0]"),
        (["--seconds", "5"], "--seconds must be 10..3600; got 5"),
        (["--scenario", "no-such-scenario"], None),
        (["--seeds", "x"], None),
    ],
)
def test_bad_arguments_are_one_line_errors(
    arguments: list[str], error: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "telemetry", *arguments]) == 2
    printed = capsys.readouterr().err.strip()
    assert printed.startswith("queuemesh bench: error: ") and "\n" not in printed
    if error is not None:
        assert printed == f"queuemesh bench: error: {error}"
