from __future__ import annotations

import io
import json
import multiprocessing
import socket
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from controller.telemetry import DecodeResult, decode_record_data
from load.recording import read_recording
from load.replay import load_config
from load.sim.scenario import load_scenario
from stack.cli import main
from stack.local.demo.command import DEMO_SCENARIO, demo_scenario

SHORT_SCENARIO = {
    "name": "demo-test",
    "duration_s": 50,
    "seed": 1,
    "telemetry_delay_s": [1, 2],
    "downstreams": [
        {"name": "payments", "capacity_rps": [[0, 100], [8, 25], [24, 100]], "latency_ms": 200}
    ],
    "queues": [
        {
            "name": "orders",
            "downstream": "payments",
            "backlog": 600,
            "arrivals_rps": [[0, 30], [45, 0]],
            "batch_size": 10,
            "visibility_timeout_s": 10,
            "max_receive_count": 5,
            "max_concurrency": 12,
            "min_concurrency": 2,
        }
    ],
}


def refuses(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=1):
            return False
    except ConnectionRefusedError:
        return True


@pytest.mark.timeout(280)
def test_demo_storm_and_cure_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = tmp_path / "demo-test.json"
    scenario.write_text(json.dumps(SHORT_SCENARIO))
    plot = tmp_path / "demo.png"
    recording = tmp_path / "telemetry.jsonl"
    threads_before = set(threading.enumerate())

    code = main(
        [
            "demo",
            "--headless",
            "--json",
            "--scenario",
            str(scenario),
            "--plot",
            str(plot),
            "--record",
            str(recording),
        ]
    )

    assert code == 0
    result = json.loads(capsys.readouterr().out)
    score = result["queues"]["orders"]
    assert result["sqs_queues"]["orders"].startswith("queuemesh-local-")
    transitions = result["transitions"]
    assert {t["queue"] for t in transitions} == {"orders"}
    # A probe's end lowers the mapping too, but it is no cut.
    cuts = [t for t in transitions if t["action"] == "MULTIPLICATIVE_DECREASE"]
    raises = [t for t in transitions if t["target"] > t["previous"]]
    ends = [t for t in transitions if t["action"] == "PROBE_END"]
    assert all(t["target"] < t["previous"] for t in cuts + ends)
    # Concurrency falls after the drop (t=8) and rises after the return (t=24).
    assert any(8 <= cut["t"] < 24 for cut in cuts), transitions
    assert any(rise["t"] >= 24 for rise in raises), transitions
    assert score["esm_updates"] == len(cuts) + len(raises) + len(ends) >= 2
    assert result["ledger"]["orders"]["version"] == len(transitions)
    assert result["ledger"]["orders"]["concurrency"] == transitions[-1]["target"]
    assert score["detection_latency_s"] is not None and score["detection_latency_s"] >= 0
    # The storm happened (the downstream rejected calls) and every message is accounted for.
    totals = result["totals"]
    assert 0 < totals["calls_rejected"] < totals["calls_total"]
    assert totals["messages_total"] == score["messages_total"]
    assert score["messages_total"] == 600 + 30 * 45
    assert score["messages_pending"] == 0
    assert score["messages_done"] + score["dlq_messages"] == score["messages_total"]
    assert score["drain_s"] is not None
    # The pace this host ran the invocations at, per step of the capacity, and the ideal at it.
    pace = result["pace"]
    assert pace["from_s"] == [0, 8, 24]
    assert pace["calls_per_invocation_s"][0] > 0
    assert pace["ideal_drain_s"] >= score["ideal_drain_s"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = [json.loads(line) for line in recording.read_text().splitlines()]
    assert lines and all(
        set(line) == {"arrival", "shard", "sequence", "partition_key", "data"} for line in lines
    )
    sequences = [int(line["sequence"]) for line in lines]
    assert sequences == sorted(sequences)
    # Beside the recording, the replay configuration the run's queue was registered with,
    # read by replay's own parser, and the command that replays the two together.
    config_path = tmp_path / "telemetry.config.json"
    config = load_config(config_path)
    assert config.queues is not None and set(config.queues) == {result["sqs_queues"]["orders"]}
    assert (config.params.cmin, config.params.cmax) == (2, 12)
    assert result["replay_command"] == f"queuemesh replay {recording} --config {config_path}"
    # Nothing is left behind: no thread, no container process, no listening port.
    deadline = time.monotonic() + 10
    while True:
        leftover = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
        if not leftover or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert leftover == []
    assert multiprocessing.active_children() == []
    assert refuses(result["aws"]) and refuses(result["downstream"])


def fabricated_result() -> dict[str, Any]:
    """A live run's result as run_demo returns it, for the summary alone (no second demo)."""
    score = {
        "messages_total": 1480,
        "messages_done": 1400,
        "dlq_messages": 80,
        "messages_pending": 0,
        "calls_total": 2000,
        "calls_rejected": 300,
        "calls_timed_out": 250,
        "wasted_ratio": 0.15,
        "drain_s": 99.0,
        "ideal_drain_s": 74.0,
        "esm_updates": 3,
        "detection_latency_s": None,
        "reaction_s": None,
    }
    return {
        "scenario": "slow-database-demo",
        "policy": "queuemesh-adaptive",
        "ended_at_s": 99.0,
        "wall_s": 130.0,
        "sqs_queues": {"billing": "queuemesh-local-billing"},
        "queues": {"billing": score},
        "totals": score,
        "ledger": {"billing": None},
        "transitions": [],
        "pace": {
            "from_s": [0, 20],
            "calls_per_invocation_s": [2.9, None],
            "simulated_calls_per_invocation_s": 3.91,
            "ideal_drain_s": 90.0,
            "drain_ratio": 1.1,
        },
    }


def summary_with_cards(scenario_name: str) -> tuple[dict[str, Any], str]:
    """The fabricated result with the simulator's cards for the scenario, and its summary."""
    from stack.local.demo.summary import (
        bound_not_shown,
        print_summary,
        simulated_cards,
        simulated_runs,
    )

    scenario, _ = demo_scenario(scenario_name)
    result = fabricated_result()
    result["simulated"] = simulated_cards(simulated_runs(scenario, "adaptive"))
    result["bound_not_shown"] = bound_not_shown(scenario)
    out = io.StringIO()
    print_summary(result, out)
    return result, out.getvalue()


def test_the_summary_prints_timed_out_calls_and_the_simulators_cards() -> None:
    from stack.local.demo.summary import SIMULATED_POLICIES

    result, text = summary_with_cards("slow-database")
    assert "rejected 300 (15.0%; 250 of them timed out)" in text
    # The host's pace, step by step of the capacity (none measured in the second), and the
    # ideal drain at it beside the oracle's.
    assert (
        "pace (calls a second per running invocation): 2.90 from 0 s (the simulator's 3.91); "
        "the ideal drain at that pace: 90.0 s, this run 1.10x it"
    ) in text
    assert list(result["simulated"]) == list(SIMULATED_POLICIES)
    for policy, totals in result["simulated"].items():
        line = next(line for line in text.splitlines() if line.strip().startswith(policy))
        assert f"rejected {totals['wasted_ratio']:6.1%}" in line
        assert f"dead-lettered {totals['dlq_messages']}" in line
        drain = totals["drain_ratio"]
        assert ("not reached" if drain is None else f"{drain:.2f}x ideal") in line
    # On a database that slows down, the static cap's calls time out: the cards show the storm.
    static = result["simulated"]["static"]
    assert static["calls_timed_out"] > 0.5 * static["calls_total"]
    assert result["simulated"]["queuemesh"]["wasted_ratio"] < static["wasted_ratio"]


def test_the_cards_end_with_the_bound_where_it_knows_the_capacity() -> None:
    from stack.local.demo.summary import SIMULATED_POLICIES

    # The bound knows a queue alone on its API (the announced demo's: the default demo's main
    # queue), not the default demo's two queues sharing it.
    shared, text = summary_with_cards("demo")
    assert list(shared["simulated"]) == list(SIMULATED_POLICIES)
    assert "hindsight" not in text
    # ... and says so.
    assert "no bound card (the capacity known): 2 queues share payments (orders, refunds)" in text
    result, text = summary_with_cards("announced")
    assert result["bound_not_shown"] is None and "no bound card" not in text
    assert list(result["simulated"]) == [*SIMULATED_POLICIES, "hindsight"]
    bound = result["simulated"]["hindsight"]
    line = next(line for line in text.splitlines() if "hindsight" in line)
    assert line.strip().startswith("hindsight")
    assert f"rejected {bound['wasted_ratio']:6.1%}" in line
    assert line.endswith("(a bound: the capacity known)")
    # Nothing refused past the controller's first cut: the bound wastes less than QueueMesh.
    assert bound["wasted_ratio"] < result["simulated"]["queuemesh"]["wasted_ratio"]


def test_the_cards_are_the_simulators_scorecard_for_the_same_scenario() -> None:
    from load.simulate import run_policies
    from stack.local.demo.summary import simulated_cards, simulated_runs

    scenario, _ = demo_scenario("slow-database")
    (seed,) = run_policies([scenario], ["seed"], "adaptive", seed=None)
    assert simulated_cards(simulated_runs(scenario, "adaptive"))["seed"] == seed.card["totals"]


def test_a_shipped_name_with_a_demo_variant_runs_the_variant_and_others_run_as_named() -> None:
    full = load_scenario("slow-database")
    variant, path = demo_scenario("slow-database")
    assert path is not None and path.name == "slow-database.json"
    assert variant.name == "slow-database-demo"
    # The variant keeps the scenario's physics: the same downstream model and client timeout.
    assert (variant.downstreams[0].latency_model, variant.downstreams[0].answers_429) == (
        full.downstreams[0].latency_model,
        full.downstreams[0].answers_429,
    )
    assert variant.queues[0].timeout_ms == full.queues[0].timeout_ms
    assert variant.duration_s < full.duration_s
    named, none = demo_scenario("capacity-drop")
    assert (named.name, none) == ("capacity-drop", None)


def test_announced_is_the_default_demo_and_an_unknown_name_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    announced, path = demo_scenario("announced")
    default = load_scenario(str(DEMO_SCENARIO))
    assert (announced.name, path) == ("announced", None)
    # The default demo's API and its main queue; its small second queue is left out.
    assert (announced.downstreams, announced.queues) == (default.downstreams, default.queues[:1])

    assert main(["demo", "--scenario", "no-such-scenario", "--headless"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "unknown scenario 'no-such-scenario'" in err
    assert "announced, below-floor" in err and "or a scenario .json file" in err


@pytest.mark.timeout(240)
def test_the_announced_demo_telemetry_carries_the_downstreams_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = tmp_path / "telemetry.jsonl"
    code = main(
        [
            "demo",
            "--scenario",
            "announced",
            "--headless",
            "--json",
            "--duration",
            "12",
            "--grace",
            "0",
            "--no-plot",
            "--record",
            str(recording),
        ]
    )

    assert code == 0
    capsys.readouterr()
    decoded = DecodeResult()
    for line in read_recording(recording).records:
        decode_record_data(line.data, sequence_number=line.sequence, into=decoded)
    samples = decoded.samples
    assert samples and "bad_value" not in decoded.skipped
    # The demo's API admits its first capacity a second before its drop, and says so on every
    # answer.
    [(_, limit)] = load_scenario(str(DEMO_SCENARIO)).downstreams[0].capacity_rps[:1]
    announced = [sample for sample in samples if sample.quota_remaining is not None]
    assert len(announced) == len(samples)
    assert {(sample.quota_limit, sample.quota_window_s) for sample in announced} == {(limit, 1.0)}
    # Whole seconds, rounded up, from a timestamp in whole milliseconds.
    assert all(0 <= sample.quota_reset_s <= 1.001 for sample in announced)  # type: ignore[operator]
    assert all(0 <= sample.quota_remaining <= limit for sample in announced)  # type: ignore[operator]


def test_a_scenario_with_two_downstreams_is_refused_in_one_line_naming_the_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["demo", "--scenario", "fleet-storm", "--headless"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "has 2 downstreams" in err and "pass a scenario file with one downstream" in err
