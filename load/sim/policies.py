"""The policies the simulator compares: none, the original rule, and the real controller (with
the default algorithm, or a peer's: load/simulate.py PEER_POLICIES); and two bounds, the levels
that fit a capacity known in hindsight, a rise at once or a telemetry delay late."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from enum import Enum

from controller.actuator import InMemoryActuator, LambdaActuator
from controller.constants import MAX_CONCURRENCY
from controller.ledger import InMemoryLedger
from controller.loop import ControlLoop
from controller.model import Backlog, Mode, QueueConfig, QueueState, QueueStateName, Sample
from controller.policy import DEFAULT_ALGORITHM, algorithm_named, evaluate_manually, memory_type
from controller.ports import WakeUpRequest
from controller.registration import register_queue
from controller.settings import PolicyParams
from controller.wakeups import held_back
from load.oracle import invocation_pace
from load.sim.control_plane import ControllerRun, ControlPlaneUse, SimControlPlane
from load.sim.engine import SIM_EPOCH, BacklogNow, SimPolicy
from load.sim.scenario import QueueSpec, Scenario, value_at
from load.sim.trace import MappingSetting

# The controller's invocation deadline: its Timeout in template.yaml (the simulated invocation
# makes its calls from the batch's time on, until this much later at most).
CONTROLLER_DEADLINE_S = 120.0
# From a wake-up message's visibility (its DelaySeconds over) to the controller's run: the
# event source mapping's long poll returns a message as it becomes visible, and the poller's
# receive and the Lambda's invoke take well under a second.
WAKE_UP_DELIVERY_S = 0.5


def queue_params(base: PolicyParams, max_concurrency: int, min_concurrency: int) -> PolicyParams:
    return base.with_overrides({"cmax": max_concurrency, "cmin": min_concurrency})


class StaticPolicy:
    """No controller: every mapping stays at its maximum concurrency."""

    name = "static"

    def __init__(self) -> None:
        self._mappings: dict[str, MappingSetting] = {}

    def start(self, scenario: Scenario, backlog: BacklogNow) -> None:
        self._mappings = {
            spec.name: MappingSetting(spec.max_concurrency) for spec in scenario.queues
        }

    def on_batch(self, samples: Sequence[Sample], now: float) -> None:
        return None

    def on_tick(self, now: float) -> None:
        return None

    def mappings(self) -> Mapping[str, MappingSetting]:
        return self._mappings

    def esm_updates(self) -> Mapping[str, int]:
        return dict.fromkeys(self._mappings, 0)

    def control_plane_use(self) -> None:
        """No controller, no call."""


class SeedPolicy:
    """The original QueueMesh rule: every telemetry batch judged alone with ``evaluate_manually``.

    No window, no settling, no minimum evidence: a queue's calls in one Kinesis batch give its
    pressure and success rates, and the rule is applied to them at once.
    """

    name = "seed"

    def __init__(self, params: PolicyParams | None = None) -> None:
        self._base = params or PolicyParams()
        self._params: dict[str, PolicyParams] = {}
        self._states: dict[str, QueueState] = {}
        self._updates: dict[str, int] = {}

    def start(self, scenario: Scenario, backlog: BacklogNow) -> None:
        for spec in scenario.queues:
            params = queue_params(self._base, spec.max_concurrency, spec.min_concurrency)
            self._params[spec.name] = params
            self._states[spec.name] = QueueState(
                queue=spec.name,
                esm_uuid=f"esm-{spec.name}",
                state=QueueStateName.HEALTHY,
                concurrency=spec.max_concurrency,
                previous_concurrency=spec.max_concurrency,
            )
            self._updates[spec.name] = 0

    def on_batch(self, samples: Sequence[Sample], now: float) -> None:
        requests: dict[str, int] = defaultdict(int)
        pressure: dict[str, int] = defaultdict(int)
        ok: dict[str, int] = defaultdict(int)
        for sample in samples:
            requests[sample.queue] += sample.requests
            pressure[sample.queue] += sample.pressure
            ok[sample.queue] += sample.ok
        for queue, calls in requests.items():
            state = self._states.get(queue)
            if state is None or calls == 0:
                continue
            config = QueueConfig(queue, state.esm_uuid)
            rates = pressure[queue] / calls, ok[queue] / calls
            decision = evaluate_manually(state, config, *rates, now, self._params[queue])
            if decision.changes_mapping:
                self._updates[queue] += 1
            self._states[queue] = decision.new_state

    def on_tick(self, now: float) -> None:
        """The original rule judges telemetry batches only."""

    def mappings(self) -> Mapping[str, MappingSetting]:
        return {
            queue: MappingSetting(state.concurrency, state.enabled)
            for queue, state in self._states.items()
        }

    def esm_updates(self) -> Mapping[str, int]:
        return self._updates

    def control_plane_use(self) -> None:
        """The original rule's updates are counted, not made (at most a few a second)."""


class QueueMeshPolicy:
    """The real controller core: ``ControlLoop`` with the in-memory ledger, and the real
    ``LambdaActuator`` on the simulated control plane (``SimControlPlane``: the in-memory
    mappings behind the account's quota).

    The same windows, guards, algorithm and pacing the Lambda runs; each simulated Kinesis
    batch is one ``run_batch``, with the Lambda's deadline. The controller's clock is the
    simulator's: a paced or retried call sleeps virtual time, so an invocation that waits for
    the control plane ends later than it started. The simulated poller follows the in-memory
    mappings (read without a request; registration too). ``name`` is the policy's name in the
    scorecard: ``queuemesh``, or a peer algorithm's own name.
    """

    name = "queuemesh"

    def __init__(
        self,
        params: PolicyParams | None = None,
        algorithm: str | None = DEFAULT_ALGORITHM,
        name: str = "queuemesh",
    ) -> None:
        self.name = name
        self._params = params or PolicyParams()
        self._algorithm = algorithm
        self._uuids: dict[str, str] = {}
        self._queues: dict[str, str] = {}
        self._deadline = math.inf
        self._now = 0.0
        self._actuator = InMemoryActuator(clock=self._clock)
        self._control_plane = SimControlPlane(self._actuator, self._clock)
        self._ledger = InMemoryLedger(suffix=_counter_suffix(), memory_types=memory_type)
        self._controller: ControlLoop | None = None
        self._wake_ups = SimulatedWakeUps(self._clock)

    @property
    def controller(self) -> ControlLoop:
        if self._controller is None:
            raise RuntimeError("the policy is not attached to a scenario yet (call start)")
        return self._controller

    @property
    def ledger(self) -> InMemoryLedger:
        return self._ledger

    def start(self, scenario: Scenario, backlog: BacklogNow) -> None:
        for spec in scenario.queues:
            uuid = f"esm-{spec.name}"
            self._uuids[spec.name] = uuid
            self._queues[uuid] = spec.name
            self._actuator.add_mapping(
                uuid,
                spec.max_concurrency,
                event_source_arn=f"arn:aws:sqs:us-east-1:000000000000:{spec.name}",
                batch_size=spec.batch_size,
            )
            # Registered as `queuemesh register` does: config and first state; then the
            # operator's standing in the downstream's group, as they would set it.
            config, _ = register_queue(
                self._ledger,
                self._actuator,
                spec.name,
                uuid,
                {"cmax": spec.max_concurrency, "cmin": spec.min_concurrency},
                Mode.ACTIVE,
                clock=lambda: SIM_EPOCH,
                deadline=lambda: math.inf,
            )
            standing = dataclasses.replace(
                config, group=spec.group, weight=spec.weight, priority=spec.priority
            )
            if standing != config:
                self._ledger.put_config(standing)
        algorithm = None if self._algorithm is None else algorithm_named(self._algorithm)
        actuator = LambdaActuator(
            self._control_plane,
            clock=self._clock,
            sleep=self._sleep,
            rng=random.Random("control-plane"),
        )
        self._controller = ControlLoop(
            self._ledger,
            actuator,
            self._params,
            algorithm=algorithm,
            monotonic=self._clock,
            clock=self._clock,
            backlog=SimulatedBacklog(backlog),
            wake_ups=self._wake_ups,
        )

    def _clock(self) -> float:
        return self._now

    def _sleep(self, seconds: float) -> None:
        self._now += seconds

    def on_batch(self, samples: Sequence[Sample], now: float) -> ControllerRun | None:
        return self._invoke(now, lambda: self.controller.run_batch(samples, now, self._deadline))

    def on_tick(self, now: float) -> ControllerRun | None:
        """The scheduled invocation, as ``ControllerApp.tick`` runs it: wake due queues."""
        return self._invoke(now, lambda: self.controller.tick(now, self._deadline))

    def _invoke(self, now: float, run: Callable[[], object]) -> ControllerRun | None:
        """One invocation from ``now``, which the simulator never sets before the last one's
        end; ``None`` when its calls took no time."""
        self._now = now
        self._deadline = now + CONTROLLER_DEADLINE_S
        done_before = len(self._actuator.calls)
        run()
        wake_ups = self._wake_ups.take()
        if self._now == now and not wake_ups:
            return None
        later = tuple(
            (call.time, self._queues[call.uuid], MappingSetting(call.value, call.enabled))
            for call in self._actuator.calls[done_before:]
            if call.time > now
        )
        return ControllerRun(self._now, later, wake_ups)

    def mappings(self) -> Mapping[str, MappingSetting]:
        settings = {}
        for queue, uuid in self._uuids.items():
            view = self._actuator.read(uuid, math.inf)
            cap = view.max_concurrency if view.max_concurrency is not None else MAX_CONCURRENCY
            settings[queue] = MappingSetting(cap, view.enabled)
        return settings

    def esm_updates(self) -> Mapping[str, int]:
        per_uuid = Counter(call.uuid for call in self._actuator.calls)
        return {queue: per_uuid[uuid] for queue, uuid in self._uuids.items()}

    def control_plane_use(self) -> ControlPlaneUse:
        return self._control_plane.use


class SimulatedWakeUps:
    """The controller's wake-up scheduler on the simulated clock, as the SQS one works: a
    message sent with ``delay_s`` DelaySeconds at the invocation's time, whose delivery
    (``WAKE_UP_DELIVERY_S`` after it turns visible) runs the controller's tick. One run per
    delivery time (messages visible together come in one batch); a wake-up past SQS's longest
    delay is not sent (the scheduled tick wakes its queue), as the SQS one does not send it.
    A simulated send never fails."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._delivered_at: set[float] = set()

    def schedule(self, requests: Sequence[WakeUpRequest], now: float, deadline: float) -> int:
        sent_at = self._clock()
        self._delivered_at.update(
            sent_at + delay + WAKE_UP_DELIVERY_S for _, delay in held_back(requests, now)
        )
        return 0

    def take(self) -> tuple[float, ...]:
        """The delivery times (epoch) asked for since the last take, in order."""
        delivered_at = tuple(sorted(self._delivered_at))
        self._delivered_at.clear()
        return delivered_at


class SimulatedBacklog:
    """The controller's backlog port on the simulated queues: an SQS read that never fails."""

    def __init__(self, backlog: BacklogNow) -> None:
        self._backlog = backlog

    def read(self, queue: str, deadline: float) -> Backlog:
        return self._backlog(queue)


class Rises(Enum):
    """How a bound learns that its queue's capacity rose (a fall it knows a report later)."""

    # At once, whole: no law can.
    AT_ONCE = "at once"
    # Whole, once a call it let through could have reported.
    A_REPORT_LATER = "a report later"
    # A report later, and then only as a law running under it learns it: a level that ran
    # clean may double once its own calls could have reported (a round trip a step).
    DOUBLING = "doubling"


class HindsightPolicy(QueueMeshPolicy):
    """A bound, not a controller: what a law that knew the downstream's capacity could reach.

    Before a queue's first reports no law knows its downstream, and doing no harm it leaves the
    poller's ramp alone, so the real controller runs the queue until its first cut. From then
    on the queue runs at the level the capacity fits, set at each controller run from the
    scenario: the whole invocations whose calls, at the simulator's pace
    (``invocation_pace``), the capacity takes; paused where even Cmin would send more. A fall
    of the capacity is known once a call it refused could have reported (the shortest
    telemetry delay after it), a rise at once, with no probe. So its waste is what a law's
    first seconds and the falls' detection cost whatever the law does next, and its drain the
    best a law reaches without sitting above the capacity.

    A queue whose downstream has no pace (a latency that changes over the run or with the
    load) or serves other queues too (how best to split a capacity depends on their backlogs)
    stays with the controller.
    """

    name = "hindsight"
    rises: Rises = Rises.AT_ONCE

    def __init__(self) -> None:
        super().__init__(name=self.name)
        self._fits: dict[str, Callable[[float], MappingSetting] | None] = {}
        self._registered: dict[str, int] = {}
        # The queues past their first cut: the mapping updates so far (the controller's until
        # the cut, then one per level set) and the level last set.
        self._known: dict[str, tuple[int, MappingSetting]] = {}

    @staticmethod
    def knows(scenario: Scenario) -> bool:
        """Whether the bound sets any of ``scenario``'s queues (else it is the controller)."""
        return HindsightPolicy.unknown_because(scenario) is None

    @staticmethod
    def unknown_because(scenario: Scenario) -> str | None:
        """Why the bound sets none of ``scenario``'s queues, in a sentence for the reader of a
        scorecard (``None``: it sets some): the first queue's reason."""
        reasons = [_unknown_because(scenario, spec) for spec in scenario.queues]
        return None if None in reasons else reasons[0]

    def start(self, scenario: Scenario, backlog: BacklogNow) -> None:
        super().start(scenario, backlog)
        for spec in scenario.queues:
            self._registered[spec.name] = spec.max_concurrency
            self._fits[spec.name] = _fitting_levels(scenario, spec, self.rises)

    def mappings(self) -> Mapping[str, MappingSetting]:
        settings = dict(super().mappings())
        for queue, setting in settings.items():
            fit = self._fits[queue]
            if fit is None:
                continue
            if queue not in self._known:
                if setting.enabled and setting.max_concurrency >= self._registered[queue]:
                    continue
                self._known[queue] = (super().esm_updates()[queue], setting)
            updates, last = self._known[queue]
            settings[queue] = fit(self._now - SIM_EPOCH)
            if settings[queue] != last:
                self._known[queue] = (updates + 1, settings[queue])
        return settings

    def _invoke(self, now: float, run: Callable[[], object]) -> ControllerRun | None:
        """The levels of queues past their first cut are the bound's, set at once."""
        invocation = super()._invoke(now, run)
        if invocation is None:
            return None
        later = tuple(c for c in invocation.later_changes if c[1] not in self._known)
        return dataclasses.replace(invocation, later_changes=later)

    def esm_updates(self) -> Mapping[str, int]:
        return {
            queue: self._known[queue][0] if queue in self._known else updates
            for queue, updates in super().esm_updates().items()
        }


def _fitting_levels(
    scenario: Scenario, spec: QueueSpec, rises: Rises
) -> Callable[[float], MappingSetting] | None:
    """``spec``'s fitting mapping at a time of the run (``None``: no pace, or a shared
    downstream), asked at times that never go back.

    A capacity that fell is known only once the first report of a call it refused could have
    arrived (the shortest telemetry delay later): no law knows sooner. One that rose is known
    as ``rises`` says: at once; as a fall is, once a call it let through could have reported;
    or, from there, by doubling: a paused queue resumes at Cmin, and a level may at most
    double once the shortest telemetry delay has passed since it was set, never past the
    level that fits.
    """
    pace = invocation_pace(scenario, spec)
    if pace is None or _unknown_because(scenario, spec) is not None:
        return None
    capacity = scenario.downstream(spec.downstream)
    lag = scenario.telemetry_delay_s[0]
    # Doubling: the level set last (under Cmin: paused; ``None``: none yet) and when.
    climb: list[tuple[int | None, float]] = [(None, -math.inf)]

    def fits(t: float) -> int:
        known = value_at(capacity.capacity_rps, t - lag)
        if rises is Rises.AT_ONCE:
            known = max(
                [known] + [rate for start, rate in capacity.capacity_rps if t - lag < start <= t]
            )
        return min(spec.max_concurrency, math.floor(known / pace))

    def climbed(t: float, fit: int) -> int:
        level, set_at = climb[0]
        if level is None or fit <= level or fit < spec.min_concurrency:
            climbed_to = fit
        elif level < spec.min_concurrency:
            climbed_to = spec.min_concurrency
        elif t - set_at >= lag:
            climbed_to = min(fit, 2 * level)
        else:
            climbed_to = level
        if climbed_to != level:
            climb[0] = (climbed_to, t)
        return climbed_to

    def fitting(t: float) -> MappingSetting:
        level = climbed(t, fits(t)) if rises is Rises.DOUBLING else fits(t)
        if level < spec.min_concurrency:
            return MappingSetting(spec.min_concurrency, enabled=False)
        return MappingSetting(level)

    return fitting


class LaggedHindsightPolicy(HindsightPolicy):
    """The bound of a law that learns the capacity only from its reports: the hindsight bound,
    but a rise known, as a fall is, only once a call it let through could have reported.

    Still generous to any such law: it learns the new capacity whole from one report, where a
    law running under it learns only that its own level fits, and never pays a probe. What it
    leaves between itself and ``hindsight`` is the part of the bound rule no law acting on its
    reports can close (issue 29's ``throttling`` target; docs/simulator.md).
    """

    name = "hindsight-lagged"
    rises = Rises.A_REPORT_LATER


class ClimbingHindsightPolicy(HindsightPolicy):
    """The bound of a law that learns a rise only as its own level runs clean: the lagged
    bound, but from the rise it would know, a level at most doubled each telemetry round trip
    (the shortest delay), from Cmin where the queue was paused (``Rises.DOUBLING``).

    Still generous: it doubles from its first report, never pays a probe that fails, and stops
    at the level that fits without overshooting it, where a law's doublings learn that level
    only by passing it. What it leaves between itself and ``hindsight-lagged`` is the cost of
    not knowing how far a capacity rose.
    """

    name = "hindsight-climbing"
    rises = Rises.DOUBLING


def _unknown_because(scenario: Scenario, spec: QueueSpec) -> str | None:
    """Why the bound cannot set ``spec``'s level (``None``: it can)."""
    sharing = [queue.name for queue in scenario.queues if queue.downstream == spec.downstream]
    if len(sharing) > 1:
        return (
            f"{len(sharing)} queues share {spec.downstream} ({', '.join(sharing)}); the bound "
            "knows the level a capacity fits for a queue alone on its API, and how best to "
            "split one among several depends on their backlogs"
        )
    if invocation_pace(scenario, spec) is None:
        return (
            f"{spec.downstream}'s latency changes over the run or with the load, so no pace "
            "turns its capacity into a level"
        )
    return None


def _counter_suffix() -> Callable[[], str]:
    """Audit key suffixes from a counter, so a simulated ledger is the same run after run."""
    numbers = itertools.count()
    return lambda: f"{next(numbers):08d}"


POLICIES: dict[str, Callable[[], SimPolicy]] = {
    StaticPolicy.name: StaticPolicy,
    SeedPolicy.name: SeedPolicy,
    QueueMeshPolicy.name: QueueMeshPolicy,
    HindsightPolicy.name: HindsightPolicy,
    LaggedHindsightPolicy.name: LaggedHindsightPolicy,
    ClimbingHindsightPolicy.name: ClimbingHindsightPolicy,
}
