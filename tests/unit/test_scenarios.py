"""Scenario files: the shipped ones load, the contract's example is shipped as is, and a bad
file gets one line naming the key and what is wrong."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from load.sim.scenario import (
    SCENARIO_DIR,
    ScenarioError,
    load_scenario,
    parse_scenario,
    shipped_scenarios,
)
from stack.cli import main

CONTRACT_EXAMPLE: dict[str, Any] = {
    "name": "capacity-drop",
    "duration_s": 900,
    "seed": 7,
    "telemetry_delay_s": [1, 5],
    "downstreams": [
        {"name": "payments", "capacity_rps": [[0, 100], [120, 25], [480, 100]], "latency_ms": 80}
    ],
    "queues": [
        {
            "name": "orders",
            "downstream": "payments",
            "backlog": 20000,
            "arrivals_rps": [[0, 20], [300, 0]],
            "batch_size": 10,
            "visibility_timeout_s": 30,
            "max_receive_count": 5,
            "max_concurrency": 100,
            "min_concurrency": 2,
        }
    ],
}

REQUIRED = {
    "capacity-drop",
    "flash-crowd",
    "slow-recovery",
    "shared-downstream",
    "noisy",
    "ample-capacity",
    "steady-surges",
    "long-recovery",
    "heavy-tail-latency",
    "slow-database",
    "brownout",
}
# Sized for a live two-minute run, not for the scorecard: `queuemesh demo`'s scenario, and the
# same at the latency the local stack's workers measure.
LIVE_SIZED = {"demo", "demo-announced", "uneven-fit"}


def test_the_contract_example_is_shipped_exactly() -> None:
    shipped = json.loads((SCENARIO_DIR / "capacity-drop.json").read_text(encoding="utf-8"))
    assert shipped == CONTRACT_EXAMPLE


def test_every_shipped_scenario_loads_and_stops_arriving_before_it_ends() -> None:
    names = shipped_scenarios()
    assert REQUIRED | {"below-floor"} <= set(names)
    for name in names:
        scenario = load_scenario(name)
        assert scenario.name == name
        if name in LIVE_SIZED:
            continue
        for queue in scenario.queues:
            assert queue.arrivals_rps[-1][1] == 0, f"{name}: {queue.name} arrives until the end"
            assert queue.arrivals_rps[-1][0] < scenario.duration_s / 2


def test_the_latency_keys_load() -> None:
    document = copy.deepcopy(CONTRACT_EXAMPLE)
    document["downstreams"][0].update(
        latency_ms=[[0, 80], [60, 160]], latency_model="queueing", answers_429=False
    )
    document["queues"][0]["timeout_ms"] = 1000
    scenario = parse_scenario(json.dumps(document), source="latency.json")
    downstream = scenario.downstreams[0]
    assert downstream.latency_ms == ((0, 80), (60, 160))
    assert (downstream.latency_model, downstream.answers_429) == ("queueing", False)
    assert downstream.latency_tail is None
    assert scenario.queues[0].timeout_ms == 1000
    # Left out: the contract's model (constant latency, 429 above capacity, no client timeout).
    plain = load_scenario("capacity-drop")
    assert (plain.downstreams[0].latency_model, plain.downstreams[0].answers_429) == (
        "constant",
        True,
    )
    assert plain.downstreams[0].latency_ms == ((0, 80),)
    assert plain.queues[0].timeout_ms is None


def test_a_queue_names_its_standing_in_its_downstreams_group() -> None:
    document = copy.deepcopy(CONTRACT_EXAMPLE)
    document["queues"][0].update(group="payments", weight=2.5, priority=9)
    queue = parse_scenario(json.dumps(document), source="group.json").queues[0]
    assert (queue.group, queue.weight, queue.priority) == ("payments", 2.5, 9)
    plain = load_scenario("capacity-drop").queues[0]
    assert (plain.group, plain.weight, plain.priority) == (None, 1.0, 0)


def test_a_scenario_file_loads_by_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(CONTRACT_EXAMPLE), encoding="utf-8")
    scenario = load_scenario(str(path))
    assert scenario.queues[0].batch_size == 10
    assert scenario.downstreams[0].capacity_rps == ((0, 100), (120, 25), (480, 100))


def _set(path: str, value: object) -> Callable[[dict[str, Any]], None]:
    def mutate(document: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = document
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[int(last) if last.isdigit() else last] = value

    return mutate


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(document: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = document
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        del target[last]

    return mutate


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            _set("queues.0.batch_size", "ten"),
            'queues[0].batch_size must be an integer >= 1, got "ten"',
        ),
        (_set("queues.0.batch_size", 0), "queues[0].batch_size must be an integer >= 1, got 0"),
        (
            _set("queues.0.max_concurrency", 1001),
            "queues[0].max_concurrency must be an integer in [2, 1000], got 1001",
        ),
        (
            _set("queues.0.min_concurrency", 200),
            "queues[0].min_concurrency must be an integer in [2, 100], got 200",
        ),
        (
            _set("queues.0.downstream", "ledger"),
            'queues[0].downstream must name one of the downstreams (payments), got "ledger"',
        ),
        (
            _set("downstreams.0.capacity_rps", [[0, 100], [480, 25], [120, 100]]),
            "downstreams[0].capacity_rps[2][0] must be later than the step before it, got 120",
        ),
        (
            _set("downstreams.0.capacity_rps", [[5, 100]]),
            "downstreams[0].capacity_rps[0][0] must be 0 (a schedule starts at t=0), got 5",
        ),
        (
            _set("downstreams.0.capacity_rps", [[0, -1]]),
            "downstreams[0].capacity_rps[0][1] must be a number >= 0, got -1",
        ),
        (
            _set("telemetry_delay_s", [5, 1]),
            "telemetry_delay_s must be [lo, hi] seconds with 0 <= lo <= hi, got [5, 1]",
        ),
        (_delete("duration_s"), "duration_s is required (a number > 0)"),
        (_set("queues.0.colour", "red"), "queues[0].colour is not a known key"),
        (_set("queues", []), "queues must be a non-empty list, got []"),
        (
            _set("downstreams.0.noise_5xx_rate", 2),
            "downstreams[0].noise_5xx_rate[0][1] must be a number in [0, 1], got 2",
        ),
        (
            _set("downstreams.0.latency_ms", 0),
            "downstreams[0].latency_ms[0][1] must be a number > 0, got 0",
        ),
        (
            _set("downstreams.0.latency_ms", [[0, 80], [60, -5]]),
            "downstreams[0].latency_ms[1][1] must be a number > 0, got -5",
        ),
        (
            _set("downstreams.0.latency_model", "fast"),
            'downstreams[0].latency_model must be one of constant, queueing, got "fast"',
        ),
        (
            _set("downstreams.0.answers_429", "no"),
            'downstreams[0].answers_429 must be true or false, got "no"',
        ),
        (
            _set("downstreams.0.answers_429", False),
            'downstreams[0].answers_429 may be false only with "latency_model": "queueing"',
        ),
        (
            _set("downstreams.0.latency_tail", 1),
            "downstreams[0].latency_tail must be a Pareto shape > 1 (e.g. 2), got 1",
        ),
        (_set("queues.0.timeout_ms", 0), "queues[0].timeout_ms must be a number > 0, got 0"),
        (_set("queues.0.weight", 0), "queues[0].weight must be a number in [0.01, 100], got 0"),
        (
            _set("queues.0.priority", 10),
            "queues[0].priority must be an integer in [0, 9], got 10",
        ),
        (_set("queues.0.group", ""), 'queues[0].group must be a non-empty string, got ""'),
        (
            _set("downstreams.0.announce", "retry-after"),
            "downstreams[0].announce must be one of ietf, ietf-legacy, x-ratelimit, github, "
            'stripe, got "retry-after"',
        ),
    ],
)
def test_a_bad_scenario_names_the_key_and_what_is_wrong(
    mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    document = copy.deepcopy(CONTRACT_EXAMPLE)
    mutate(document)
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(json.dumps(document), source="capacity-drop.json")
    text = str(caught.value)
    assert text.startswith(f"scenario capacity-drop.json: {message}")
    assert "\n" not in text


def test_not_json_says_where() -> None:
    with pytest.raises(ScenarioError, match=r"scenario x\.json: not valid JSON .* line 1"):
        parse_scenario("{", source="x.json")


def test_an_unknown_name_lists_the_shipped_ones() -> None:
    with pytest.raises(ScenarioError, match=r"unknown scenario 'nope'; shipped: .*capacity-drop"):
        load_scenario("nope")


def test_the_cli_prints_one_line_for_a_bad_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = copy.deepcopy(CONTRACT_EXAMPLE)
    document["queues"][0]["batch_size"] = "ten"
    path = tmp_path / "capacity-drop.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    code = main(["simulate", "--scenario", str(path)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert captured.err == (
        "queuemesh simulate: error: scenario capacity-drop.json: queues[0].batch_size must be "
        'an integer >= 1, got "ten"\n'
    )


def test_the_latency_scenarios_are_what_their_names_say() -> None:
    slow = load_scenario("slow-database")
    assert slow.downstreams[0].latency_model == "queueing"
    assert not slow.downstreams[0].answers_429
    assert slow.queues[0].timeout_ms is not None
    brownout = load_scenario("brownout")
    latency = [value for _, value in brownout.downstreams[0].latency_ms]
    assert latency == [latency[0], 2 * latency[0], latency[0]]
    assert len(brownout.downstreams[0].capacity_rps) == 1
    heavy = load_scenario("heavy-tail-latency")
    assert heavy.downstreams[0].latency_tail is not None
    assert heavy.downstreams[0].latency_model == "constant"
    assert heavy.queues[0].timeout_ms is None


def test_the_announced_scenarios_are_their_blind_ones_announcing_their_quota() -> None:
    for blind in ("capacity-drop", "below-floor", "flash-crowd", "demo"):
        announced = load_scenario(f"{blind}-announced")
        (downstream,) = announced.downstreams
        assert downstream.announce is not None
        same = dataclasses.replace(
            announced,
            name=blind,
            description=load_scenario(blind).description,
            downstreams=(dataclasses.replace(downstream, announce=None),),
        )
        assert same == load_scenario(blind)


def test_only_a_downstream_that_answers_429_announces() -> None:
    document = copy.deepcopy(CONTRACT_EXAMPLE)
    document["downstreams"][0].update(
        {"answers_429": False, "latency_model": "queueing", "announce": "ietf"}
    )
    with pytest.raises(ScenarioError, match=r"downstreams\[0\]\.announce needs a downstream"):
        parse_scenario(json.dumps(document), source="x.json")
