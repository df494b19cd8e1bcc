"""The control loop on the in-memory twins: decide all, then claim and actuate."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence

import pytest

from controller.actuator import InMemoryActuator
from controller.backlog import REREAD_AFTER_S, InMemoryBacklog
from controller.executor import STEP_BUDGET_S, DisplayExecutor
from controller.ledger import InMemoryLedger
from controller.loop import ControlLoop
from controller.model import Action, AuditEvent, Decision, Mode, QueueStateName, Sample
from controller.policy import ALGORITHMS, LimitAlgorithm, Situation, Verdict, memory_type
from controller.policy.aimd import Aimd
from controller.policy.base import NoMemory
from controller.ports import ActuationError, BacklogUnavailable, MappingView, WakeUpRequest
from controller.settings import PolicyParams
from tests.factories import backlogged, config, mapped, registered, sample, waiting


def storm(start: float, seconds: int = 10, queue: str = "orders") -> list[Sample]:
    return [
        sample(queue, at=start + s + 0.9, ok=8, throttled=2, invocation_ms=500)
        for s in range(seconds)
    ]


def healthy(start: float, seconds: int = 10, queue: str = "orders") -> list[Sample]:
    return [sample(queue, at=start + s + 0.9, ok=10, invocation_ms=500) for s in range(seconds)]


@pytest.fixture
def ledger() -> InMemoryLedger:
    return registered(InMemoryLedger(memory_types=memory_type))


@pytest.fixture
def actuator() -> InMemoryActuator:
    return mapped(InMemoryActuator())


@pytest.fixture
def controller(ledger: InMemoryLedger, actuator: InMemoryActuator) -> ControlLoop:
    return ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())


def test_a_storm_cuts_once_and_records_the_transition(
    controller: ControlLoop, ledger: InMemoryLedger, actuator: InMemoryActuator
) -> None:
    decisions = controller.run_batch(storm(100), now=110.0).done
    assert [(d.previous, d.target) for d in decisions] == [(100, 50)]
    assert actuator.read("esm-orders", 0).max_concurrency == 50
    state = ledger.get_states(["orders"])["orders"]
    assert (state.concurrency, state.state, state.version) == (50, QueueStateName.THROTTLED, 1)
    [audit] = ledger.audit_trail("orders")
    assert (audit.previous_value, audit.new_value, audit.action) == (
        50 * 2,
        50,
        "MULTIPLICATIVE_DECREASE",
    )
    assert audit.control_loop_latency_ms == pytest.approx(100.0)
    # The lagging tail of the same storm (invocations begun before the cut) changes nothing.
    late = [sample(at=111.0 + s, ok=0, throttled=10, invocation_ms=3000) for s in range(3)]
    assert all(d.action is Action.HOLD for d in controller.run_batch(late, now=114.0).done)
    assert actuator.read("esm-orders", 0).max_concurrency == 50


def test_unregistered_queues_are_ignored_and_counted(
    controller: ControlLoop, actuator: InMemoryActuator
) -> None:
    assert controller.run_batch(storm(100, queue="stranger"), now=110.0).done == []
    assert controller.counters["samples_unregistered"] == 10
    assert actuator.calls == []


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_a_steady_queue_writes_nothing(
    ledger: InMemoryLedger, actuator: InMemoryActuator, algorithm: str
) -> None:
    """An hour of clean traffic (3 invocations in use): after settling in, no ledger writes."""
    controller = ControlLoop(ledger, actuator, PolicyParams(), algorithm=ALGORITHMS[algorithm]())
    for second in range(3600):
        samples = [sample(at=1000 + second + 0.99, ok=10, invocation_ms=990) for _ in range(3)]
        controller.run_batch(samples, now=1000 + second + 2)
    settling = [a for a in ledger.audit_trail("orders") if a.timestamp < 1060]
    assert ledger.audit_trail("orders") == settling
    assert actuator.read("esm-orders", 0).max_concurrency == 100


def test_an_operator_change_to_the_mapping_wins(
    controller: ControlLoop, ledger: InMemoryLedger, actuator: InMemoryActuator
) -> None:
    controller.run_batch(storm(100), now=110.0)
    actuator.apply("esm-orders", 70, True, 0)  # someone, by hand
    decisions = controller.run_batch(storm(113), now=124.0).done
    assert decisions == []
    assert actuator.read("esm-orders", 0).max_concurrency == 70
    state = ledger.get_states(["orders"])["orders"]
    assert state.concurrency == 70
    assert [a.event_type for a in ledger.audit_trail("orders")] == [
        AuditEvent.TRANSITION,
        AuditEvent.DRIFT_DETECTED,
    ]
    # Fresh evidence under the adopted value is judged from there.
    [cut] = controller.run_batch(storm(127), now=138.0).done
    assert (cut.previous, cut.target) == (70, 35)


def fleet(actuator: InMemoryActuator, *queues: str) -> ControlLoop:
    """Registered queues at 100 on ``actuator``, and a controller over them."""
    ledger = InMemoryLedger(memory_types=memory_type)
    for queue in queues:
        ledger.put_config(config(queue))
        actuator.add_mapping(f"esm-{queue}", 100)
    return ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())


def storms(start: float, *queues: str) -> list[Sample]:
    return [s for queue in queues for s in storm(start, queue=queue)]


QUEUES = ("orders", "refunds", "invoices")


def test_one_listing_per_batch_replaces_a_read_per_change() -> None:
    actuator = InMemoryActuator()
    controller = fleet(actuator, *QUEUES)
    # Never decided before: each state is read from its mapping, then one listing checks all.
    decisions = controller.run_batch(storms(100, *QUEUES), now=110.0).done

    assert sorted((d.queue, d.target) for d in decisions) == [(q, 50) for q in sorted(QUEUES)]
    assert (actuator.list_pages, actuator.reads, len(actuator.calls)) == (1, 3, 3)


def test_a_mapping_the_listing_did_not_show_is_read_on_its_own() -> None:
    # One mapping per page, an unrelated one first: the budget (a page per mapping wanted)
    # runs out before "refunds" is listed.
    actuator = InMemoryActuator(page_size=1)
    actuator.add_mapping("esm-someone-else", 10)
    controller = fleet(actuator, "orders", "refunds")

    decisions = controller.run_batch(storms(100, "orders", "refunds"), now=110.0).done

    assert sorted((d.queue, d.target) for d in decisions) == [("orders", 50), ("refunds", 50)]
    assert (actuator.list_pages, actuator.reads) == (2, 2 + 1)  # two first states, one check


def test_a_failed_listing_falls_back_to_a_read_per_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    actuator = InMemoryActuator()
    controller = fleet(actuator, *QUEUES)

    def refused(uuids: Collection[str], deadline: float) -> dict[str, MappingView]:
        raise ActuationError("AccessDeniedException")

    monkeypatch.setattr(actuator, "read_many", refused)
    decisions = controller.run_batch(storms(100, *QUEUES), now=110.0).done

    assert len(decisions) == 3
    assert (actuator.list_pages, actuator.reads) == (0, 3 + 3)  # first states, then checks
    assert controller.counters["mapping_list_failures"] == 1


def test_drift_is_detected_from_the_listed_value() -> None:
    actuator = InMemoryActuator()
    controller = fleet(actuator, *QUEUES)
    controller.run_batch(storms(100, *QUEUES), now=110.0)
    actuator.apply("esm-refunds", 70, True, 0)  # someone, by hand

    decisions = controller.run_batch(storms(113, *QUEUES), now=124.0).done

    assert sorted((d.queue, d.target) for d in decisions) == [("invoices", 25), ("orders", 25)]
    assert (actuator.list_pages, actuator.reads) == (2, 3)  # the reads of the first states
    assert actuator.read("esm-refunds", 0).max_concurrency == 70
    state = controller.ledger.get_states(["refunds"])["refunds"]
    assert state.concurrency == 70
    assert controller.counters["drift_detected"] == 1


class InterleavingActuator(InMemoryActuator):
    """Runs ``between`` right after a read has seen the mapping: a rival acting in that gap."""

    between: Callable[[], object] | None = None

    def read(self, uuid: str, deadline: float) -> MappingView:
        view = super().read(uuid, deadline)
        if self.between is not None:
            rival, self.between = self.between, None
            rival()
        return view


def test_two_controllers_race_one_wins_the_other_rereads(
    ledger: InMemoryLedger, actuator: InMemoryActuator
) -> None:
    actuator = InterleavingActuator()
    actuator.add_mapping("esm-orders", 100)
    first = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())
    second = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())
    first_done: list[Decision] = []
    # The first container runs its whole batch while the second learns the queue's state.
    actuator.between = lambda: first_done.extend(first.run_batch(storm(100), 110.0).done)
    # The second's mapping check shows 50, not the 100 it decided from: it adopts, never
    # halves again on the same evidence.
    assert second.run_batch(storm(100), 110.0).done == []
    assert [d.target for d in first_done] == [50]
    assert actuator.read("esm-orders", 0).max_concurrency == 50
    assert len([c for c in actuator.calls if c.uuid == "esm-orders"]) == 1


def test_a_lost_conditional_write_is_counted_and_retried_from_fresh_state(
    ledger: InMemoryLedger,
) -> None:
    actuator = InterleavingActuator()
    actuator.add_mapping("esm-orders", 100)
    rival = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())
    loser = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())
    # Both know the queue's state; the rival's batch runs while the loser checks the mapping.
    for controller in (rival, loser):
        assert controller.run_batch(healthy(90), now=100.0).done
    actuator.between = lambda: rival.run_batch(storm(100), 110.0)
    assert loser.run_batch(storm(100), 110.0).done == []
    assert loser.counters["version_conflicts"] == 1
    assert [call.value for call in actuator.calls] == [50]
    [retry] = loser.run_batch(storm(113), now=124.0).done
    assert (retry.previous, retry.target) == (50, 25)


def test_failed_actuation_puts_the_ledger_back_and_tries_again(
    controller: ControlLoop,
    ledger: InMemoryLedger,
    actuator: InMemoryActuator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def gives_up(uuid: str, value: int, enabled: bool, deadline: float) -> MappingView:
        raise ActuationError("ResourceInUseException after 6 attempts")

    with monkeypatch.context() as patch:
        patch.setattr(actuator, "apply", gives_up)
        assert controller.run_batch(storm(100), 110.0).done == []
        state = ledger.get_states(["orders"])["orders"]
        assert state.concurrency == 100
        assert [a.event_type for a in ledger.audit_trail("orders")] == [
            AuditEvent.TRANSITION,
            AuditEvent.ACTUATION_FAILED,
        ]
    [retry] = controller.run_batch([], 111.0).done
    assert (retry.previous, retry.target) == (100, 50)
    assert actuator.read("esm-orders", 0).max_concurrency == 50


def test_dry_run_records_but_never_actuates(
    ledger: InMemoryLedger, actuator: InMemoryActuator
) -> None:
    ledger.put_config(config("orders", mode=Mode.DRY_RUN))
    controller = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())
    [decision] = controller.run_batch(storm(100), now=110.0).done
    assert decision.target == 50
    assert actuator.calls == []
    [audit] = ledger.audit_trail("orders")
    assert audit.reason.startswith("[dry-run] ")


def test_steps_past_the_deadline_are_deferred_not_lost(actuator: InMemoryActuator) -> None:
    ledger = InMemoryLedger(memory_types=memory_type)
    for index in range(5):
        ledger.put_config(config(f"q{index}"))
        actuator.add_mapping(f"esm-q{index}", 100)
    clock = [0.0]
    controller = ControlLoop(
        ledger, actuator, PolicyParams(), algorithm=Aimd(), monotonic=lambda: clock[0]
    )
    samples = [s for index in range(5) for s in storm(100, queue=f"q{index}")]
    controller.states([config(f"q{index}") for index in range(5)], 100.0)  # known states
    assert controller.run_batch(samples, 110.0, deadline=2.0).done == []
    assert controller.counters["steps_deferred"] == 5
    assert (actuator.list_pages, actuator.calls) == (0, [])
    done = controller.run_batch([], 111.0, deadline=100.0).done
    assert sorted(d.queue for d in done) == [f"q{index}" for index in range(5)]
    assert all(actuator.read(f"esm-q{i}", 0).max_concurrency == 50 for i in range(5))


def test_a_cold_start_restores_state_and_relearns_before_judging(
    controller: ControlLoop, ledger: InMemoryLedger, actuator: InMemoryActuator
) -> None:
    controller.run_batch(storm(100), now=110.0)
    cold = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Aimd())
    [decision] = cold.run_batch(healthy(113, 1), now=114.0).done
    assert decision.action is Action.HOLD
    assert decision.previous == 50
    assert "Insufficient evidence" in decision.reason


def test_manual_evaluation_follows_the_original_sequence(controller: ControlLoop) -> None:
    results = []
    for error_rate, success_rate in [(0.2, 0.8), (0.2, 0.8), (0.01, 0.99)]:
        outcome = controller.evaluate("orders", error_rate, success_rate, 500.0, 1e9)
        assert outcome is not None
        decision = outcome.decision
        results.append((decision.target, decision.state, outcome.esm_updated))
    assert results == [
        (50, QueueStateName.THROTTLED, True),
        (25, QueueStateName.CRITICAL_BACKOFF, True),
        (30, QueueStateName.RECOVERING, True),
    ]


# -- the backlog: read before a probe or for a hold that asks, never for anything else -------


def test_a_queue_with_nothing_waiting_is_not_probed(ledger: InMemoryLedger) -> None:
    backlog = InMemoryBacklog(orders=0)
    loop = backlogged(ledger, backlog)
    [decision] = loop.run_batch(healthy(100), now=110.0).done
    assert (decision.action, decision.target) == (Action.HOLD, 50)
    assert decision.reason.startswith("Nothing waiting in the queue: no raise to ")
    assert backlog.reads == ["orders"]
    assert loop.actuator.read("esm-orders", 0).max_concurrency == 50


def test_a_queue_with_messages_waiting_is_probed(ledger: InMemoryLedger) -> None:
    backlog = InMemoryBacklog(orders=12)
    loop = backlogged(ledger, backlog)
    [decision] = loop.run_batch(healthy(100), now=110.0).done
    assert decision.probes
    assert backlog.reads == ["orders"]
    assert loop.actuator.read("esm-orders", 0).max_concurrency == decision.target > 50


def test_a_backlog_that_holds_a_probe_is_read_again_only_after_a_while(
    ledger: InMemoryLedger,
) -> None:
    # throttling seed 7 draw 54: a probe held for its backlog was asked for at every batch,
    # each time one more read (42 in 42 s).
    backlog = InMemoryBacklog(orders=0)
    loop = backlogged(ledger, backlog)
    for now in (110.0, 111.0, 112.0, 110.0 + REREAD_AFTER_S):
        # Every invocation of the level in use and clean, each second: a raise wanted.
        busy = [sample("orders", at=now - 1.1, ok=10, invocation_ms=1000) for _ in range(50)]
        [decision] = loop.run_batch(busy, now=now).done
        assert decision.reason.startswith("Nothing waiting in the queue: no raise to ")
    assert backlog.reads == ["orders", "orders"]


def test_a_reading_that_lets_a_probe_go_is_not_kept(ledger: InMemoryLedger) -> None:
    backlog = InMemoryBacklog(orders=12)
    loop = backlogged(ledger, backlog)
    loop.run_batch(healthy(100), now=110.0)
    # The probe went ahead on its reading: the next one is read for again.
    readings = loop.backlogs
    assert readings is not None
    assert readings.read(["orders"], 111.0, math.inf) == ({"orders": waiting(12)}, 0)
    assert backlog.reads == ["orders", "orders"]


def test_the_backlog_is_read_only_before_a_raise(ledger: InMemoryLedger) -> None:
    backlog = InMemoryBacklog(orders=0)
    loop = backlogged(ledger, backlog)
    [cut] = loop.run_batch(storm(100), now=110.0).done
    assert cut.action is Action.MULTIPLICATIVE_DECREASE
    assert backlog.reads == []


class NearTheEnd(LimitAlgorithm[NoMemory]):
    """Holds asking for the backlog; steps down one once it is read and ends soon."""

    name = "near-the-end"

    def decide(self, situation: Situation[NoMemory]) -> Verdict[NoMemory]:
        state, backlog = situation.state, situation.backlog
        if backlog is None:
            return Verdict(
                state.concurrency, state.state, "Asking.", situation.memory, asks_backlog=True
            )
        target = state.concurrency - 1 if backlog.visible < 100 else state.concurrency
        return Verdict(target, QueueStateName.THROTTLED, "Read.", situation.memory)


def test_a_hold_that_asks_for_the_backlog_is_decided_again_with_it(
    ledger: InMemoryLedger,
) -> None:
    backlog = InMemoryBacklog(orders=12)
    loop = backlogged(ledger, backlog, NearTheEnd())
    [decision] = loop.run_batch(healthy(100), now=110.0).done
    assert (decision.target, decision.reason) == (49, "Read.")
    assert backlog.reads == ["orders"]
    assert loop.actuator.read("esm-orders", 0).max_concurrency == 49


def test_a_failed_read_is_counted_and_the_probe_goes_on(ledger: InMemoryLedger) -> None:
    backlog = InMemoryBacklog(orders=0)
    backlog.fail_next(BacklogUnavailable("throttled"))
    loop = backlogged(ledger, backlog)
    [decision] = loop.run_batch(healthy(100), now=110.0).done
    assert decision.probes
    assert loop.counters["backlog_read_failures"] == 1


def test_no_backlog_read_without_time_for_the_plan_after_it(ledger: InMemoryLedger) -> None:
    backlog = InMemoryBacklog(orders=0)
    loop = ControlLoop(
        ledger,
        mapped(InMemoryActuator(), concurrency=50),
        PolicyParams(),
        backlog=backlog,
        monotonic=lambda: 0.0,
    )
    loop.run_batch(healthy(100), now=110.0, deadline=STEP_BUDGET_S)
    assert backlog.reads == []
    assert loop.counters["backlog_read_failures"] == 0


class Pauser(LimitAlgorithm[NoMemory]):
    """Pauses every queue it decides until ``pause_s`` after the decision."""

    name = "pauser"

    def __init__(self, pause_s: float) -> None:
        self.pause_s = pause_s

    def decide(self, situation: Situation[NoMemory]) -> Verdict[NoMemory]:
        state = situation.state
        wake_at = state.wake_at if state.wake_at > situation.now else situation.now + self.pause_s
        return Verdict(
            state.concurrency,
            QueueStateName.THROTTLED,
            "Paused.",
            situation.memory,
            enabled=False,
            wake_at=wake_at,
        )


class Scheduler:
    """The wake-up scheduler's twin: what it was asked, refusing the first ``refuse``."""

    def __init__(self, refuse: int = 0) -> None:
        self.asked: list[WakeUpRequest] = []
        self.refuse = refuse

    def schedule(self, requests: Sequence[WakeUpRequest], now: float, deadline: float) -> int:
        self.asked.extend(requests)
        refused, self.refuse = min(self.refuse, len(requests)), 0
        return refused


def test_a_wake_up_set_anew_is_asked_for_once(
    ledger: InMemoryLedger, actuator: InMemoryActuator
) -> None:
    scheduler = Scheduler()
    loop = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Pauser(30), wake_ups=scheduler)
    loop.run_batch(storm(100), now=110.0)
    assert scheduler.asked == [WakeUpRequest("orders", 140.0)]
    assert not actuator.read("esm-orders", 0).enabled
    # Decided again before its wake-up, the queue keeps it: nothing more is asked.
    loop.run_batch(storm(110, seconds=2), now=113.0)
    assert scheduler.asked == [WakeUpRequest("orders", 140.0)]
    assert loop.counters["wake_ups_unscheduled"] == 0


def test_a_wake_up_the_scheduler_refuses_is_counted_and_the_tick_still_wakes_it(
    ledger: InMemoryLedger, actuator: InMemoryActuator
) -> None:
    scheduler = Scheduler(refuse=1)
    loop = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Pauser(30), wake_ups=scheduler)
    loop.run_batch(storm(100), now=110.0)
    assert loop.counters["wake_ups_unscheduled"] == 1
    assert loop.tick(now=141.0).due == 1


class Prober(LimitAlgorithm[NoMemory]):
    """Raises every queue it decides for a pulse of ``pulse_s``, its mapping running."""

    name = "prober"

    def __init__(self, pulse_s: float) -> None:
        self.pulse_s = pulse_s

    def decide(self, situation: Situation[NoMemory]) -> Verdict[NoMemory]:
        state = situation.state
        return Verdict(
            state.concurrency + 1,
            QueueStateName.RECOVERING,
            "Probing.",
            situation.memory,
            wake_at=situation.now + self.pulse_s,
        )


def test_a_running_queue_asks_for_no_wake_up_its_telemetry_serves_it(
    ledger: InMemoryLedger, actuator: InMemoryActuator
) -> None:
    scheduler = Scheduler()
    loop = ControlLoop(ledger, actuator, PolicyParams(), algorithm=Prober(3), wake_ups=scheduler)
    loop.run_batch(healthy(100), now=110.0)
    assert ledger.get_states(["orders"])["orders"].wake_at == 113.0
    assert actuator.read("esm-orders", 0).enabled
    assert scheduler.asked == []


def test_a_dry_run_asks_for_no_wake_up(ledger: InMemoryLedger, actuator: InMemoryActuator) -> None:
    scheduler = Scheduler()
    loop = ControlLoop(
        ledger,
        actuator,
        PolicyParams(),
        algorithm=Pauser(30),
        executor=DisplayExecutor(show=lambda line: None),
        wake_ups=scheduler,
    )
    loop.run_batch(storm(100), now=110.0)
    assert scheduler.asked == []
