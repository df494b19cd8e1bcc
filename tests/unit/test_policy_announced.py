"""The adaptive limit's announced phase: sizing from the quota a downstream announces
(controller/policy/adaptive/announced.py)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.actuator import InMemoryActuator
from controller.backlog import InMemoryBacklog
from controller.groups import GroupMemory
from controller.ledger import InMemoryLedger
from controller.loop import ControlLoop
from controller.model import Action, Decision, QueueState, QueueStateName, Sample
from controller.policy import decide, memory_type
from controller.policy.adaptive import AdaptiveLimit, AdaptiveMemory
from controller.policy.adaptive.announced import Fit, max_min_share
from controller.policy.adaptive.memory import move
from controller.policy.base import Situation
from controller.ports import StoredGroupMemory
from controller.settings import PolicyParams
from controller.window import QueueWindow
from tests.factories import config, mapped, registered, state

PARAMS = PolicyParams()
ALGORITHM = AdaptiveLimit()
NOW = 1000.0
# Every invocation here makes 10 calls in 800 ms: 12.5 calls a second.
PACE = 12.5


def announced(
    at: float,
    limit: float | None = 100.0,
    window_s: float | None = 1.0,
    remaining: float | None = 50.0,
    reset_s: float | None = 0.0,
    *,
    throttled: int = 0,
    concurrency_kind: int = 0,
    downstream: str = "api",
) -> Sample:
    """One invocation's document whose answers announced a quota of ``limit`` calls per
    ``window_s`` seconds, ``remaining`` of them left, resetting ``reset_s`` after ``at``."""
    return Sample(
        queue="orders",
        event_time=at,
        requests=10,
        ok=10 - throttled,
        throttled=throttled,
        invocation_ms=800.0,
        downstream=downstream,
        quota_remaining=remaining,
        quota_limit=limit,
        quota_window_s=window_s,
        quota_reset_s=reset_s,
        throttled_concurrency=concurrency_kind,
    )


def busy(documents: int = 60, **quota: object) -> QueueWindow:
    """A window of ``documents`` clean invocations over the 30 seconds before ``NOW``, each
    announcing ``quota``."""
    window = QueueWindow()
    for index in range(documents):
        window.add(announced(NOW - 30 + index * 30 / documents, **quota))  # type: ignore[arg-type]
    return window


def queue(concurrency: int, **memory: object) -> QueueState:
    record = AdaptiveMemory(**memory)  # type: ignore[arg-type]
    return state(concurrency, last_change_at=900.0).evolve(algorithm="adaptive", memory=record)


def run(
    current: QueueState,
    window: QueueWindow,
    now: float = NOW,
    params: PolicyParams = PARAMS,
    sharing: Mapping[str, Mapping[str, float]] | None = None,
) -> Decision:
    return decide(ALGORITHM, current, config(), window, now, params, sharing=sharing)


def memory_of_state(current: QueueState) -> AdaptiveMemory:
    assert isinstance(current.memory, AdaptiveMemory)
    return current.memory


def memory_of(decision: Decision) -> AdaptiveMemory:
    memory = decision.new_state.memory
    assert isinstance(memory, AdaptiveMemory)
    return memory


class TestAnnouncedPhase:
    def test_a_mapping_above_the_announced_level_steps_down_before_any_429(self) -> None:
        # 100 calls/s at 12.5 calls per invocation-second: 8 invocations.
        decision = run(queue(100), busy())
        assert (decision.action, decision.target) == (Action.MULTIPLICATIVE_DECREASE, 8)
        assert memory_of(decision).announced_level == 8
        assert "Announced quota" in decision.reason

    def test_the_quota_is_shared_among_the_queues_reporting_its_downstream(self) -> None:
        # Another queue on the api wanting at least half of its 100 calls/s: half each, 4
        # invocations at 12.5 calls per invocation-second; a downstream the queue does not
        # report takes nothing from it.
        for wanted in (50.0, 100.0, 500.0):
            shared = {"api": {"orders": 100.0, "refunds": wanted}, "other": {"mails": 90.0}}
            assert run(queue(100), busy(), sharing=shared).target == 4

    def test_a_queue_sharing_the_quota_takes_what_the_others_leave(self) -> None:
        # The other queue wants 10 of the 100 calls/s: 90 are left, 7.2 invocations.
        shared = {"api": {"orders": 100.0, "refunds": 10.0}}
        decision = run(queue(100), busy(), sharing=shared)
        assert decision.target == 7
        assert "leave 90.0 to this one" in decision.reason

    def test_a_rise_of_the_announced_level_is_raised_to_without_a_probe(self) -> None:
        decision = run(queue(2, announced_level=2), busy())
        assert (decision.action, decision.target) == (Action.ADDITIVE_INCREASE, 8)
        assert memory_of(decision).probe_until == 0.0

    def test_a_pace_read_a_little_differently_does_not_count_as_a_rise(self) -> None:
        # 100.75 calls/s fit 8.06 invocations: 5% less is under 8, no rise from 7.
        assert run(queue(7, announced_level=7), busy(limit=100.75)).target == 7
        # 110 calls/s fit 8.8: a rise.
        assert run(queue(7, announced_level=7), busy(limit=110.0)).target == 8

    def test_the_pace_is_the_current_levels_once_it_has_enough_invocations(self) -> None:
        # 16 invocations on a shared host took 1.6 s for their 10 calls (6.25 calls/s each);
        # since the cut to 12, at 985 s, each takes 0.8 s (12.5): 100 calls/s fit 8, where
        # the 30 s span's mean pace (7.6) would fit 13, more than the level already set.
        def window_with(since_cut: int) -> QueueWindow:
            window = QueueWindow()
            for index in range(40):
                window.add(replace(announced(NOW - 30 + index * 15 / 40), invocation_ms=1600.0))
            for index in range(since_cut):
                # Each ends 0.8 s after it starts: the first starts after the cut.
                window.add(announced(NOW - 14 + index * 14 / since_cut))
            return window

        cut = queue(12).evolve(last_change_at=NOW - 15)
        enough = run(cut, window_with(PARAMS.min_samples))
        assert (enough.action, enough.target) == (Action.MULTIPLICATIVE_DECREASE, 8)
        # Too few invocations since the cut to tell their pace: the span's, which fits 13.
        assert run(cut, window_with(PARAMS.min_samples - 1)).target == 13

    def test_a_window_that_resets_before_a_change_could_act_does_not_size_it(self) -> None:
        # 100 calls a second, 4 left 0.3 s before the second ends, decided 0.1 s later: the
        # invocations running end (0.8 s) after the reset, so the level is the steady rate's
        # 8, not the 4 left spread over the window's rest (13.3 calls/s, 1 invocation).
        window = busy()
        window.add(announced(NOW, remaining=4.0, reset_s=0.3))
        decision = run(queue(8, announced_level=8), window, now=NOW + 0.1)
        assert (decision.action, decision.target) == (Action.HOLD, 8)
        # A minute's window with 4 left for 30 s: that binds, the mapping pauses at Cmin.
        minute = busy(limit=6000.0, window_s=60.0)
        minute.add(announced(NOW, limit=6000.0, window_s=60.0, remaining=4.0, reset_s=30.0))
        paused = run(queue(8, announced_level=8), minute, now=NOW + 0.1)
        assert paused.enabled is False and paused.target == PARAMS.cmin

    def test_at_the_announced_level_blind_growth_stops(self) -> None:
        # Clean and fully used at 8: the blind law would grow or probe; the quota says 8.
        decision = run(queue(8, announced_level=8), busy(documents=240))
        assert (decision.action, decision.target) == (Action.HOLD, 8)

    def test_below_it_429s_the_quota_does_not_explain_are_cut_blind(self) -> None:
        window = busy(throttled=6)
        decision = run(queue(6, announced_level=8), window)
        assert decision.action is Action.MULTIPLICATIVE_DECREASE
        assert decision.target < 6
        # No raise back to the same announced level while it is what was announced before.
        after = run(decision.new_state, window, now=NOW + 1)
        assert after.target <= decision.target

    def test_clean_and_used_below_the_announced_level_it_goes_to_it_without_a_probe(
        self,
    ) -> None:
        # At 5 with 8 announced before and nothing refused: the blind law would grow.
        decision = run(queue(5, announced_level=8), busy(documents=240))
        assert (decision.action, decision.target) == (Action.ADDITIVE_INCREASE, 8)
        assert memory_of(decision).probe_until == 0.0

    def test_a_blind_cut_under_a_quota_is_no_deeper_than_the_levels_accepted_share(
        self,
    ) -> None:
        # 10% refused at the announced level 8, and a blind cut sized from a poor in-use
        # estimate (2): the quota says 8 fits, so the cut is to 8's accepted share, 7.
        window = busy(throttled=1)
        stats = window.stats(NOW - 30, NOW + 1)
        current = queue(8, announced_level=8)
        situation = Situation(
            current,
            memory_of_state(current),
            stats,
            None,
            window.snapshot(),
            NOW,
            PARAMS,
            window.quota,
        )
        blind = move(2, QueueStateName.THROTTLED, "Overload.", AdaptiveMemory(ceiling=3), stats)
        fit = Fit(8.0, 8.0 * PACE, NOW, 8.0 * PACE)
        verdict = ALGORITHM.within_announced(situation, fit, blind)
        assert verdict.target == 7
        assert verdict.memory.ceiling == 8
        # A cut no deeper than that share is the blind law's own.
        shallow = move(7, QueueStateName.THROTTLED, "Trim.", AdaptiveMemory(ceiling=8), stats)
        assert ALGORITHM.within_announced(situation, fit, shallow) is shallow

    def test_a_remaining_quota_running_toward_zero_steps_down_before_the_first_429(
        self,
    ) -> None:
        # 6000 calls a minute (100/s: 8 invocations), no 429 yet, but only 1500 left for the
        # window's last 30 s: 50 calls a second until the reset, 4 invocations.
        window = busy(limit=6000.0, window_s=60.0, remaining=1500.0, reset_s=30.0)
        assert window.stats(NOW - 30, NOW + 1).throttled == 0
        spending = run(queue(8, announced_level=8), window, now=NOW + 0.1)
        assert (spending.action, spending.target) == (Action.MULTIPLICATIVE_DECREASE, 4)
        assert spending.new_state.enabled
        # With as many left as the steady rate spends to the reset, it holds.
        whole = busy(limit=6000.0, window_s=60.0, remaining=3000.0, reset_s=30.0)
        assert run(queue(8, announced_level=8), whole, now=NOW + 0.1).target == 8

    def test_a_spent_quota_pauses_until_its_reset_then_resumes_at_its_level(self) -> None:
        # 6000 calls a minute (100/s), 20 left 40 s before the reset: 0.5 calls/s until then.
        window = busy(limit=6000.0, window_s=60.0, remaining=20.0, reset_s=40.0)
        paused = run(queue(8), window, now=NOW + 1)
        assert window.quota is not None and window.quota.reset_at is not None
        reset_at = window.quota.reset_at
        assert paused.enabled is False and paused.target == PARAMS.cmin
        assert paused.new_state.wake_at == reset_at
        assert memory_of(paused).paused_until == reset_at
        # No raise before the reset.
        waiting = run(paused.new_state, window, now=reset_at - 5)
        assert waiting.enabled is False and waiting.target == PARAMS.cmin
        resumed = run(waiting.new_state, window, now=reset_at + 0.5)
        assert resumed.enabled is True and resumed.target == 8
        assert resumed.action is Action.RESUME

    def test_a_quota_below_the_floor_pauses_and_a_test_ends_at_its_first_announcement(
        self,
    ) -> None:
        # 3 calls/s: a quarter of one invocation, where Cmin sends 25 calls/s.
        window = busy(limit=3.0, remaining=0.0)
        paused = run(queue(8), window)
        assert paused.enabled is False and paused.target == PARAMS.cmin
        period = memory_of(paused).pause_s
        # The pause is over: testing Cmin. The test's first document brings the same quota.
        testing = paused.new_state.evolve(
            enabled=True,
            memory=replace(memory_of(paused), probe_started_at=NOW + 60, probe_until=NOW + 61),
        )
        window.add(announced(NOW + 62, limit=3.0, remaining=0.0))
        again = run(testing, window, now=NOW + 62.5)
        assert again.enabled is False and again.action is Action.PAUSE
        assert memory_of(again).pause_s == 2 * period
        # A test that brings back a quota that fits resumes at its level at once.
        window.add(announced(NOW + 63, limit=100.0))
        resumed = run(testing, window, now=NOW + 63.5)
        assert resumed.enabled is True and resumed.target == 8

    def test_429s_naming_a_concurrency_limit_set_the_quota_aside(self) -> None:
        kinds = busy(throttled=4, concurrency_kind=4)
        unannounced = busy(throttled=4, limit=None, window_s=None, remaining=None, reset_s=None)
        assert unannounced.quota is None
        decision, blind = run(queue(20), kinds), run(queue(20), unannounced)
        # The in-flight cut in proportion, as the blind law sizes it, not the quota's 8.
        assert decision.action is Action.MULTIPLICATIVE_DECREASE
        assert decision.target == blind.target != 8

    def test_without_a_quota_it_decides_as_the_blind_law(self) -> None:
        def unannounced(throttled: int) -> QueueWindow:
            # Stripe's kind of every 429 (a rate limit) but no quota.
            window = QueueWindow()
            for index in range(60):
                window.add(
                    Sample(
                        "orders",
                        NOW - 30 + index / 2,
                        10,
                        10 - throttled,
                        throttled,
                        invocation_ms=800.0,
                        throttled_rate=throttled,
                    )
                )
            return window

        for throttled in (0, 1, 6):
            for current in (queue(100), queue(8, ceiling=9, broke_at=12), queue(3)):
                window = unannounced(throttled)
                with_phase = run(current, window)
                blind = decide(BLIND, current, config(), window, NOW, PARAMS)
                assert with_phase == blind


def both_announcing(refunds_calls: int = 10) -> list[Sample]:
    """Ten seconds of orders and refunds on one API announcing 100 calls/s: four invocations a
    second each, orders' of 10 calls, refunds' of ``refunds_calls``, all answered."""
    return [
        replace(announced(NOW - 10 + index / 4), queue=name, requests=calls, ok=calls)
        for index in range(40)
        for name, calls in (("orders", 10), ("refunds", refunds_calls))
    ]


def test_the_loop_shares_a_quota_among_the_queues_that_report_its_downstream() -> None:
    ledger = registered(registered(InMemoryLedger(memory_types=memory_type)), "refunds")
    actuator = mapped(mapped(InMemoryActuator()), "refunds")
    loop = ControlLoop(ledger, actuator, PARAMS)
    loop.run_batch(both_announcing(), now=NOW)
    # 100 calls/s between two queues that both want more than half (each sent 41 calls/s,
    # with headroom 49.2), at 12.5 calls per invocation-second: 4 invocations each.
    assert actuator.read("esm-orders", 0).max_concurrency == 4
    assert actuator.read("esm-refunds", 0).max_concurrency == 4
    # The book names the queues announcing per downstream, with what each may want of it.
    assert {api: sorted(wanted) for api, wanted in loop.book.announcing(NOW - 60).items()} == {
        "api": ["orders", "refunds"]
    }


def test_calls_after_a_queues_newest_announcement_do_not_raise_what_it_wants() -> None:
    # Orders and refunds announce for ten seconds (nine whole seconds of starts, 360 calls
    # each, over the 9.75 s since the first), then orders' API stops sending headers and five
    # more seconds bring it 40 calls/s more: what it wants of the quota is still read from
    # the seconds it announced, like refunds'.
    ledger = registered(registered(InMemoryLedger(memory_types=memory_type)), "refunds")
    loop = ControlLoop(ledger, mapped(mapped(InMemoryActuator()), "refunds"), PARAMS)
    unannounced = [
        replace(
            announced(NOW + 1 + index / 4),
            quota_remaining=None,
            quota_limit=None,
            quota_window_s=None,
            quota_reset_s=None,
        )
        for index in range(20)
    ]
    loop.run_batch(both_announcing() + unannounced, now=NOW + 5)
    wanted = loop.book.announcing(NOW - 60)["api"]
    assert wanted["orders"] == pytest.approx(wanted["refunds"])
    assert wanted["orders"] == pytest.approx(1.2 * 360 / 9.75)


def test_the_loop_leaves_a_queue_the_quota_another_one_does_not_use() -> None:
    # The demo's shape: orders drains a backlog, refunds sends a call an invocation (4.1
    # calls/s over the 9.75 s since its first, 4.9 with headroom). Shared evenly, orders would
    # get 4 invocations and 50 calls/s would go unused; max-min fair, it takes the 95.1 that
    # refunds leaves, 7 invocations. Refunds keeps at least half: 4 of its own pace (1.25
    # calls per invocation-second) would be 40; it is not cut.
    ledger = registered(registered(InMemoryLedger(memory_types=memory_type)), "refunds")
    actuator = mapped(mapped(InMemoryActuator()), "refunds", concurrency=2)
    loop = ControlLoop(ledger, actuator, PARAMS)
    loop.run_batch(both_announcing(refunds_calls=1), now=NOW)
    assert actuator.read("esm-orders", 0).max_concurrency == 7
    assert actuator.read("esm-refunds", 0).max_concurrency >= 2


def test_a_group_estimate_does_not_size_queues_sharing_an_announced_quota() -> None:
    # The group of the api remembers a blind estimate of 30 calls/s (the refusals of a drop
    # before it was announced, say): the quota announced since says 100, shared by demand.
    ledger = registered(registered(InMemoryLedger(memory_types=memory_type)), "refunds")
    ledger.put_group_memory("api", GroupMemory(capacity_rps=30.0), 0)
    actuator = mapped(mapped(InMemoryActuator()), "refunds")
    loop = ControlLoop(ledger, actuator, PARAMS)
    loop.run_batch(both_announcing(), now=NOW)
    assert actuator.read("esm-orders", 0).max_concurrency == 4
    assert actuator.read("esm-refunds", 0).max_concurrency == 4


class CountingLedger(InMemoryLedger):
    """The in-memory ledger, counting the groups whose memory was read."""

    def __init__(self) -> None:
        super().__init__(memory_types=memory_type)
        self.memories_read: list[str] = []

    def get_group_memories(self, groups: Iterable[str]) -> dict[str, StoredGroupMemory]:
        names = list(groups)
        self.memories_read.extend(names)
        return super().get_group_memories(names)


def test_a_group_whose_queues_all_announce_reads_no_group_memory() -> None:
    ledger = registered(registered(CountingLedger()), "refunds")
    actuator = mapped(mapped(InMemoryActuator()), "refunds")
    loop = ControlLoop(ledger, actuator, PARAMS)
    loop.run_batch(both_announcing(), now=NOW)
    assert actuator.read("esm-orders", 0).max_concurrency == 4
    assert ledger.memories_read == []
    # One of them reporting without the headers puts the group's blind law back in charge
    # of it, and its memory is read.
    blind = [
        replace(
            sample, quota_remaining=None, quota_limit=None, quota_window_s=None, quota_reset_s=None
        )
        if sample.queue == "refunds"
        else sample
        for sample in both_announcing()
    ]
    loop.run_batch([replace(s, event_time=s.event_time + 60) for s in blind], now=NOW + 60)
    assert ledger.memories_read == ["api"]


def test_a_raise_decided_again_with_the_backlog_still_shares_the_quota() -> None:
    ledger = registered(registered(InMemoryLedger(memory_types=memory_type)), "refunds")
    actuator = mapped(mapped(InMemoryActuator(), concurrency=2), "refunds", concurrency=2)
    backlog = InMemoryBacklog(orders=500, refunds=500)
    loop = ControlLoop(ledger, actuator, PARAMS, backlog=backlog)
    loop.run_batch(both_announcing(), now=NOW)
    # Both raises were read against their backlogs and decided again: still 4 each, the
    # quota's 100 calls/s shared by the two queues, not 8 each as if each had it alone.
    assert sorted(backlog.reads) == ["orders", "refunds"]
    assert actuator.read("esm-orders", 0).max_concurrency == 4
    assert actuator.read("esm-refunds", 0).max_concurrency == 4


class _BlindLaw(AdaptiveLimit):
    """The adaptive limit with no announced phase in front of it."""

    def decide(self, situation):  # type: ignore[no-untyped-def]
        return self._blind(situation)


BLIND = _BlindLaw()


# --- invariants ---------------------------------------------------------------------------

quotas = st.fixed_dictionaries(
    {
        "limit": st.floats(1.0, 10_000.0),
        "window_s": st.sampled_from([1.0, 10.0, 60.0, 3600.0]),
        "remaining_share": st.floats(0.0, 1.0),
        "reset_share": st.floats(0.0, 1.0),
    }
)


@settings(max_examples=200)
@given(
    quota=quotas,
    current=st.integers(5, 100),
    cmin=st.integers(2, 5),
    others=st.lists(st.floats(0.0, 20_000.0), max_size=3),
    announced_level=st.integers(0, 100),
    later_s=st.floats(0.0, 5.0),
)
def test_the_announced_level_bounds_every_decision(
    quota: dict[str, float],
    current: int,
    cmin: int,
    others: list[float],
    announced_level: int,
    later_s: float,
) -> None:
    params = PolicyParams(cmin=cmin, cmax=100)
    limit, window_s = quota["limit"], quota["window_s"]
    remaining = math.floor(limit * quota["remaining_share"])
    reset_s = window_s * quota["reset_share"]
    window = busy(limit=limit, window_s=window_s, remaining=float(remaining), reset_s=reset_s)
    now = NOW + later_s
    decision = run(
        queue(current, announced_level=announced_level),
        window,
        now=now,
        params=params,
        sharing={"api": {"orders": 1.0} | {f"q{i}": wanted for i, wanted in enumerate(others)}},
    )
    newest = window.quota
    assert newest is not None
    # The level acts once the invocations running (0.8 s each) end.
    acts_at = now + 0.8
    rate = newest.sustained_rate(acts_at)
    assert rate is not None
    fit = max_min_share(rate, tuple(others)) / PACE
    # Never above the level the quota sustains then (Cmin being the least a mapping runs at)...
    assert decision.target <= max(cmin, math.floor(fit + 1e-9))
    # ...never below Cmin...
    assert decision.target >= cmin
    # ...and with nothing left until a reset still ahead then, never a raise nor a resume.
    if remaining == 0 and newest.reset_at is not None and newest.reset_at > acts_at:
        assert decision.target <= current
        assert decision.action is not Action.RESUME


@given(
    rate=st.floats(0.0, 10_000.0),
    others=st.lists(st.floats(0.0, 20_000.0), max_size=5),
)
def test_a_share_is_max_min_fair_by_demand(rate: float, others: list[float]) -> None:
    share = max_min_share(rate, tuple(others))
    # Never less than an even part, never more than the whole: all of it alone.
    assert rate / (len(others) + 1) - 1e-6 <= share <= rate + 1e-6
    if not others:
        assert share == rate
    # What the others want, up to the share, and the share itself fill the rate exactly:
    # none of it is left unused, none given twice.
    assert math.isclose(sum(min(wanted, share) for wanted in others) + share, rate, abs_tol=1e-6)
