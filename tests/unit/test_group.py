"""The group law (controller/groups): queues sharing one downstream decided as one, around
whatever algorithm decided each of them alone. One class per rule of docs/algorithms.md,
"Groups: queues sharing one downstream"."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from controller.groups import GroupMemory, Member, govern
from controller.groups.estimate import (
    LAG_S,
    PROBE_INTERVAL_S,
    PROTECTING_PROBE_INTERVAL_S,
    SPAN_S,
    Pooled,
    estimated,
    grown,
    pooled,
)
from controller.groups.shares import (
    FORCE_AHEAD_S,
    MIN_SLICE_S,
    Claim,
    fair_shares,
    levels,
    running_set,
)
from controller.model import Action, Backlog, Mode, QueueConfig, QueueState, Sample
from controller.planner import Plan, governed, groups_of, plan
from controller.policy.adaptive import AdaptiveLimit, AdaptiveMemory
from controller.policy.aimd import Aimd
from controller.settings import BOUNDS, PolicyParams, SettingsError
from controller.window import QueueWindow
from tests.factories import state

NOW = 1000.0


def window(
    queue: str,
    ok: int,
    refused: int = 0,
    *,
    seconds: range | None = None,
    downstream: str = "api",
    invocations: int = 1,
    timed_out: int = 0,
    into: QueueWindow | None = None,
) -> QueueWindow:
    """A queue's window: ``invocations`` of ``ok + refused + timed_out`` calls starting each
    second of ``seconds`` (the last 30 s by default), each taking one second (a pace of as
    many calls); added to ``into`` where given."""
    kept = QueueWindow() if into is None else into
    for second in seconds or range(int(NOW) - 30, int(NOW)):
        for _ in range(invocations):
            kept.add(
                Sample(
                    queue=queue,
                    event_time=second + 1.0,
                    requests=ok + refused + timed_out,
                    ok=ok,
                    throttled=refused,
                    timed_out=timed_out,
                    invocation_ms=1000.0,
                    downstream=downstream,
                )
            )
    return kept


def member(
    queue: str,
    ok: int = 10,
    refused: int = 0,
    concurrency: int = 1,
    *,
    weight: float = 1.0,
    priority: int = 0,
    enabled: bool = True,
    paused_since: float = 0.0,
    cmax: int = 10,
    seconds: range | None = None,
    timed_out: int = 0,
) -> Member:
    """A member decided alone to hold at ``concurrency``, every invocation of it in use."""
    params = PolicyParams(cmin=2, cmax=cmax)
    config = QueueConfig(queue, f"esm-{queue}", weight=weight, priority=priority)
    held = dataclasses.replace(
        state(concurrency, queue=queue), enabled=enabled, paused_since=paused_since
    )
    [step] = plan(
        NOW,
        [queue],
        {queue: config},
        {queue: held},
        {queue: QueueWindow()},
        lambda _: False,
        Aimd(),
        lambda _: params,
    ).steps
    snapshot = window(
        queue, ok, refused, seconds=seconds, invocations=concurrency, timed_out=timed_out
    ).snapshot()
    return Member(config, held, step.decision, params, snapshot)


def claim(queue: str, floor: float, demand: float, **fields: object) -> Claim:
    defaults: dict[str, object] = dict(
        priority=0, weight=1.0, pace=10.0, cmin=2, cmax=10, running=True, since=0.0
    )
    defaults.update(fields)
    return Claim(queue, floor_rps=floor, demand_rps=demand, **defaults)  # type: ignore[arg-type]


class TestOneGroupPerDownstream:
    """Rule 1: a group is the queues whose CONFIG ``Group`` matches, else that report one
    ``Downstream``; a queue alone, pinned or naming neither is decided alone."""

    def test_config_group_first_then_downstream(self) -> None:
        configs = {
            "a": QueueConfig("a", "esm-a", group="tenants"),
            "b": QueueConfig("b", "esm-b"),
            "c": QueueConfig("c", "esm-c"),
            "d": QueueConfig("d", "esm-d"),
            "e": QueueConfig("e", "esm-e", mode=Mode.PINNED),
        }
        downstreams = {"b": "tenants", "c": "crm", "d": None, "e": "tenants"}
        assert groups_of(configs, downstreams) == {"a": "tenants", "b": "tenants"}

    def test_a_window_remembers_the_downstream_its_newest_telemetry_named(self) -> None:
        kept = window("a", 10, downstream="crm")
        assert kept.downstream == "crm"


class TestEstimate:
    """Rule 1: the pooled evidence's refused seconds say what the downstream accepts."""

    def test_refused_seconds_measure_the_2xx_the_downstream_took(self) -> None:
        pool = pooled([window("a", 40, 60).snapshot(), window("b", 40, 60).snapshot()], NOW)
        assert pool.accepted_rps == pytest.approx(80.0)
        assert not pool.clean and pool.pressed
        learned = estimated(GroupMemory(), pool, wanting=True, step_rps=10.0, now=NOW)
        assert learned.capacity_rps == pytest.approx(80.0)

    def test_a_reading_above_the_estimate_outside_a_probe_moves_it_half_way(self) -> None:
        # The demo's bunched seconds: a heavy second of starts (42 calls, 37 2xx: its calls
        # spilled into the next wall-clock second) beside a light one, the API taking 30.
        heavy = window("a", 37, 5, seconds=range(int(NOW) - 30, int(NOW), 2)).snapshot()
        light = window("a", 22, seconds=range(int(NOW) - 29, int(NOW), 2)).snapshot()
        pool = pooled([heavy, light], NOW)
        assert pool.accepted_rps == pytest.approx(37.0)
        held = GroupMemory(capacity_rps=30.0)
        assert estimated(held, pool, True, 4.0, NOW).capacity_rps == pytest.approx(33.5)
        # A lower reading is taken whole: a fall costs no batch.
        assert estimated(GroupMemory(capacity_rps=45.0), pool, True, 4.0, NOW).capacity_rps == 37.0

    def test_a_lower_reading_lowers_the_estimate_only_while_its_refusals_are_fresh(
        self,
    ) -> None:
        # The README demo's cut 7 -> 5: the span slid past the refusals' end keeps their last
        # seconds, starts thinned by a cut (25 calls, 20 2xx) beside clean seconds of 30.
        complete_from = int(NOW - LAG_S - SPAN_S)
        refused_at = (complete_from, complete_from + 1)
        clean = [s for s in range(complete_from, int(NOW)) if s not in refused_at]
        ended = pooled(
            [
                window("a", 20, 5, seconds=range(refused_at[0], refused_at[1] + 1)).snapshot(),
                window("a", 30, seconds=range(clean[0], clean[-1] + 1)).snapshot(),
            ],
            NOW,
        )
        assert ended.accepted_rps == pytest.approx(20.0)
        held = GroupMemory(capacity_rps=30.0)
        assert estimated(held, ended, True, 4.0, NOW).capacity_rps == 30.0
        # The same seconds the newest of the complete span: the refusals go on, taken whole.
        newest = int(NOW - LAG_S) - 2
        going_on = pooled(
            [
                window("a", 30, seconds=range(complete_from, newest)).snapshot(),
                window("a", 20, 5, seconds=range(newest, newest + 2)).snapshot(),
            ],
            NOW,
        )
        assert going_on.accepted_rps == pytest.approx(20.0)
        assert estimated(held, going_on, True, 4.0, NOW).capacity_rps == 20.0

    def test_a_rise_that_holds_is_reached_within_a_few_batches(self) -> None:
        # The downstream took 40 where the group held 30, and goes on taking it.
        pool = pooled([window("a", 40, 10).snapshot()], NOW)
        memory = GroupMemory(capacity_rps=30.0)
        for batch in range(6):
            memory = estimated(memory, pool, True, 4.0, NOW + batch)
        assert memory.capacity_rps == pytest.approx(40.0, abs=0.2)

    def test_a_probe_meeting_refusals_takes_the_reading_whole(self) -> None:
        pool = pooled([window("a", 40, 10).snapshot()], NOW)
        probing = GroupMemory(capacity_rps=30.0, probed_at=NOW - 5, probed_from=20.0)
        assert estimated(probing, pool, True, 4.0, NOW).capacity_rps == 40.0

    def test_seconds_refused_too_little_to_measure_still_say_what_was_taken(self) -> None:
        pool = pooled([window("a", 97, 3).snapshot()], NOW)
        assert pool.accepted_rps is None and not pool.clean
        assert pool.took_rps == pytest.approx(97.0)

    def test_a_probes_peak_is_what_two_seconds_since_it_took(self) -> None:
        steady = window("a", 60).snapshot()
        burst = window("b", 100, seconds=range(int(NOW) - 3, int(NOW) - 2)).snapshot()
        assert pooled([steady, burst], NOW, probed_at=NOW - 6).peak_ok_rps == 60.0
        risen = window("b", 100, seconds=range(int(NOW) - 3, int(NOW) - 1)).snapshot()
        assert pooled([steady, risen], NOW, probed_at=NOW - 6).peak_ok_rps == 160.0
        assert pooled([steady, risen], NOW).peak_ok_rps == 0.0

    def test_nothing_refused_no_estimate(self) -> None:
        pool = pooled([window("a", 40).snapshot()], NOW)
        assert pool.accepted_rps is None and pool.clean
        assert estimated(GroupMemory(), pool, True, 10.0, NOW).capacity_rps is None

    def test_no_estimate_leaves_every_decision_as_it_was(self) -> None:
        members = [member("a", 10), member("b", 10)]
        decided = govern("api", members, GroupMemory(), NOW)
        assert decided.decisions == {}
        assert decided.report.capacity_rps is None


class TestShares:
    """Rule 1: max-min fair by demand, by priority then weight; levels within Cmin..Cmax."""

    def test_a_small_demand_is_met_and_the_rest_split_by_weight(self) -> None:
        claims = [
            claim("small", 20, 30),
            claim("heavy", 20, 100, weight=3.0),
            claim("light", 20, 100),
        ]
        shares = fair_shares(150.0, claims)
        assert shares["small"] == pytest.approx(30.0)
        # Floors first (60), the small demand met (10), the 80 left split 3:1.
        assert shares["heavy"] == pytest.approx(20 + 0.75 * 80)
        assert shares["light"] == pytest.approx(20 + 0.25 * 80)

    def test_a_higher_priority_is_served_first(self) -> None:
        shares = fair_shares(100.0, [claim("orders", 20, 70, priority=9), claim("bulk", 20, 100)])
        assert shares == {"orders": pytest.approx(70.0), "bulk": pytest.approx(30.0)}

    def test_levels_stay_within_the_shares_and_keep_who_holds_the_extra_invocation(
        self,
    ) -> None:
        claims = [claim("a", 20, 100), claim("b", 20, 100), claim("c", 20, 100)]
        shares = {"a": 25.0, "b": 25.0, "c": 25.0}
        chosen = levels(shares, claims, {"c": 3})
        assert chosen == {"a": 2, "b": 2, "c": 3}
        assert sum(chosen.values()) * 10 <= sum(shares.values())

    def test_members_whose_allowance_is_in_use_go_to_their_levels(self) -> None:
        # Two members at 5 invocations each, refused 40% of their calls: 60 calls/s accepted.
        members = [member("a", 6, 4, concurrency=5), member("b", 6, 4, concurrency=5)]
        decided = govern("api", members, GroupMemory(), NOW)
        assert decided.report.capacity_rps == pytest.approx(60.0)
        # 0.95 x 60 = 57 calls/s: floors 2 x 20, one more invocation fits (10 <= 17).
        assert sorted(share.level for share in decided.report.members) == [2, 3]
        assert sum(share.share_rps for share in decided.report.members) <= 57.0 + 1e-9
        assert sorted(d.target for d in decided.decisions.values()) == [2, 3]


class TestTheMembersOwnRefusals:
    """Rule 1, the members' decisions: outside a probe the group does not raise a member
    making most of the group's calls back above its own decision to a level its own refused
    calls have just cut it from."""

    @staticmethod
    def _cut_from_eight(cut_ago_s: float) -> list[Member]:
        """``orders`` cut 8 -> 7 ``cut_ago_s`` ago on its own calls (10% refused in the 8 s of
        starts before the cut, clean since), and ``refunds`` at its floor of 2; the estimate,
        110 calls/s, fits 8 for ``orders``."""
        cut_at = NOW - cut_ago_s
        refused_from, clean_from = math.ceil(cut_at - 8), math.ceil(cut_at)
        kept = window("orders", 10, seconds=range(int(NOW) - 40, refused_from), invocations=7)
        window("orders", 9, 1, seconds=range(refused_from, clean_from), invocations=7, into=kept)
        window("orders", 10, seconds=range(clean_from, int(NOW)), invocations=7, into=kept)
        orders = member("orders", concurrency=7)
        cut = dataclasses.replace(orders.state, previous_concurrency=8, last_change_at=cut_at)
        orders = dataclasses.replace(orders, state=cut, window=kept.snapshot())
        return [orders, member("refunds", concurrency=2, cmax=2)]

    def _level(self, members: list[Member], memory: GroupMemory) -> int:
        decided = govern("api", members, memory, NOW)
        assert decided.memory.capacity_rps == pytest.approx(memory.capacity_rps)
        [orders] = [share for share in decided.report.members if share.queue == "orders"]
        assert orders.level == 8
        decision = decided.decisions.get("orders", members[0].decision)
        return decision.target

    def test_a_level_just_refused_is_not_raised_back_to_on_the_estimate(self) -> None:
        # Cut 17 s ago, within the span the group reads its refusals on, and making 70 of the
        # group's 90 calls a second: its own decision (hold at 7) stands, though the
        # estimate's share fits 8 (the estimate reads high: the README demo's `orders` was
        # raised 7 -> 8 on 36 calls/s where 30 fit, refused, and cut back, about every 15 s).
        held = GroupMemory(capacity_rps=110.0, next_probe_at=NOW + 100)
        assert self._level(self._cut_from_eight(17.0), held) == 7

    def test_the_groups_probe_raises_it(self) -> None:
        # The group's own probe of the downstream still raises every member to its level.
        probing = GroupMemory(
            capacity_rps=110.0, next_probe_at=NOW + 100, probed_at=NOW - 1, probed_from=100.0
        )
        assert self._level(self._cut_from_eight(17.0), probing) == 8

    def test_a_cut_older_than_the_groups_span_is_no_evidence_against_it(self) -> None:
        held = GroupMemory(capacity_rps=110.0, next_probe_at=NOW + 100)
        assert self._level(self._cut_from_eight(LAG_S + SPAN_S + 1), held) == 8

    def test_a_member_making_fewer_than_half_the_calls_is_raised_on_the_estimate(self) -> None:
        # Three more members at their floor of 2 make 60 calls a second beside `refunds`' 20
        # and `orders`' 70: `orders`' refused calls were its part of the group's seconds, and
        # the estimate, read on all of them, raises it (170 calls/s fit 8 for it).
        fleet = self._cut_from_eight(17.0) + [
            member(f"tenant-{index}", concurrency=2, cmax=2) for index in range(3)
        ]
        held = GroupMemory(capacity_rps=170.0, next_probe_at=NOW + 100)
        assert self._level(fleet, held) == 8


class TestTimeSharing:
    """Rule 2: below the group's floor a rotating subset runs, the priority and the longest
    wait first, and nobody waits paused past its bound."""

    def test_the_running_set_fits_and_the_highest_priority_runs(self) -> None:
        claims = [claim(f"q{i}", 20, 100, running=False, paused_since=NOW - 10) for i in range(6)]
        claims.append(claim("orders", 20, 100, running=False, paused_since=NOW, priority=9))
        running = running_set(45.0, claims, NOW, dict.fromkeys([c.queue for c in claims], 120))
        assert "orders" in running and len(running) == 2

    def test_a_member_about_to_pass_its_bound_runs_first(self) -> None:
        bound = 120.0
        claims = [
            claim("fresh", 20, 100, running=True, since=NOW - 1, priority=9),
            claim("waited", 20, 100, running=False, paused_since=NOW - bound + FORCE_AHEAD_S),
        ]
        assert running_set(25.0, claims, NOW, {"fresh": bound, "waited": bound}) == {"waited"}

    def test_a_resume_taken_back_within_its_first_slice_does_not_end_the_wait(self) -> None:
        # fleet-below-floor seed 7: resumed at its bound, paused again a second later when the
        # estimate fell, the queue waited twice its bound. The wait counts on through the resume.
        bound = 120.0
        bounds = {"resumed": bound, "waiting": bound}
        claims = [
            claim("resumed", 20, 100, running=True, since=NOW - 1, paused_since=NOW - bound - 1),
            claim("waiting", 20, 100, running=False, paused_since=NOW - bound + FORCE_AHEAD_S),
        ]
        assert running_set(25.0, claims, NOW, bounds) == {"resumed"}
        # Through the group law: resumed at its bound, it keeps its place in the next batch.
        members = [member(f"q{i}", 20, 0, concurrency=2) for i in range(4)]
        memory = GroupMemory(capacity_rps=90.0, next_probe_at=NOW + 600)
        first = govern("api", members, memory, NOW)
        paused = {share.queue for share in first.report.members if share.paused}
        later = NOW + bound - FORCE_AHEAD_S
        resumed_members = [
            dataclasses.replace(m, state=first.decisions[m.config.queue].new_state)
            if m.config.queue in paused
            else m
            for m in members
        ]
        second = govern("api", resumed_members, first.memory, later)
        back = {s.queue for s in second.report.members if not s.paused} & paused
        assert back
        taken_back = [
            dataclasses.replace(m, state=second.decisions[m.config.queue].new_state)
            if m.config.queue in second.decisions
            else m
            for m in resumed_members
        ]
        # The estimate falls: one member fits; the other resumed one is paused again, its wait
        # counted from its first pause, and woken before its bound.
        fallen = dataclasses.replace(second.memory, capacity_rps=45.0)
        third = govern("api", taken_back, fallen, later + 1)
        again = [d for q, d in third.decisions.items() if q in back and not d.enabled]
        assert again
        for decision in again:
            assert f"waited {bound - FORCE_AHEAD_S + 1:.0f}s" in decision.reason
            assert decision.new_state.wake_at <= NOW + bound

    def test_paused_members_are_paused_with_a_wake_up_and_the_others_resumed(self) -> None:
        # Each sends 40 calls/s at Cmin (2 invocations of 20 calls a second): two fit 0.95 x 90.
        members = [member(f"q{i}", 20, 0, concurrency=2) for i in range(4)]
        memory = GroupMemory(capacity_rps=90.0, next_probe_at=NOW + 60)
        decided = govern("api", members, memory, NOW)
        paused = [share.queue for share in decided.report.members if share.paused]
        assert len(paused) == 2
        for queue in paused:
            decision = decided.decisions[queue]
            assert not decision.enabled and decision.new_state.wake_at > NOW

    @pytest.mark.parametrize(("refused", "timed_out"), [(15, 0), (0, 0), (0, 15)])
    def test_a_member_whose_last_calls_were_refused_waits_its_turn_for_their_return(
        self, refused: int, timed_out: int
    ) -> None:
        # shared seed 300 draw 24: below the floor, a member whose refused messages were all
        # out of sight started nothing for a while; read as having no work, it ran beside the
        # member whose turn it was each time they came back, 85-92% of its calls refused, and
        # lost 260 messages to the dead-letter queue. Its last calls clean, or timed out (the
        # client's, not the downstream's refusal), it has no work.
        busy = member("busy", 5, 15, concurrency=2)
        quiet = member(
            "quiet",
            20 - refused - timed_out,
            refused,
            concurrency=2,
            seconds=range(940, 985),
            timed_out=timed_out,
        )
        memory = GroupMemory(
            capacity_rps=30.0, next_probe_at=NOW + 60, running_since={"busy": NOW - 5}
        )
        decided = govern("api", [busy, quiet], memory, NOW)
        waiting = {share.queue for share in decided.report.members if share.paused}
        if refused:
            assert waiting == {"quiet"}
            assert not decided.decisions["quiet"].enabled
        else:
            assert waiting == set()
            assert "quiet" not in decided.decisions or decided.decisions["quiet"].enabled

    @settings(max_examples=30)
    @given(
        members=st.integers(3, 30),
        capacity=st.floats(20.0, 200.0),
        bound=st.floats(BOUNDS["group_pause_max_s"].low, BOUNDS["group_pause_max_s"].high),
    )
    def test_over_a_long_run_nobody_waits_past_the_bound_and_the_running_set_fits(
        self, members: int, capacity: float, bound: float
    ) -> None:
        # The bound holds where the members that fit at once can take turns of a slice each
        # within it (docs/algorithms.md); with fewer places the group rotates as fast as it can.
        assume(math.floor(capacity / 20) * bound >= members * MIN_SLICE_S)
        names = [f"q{i}" for i in range(members)]
        since = dict.fromkeys(names, 0.0)
        runs = set(names)
        longest = 0.0
        for tick in range(0, 1200, 2):
            now = float(tick)
            claims = [
                claim(
                    name,
                    20,
                    100,
                    running=name in runs,
                    since=since[name],
                    paused_since=since[name],
                )
                for name in names
            ]
            chosen = running_set(capacity, claims, now, dict.fromkeys(names, bound))
            assert len(chosen) == 1 or 20 * len(chosen) <= capacity
            for name in names:
                if (name in chosen) != (name in runs):
                    since[name] = now
                if name not in chosen:
                    longest = max(longest, now - since[name])
            runs = chosen
        assert longest <= bound


class TestPausesGiveWay:
    """Rule 2: below the floor, the group decides who pauses; a pause the algorithm asks for on
    a downstream whose members' floors fit is not carried out, and neither is its memory."""

    @staticmethod
    def adaptive(
        queue: str,
        concurrency: int,
        cmin: int,
        cmax: int,
        held: QueueState | None = None,
        now: float = NOW,
    ) -> Member:
        """A member the adaptive law decided alone at ``now`` (from ``held``, by default a queue
        at ``concurrency``) on a window with a fifth of its calls refused up to ``NOW`` (each
        invocation 4 calls accepted, 1 refused, a second long)."""
        params = PolicyParams(cmin=cmin, cmax=cmax)
        config = QueueConfig(queue, f"esm-{queue}")
        held = held or state(concurrency, queue=queue)
        kept = window(queue, 4, 1, invocations=concurrency)
        [step] = plan(
            now,
            [queue],
            {queue: config},
            {queue: held},
            {queue: kept},
            lambda _: False,
            AdaptiveLimit(),
            lambda _: params,
        ).steps
        return Member(config, held, step.decision, params, kept.snapshot())

    def test_a_queue_at_cmin_equal_cmax_runs_where_the_floors_fit(self) -> None:
        # The default demo: refunds at Lambda's floor (cmin = cmax = 2) beside orders, the API
        # refusing a fifth of both. Alone, refunds' own floor would pause (below the floor);
        # in the group the 20 calls/s both floors send fit the 40 accepted, so it runs. It was
        # held running with the reason "...; pausing the mapping for 15s." and the pause in its
        # memory: the law then tested and judged a pause that never was.
        refunds = self.adaptive("refunds", 2, cmin=2, cmax=2)
        orders = self.adaptive("orders", 8, cmin=2, cmax=16)
        assert (refunds.decision.action, refunds.decision.enabled) == (Action.PAUSE, False)
        memory = GroupMemory(capacity_rps=40.0, next_probe_at=NOW + 60)
        decided = govern("api", [orders, refunds], memory, NOW).decisions["refunds"]
        assert (decided.action, decided.enabled, decided.target) == (Action.HOLD, True, 2)
        assert "pausing" not in decided.reason and "not paused" in decided.reason
        assert decided.new_state.memory == refunds.state.memory
        assert decided.new_state.state is refunds.state.state
        assert decided.new_state.wake_at == refunds.state.wake_at
        assert decided.new_state.paused_since == 0.0

    def test_a_member_the_group_resumes_is_no_longer_paused_in_its_laws_memory(self) -> None:
        # fleet-below-floor seed 1: a member its law paused was resumed by the group (its
        # turn) with the pause in its memory, and its law asked every batch after to end a
        # test that was not running ("Pause test over: ..."), overruled by the group.
        orders = self.adaptive("orders", 8, cmin=2, cmax=16)
        paused = self.adaptive("refunds", 2, cmin=2, cmax=2).decision.new_state
        assert not paused.enabled and paused.wake_at > NOW + 5
        waiting = self.adaptive("refunds", 2, cmin=2, cmax=2, held=paused, now=NOW + 5)
        assert not waiting.decision.enabled
        memory = GroupMemory(capacity_rps=40.0, next_probe_at=NOW + 60)
        resumed = govern("api", [orders, waiting], memory, NOW + 5).decisions["refunds"]
        assert (resumed.action, resumed.enabled) == (Action.RESUME, True)
        later = self.adaptive("refunds", 2, 2, 2, held=resumed.new_state, now=NOW + 10)
        assert later.decision.enabled and later.decision.action is not Action.PAUSE
        assert "Pause" not in later.decision.reason
        assert isinstance(later.decision.new_state.memory, AdaptiveMemory)
        assert later.decision.new_state.memory.paused_until == 0.0


class TestOneProbe:
    """Rule 3: the group probes the downstream once, not each queue: it grows the estimate
    while its members want more and use it, and a probe that meets refusals backs off."""

    clean = Pooled(None, 0.0, sent_rps=95.0, clean=True, pressed=False)

    def test_a_clean_used_estimate_is_probed_once_then_judged(self) -> None:
        memory = GroupMemory(capacity_rps=100.0)
        probed = estimated(memory, self.clean, wanting=True, step_rps=10.0, now=NOW)
        assert probed.capacity_rps == pytest.approx(150.0) and probed.probed_at == NOW
        again = estimated(probed, self.clean, wanting=True, step_rps=10.0, now=NOW + 1)
        assert again == probed

    def test_no_probe_while_nobody_wants_more(self) -> None:
        memory = GroupMemory(capacity_rps=100.0)
        assert estimated(memory, self.clean, False, 10.0, NOW) == memory

    def test_refusals_too_few_to_measure_hold_the_estimate_and_the_next_probe(self) -> None:
        # Outside a probe they move no estimate, and the next probe waits the shortest
        # interval past the last batch that saw them (sparse refusals most often mean a
        # capacity that has not moved: measurements.md, "Tried at stop 61").
        memory = GroupMemory(capacity_rps=100.0)
        refused = dataclasses.replace(self.clean, clean=False)
        held = estimated(memory, refused, wanting=True, step_rps=10.0, now=NOW)
        assert held.capacity_rps == 100.0 and held.probed_at == 0.0
        assert estimated(held, self.clean, True, 10.0, NOW + 1) == held
        later = NOW + PROBE_INTERVAL_S[0]
        assert estimated(held, self.clean, True, 10.0, later).probed_at == later

    def test_a_probe_refused_a_little_goes_back_and_waits_longer(self) -> None:
        memory = GroupMemory(capacity_rps=110.0, probed_at=NOW - 5, probed_from=100.0)
        refused = dataclasses.replace(self.clean, clean=False)
        failed = estimated(memory, refused, True, 10.0, NOW)
        assert failed.capacity_rps == 100.0 and failed.probed_at == 0.0
        assert failed.probe_interval_s > memory.probe_interval_s

    @pytest.mark.parametrize(("took", "back"), [(105.0, 105.0), (130.0, 110.0), (90.0, 100.0)])
    def test_a_probe_refused_a_little_goes_back_to_what_the_downstream_took(
        self, took: float, back: float
    ) -> None:
        # Within what it began from and what it probed.
        memory = GroupMemory(capacity_rps=110.0, probed_at=NOW - 5, probed_from=100.0)
        refused = dataclasses.replace(self.clean, clean=False, took_rps=took)
        assert estimated(memory, refused, True, 10.0, NOW).capacity_rps == back

    def test_a_probe_whose_rise_is_seen_passes_and_the_next_follows_at_once(self) -> None:
        # Two seconds since the probe took more than the members were given before it (95 of
        # 100), none refused: no wait for its seconds to be complete (the complete span still
        # sends the old rate).
        memory = GroupMemory(capacity_rps=150.0, probed_at=NOW - 4, probed_from=100.0)
        risen = dataclasses.replace(self.clean, sent_rps=95.0, peak_ok_rps=96.0)
        probed = estimated(memory, risen, wanting=True, step_rps=10.0, now=NOW)
        assert probed.probed_at == NOW and probed.probed_from == 150.0
        assert probed.capacity_rps == pytest.approx(225.0)
        unrisen = dataclasses.replace(risen, peak_ok_rps=95.0)
        assert estimated(memory, unrisen, True, 10.0, NOW) == memory

    def test_a_probe_that_began_at_the_rate_that_broke_and_passed_expires_it(self) -> None:
        memory = GroupMemory(
            capacity_rps=109.2, ceiling_rps=104.0, probed_at=NOW - LAG_S - 4, probed_from=104.0
        )
        passed = estimated(memory, self.clean, wanting=False, step_rps=1.0, now=NOW)
        assert passed.ceiling_rps == 0.0 and passed.capacity_rps == 109.2
        assert passed.probed_at == 0.0
        # Free of it, the next probe grows half as much again.
        probed = estimated(passed, self.clean, wanting=True, step_rps=1.0, now=NOW)
        assert probed.capacity_rps == pytest.approx(109.2 * 1.5)

    def test_a_probe_that_only_reached_the_rate_that_broke_keeps_it_and_the_next_is_gentle(
        self,
    ) -> None:
        # The demo after its drop (docs/algorithms.md, "One probe per downstream"): refused at
        # 32 calls/s sent (the capacity, 30, read high: calls bunch), the group probed 28 -> 32
        # and its rise was seen at once, clean. 32 fits; more need not: the next probe goes
        # one invocation's calls past the ceiling (4 calls/s), not half as much again (48).
        memory = GroupMemory(
            capacity_rps=32.0, ceiling_rps=32.0, probed_at=NOW - 6, probed_from=28.0
        )
        risen = dataclasses.replace(self.clean, sent_rps=27.6, peak_ok_rps=32.0)
        probed = estimated(memory, risen, wanting=True, step_rps=4.0, now=NOW)
        assert probed.ceiling_rps == 32.0
        assert probed.probed_at == NOW and probed.probed_from == 32.0
        assert probed.capacity_rps == pytest.approx(36.0)

    @given(
        ceiling=st.floats(1.0, 1000.0),
        below=st.floats(0.01, 1.0),
        raised=st.floats(1.0, 2.0),
        peak=st.floats(0.0, 2000.0),
        judged_after=st.floats(0.0, 60.0),
        wanting=st.booleans(),
    )
    def test_a_ceiling_outlives_every_clean_probe_that_began_below_it(
        self,
        ceiling: float,
        below: float,
        raised: float,
        peak: float,
        judged_after: float,
        wanting: bool,
    ) -> None:
        # However the probe is judged (by its rise or by its complete seconds) and whatever the
        # group does next, a rate that broke is forgotten only past it.
        start = ceiling * (1.0 - below)
        memory = GroupMemory(
            capacity_rps=start * raised,
            ceiling_rps=ceiling,
            probed_at=NOW - judged_after,
            probed_from=start,
        )
        pool = dataclasses.replace(self.clean, peak_ok_rps=peak)
        after = estimated(memory, pool, wanting, step_rps=1.0, now=NOW)
        assert after.ceiling_rps == ceiling

    def test_near_the_rate_that_broke_a_probe_is_gentle(self) -> None:
        memory = GroupMemory(capacity_rps=100.0, ceiling_rps=104.0)
        probed = estimated(memory, self.clean, True, 1.0, NOW)
        assert probed.capacity_rps == pytest.approx(105.0)


class TestBacklogsEndingFirst:
    """Rule 3's hold: the group does not probe where the members whose backlogs are known,
    making at least half of its calls, drain them at the calls they make before a probe could
    pay (judged, or a refused message back after its visibility timeout), unless a member
    waits its turn paused."""

    @staticmethod
    def probed(*members: Member) -> bool:
        # The estimate the running members fill (20 calls a second for two): used, wanted.
        memory = GroupMemory(capacity_rps=10.0 * sum(m.state.enabled for m in members))
        return govern("api", list(members), memory, NOW).memory.probed_at == NOW

    @staticmethod
    def waiting(queue: str, visible: int) -> Member:
        # A member making 10 calls a second, filling its level (it wants more), with
        # ``visible`` messages waiting behind a 30 s visibility timeout.
        return dataclasses.replace(member(queue, ok=10), backlog=Backlog(visible, 30.0))

    def test_no_probe_where_the_backlogs_drain_within_a_visibility_timeout(self) -> None:
        # 250 waiting each at 10 calls a second: drained in 25 s, sooner than a refused
        # message would come back.
        assert not self.probed(self.waiting("a", 250), self.waiting("b", 250))

    def test_a_probe_where_the_backlogs_outlast_it(self) -> None:
        assert self.probed(self.waiting("a", 350), self.waiting("b", 350))

    def test_a_probe_where_no_backlog_is_known(self) -> None:
        assert self.probed(member("a", ok=10), member("b", ok=10))

    def test_a_probe_where_the_known_backlogs_make_under_half_of_the_calls(self) -> None:
        # The others' work, not read, may outlast any probe.
        assert self.probed(self.waiting("a", 0), member("b", ok=10), member("c", ok=10))

    def test_a_probe_while_a_member_waits_its_turn_paused(self) -> None:
        paused = member("c", ok=0, enabled=False, paused_since=NOW - 5)
        assert self.probed(self.waiting("a", 250), self.waiting("b", 250), paused)


class TestPriorityProtection:
    """A group whose members with work have more than one ``Priority`` protects the highest:
    every call the downstream refuses may be the priority queue's."""

    # The complete span clean at 60 calls/s; the newest seconds refused half the calls.
    fresh = [
        window("a", 30, seconds=range(int(NOW - LAG_S - SPAN_S), int(NOW - LAG_S))).snapshot(),
        window("a", 15, 15, seconds=range(int(NOW - LAG_S), int(NOW))).snapshot(),
        window("b", 30, seconds=range(int(NOW - LAG_S - SPAN_S), int(NOW))).snapshot(),
    ]

    def test_the_newest_refusals_set_a_first_estimate_only_when_protecting(self) -> None:
        pool = pooled(self.fresh, NOW)
        assert pool.pressed and pool.accepted_rps is None
        # 60 calls/s sent, 45 of every 60 accepted in the newest seconds.
        assert pool.fresh_accepted_rps == pytest.approx(45.0)
        alone = estimated(GroupMemory(), pool, True, 10.0, NOW)
        assert alone.capacity_rps is None
        learned = estimated(GroupMemory(), pool, True, 10.0, NOW, protecting=True)
        assert learned.capacity_rps == pytest.approx(45.0)
        assert learned.ceiling_rps == pytest.approx(60.0)

    def test_a_probe_fails_at_the_first_second_refused_after_it(self) -> None:
        memory = GroupMemory(capacity_rps=110.0, probed_at=NOW - 2, probed_from=100.0)
        before = Pooled(None, 0.0, 95.0, clean=True, pressed=True, last_refused_at=NOW - 3)
        assert estimated(memory, before, True, 10.0, NOW, protecting=True) == memory
        after = dataclasses.replace(before, last_refused_at=NOW - 1)
        assert estimated(memory, after, True, 10.0, NOW) == memory
        failed = estimated(memory, after, True, 10.0, NOW, protecting=True)
        assert failed.capacity_rps == 100.0 and failed.probed_at == 0.0
        assert failed.ceiling_rps == 110.0

    def test_failed_probes_wait_longer_and_probes_are_gentle_below_a_broken_rate(
        self,
    ) -> None:
        memory = GroupMemory(capacity_rps=110.0, probed_at=NOW - 20, probed_from=100.0)
        refused = Pooled(None, 0.0, sent_rps=95.0, clean=False, pressed=False)
        for _ in range(4):
            memory = estimated(memory, refused, True, 10.0, NOW, protecting=True)
            memory = dataclasses.replace(memory, probed_at=NOW - 20, capacity_rps=110.0)
        assert memory.probe_interval_s == PROTECTING_PROBE_INTERVAL_S
        assert grown(100.0, 200.0) == pytest.approx(125.0)
        assert grown(100.0, 200.0, gently=True) == pytest.approx(105.0)
        assert grown(100.0, 0.0, gently=True) == pytest.approx(105.0)

    def test_the_lower_priority_is_cut_the_protected_one_is_not(self) -> None:
        # Both at 5 invocations in use, 40% refused: 60 calls/s accepted, 57 given out.
        members = [
            member("orders", 6, 4, concurrency=5, priority=9),
            member("bulk", 6, 4, concurrency=5),
        ]
        decided = govern("api", members, GroupMemory(), NOW)
        assert decided.report.capacity_rps == pytest.approx(60.0)
        orders = decided.decisions.get("orders", members[0].decision)
        assert orders.enabled and orders.target >= 5
        assert decided.decisions["bulk"].target < 5
        # 20 calls/s accepted: only one floor fits, the lower priority is paused, and the
        # protected member is cut like any.
        scarce = [
            member("orders", 2, 8, concurrency=5, priority=9),
            member("bulk", 2, 8, concurrency=5),
        ]
        cut_alone = govern("api", scarce, GroupMemory(), NOW)
        assert {s.queue for s in cut_alone.report.members if s.paused} == {"bulk"}
        assert cut_alone.decisions["orders"].target < 5
        # Of equal priority both are cut (the law as without priorities).
        level = [member("a", 6, 4, concurrency=5), member("b", 6, 4, concurrency=5)]
        cut = govern("api", level, GroupMemory(), NOW).decisions
        assert all(decision.target < 5 for decision in cut.values())

    def test_a_turn_resumes_only_into_room_the_yielding_member_left(self) -> None:
        # "ran" has run past its slice; "waited" waits. Both fit only one at a time.
        claims = [
            claim("ran", 20, 100, running=True, since=NOW - 100),
            claim("waited", 20, 100, running=False, paused_since=NOW - 60),
        ]
        bounds = {"ran": 120.0, "waited": 120.0}
        assert running_set(25.0, claims, NOW, bounds) == {"waited"}
        # Staggered: "ran" yields now, "waited" resumes a batch later.
        assert running_set(25.0, claims, NOW, bounds, staggered=True) == set()
        after = [
            claim("ran", 20, 100, running=False, since=NOW, paused_since=NOW),
            claim("waited", 20, 100, running=False, paused_since=NOW - 60),
        ]
        assert running_set(25.0, after, NOW + 1, bounds, staggered=True) == {"waited"}

    @given(
        capacity=st.floats(0.0, 2000.0),
        claims=st.lists(
            st.tuples(st.floats(0.0, 50.0), st.floats(0.0, 500.0), st.integers(0, 9)),
            min_size=2,
            max_size=12,
        ),
    )
    def test_a_higher_priority_is_served_its_demand_before_a_lower_one_gets_past_its_floor(
        self, capacity: float, claims: list[tuple[float, float, int]]
    ) -> None:
        made = [
            claim(f"q{i}", floor, floor + demand, priority=priority)
            for i, (floor, demand, priority) in enumerate(claims)
        ]
        shares = fair_shares(capacity, made)
        for high in made:
            short = shares[high.queue] < min(high.demand_rps, high.cmax * high.pace) - 1e-6
            for low in made:
                if short and low.priority < high.priority:
                    assert shares[low.queue] == pytest.approx(low.floor_rps)


class TestQuotaOrder:
    """Rule 4: the group's changes are steps like any other: one per queue, the most urgent
    (cuts) first."""

    def test_the_group_cut_comes_before_the_group_raise_one_step_each(self) -> None:
        # "big" runs 8 invocations, "small" 2 and wants more: the group takes from one and
        # gives to the other.
        windows = {
            "big": window("big", 10, 0, downstream="api"),
            "small": window("small", 10, 0, downstream="api"),
        }
        configs = {q: QueueConfig(q, f"esm-{q}") for q in windows}
        states = {
            "big": dataclasses.replace(state(8, queue="big")),
            "small": dataclasses.replace(state(2, queue="small")),
        }
        params = PolicyParams(cmin=2, cmax=10)
        alone = plan(
            NOW,
            sorted(windows),
            configs,
            states,
            windows,
            lambda _: False,
            Aimd(),
            lambda _: params,
        )
        # Both use their allowance (one invocation a second of one second each: in use 1 of 8
        # is not in use; make the span busy instead).
        memory = {"api": GroupMemory(capacity_rps=100.0, next_probe_at=NOW + 100)}
        together = governed(
            alone,
            {"big": "api", "small": "api"},
            windows,
            lambda _: params,
            lambda _: False,
            memory,
        )
        assert len(together.steps) == len({step.queue for step in together.steps}) == 2
        urgencies = [step.urgency for step in together.steps]
        assert urgencies == sorted(urgencies)


class TestReports:
    """Rule 5: a plan says what each group decided: its estimate and each member's share,
    level and whether it is paused."""

    def test_a_governed_plan_reports_each_group(self) -> None:
        members = [member("a", 6, 4, concurrency=5), member("b", 6, 4, concurrency=5)]
        steps = []
        windows = {}
        for one in members:
            [step] = plan(
                NOW,
                [one.config.queue],
                {one.config.queue: one.config},
                {one.config.queue: one.state},
                {one.config.queue: QueueWindow()},
                lambda _: False,
                Aimd(),
                lambda _: PolicyParams(cmin=2, cmax=10),
            ).steps
            steps.append(step)
            windows[one.config.queue] = window(one.config.queue, 6, 4)
        together = governed(
            Plan(NOW, tuple(steps)),
            {"a": "api", "b": "api"},
            windows,
            lambda _: PolicyParams(cmin=2, cmax=10),
            lambda _: False,
            {},
        )
        [report] = together.groups
        assert report.group == "api" and report.capacity_rps == pytest.approx(12.0)
        assert [share.queue for share in report.members] == ["a", "b"]
        assert together.group_memory["api"].capacity_rps == pytest.approx(12.0)


class TestAlone:
    """Rule 6: a queue alone on its downstream is decided exactly as without groups."""

    def test_a_group_of_one_is_not_governed(self) -> None:
        [one] = [member("a", 6, 4, concurrency=5)]
        alone = Plan(NOW)
        assert governed(alone, {}, {}, lambda _: one.params, lambda _: False, {}) == alone

    def test_the_pause_bound_is_a_checked_setting(self) -> None:
        with pytest.raises(SettingsError, match=r"group_pause_max_s must be in 30\.\.300 s"):
            PolicyParams(group_pause_max_s=5.0)


class TestShareInvariants:
    """Invariants of the division, for any claims: shares are never negative, add up to the
    estimate at most (the floors fitting), and follow the weights between equal demands."""

    @given(
        capacity=st.floats(0.0, 5000.0),
        claims=st.lists(
            st.tuples(
                st.floats(0.0, 50.0),
                st.floats(0.0, 500.0),
                st.floats(0.01, 100.0),
                st.integers(0, 9),
            ),
            min_size=1,
            max_size=20,
        ),
    )
    def test_shares_are_fair_and_within_the_estimate(
        self, capacity: float, claims: list[tuple[float, float, float, int]]
    ) -> None:
        made = [
            claim(f"q{i}", floor, floor + demand, weight=weight, priority=priority)
            for i, (floor, demand, weight, priority) in enumerate(claims)
        ]
        floors = sum(c.floor_rps for c in made)
        shares = fair_shares(capacity, made)
        assert all(share >= 0 for share in shares.values())
        assert sum(shares.values()) <= max(capacity, floors) * (1 + 1e-9) + 1e-6

    @given(
        capacity=st.floats(10.0, 1000.0),
        weights=st.lists(st.floats(0.1, 10.0), min_size=2, max_size=8),
    )
    def test_equal_demands_share_by_weight(self, capacity: float, weights: list[float]) -> None:
        made = [claim(f"q{i}", 0.0, 1e6, weight=w, cmax=1000) for i, w in enumerate(weights)]
        shares = fair_shares(capacity, made)
        for i, weight in enumerate(weights):
            assert shares[f"q{i}"] == pytest.approx(capacity * weight / sum(weights))


def test_the_complete_span_is_the_lagged_one() -> None:
    # Refusals only in the newest seconds are pressure, not yet a measurement.
    recent = range(int(NOW - LAG_S) + 1, int(NOW))
    pool = pooled([window("a", 5, 5, seconds=recent).snapshot()], NOW)
    assert pool.pressed and pool.accepted_rps is None and pool.clean
    assert SPAN_S > 0
