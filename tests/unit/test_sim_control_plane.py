"""The simulated control plane: the account's quota refused as AWS refuses it, the controller's
paced calls on virtual time, and the engine following an invocation that takes time."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import pytest
from botocore.exceptions import ClientError

from controller.actuator import InMemoryActuator, LambdaActuator
from controller.constants import CONTROL_PLANE_QUOTA_PER_S
from controller.model import Sample
from load.clock import HandClock
from load.sim.control_plane import ControllerRun, ControlPlaneUse, SimControlPlane
from load.sim.engine import SIM_EPOCH, BacklogNow, simulate
from load.sim.scenario import Scenario
from load.sim.trace import MappingSetting
from tests.unit.test_sim import tiny


def plane_with(mappings: int, clock: HandClock) -> tuple[SimControlPlane, InMemoryActuator]:
    twin = InMemoryActuator(clock=clock)
    for index in range(mappings):
        twin.add_mapping(f"esm-{index}", 100)
    return SimControlPlane(twin, clock), twin


def test_a_request_over_the_accounts_quota_is_refused_as_lambda_refuses_it() -> None:
    clock = HandClock(100.0)
    plane, twin = plane_with(1, clock)
    for _ in range(CONTROL_PLANE_QUOTA_PER_S):
        plane.get_event_source_mapping(UUID="esm-0")
    with pytest.raises(ClientError) as refused:
        plane.update_event_source_mapping(
            UUID="esm-0", ScalingConfig={"MaximumConcurrency": 50}, Enabled=True
        )
    response = refused.value.response
    assert response["Error"]["Code"] == "TooManyRequestsException"
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 429
    assert response.get("Reason") == "CallerRateLimitExceeded"
    assert twin.calls == []  # refused: the mapping did not move

    clock.now += 1.0  # the quota is per second: the first requests have left the window
    answer = plane.update_event_source_mapping(
        UUID="esm-0", ScalingConfig={"MaximumConcurrency": 50}, Enabled=True
    )
    assert answer["ScalingConfig"] == {"MaximumConcurrency": 50}
    assert plane.use == ControlPlaneUse(requests=16, refused=1, most_in_one_second=15)


def test_the_plane_lists_in_pages_of_a_hundred_and_reports_a_missing_mapping() -> None:
    plane, _ = plane_with(250, HandClock(100.0))
    first = plane.list_event_source_mappings(MaxItems=100)
    last = plane.list_event_source_mappings(MaxItems=100, Marker="200")
    assert (len(first["EventSourceMappings"]), first["NextMarker"]) == (100, "100")
    assert len(last["EventSourceMappings"]) == 50 and "NextMarker" not in last
    with pytest.raises(ClientError) as missing:
        plane.get_event_source_mapping(UUID="esm-gone")
    assert missing.value.response["Error"]["Code"] == "ResourceNotFoundException"


def test_an_actuator_paced_above_the_quota_is_refused_and_retries_on_virtual_time() -> None:
    """What the controller does with a refusal: back off (virtual sleep) and try again."""
    clock = HandClock(100.0)
    plane, twin = plane_with(40, clock)
    eager = LambdaActuator(
        plane, calls_per_s=30, clock=clock, sleep=clock.sleep, rng=random.Random(1)
    )
    for index in range(40):
        eager.apply(f"esm-{index}", 50, True, deadline=clock.now + 60)
    use = plane.use
    assert len(twin.calls) == 40 and use.refused > 0
    assert use.most_in_one_second == CONTROL_PLANE_QUOTA_PER_S
    assert clock.now > 100.0 + 40 / CONTROL_PLANE_QUOTA_PER_S - 1


class SlowController:
    """A policy whose first invocation takes five seconds and cuts ``q`` 2.5 s into it."""

    name = "slow"

    def __init__(self) -> None:
        self.setting = MappingSetting(20)
        self.invoked_at: list[float] = []

    def start(self, scenario: Scenario, backlog: BacklogNow) -> None:
        return None

    def on_batch(self, samples: Sequence[Sample], now: float) -> ControllerRun | None:
        self.invoked_at.append(now - SIM_EPOCH)
        if self.setting.max_concurrency == 4:
            return None
        self.setting = MappingSetting(4)
        return ControllerRun(now + 5.0, ((now + 2.5, "q", MappingSetting(4)),))

    def on_tick(self, now: float) -> ControllerRun | None:
        self.invoked_at.append(now - SIM_EPOCH)
        return None

    def mappings(self) -> Mapping[str, MappingSetting]:
        return {"q": self.setting}

    def esm_updates(self) -> Mapping[str, int]:
        return {"q": 1}

    def control_plane_use(self) -> None:
        return None


def test_a_change_made_late_in_an_invocation_takes_effect_then_and_holds_the_next_batch() -> None:
    policy = SlowController()
    trace = simulate(tiny(), policy).queues["q"]
    first = next(at for at in policy.invoked_at if at > 0)  # the tick at 0 aside
    assert trace.cap_per_s[int(first) + 2] == 20  # not yet: the call came at first + 2.5
    assert trace.cap_per_s[int(first) + 3] == 4
    following = [at for at in policy.invoked_at if at > first]
    assert following[0] >= first + 5.0  # the shard waited for the running invocation
