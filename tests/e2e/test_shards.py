"""The live demo on a 4-shard telemetry stream read at a parallelization factor of 2 makes the
same cuts as on one shard (issue 31's target): the reducer hands the controller each queue's
evidence whole, however the stream spreads it. Both runs read a reduced stream of two shards
(the template's default), the second at a parallelization factor of 2 too, and the local
runtime hands each controller batch to the container idle longest: every batch is decided
after reading back what other containers were handed (docs/architecture.md, "Scaling out the
controller")."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from stack.cli import main

# Short: a capacity drop at 6 s, load until 22 s, no grace (two demos run here).
DURATION_S = 22
MAX_CONCURRENCY = 12
SCENARIO = {
    "name": "shards-test",
    "duration_s": DURATION_S,
    "seed": 1,
    "telemetry_delay_s": [1, 2],
    "downstreams": [{"name": "payments", "capacity_rps": [[0, 100], [6, 25]], "latency_ms": 200}],
    "queues": [
        {
            "name": "orders",
            "downstream": "payments",
            "backlog": 600,
            "arrivals_rps": [[0, 30]],
            "batch_size": 10,
            "visibility_timeout_s": 10,
            "max_receive_count": 5,
            "max_concurrency": MAX_CONCURRENCY,
            "min_concurrency": 2,
        }
    ],
}


def _demo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shards: int, factor: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    scenario = tmp_path / "shards-test.json"
    scenario.write_text(json.dumps(SCENARIO))
    recording = tmp_path / f"telemetry-{shards}.jsonl"
    argv = ["demo", "--headless", "--json", "--no-plot", "--grace", "0"]
    argv += ["--scenario", str(scenario), "--record", str(recording)]
    argv += ["--telemetry-shards", str(shards), "--parallelization-factor", str(factor)]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    lines = [json.loads(line) for line in recording.read_text().splitlines()]
    return result, lines


def _cuts(result: dict[str, Any], until: float) -> list[dict[str, Any]]:
    return [t for t in result["transitions"] if t["target"] < t["previous"] and t["t"] < until]


# Two demos, the second cold-starting 24 containers (8 reducer lanes, 4 controller lanes, 12
# workers): slow on a loaded host.
@pytest.mark.timeout(600)
def test_four_shards_at_parallelization_two_cut_as_one_shard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one, _ = _demo(tmp_path, capsys, 1, 1)
    four, lines = _demo(tmp_path, capsys, 4, 2)
    assert (four["telemetry_shards"], four["parallelization_factor"]) == (4, 2)
    assert four["errors"] == [] and one["errors"] == []
    # The telemetry really was spread: records on several shards.
    assert len({line["shard"] for line in lines}) >= 3
    # The same cuts within one level and two seconds: at every moment until the load ends,
    # the four-shard run's level is within one step (on the ladder of levels either run held)
    # of a level the one-shard run held within two seconds of that moment, and the other way
    # round. A
    # trajectory, not the first transition: a live run may split one cut into two a few
    # seconds apart (12 -> 8 -> 5 against 12 -> 5) as its telemetry delays fall.
    horizon = DURATION_S - 3
    expected, cuts = _cuts(one, horizon), _cuts(four, horizon)
    assert expected and cuts, (one["transitions"], four["transitions"])
    held = [t["target"] for t in one["transitions"] + four["transitions"] if t["t"] < horizon]
    levels = sorted({MAX_CONCURRENCY, *held})

    def level(target: int) -> int:
        return min(range(len(levels)), key=lambda i: abs(levels[i] - target))

    for run, other in ((four, one), (one, four)):
        for tenth in range(horizon * 10):
            t = tenth / 10
            near = {level(_held(other, t + dt / 10)) for dt in range(-20, 21)}
            assert min(abs(level(_held(run, t)) - n) for n in near) <= 1, (t, expected, cuts)
    # The in-use estimate behind the cut is the whole queue's, not a shard's share (an eighth
    # of it, at 4 shards and 2 lanes, before the reducing stage).
    assert _in_use(cuts[0]) >= 0.75 * _in_use(expected[0]), (expected, cuts)


def _held(result: dict[str, Any], at: float) -> int:
    """The mapping's level at ``at`` seconds."""
    targets = [t["target"] for t in result["transitions"] if t["t"] <= at]
    return targets[-1] if targets else MAX_CONCURRENCY


IN_USE = re.compile(r"about ([0-9.]+) invocations in use")


def _in_use(transition: dict[str, Any]) -> float:
    found = IN_USE.search(transition["reason"])
    assert found is not None, transition
    return float(found.group(1))
