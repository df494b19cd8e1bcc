"""The simulated wake-ups: the controller's runs at the times its decisions ask for (a pause's or
a test's end), delivered as the SQS scheduler delivers them, beside the scheduled tick."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import pytest

from controller.constants import WAKE_UP_MAX_DELAY_S
from controller.model import Sample
from controller.policy import DEFAULT_ALGORITHM
from controller.ports import WakeUpRequest
from load.sim.control_plane import ControllerRun
from load.sim.engine import SIM_EPOCH, BacklogNow, simulate
from load.sim.policies import (
    WAKE_UP_DELIVERY_S,
    QueueMeshPolicy,
    SimulatedWakeUps,
    StaticPolicy,
)
from load.sim.scenario import Scenario
from load.sim.trace import MappingSetting, SimResult
from load.simulate import PEER_POLICIES, make_policy
from tests.unit.test_sim import tiny

# A capacity under what Cmin sends: the law pauses, tests Cmin, pauses again.
BELOW_THE_FLOOR = {"backlog": 3000, "capacity_rps": [[0, 2]], "duration_s": 400}


class Watched(QueueMeshPolicy):
    """The controller, and after each of its runs the queue's state: when it ran, whether its
    mapping is enabled, and when it asked to be decided again."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[tuple[float, bool, float]] = []

    def _invoke(self, now: float, run: Callable[[], object]) -> ControllerRun | None:
        invocation = super()._invoke(now, run)
        state = self.controller.book.state("q")
        if state is not None:  # held once the queue's first run learned it
            self.runs.append((now - SIM_EPOCH, state.enabled, state.wake_at - SIM_EPOCH))
        return invocation


def test_a_paused_queue_is_decided_again_on_its_wake_up_not_at_the_minutes_tick() -> None:
    policy = Watched()
    trace = simulate(tiny(**BELOW_THE_FLOOR), policy).queues["q"]
    times = [at for at, _, _ in policy.runs]
    ended = BELOW_THE_FLOOR["duration_s"] - 2
    asked = sorted({wake_at for at, _, wake_at in policy.runs if at < wake_at < ended})
    paused = [wake_at for at, enabled, wake_at in policy.runs if not enabled and wake_at > at]
    assert len(paused) >= 3  # paused, and paused again after failed tests
    for wake_at in asked:  # the delay's whole seconds and the delivery, at most
        assert any(wake_at <= at <= wake_at + 1 + WAKE_UP_DELIVERY_S for at in times), wake_at
    # The first pause (the shortest, 15 s) ends with a test of Cmin at its end, not at 60 s.
    first = trace.enabled_per_s.index(False)
    assert trace.enabled_per_s.index(True, first) <= first + 15 + 2
    assert trace.dlq_messages == 0


def test_a_wake_up_past_the_longest_sqs_delay_is_left_to_the_tick() -> None:
    clock = 100.5  # the invocation's time: it sends its wake-ups after its calls
    wake_ups = SimulatedWakeUps(lambda: clock)
    requests = [
        WakeUpRequest("near", 100.2),  # due: at once
        WakeUpRequest("far", 100 + WAKE_UP_MAX_DELAY_S),
        WakeUpRequest("beyond", 100 + WAKE_UP_MAX_DELAY_S + 1),
        WakeUpRequest("beside", 100.2),  # the same delivery: one run
    ]
    # Not sent, and no failure: the SQS scheduler does not send it either.
    assert wake_ups.schedule(requests, 100.0, math.inf) == 0
    assert wake_ups.take() == (
        clock + 1 + WAKE_UP_DELIVERY_S,
        clock + WAKE_UP_MAX_DELAY_S + WAKE_UP_DELIVERY_S,
    )
    assert wake_ups.take() == ()


class Sleeper:
    """A policy whose tick at 0 takes five seconds and asks for runs at 2 s and 40 s."""

    name = "sleeper"

    def __init__(self) -> None:
        self.ticks: list[float] = []

    def start(self, scenario: Scenario, backlog: BacklogNow) -> None:
        return None

    def on_batch(self, samples: Sequence[Sample], now: float) -> ControllerRun | None:
        return None

    def on_tick(self, now: float) -> ControllerRun | None:
        self.ticks.append(now - SIM_EPOCH)
        if now > SIM_EPOCH:
            return None
        return ControllerRun(now + 5.0, wake_ups=(now + 2.0, now + 40.0))

    def mappings(self) -> Mapping[str, MappingSetting]:
        return {"q": MappingSetting(5)}

    def esm_updates(self) -> Mapping[str, int]:
        return {"q": 0}

    def control_plane_use(self) -> None:
        return None


def test_a_wake_up_waits_for_the_running_invocation_and_starts_no_schedule_of_its_own() -> None:
    policy = Sleeper()
    simulate(tiny(arrivals_rps=[[0, 20]], duration_s=70, controller_schedule_s=30), policy)
    assert policy.ticks == [0.0, 5.0, 30.0, 40.0, 60.0]


def runs_without_wake_ups(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[SimResult, SimResult]:
    """The policy ``name``'s run below the floor, and the same run with no wake-up delivered."""
    scenario = tiny(**BELOW_THE_FLOOR)
    with_wake_ups = simulate(scenario, make_policy(name, DEFAULT_ALGORITHM))
    with monkeypatch.context() as patch:
        patch.setattr(SimulatedWakeUps, "take", lambda self: ())
        without = simulate(scenario, make_policy(name, DEFAULT_ALGORITHM))
    return with_wake_ups, without


def comparable(result: SimResult) -> tuple[object, ...]:
    trace = result.queues["q"]
    return (trace.cap_per_s, trace.enabled_per_s, trace.calls_rejected, trace.dlq_messages)


@pytest.mark.parametrize("name", [*PEER_POLICIES, StaticPolicy.name])
def test_the_peers_and_static_run_as_without_wake_ups(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the law asks for wake-ups: the peers never set one, static has no controller."""
    runs = runs_without_wake_ups(name, monkeypatch)
    assert comparable(runs[0]) == comparable(runs[1])


def test_the_law_runs_otherwise_with_its_wake_ups(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above can tell: the law's own run moves with its wake-ups."""
    runs = runs_without_wake_ups(QueueMeshPolicy.name, monkeypatch)
    assert comparable(runs[0]) != comparable(runs[1])
