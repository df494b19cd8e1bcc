"""The simulator: physics on tiny scenarios, determinism, the oracle, the scorecard, the CLI."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.model import Action, Backlog
from controller.policy import DEFAULT_ALGORITHM
from load.oracle import ideal_drain_times, invocation_pace, paced_drain_time
from load.plot import policy_colours
from load.scorecard import scorecard
from load.sim.engine import ARRIVAL_STEP_S, SIM_EPOCH, BacklogNow, simulate
from load.sim.policies import (
    ClimbingHindsightPolicy,
    HindsightPolicy,
    LaggedHindsightPolicy,
    QueueMeshPolicy,
    SeedPolicy,
    StaticPolicy,
)
from load.sim.scenario import Scenario, load_scenario, parse_scenario
from load.sim.services import POLLER_START, POLLER_STEP_PER_S, Arrivals, arrived_by
from load.simulate import BOUND_POLICIES, make_policy
from stack.cli import main
from tests.factories import SIMULATED_POLICIES


def tiny(**changes: Any) -> Scenario:
    """One queue, one downstream, a minute: small enough for unit tests."""
    queue: dict[str, Any] = {
        "name": "q",
        "downstream": "api",
        "backlog": 2000,
        "arrivals_rps": [[0, 0]],
        "batch_size": 10,
        "visibility_timeout_s": 10,
        "max_receive_count": 3,
        "max_concurrency": 20,
        "min_concurrency": 2,
        "invocation_overhead_ms": 30,
        "timeout_ms": None,
    }
    downstream: dict[str, Any] = {
        "name": "api",
        "capacity_rps": [[0, 1000]],
        "latency_ms": 50,
        "noise_5xx_rate": 0,
        "latency_model": "constant",
        "latency_tail": None,
        "answers_429": True,
        "announce": None,
    }
    document: dict[str, Any] = {
        "name": "tiny",
        "duration_s": 120,
        "seed": 3,
        "telemetry_delay_s": [1, 2],
        "downstreams": [downstream],
        "queues": [queue],
    }
    for key, value in changes.items():
        if key in queue:
            queue[key] = value
        elif key in downstream:
            downstream[key] = value
        else:
            document[key] = value
    return parse_scenario(json.dumps(document), source="tiny.json")


# --- physics ---------------------------------------------------------------------------
def test_the_poller_starts_at_five_and_adds_five_a_second_up_to_the_cap() -> None:
    result = simulate(tiny(backlog=20000, max_concurrency=20), StaticPolicy())
    running = result.queues["q"].running_per_s
    for second, value in enumerate(running[:10]):
        assert value <= min(20, POLLER_START + POLLER_STEP_PER_S * second)
    assert max(running) == 20
    assert running[0] == POLLER_START


def test_without_capacity_every_message_is_tried_max_receive_count_times_then_dead_lettered() -> (
    None
):
    result = simulate(tiny(backlog=100, capacity_rps=[[0, 0]], duration_s=300), StaticPolicy())
    trace = result.queues["q"]
    assert trace.messages_done == 0
    assert trace.dlq_messages == 100
    assert trace.calls_total == trace.calls_rejected == 100 * 3
    card = scorecard(result)["queues"]["q"]
    assert card["drain_s"] is None
    assert card["drain_ratio"] is None
    assert card["wasted_ratio"] == 1.0


def test_a_downstream_accepts_its_capacity_each_second_and_rejects_the_rest() -> None:
    result = simulate(tiny(backlog=5000, capacity_rps=[[0, 40]]), StaticPolicy())
    trace = result.queues["q"]
    ok_per_s = [c - r for c, r in zip(trace.calls_per_s, trace.rejected_per_s, strict=True)]
    assert max(ok_per_s) == 40
    assert trace.calls_rejected > 0


def test_rejected_messages_come_back_after_the_visibility_timeout() -> None:
    # Capacity for a first try of half the messages, then none for a while, then plenty:
    # the rejected ones are received again only once their visibility timeout has passed.
    result = simulate(
        tiny(backlog=200, capacity_rps=[[0, 100], [2, 0], [20, 1000]], visibility_timeout_s=10),
        StaticPolicy(),
    )
    trace = result.queues["q"]
    assert trace.messages_done == 200
    assert trace.dlq_messages == 0
    assert sum(trace.calls_per_s[3:10]) == 0


def test_noise_is_5xx_that_fails_messages_but_is_not_pressure() -> None:
    result = simulate(tiny(backlog=5000, noise_5xx_rate=0.05, max_receive_count=10), StaticPolicy())
    trace = result.queues["q"]
    assert trace.calls_rejected == 0
    assert 0.03 < trace.calls_noise / trace.calls_total < 0.07
    assert trace.messages_done == 5000
    assert all(
        delivery.sample.pressure == 0 and delivery.sample.overloaded == 0
        for delivery in result.telemetry
    )


def test_arrivals_follow_the_schedule() -> None:
    schedule = ((0.0, 10.0), (5.0, 0.0), (8.0, 2.5))
    assert arrived_by(7, schedule, 0.0) == 7
    assert arrived_by(7, schedule, 3.0) == 37
    assert arrived_by(7, schedule, 6.0) == 57
    assert arrived_by(7, schedule, 10.0) == 62


def summed_from_the_start(backlog: int, schedule: Sequence[tuple[float, float]], t: float) -> int:
    """The count each read of a schedule must give: every segment before ``t``, summed in
    order from the start."""
    total = 0.0
    for index, (start, rate) in enumerate(schedule):
        if start >= t:
            break
        end = schedule[index + 1][0] if index + 1 < len(schedule) else math.inf
        total += rate * (min(t, end) - start)
    return backlog + math.floor(total + 1e-9)


@given(
    st.lists(
        st.tuples(st.integers(1, 600), st.floats(0, 500, allow_nan=False)), min_size=0, max_size=8
    ),
    st.floats(0, 500, allow_nan=False),
    st.lists(st.integers(0, 12_000), min_size=1, max_size=40),
)
@settings(max_examples=300)
def test_arrivals_read_at_later_times_count_as_summing_from_the_start(
    steps: list[tuple[int, float]], first_rate: float, tenths: list[int]
) -> None:
    starts = sorted({start for start, _ in steps})
    rates = dict(steps)
    schedule = ((0.0, first_rate), *((float(start), rates[start]) for start in starts))
    arrivals = Arrivals(3, schedule)
    count = None
    for tenth in sorted(tenths):
        t = tenth * ARRIVAL_STEP_S
        expected = summed_from_the_start(3, schedule, t)
        if t < arrivals.quiet_until:
            # A read the engine skips would have found nothing new.
            assert expected == count
        else:
            count = arrivals.by(t)
            assert count == expected


def test_one_sample_per_invocation_delivered_within_the_telemetry_delay() -> None:
    result = simulate(tiny(backlog=500, telemetry_delay_s=[2, 3]), StaticPolicy())
    samples = [delivery.sample for delivery in result.telemetry]
    assert sum(sample.requests for sample in samples) == result.queues["q"].calls_total
    for delivery in result.telemetry:
        emitted = delivery.sample.event_time - 1_767_225_600.0
        assert 2.0 <= delivery.arrival - emitted <= 3.0
        assert delivery.sample.invocation_ms == delivery.sample.requests * 50.0


# --- determinism -----------------------------------------------------------------------
@pytest.mark.parametrize("policy", [StaticPolicy, SeedPolicy, QueueMeshPolicy])
def test_the_same_seed_gives_the_same_scorecard(policy: type) -> None:
    scenario = tiny(backlog=3000, capacity_rps=[[0, 300], [20, 60]], noise_5xx_rate=0.01)
    first = scorecard(simulate(scenario, policy(), seed=5))
    second = scorecard(simulate(scenario, policy(), seed=5))
    assert first == second
    other = scorecard(simulate(scenario, policy(), seed=6))
    assert other["seed"] == 6
    assert other != first


# --- policies --------------------------------------------------------------------------
def test_static_never_moves_the_mapping() -> None:
    result = simulate(tiny(capacity_rps=[[0, 100]]), StaticPolicy())
    assert set(result.queues["q"].cap_per_s) == {20}
    assert result.esm_updates == {"q": 0}


def test_seed_halves_on_a_storm_and_adds_alpha_when_clean() -> None:
    result = simulate(tiny(backlog=20000, capacity_rps=[[0, 1000], [5, 50]]), SeedPolicy())
    caps = result.queues["q"].cap_per_s
    assert caps[0] == 20
    assert min(caps[5:30]) < 10
    assert max(caps[30:]) > min(caps[5:30])
    assert result.esm_updates["q"] > 0


def test_queuemesh_runs_the_real_controller_and_the_poller_follows_its_mapping() -> None:
    policy = QueueMeshPolicy()
    result = simulate(tiny(backlog=12000, capacity_rps=[[0, 1000], [20, 50]]), policy)
    trail = policy.ledger.audit_trail("q")
    actions = [entry.action for entry in trail]
    assert "REGISTER" in actions
    assert Action.MULTIPLICATIVE_DECREASE.value in actions
    changes = [entry for entry in trail if entry.new_value != entry.previous_value]
    assert result.esm_updates["q"] == len(changes)
    # The poller never runs above the mapping it read in the second before.
    trace = result.queues["q"]
    for second in range(1, len(trace.cap_per_s)):
        assert trace.running_per_s[second] <= max(trace.cap_per_s[second - 1 : second + 1])


def test_a_policy_reads_the_visible_messages_the_controller_would() -> None:
    """What the engine hands a policy as the backlog read: the messages a receive could take
    (not those in flight), at the policy's own time, and the queue's visibility timeout."""
    seen: list[Backlog] = []

    class Watching(StaticPolicy):
        def start(self, scenario: Scenario, backlog: BacklogNow) -> None:
            super().start(scenario, backlog)
            self.backlog = backlog

        def on_tick(self, now: float) -> None:
            seen.append(self.backlog("q"))

    simulate(tiny(max_concurrency=5, controller_schedule_s=5, visibility_timeout_s=45), Watching())
    # Five batches of ten received at time 0.
    assert seen[0] == Backlog(2000 - POLLER_START * 10, visibility_timeout_s=45.0)
    visible = [backlog.visible for backlog in seen]
    assert visible == sorted(visible, reverse=True)  # no arrivals, no failures: it only drains
    assert visible[-1] < visible[0]


def test_queuemesh_pauses_a_mapping_whose_floor_overloads_the_downstream() -> None:
    scenario = tiny(backlog=3000, capacity_rps=[[0, 2]], duration_s=400, max_receive_count=5)
    result = simulate(scenario, QueueMeshPolicy())
    trace = result.queues["q"]
    assert not all(trace.enabled_per_s)
    assert trace.dlq_messages == 0
    seed = simulate(scenario, SeedPolicy()).queues["q"]
    assert trace.calls_rejected < seed.calls_rejected


def test_hindsight_runs_the_controller_until_its_first_cut_then_the_level_the_capacity_fits() -> (
    None
):
    # An invocation makes 10 calls of 50 ms in 0.53 s: 18.9 a second. 150/s fits 7 of them
    # and 50/s fits 2; the 20 the poller runs at first send 377/s.
    scenario = tiny(backlog=20000, capacity_rps=[[0, 150], [30, 50], [45, 150]])
    law = simulate(scenario, QueueMeshPolicy())
    result = simulate(scenario, HindsightPolicy())
    trace = result.queues["q"]
    cut = next(second for second, cap in enumerate(trace.cap_per_s) if cap < 20)
    assert trace.cap_per_s[:cut] == law.queues["q"].cap_per_s[:cut]
    assert cut > 1
    # The fall at 30 s is known a second later (the shortest telemetry delay), the rise at
    # 45 s at once.
    assert trace.cap_per_s[cut:31] == [7] * (31 - cut)
    assert trace.cap_per_s[31:45] == [2] * 14
    assert set(trace.cap_per_s[45:]) == {7}
    # Refused: the first seconds and the fall's first second; nothing else.
    assert sum(trace.rejected_per_s[cut + 1 : 30]) == 0
    assert trace.rejected_per_s[30] > 0
    assert sum(trace.rejected_per_s[32:]) == 0
    assert trace.calls_rejected < law.queues["q"].calls_rejected
    # One mapping update a level: the controller's cut, then 7, 2 and 7.
    assert result.esm_updates == {"q": 4}


def test_the_lagged_bound_knows_a_rise_as_late_as_a_fall() -> None:
    # The scenario above: the fall at 30 s known at 31 s, as hindsight knows it; the rise at
    # 45 s only at 46 s, once a call it let through could have reported.
    scenario = tiny(backlog=20000, capacity_rps=[[0, 150], [30, 50], [45, 150]])
    bound = simulate(scenario, HindsightPolicy()).queues["q"]
    lagged = simulate(scenario, LaggedHindsightPolicy()).queues["q"]
    assert lagged.cap_per_s[:45] == bound.cap_per_s[:45]
    assert lagged.cap_per_s[45] == 2
    assert set(lagged.cap_per_s[46:]) == {7}
    # A second at 2 where 7 fit: fewer calls done by the end of 45 s, none refused for it.
    assert sum(lagged.ok_per_s[:46]) < sum(bound.ok_per_s[:46])
    assert lagged.calls_rejected == bound.calls_rejected


def test_the_climbing_bound_learns_a_rise_by_doubling_from_its_level_or_from_cmin() -> None:
    # The fall at 30 s known at 31 s, as every bound knows it; the rise at 45 s a report later,
    # as the lagged bound knows it, and then only by doubling a level a report apart: 2, 4, 7.
    scenario = tiny(backlog=20000, capacity_rps=[[0, 150], [30, 50], [45, 150]])
    lagged = simulate(scenario, LaggedHindsightPolicy()).queues["q"]
    climbing = simulate(scenario, ClimbingHindsightPolicy()).queues["q"]
    assert climbing.cap_per_s[:46] == lagged.cap_per_s[:46]
    assert climbing.cap_per_s[46:48] == [4, 7]
    assert set(climbing.cap_per_s[48:]) == {7}
    assert climbing.calls_rejected == lagged.calls_rejected
    # Paused where even Cmin sends more: resumed when the lagged bound is, at Cmin, and
    # doubled from there.
    paused = tiny(backlog=3000, capacity_rps=[[0, 2], [120, 300]], duration_s=400)
    lagged = simulate(paused, LaggedHindsightPolicy()).queues["q"]
    climbing = simulate(paused, ClimbingHindsightPolicy()).queues["q"]
    resumed = lagged.enabled_per_s.index(True, 100)
    assert climbing.enabled_per_s.index(True, 100) == resumed
    assert lagged.cap_per_s[resumed] == 15
    climb = climbing.cap_per_s[resumed : resumed + 6]
    assert climb[0] == 2 and climb[-1] == 15
    assert all(b in (a, min(15, 2 * a)) for a, b in itertools.pairwise(climb))
    assert climbing.last_done_at > lagged.last_done_at


def test_hindsight_pauses_where_even_cmin_sends_more_until_the_capacity_returns() -> None:
    scenario = tiny(backlog=3000, capacity_rps=[[0, 2], [120, 300]], duration_s=400)
    trace = simulate(scenario, HindsightPolicy()).queues["q"]
    paused = [second for second, enabled in enumerate(trace.enabled_per_s) if not enabled]
    # Paused from the controller's first cut until the first controller run after the
    # capacity returned (the one-minute tick at 120 s: a paused queue reports nothing).
    assert paused == list(range(paused[0], 120))
    assert trace.cap_per_s[120] == 15
    assert sum(trace.rejected_per_s[paused[0] + 1 :]) == 0
    assert trace.dlq_messages == 0


def test_hindsight_leaves_to_the_controller_a_queue_without_a_pace_or_with_neighbours() -> None:
    queueing = tiny(backlog=6000, capacity_rps=[[0, 300], [20, 60]], latency_model="queueing")
    single = tiny(backlog=6000, capacity_rps=[[0, 300], [20, 60]])
    shared = replace(single, queues=(*single.queues, replace(single.queues[0], name="r")))
    assert HindsightPolicy.knows(single)
    assert HindsightPolicy.unknown_because(single) is None
    # Said to whoever reads the cards (the demo's summary): which queues share, or no pace.
    assert "2 queues share api (q, r)" in str(HindsightPolicy.unknown_because(shared))
    assert "latency changes" in str(HindsightPolicy.unknown_because(queueing))
    for scenario in (queueing, shared):
        assert not HindsightPolicy.knows(scenario)
        law = simulate(scenario, QueueMeshPolicy())
        bound = simulate(scenario, HindsightPolicy())
        for queue in law.queues:
            assert bound.queues[queue].cap_per_s == law.queues[queue].cap_per_s
        assert bound.esm_updates == law.esm_updates
    assert (
        simulate(single, HindsightPolicy()).queues["q"].cap_per_s
        != simulate(single, QueueMeshPolicy()).queues["q"].cap_per_s
    )


# --- the oracle ------------------------------------------------------------------------
def test_the_oracle_on_the_contract_example() -> None:
    # 20000 + 20/s arrive; 100/s until 120 leaves 10400, 25/s against 20/s arriving until
    # 300 leaves 9500, 25/s until 480 leaves 5000, 100/s clears them by 530.
    assert ideal_drain_times(load_scenario("capacity-drop")) == {"orders": 530.0}


def test_the_oracle_on_hand_checked_cases() -> None:
    assert ideal_drain_times(tiny(backlog=1000, capacity_rps=[[0, 100]])) == {"q": 10.0}
    # Arrivals the downstream keeps up with: done when the last one arrives.
    steady = tiny(backlog=0, arrivals_rps=[[0, 10], [30, 0]], capacity_rps=[[0, 50]])
    assert ideal_drain_times(steady) == {"q": 30.0}
    # A backlog that first grows (60 arriving against 40), then drains at 40.
    growing = tiny(backlog=0, arrivals_rps=[[0, 60], [10, 0]], capacity_rps=[[0, 40]])
    assert ideal_drain_times(growing) == {"q": 15.0}
    # Capacity that only comes later.
    late = tiny(backlog=500, capacity_rps=[[0, 0], [20, 50]])
    assert ideal_drain_times(late) == {"q": 30.0}
    assert ideal_drain_times(tiny(capacity_rps=[[0, 0]])) == {"q": None}


def test_the_oracle_pools_queues_that_share_a_downstream() -> None:
    document = json.loads(
        Path(load_scenario.__globals__["SCENARIO_DIR"], "capacity-drop.json").read_text(
            encoding="utf-8"
        )
    )
    document["downstreams"][0]["capacity_rps"] = [[0, 100]]
    first = dict(document["queues"][0], name="a", backlog=500, arrivals_rps=[[0, 0]])
    second = dict(first, name="b", backlog=1500)
    document["queues"] = [first, second]
    drains = ideal_drain_times(parse_scenario(json.dumps(document), source="pool.json"))
    assert drains == {"a": 20.0, "b": 20.0}


def test_the_ideal_at_a_pace_caps_each_step_at_what_the_cap_sends() -> None:
    # 20 invocations at 2 calls a second send 40/s: 1000 messages on 100/s take 25 s, not 10.
    scenario = tiny(backlog=1000, capacity_rps=[[0, 100], [10, 30]])
    assert paced_drain_time(scenario, "api", [None, None]) == ideal_drain_times(scenario)["q"]
    # 40/s for 10 s (400), then 30/s, under the cap's 40: 600 more take 20 s.
    assert paced_drain_time(scenario, "api", [2.0, 2.0]) == 30.0
    # A pace for the first step only: the second keeps its capacity.
    assert paced_drain_time(scenario, "api", [2.0, None]) == 30.0
    assert paced_drain_time(scenario, "api", [1.0, None]) == 10.0 + 800 / 30


def test_the_ideal_at_a_pace_pools_the_caps_of_the_queues_on_the_downstream() -> None:
    # A second queue of 10 invocations and 500 messages: 30 invocations at 2 calls a second
    # send 60/s, for 1,500 messages: 10 s at 60 (600), then 900 at 30/s.
    one = tiny(backlog=1000, capacity_rps=[[0, 100], [10, 30]])
    second = dataclasses.replace(one.queues[0], name="r", backlog=500, max_concurrency=10)
    scenario = dataclasses.replace(one, queues=(*one.queues, second))
    assert paced_drain_time(scenario, "api", [2.0, 2.0]) == 10.0 + 900 / 30


def test_a_heavy_tail_keeps_the_pace_the_simulated_invocations_make() -> None:
    # The tail's factor has a mean of 1: over many invocations, each slot makes the calls of
    # the batch over the mean invocation time, as without it.
    scenario = tiny(latency_tail=2.0, backlog=40000, capacity_rps=[[0, 100000]], duration_s=200)
    trace = simulate(scenario, StaticPolicy(), seed=1).queues["q"]
    full = [second for second, running in enumerate(trace.running_per_s) if running == 20][5:-5]
    made = sum(trace.calls_per_s[second] for second in full)
    slots = sum(trace.running_per_s[second] for second in full)
    assert len(full) > 60
    assert made / slots == pytest.approx(invocation_pace(scenario, scenario.queues[0]), rel=0.02)


def test_an_invocations_pace_is_its_batch_over_its_calls_and_overhead() -> None:
    scenario = tiny()
    # 10 calls of 50 ms and 30 ms of overhead: 10 calls in 0.53 s.
    assert invocation_pace(scenario, scenario.queues[0]) == pytest.approx(10 / 0.53)
    # A latency that grows with the load has no pace of its own.
    queueing = load_scenario("slow-database")
    assert invocation_pace(queueing, queueing.queues[0]) is None


# --- the scorecard ---------------------------------------------------------------------
def test_the_scorecard_has_the_contract_keys_per_queue_and_in_total() -> None:
    card = scorecard(simulate(tiny(backlog=3000, capacity_rps=[[0, 200], [15, 50]]), SeedPolicy()))
    keys = {
        "messages_total",
        "messages_done",
        "dlq_messages",
        "calls_total",
        "calls_rejected",
        "wasted_ratio",
        "drain_s",
        "ideal_drain_s",
        "drain_ratio",
        "esm_updates",
        "reaction_s",
    }
    assert keys <= set(card["queues"]["q"]) and keys <= set(card["totals"])
    assert (card["scenario"], card["policy"]) == ("tiny", "seed")
    queue = card["queues"]["q"]
    assert queue["wasted_ratio"] == round(queue["calls_rejected"] / queue["calls_total"], 4)
    if queue["drain_s"] is not None:
        assert queue["drain_ratio"] == round(queue["drain_s"] / queue["ideal_drain_s"], 3)
    assert queue["reaction_s"] is not None and queue["reaction_s"] >= 1


# --- the command -----------------------------------------------------------------------
@pytest.fixture
def tiny_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.json"
    scenario = tiny(backlog=3000, capacity_rps=[[0, 300], [15, 60]])
    document = {
        "name": scenario.name,
        "duration_s": scenario.duration_s,
        "seed": scenario.seed,
        "telemetry_delay_s": list(scenario.telemetry_delay_s),
        "downstreams": [{"name": "api", "capacity_rps": [[0, 300], [15, 60]], "latency_ms": 50}],
        "queues": [
            {
                "name": "q",
                "downstream": "api",
                "backlog": 3000,
                "arrivals_rps": [[0, 0]],
                "batch_size": 10,
                "visibility_timeout_s": 10,
                "max_receive_count": 3,
                "max_concurrency": 20,
                "min_concurrency": 2,
            }
        ],
    }
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_simulate_json_lists_one_scorecard_per_policy(
    tiny_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--scenario", str(tiny_file), "--json"]) == 0
    cards = json.loads(capsys.readouterr().out)
    assert [card["policy"] for card in cards] == SIMULATED_POLICIES
    assert main(["simulate", "--scenario", str(tiny_file), "--json", "--policy", "seed"]) == 0
    single = json.loads(capsys.readouterr().out)
    assert single["policy"] == "seed" and single == cards[1]
    # The bounds run only when named.
    for bound in BOUND_POLICIES:
        assert main(["simulate", "--scenario", str(tiny_file), "--json", "--policy", bound]) == 0
        assert json.loads(capsys.readouterr().out)["policy"] == bound
    assert not set(BOUND_POLICIES) & {card["policy"] for card in cards}


@pytest.mark.parametrize("peer", ["vector-arc", "envoy-gradient"])
def test_vector_and_envoy_are_peers_the_cli_runs_by_name(
    peer: str, tiny_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--scenario", str(tiny_file), "--json", "--policy", peer]) == 0
    card = json.loads(capsys.readouterr().out)
    assert card["policy"] == peer
    # The same core as queuemesh, deciding by the peer's own rule: every change says so.
    policy = make_policy(peer, DEFAULT_ALGORITHM)
    assert isinstance(policy, QueueMeshPolicy)
    result = simulate(tiny(backlog=12000, capacity_rps=[[0, 1000], [20, 50]]), policy)
    changes = [
        entry
        for entry in policy.ledger.audit_trail("q")
        if entry.action != "REGISTER" and entry.new_value != entry.previous_value
    ]
    assert changes and all(entry.reason.startswith(f"{peer}: ") for entry in changes)
    assert result.esm_updates["q"] == len(changes)
    assert scorecard(result)["policy"] == peer


def test_every_policy_keeps_one_colour_of_its_own_on_the_plot() -> None:
    # Each policy's cap, running, goodput and share lines share its colour: the peers and the
    # bound too, not the next of matplotlib's cycle for each line.
    runs = [*SIMULATED_POLICIES, "hindsight"]
    colours = policy_colours([*runs, "queuemesh"])
    assert list(colours) == runs
    assert len(set(colours.values())) == len(runs)
    assert policy_colours(["queuemesh"]) == {"queuemesh": colours["queuemesh"]}


def test_simulate_table_plot_and_recording(
    tiny_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plot, recording = tmp_path / "runs.png", tmp_path / "run.jsonl"
    code = main(
        ["simulate", "--scenario", str(tiny_file), "--plot", str(plot), "--record", str(recording)]
    )
    captured = capsys.readouterr()
    assert code == 0
    assert "policy" in captured.out and "queuemesh" in captured.out and "wall_s" in captured.out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert recording.read_text(encoding="utf-8").count("\n") > 10


def test_simulate_refuses_a_plot_of_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--scenario", "all", "--plot", "x.png"]) == 2
    assert "one scenario" in capsys.readouterr().err


# --- announced limits -------------------------------------------------------------------------
def test_an_announcing_downstream_reports_its_quota_in_fixed_one_second_windows() -> None:
    result = simulate(tiny(capacity_rps=[[0, 40]], announce="ietf"), StaticPolicy())
    samples = [delivery.sample for delivery in result.telemetry]
    assert samples and all(sample.quota_limit == 40.0 for sample in samples)
    assert all(sample.quota_window_s == 1.0 for sample in samples)
    for sample in samples:
        assert sample.quota_remaining is not None and 0.0 <= sample.quota_remaining < 40.0
        assert sample.quota_reset_s is not None and 0.0 <= sample.quota_reset_s <= 1.0
    # Over capacity, some invocation met the window spent.
    assert min(sample.quota_remaining or 0.0 for sample in samples) == 0.0
    assert all(sample.throttled_rate == 0 for sample in samples)


def test_an_invocation_reports_the_quota_of_the_window_its_last_answer_came_in() -> None:
    # The quota drops from 300 to 60 a second at 5 s: an invocation whose calls straddle the
    # drop reports the new quota, however little the old window had left when it was called
    # (the least remaining of all its answers was the old window's, and hid the drop).
    result = simulate(tiny(capacity_rps=[[0, 300], [5, 60]], announce="ietf"), StaticPolicy())
    samples = [delivery.sample for delivery in result.telemetry]
    by_end = [(sample.event_time - SIM_EPOCH, sample) for sample in samples]
    assert {sample.quota_limit for end, sample in by_end if end < 5.0} == {300.0}
    # Its last call, 50 ms before its end, came after the drop.
    after = [sample for end, sample in by_end if end >= 5.05]
    assert after and {sample.quota_limit for sample in after} == {60.0}


def test_stripes_style_names_each_429_a_rate_limits_and_announces_no_quota() -> None:
    result = simulate(tiny(capacity_rps=[[0, 40]], announce="stripe"), StaticPolicy())
    samples = [delivery.sample for delivery in result.telemetry]
    assert any(sample.throttled for sample in samples)
    assert all(sample.throttled_rate == sample.throttled for sample in samples)
    assert all(sample.quota_limit is None for sample in samples)


def test_announcing_changes_no_call_of_the_run() -> None:
    blind = simulate(tiny(capacity_rps=[[0, 40]]), StaticPolicy())
    announced = simulate(tiny(capacity_rps=[[0, 40]], announce="github"), StaticPolicy())
    assert scorecard(blind)["totals"] == scorecard(announced)["totals"]
    assert all(delivery.sample.quota_limit is None for delivery in blind.telemetry)


def test_the_bound_knows_the_announced_scenarios_as_their_blind_ones() -> None:
    for name in ("capacity-drop", "below-floor", "flash-crowd"):
        assert HindsightPolicy.knows(load_scenario(f"{name}-announced"))
        blind, announced = load_scenario(name), load_scenario(f"{name}-announced")
        assert ideal_drain_times(announced) == ideal_drain_times(blind)
        assert [invocation_pace(announced, queue) for queue in announced.queues] == [
            invocation_pace(blind, queue) for queue in blind.queues
        ]
