"""The dead-letter classification (load/dead_letters.py): its messages are the run's own, each
timed within the run, and the classification names every other policy's loss."""

from __future__ import annotations

from dataclasses import replace

import pytest

from load import dead_letters as dl
from load.scorecard import scorecard
from load.sim.engine import simulate
from load.sim.families import CAPACITY_SHAPES, draw_scenario
from load.simulate import make_policy

# throttling seed 7 draw 6: a flash crowd under 4.7% 5xx noise, maxReceiveCount 3; static
# dead-letters 2 messages (noise failing a message three times).
DRAW = ("throttling", 7, 6)


def test_the_noted_dead_letters_are_the_runs_each_timed_within_it() -> None:
    noted = dl.dead_letters((*DRAW, "static", None))
    run = simulate(draw_scenario(*DRAW), make_policy("static", "adaptive"))
    assert noted.messages == scorecard(run)["totals"]["dlq_messages"] == 2
    assert all(0 < when <= run.ended_at and cap > 0 for when, cap in noted.events)


def test_the_shape_names_what_runs_messages_out_of_receives() -> None:
    shape = dl.shape(*DRAW)
    assert shape["shape"] == "flash"
    assert (shape["batch"], shape["visibility_s"], shape["receives"]) == (10, 23, 3)
    assert shape["noise"] == 0.047
    assert shape["floor"] > 1


def test_a_shared_draw_names_its_capacity_shape() -> None:
    assert dl.shape("shared", 100, 1)["shape"] in CAPACITY_SHAPES


def test_noise_alone_expects_each_queues_messages_times_its_noise_to_its_receives() -> None:
    scenario = draw_scenario(*DRAW)
    run = simulate(scenario, make_policy("static", "adaptive"))
    (queue,) = scenario.queues
    messages = run.queues[queue.name].messages_total
    # 4.7% noise, maxReceiveCount 3: about one message in 9,600 fails all three receives.
    assert dl.noise_alone(scenario, run) == pytest.approx(messages * 0.047**3)
    assert dl.dead_letters((*DRAW, "static", None)).noise_alone == dl.noise_alone(scenario, run)
    quiet = replace(
        scenario,
        downstreams=tuple(replace(d, noise_5xx_rate=((0.0, 0.0),)) for d in scenario.downstreams),
    )
    assert dl.noise_alone(quiet, run) == 0.0


def test_the_summary_counts_the_laws_dead_letters_by_who_else_loses_some() -> None:
    rows = [
        {"queuemesh": 2, "static": 2, "hindsight": 2, "vegas": 1, "floor": 36.0, "by_noise": 0.4},
        {
            "queuemesh": 481,
            "static": 3652,
            "hindsight": 0,
            "vegas": 2645,
            "floor": 0.49,
            "by_noise": 0.0,
        },
        {"queuemesh": 3, "static": 0, "hindsight": 0, "vegas": 0, "floor": 1.35, "by_noise": 0.1},
        {"queuemesh": 7, "static": 0, "vegas": 0, "floor": 2.0, "by_noise": 0.09},
    ]
    assert dl.summary(rows, ["vegas"]).splitlines() == [
        "the bound too: 1 draws, 2 messages",
        "static and every peer too: 2 draws, 483 messages",
        "no other policy: 2 draws, 10 messages",
        "under the floor: 1 draws, 481 messages",
        "noise alone expects 0.1 or more: 2 draws, 5 messages",
    ]
