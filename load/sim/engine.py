"""The discrete-event simulation: SQS, the Lambda SQS poller, workers, downstreams, telemetry.

Virtual time in seconds from the scenario's start; the controller sees ``SIM_EPOCH + t``. One
event per downstream call, so calls from every invocation and queue meet each downstream's
per-second capacity in time order. Everything random draws from generators seeded by the
scenario's seed, one per purpose, so the same scenario and seed give the same run.

What is modelled, and how (AWS's documented behaviour where there is one: SQS, the poller,
the workers, the downstreams, announced limits, telemetry and the controller's one container):
docs/simulator.md, "What is simulated".
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

from controller.model import Backlog, Sample
from load.sim.control_plane import ControllerRun, ControlPlaneUse
from load.sim.environments import Environments
from load.sim.scenario import Scenario
from load.sim.services import (
    ANNOUNCED_WINDOW_S,
    Announcement,
    Arrivals,
    SimDownstream,
    SimQueue,
    arrivals_end,
)
from load.sim.trace import MappingSetting, QueueTrace, SimResult, TelemetryDelivery

# 2026-01-01T00:00:00Z: virtual time 0, as epoch seconds, for the controller and recordings.
SIM_EPOCH = 1_767_225_600.0
ARRIVAL_STEP_S = 0.1
# The status of a call the worker gave up on at its client timeout (no answer, no HTTP status).
TIMED_OUT = 0

_CALL, _END, _RETURN, _ARRIVALS, _SECOND, _CONTROL, _TICK, _MAPPING, _WAKE = range(9)

# A queue's backlog now, by its name: what the controller's backlog read answers.
BacklogNow = Callable[[str], Backlog]


class SimPolicy(Protocol):
    """Something that sets each queue's mapping from telemetry batches."""

    name: str

    def start(self, scenario: Scenario, backlog: BacklogNow) -> None:
        """Attach to the scenario's mappings and queues (called once, before time 0)."""
        ...

    def on_batch(self, samples: Sequence[Sample], now: float) -> ControllerRun | None:
        """One controller invocation by its Kinesis mapping at epoch time ``now``; ``None``:
        it took no time, every change at ``now``."""
        ...

    def on_tick(self, now: float) -> ControllerRun | None:
        """One scheduled controller invocation (no records) at epoch time ``now``, or one a
        wake-up it asked for caused (``ControllerRun.wake_ups``)."""
        ...

    def mappings(self) -> Mapping[str, MappingSetting]: ...

    def esm_updates(self) -> Mapping[str, int]: ...

    def control_plane_use(self) -> ControlPlaneUse | None:
        """What the run asked of the account's control plane; ``None``: not modelled."""
        ...


class _Invocation:
    __slots__ = (
        "announced",
        "busy_ms",
        "done_arrivals",
        "environment",
        "failed",
        "messages",
        "next_call",
        "noise",
        "ok",
        "queue",
        "rejected",
        "started",
        "timed_out",
    )

    def __init__(self, queue: SimQueue, messages: list[tuple[int, float]], started: float) -> None:
        self.queue = queue
        self.messages = messages
        self.started = started
        self.next_call = 0
        self.ok = 0
        self.rejected = 0
        self.timed_out = 0
        self.noise = 0
        self.busy_ms = 0.0
        self.failed: list[tuple[int, float]] = []
        self.done_arrivals: list[float] = []
        self.announced: Announcement | None = None
        self.environment = 0


def simulate(
    scenario: Scenario,
    policy: SimPolicy,
    *,
    seed: int | None = None,
    aggregated_telemetry: bool = False,
    delay_draw: int = 0,
) -> SimResult:
    """Run ``scenario`` under ``policy``; ``seed`` overrides the scenario's. With
    ``aggregated_telemetry`` the workers write one document per execution environment, queue
    and second of invocation starts, as the worker does (load/sim/environments.py), rather
    than one per invocation. ``delay_draw`` other than 0 draws the telemetry delays anew
    (everything else as the seed draws it): how much a run owes to when its reports arrive."""
    run = _Run(scenario, policy, scenario.seed if seed is None else seed)
    if aggregated_telemetry:
        run.environments = Environments()
    if delay_draw:
        run.delay_rng = random.Random(f"{run.seed}:telemetry:{delay_draw}")
    return run.run()


class _Run:
    def __init__(self, scenario: Scenario, policy: SimPolicy, seed: int) -> None:
        self.scenario = scenario
        self.environments: Environments | None = None
        self.policy = policy
        self.seed = seed
        seconds = math.ceil(scenario.duration_s) + 1
        self.seconds = seconds
        self.downstreams = {
            spec.name: SimDownstream(spec, seconds, seed) for spec in scenario.downstreams
        }
        self.queues = [
            SimQueue(
                spec,
                self.downstreams[spec.downstream],
                f"{seed}:sqs:{spec.name}",
                QueueTrace(name=spec.name, downstream=spec.downstream),
            )
            for spec in scenario.queues
        ]
        for queue in self.queues:
            trace = queue.trace
            trace.calls_per_s = [0] * seconds
            trace.rejected_per_s = [0] * seconds
            trace.ok_per_s = [0] * seconds
        self.delay_rng = random.Random(f"{seed}:telemetry")
        self.events: list[tuple[float, int, int, object]] = []
        self.sequence = 0
        # Until when (virtual seconds) the controller's last invocation runs.
        self.busy_until = 0.0
        self.in_transit: list[tuple[float, int, Sample]] = []
        self.deliveries: list[TelemetryDelivery] = []
        # Each queue's arrivals (once they are over, quiet for ever).
        self.arrivals = [
            (queue, Arrivals(queue.spec.backlog, queue.spec.arrivals_rps)) for queue in self.queues
        ]
        self.arrivals_over = max(
            (arrivals_end(spec.arrivals_rps, scenario.duration_s) for spec in scenario.queues),
            default=0.0,
        )

    def push(self, time: float, kind: int, payload: object) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (time, self.sequence, kind, payload))

    def run(self) -> SimResult:
        scenario = self.scenario
        by_name = {queue.spec.name: queue for queue in self.queues}
        self.policy.start(scenario, lambda name: by_name[name].backlog)
        self.apply_mappings()
        self.push(0.0, _ARRIVALS, 0)
        self.push(0.0, _SECOND, 0)
        self.push(scenario.kinesis_batch_window_s, _CONTROL, 1)
        self.push(0.0, _TICK, 0)
        duration = scenario.duration_s
        events = self.events
        pop = heapq.heappop
        now = 0.0
        while events:
            now, _, kind, payload = pop(events)
            if now > duration:
                now = duration
                break
            if kind == _CALL:
                self.call(now, payload)  # type: ignore[arg-type]
            elif kind == _END:
                self.end(now, payload)  # type: ignore[arg-type]
            elif kind == _RETURN:
                self.returned(now, payload)  # type: ignore[arg-type]
            elif kind == _ARRIVALS:
                self.arrive(now, payload)  # type: ignore[arg-type]
            elif kind == _SECOND:
                if self.second(now, payload):  # type: ignore[arg-type]
                    break
            elif kind == _CONTROL:
                self.control(now, payload)  # type: ignore[arg-type]
            elif kind == _TICK:
                self.tick(now, payload)  # type: ignore[arg-type]
            elif kind == _WAKE:
                self.wake(now)
            else:
                self.remap(now, payload)  # type: ignore[arg-type]
        # Samples still on their way (or held) when the run ends complete the telemetry (a
        # recording holds every invocation); the controller never saw them.
        for sample in [] if self.environments is None else self.environments.drain():
            self.deliveries.append(TelemetryDelivery(now, sample))
        while self.in_transit:
            arrival, _, sample = heapq.heappop(self.in_transit)
            self.deliveries.append(TelemetryDelivery(arrival, sample))
        for queue in self.queues:
            queue.trace.pending_at_end = queue.waiting + queue.in_flight_messages
            queue.trace.waiting_end_per_s.append(queue.waiting)
        return SimResult(
            scenario=scenario,
            policy=self.policy.name,
            seed=self.seed,
            ended_at=now,
            queues={queue.spec.name: queue.trace for queue in self.queues},
            esm_updates=dict(self.policy.esm_updates()),
            telemetry=self.deliveries,
            control_plane=self.policy.control_plane_use(),
        )

    def apply_mappings(self, now: float | None = None, later: Collection[str] = ()) -> None:
        """Every queue's mapping as the policy holds it, but those changed ``later``; at
        ``now``, each queue whose mapping changed is dispatched.

        A queue whose mapping is as it was is left alone: every event that could let it start
        an invocation has dispatched it already, so setting and dispatching it again changed
        nothing, at a cost per queue and controller run (on a fleet, most queues at most runs).
        """
        settings = self.policy.mappings()
        for queue in self.queues:
            setting = settings[queue.spec.name]
            if queue.spec.name in later or (
                now is not None
                and setting.max_concurrency == queue.max_concurrency
                and setting.enabled == queue.enabled
            ):
                continue
            queue.set_mapping(setting)
            if now is not None:
                self.dispatch(queue, now)

    def dispatch(self, queue: SimQueue, now: float) -> None:
        while queue.in_flight < queue.limit and (queue.fresh or queue.retry):
            messages = queue.receive(now)
            if not messages:
                return
            queue.in_flight += 1
            queue.in_flight_messages += len(messages)
            invocation = _Invocation(queue, messages, now)
            if self.environments is not None:
                invocation.environment = self.environments.take(queue.spec.name)
            self.push(now + queue.spec.invocation_overhead_ms / 1000.0, _CALL, invocation)

    def call(self, now: float, invocation: _Invocation) -> None:
        queue = invocation.queue
        status, latency = queue.downstream.answer(now)
        timeout = queue.timeout_s
        if timeout is not None and latency > timeout:
            status, latency = TIMED_OUT, timeout
        elif queue.downstream.announces_quota:
            invocation.announced = Announcement(queue.downstream, now)
        trace = queue.trace
        second = int(now)
        trace.calls_total += 1
        trace.calls_per_s[second] += 1
        message = invocation.messages[invocation.next_call]
        if status == 200:
            invocation.ok += 1
            invocation.done_arrivals.append(message[1])
            trace.ok_per_s[second] += 1
        else:
            invocation.failed.append(message)
            if status == 429 or status == TIMED_OUT:
                if status == 429:
                    invocation.rejected += 1
                else:
                    invocation.timed_out += 1
                    trace.calls_timed_out += 1
                trace.calls_rejected += 1
                trace.rejected_per_s[second] += 1
            else:
                invocation.noise += 1
                trace.calls_noise += 1
        invocation.busy_ms += latency * 1000.0
        invocation.next_call += 1
        answered = now + latency
        if invocation.next_call < len(invocation.messages):
            self.push(answered, _CALL, invocation)
        else:
            self.push(answered, _END, invocation)

    def end(self, now: float, invocation: _Invocation) -> None:
        queue = invocation.queue
        trace = queue.trace
        queue.in_flight -= 1
        queue.in_flight_messages -= len(invocation.messages)
        if invocation.ok:
            trace.messages_done += invocation.ok
            trace.last_done_at = now
            trace.ages_s.extend(now - arrived for arrived in invocation.done_arrivals)
        if invocation.failed:
            queue.pending_returns += len(invocation.failed)
            returns_at = max(now, invocation.started + queue.spec.visibility_timeout_s)
            self.push(returns_at, _RETURN, (queue, invocation.failed))
        sample = self.sample(invocation, now)
        # One delay per invocation end, whatever it writes: what its worker writes now reaches
        # Kinesis that long after, so aggregated telemetry (fewer documents) draws the same
        # delays as per-invocation telemetry and the runs differ only in what is written.
        low, high = self.scenario.telemetry_delay_s
        arrival = now + self.delay_rng.uniform(low, high)
        environments = self.environments
        for document in (
            [sample]
            if environments is None
            else environments.ended(invocation.environment, sample, SIM_EPOCH + now)
        ):
            self.sequence += 1
            heapq.heappush(self.in_transit, (arrival, self.sequence, document))
        self.dispatch(queue, now)

    def sample(self, invocation: _Invocation, now: float) -> Sample:
        """The one place an invocation becomes telemetry (what its worker would emit): its
        429s, its client-side timeouts (``DownstreamTimeout``) and the other failures."""
        calls = len(invocation.messages)
        seen = invocation.announced
        return Sample(
            queue=invocation.queue.spec.name,
            event_time=SIM_EPOCH + now,
            requests=calls,
            ok=invocation.ok,
            throttled=invocation.rejected,
            server_errors=invocation.noise,
            overloaded=0,
            latency_ms_sum=invocation.busy_ms,
            latency_count=calls,
            invocation_ms=invocation.busy_ms,
            downstream=invocation.queue.spec.downstream,
            timed_out=invocation.timed_out,
            quota_remaining=None if seen is None else seen.remaining,
            quota_limit=None if seen is None else seen.quota * ANNOUNCED_WINDOW_S,
            quota_window_s=None if seen is None else ANNOUNCED_WINDOW_S,
            quota_reset_s=None if seen is None else max(0.0, seen.reset_at - now),
            throttled_rate=invocation.rejected if invocation.queue.downstream.names_429_kind else 0,
        )

    def returned(self, now: float, payload: tuple[SimQueue, list[tuple[int, float]]]) -> None:
        queue, counts = payload
        queue.pending_returns -= len(counts)
        queue.retry.extend(counts)
        self.dispatch(queue, now)

    def arrive(self, now: float, step: int) -> None:
        for queue, arrivals in self.arrivals:
            if now < arrivals.quiet_until:
                continue
            total = arrivals.by(now)
            if total > queue.arrivals:
                queue.arrive(total - queue.arrivals, now)
                queue.trace.messages_total = total
                queue.arrivals = total
                self.dispatch(queue, now)
        if now < self.arrivals_over:
            next_step = step + 1
            self.push(next_step * ARRIVAL_STEP_S, _ARRIVALS, next_step)

    def second(self, now: float, second: int) -> bool:
        """The once-a-second housekeeping; ``True`` when nothing is left to happen."""
        finished = now > self.arrivals_over
        for queue in self.queues:
            trace = queue.trace
            if second:
                trace.waiting_end_per_s.append(queue.waiting)
                queue.scale()
            trace.cap_per_s.append(queue.max_concurrency)
            trace.running_per_s.append(queue.in_flight)
            trace.enabled_per_s.append(queue.enabled)
            self.dispatch(queue, now)
            if queue.fresh or queue.retry or queue.in_flight or queue.pending_returns:
                finished = False
        if finished:
            return True
        self.push(float(second + 1), _SECOND, second + 1)
        return False

    def control(self, now: float, tick: int) -> None:
        window = self.scenario.kinesis_batch_window_s
        if now < self.busy_until:
            # The shard's records wait for the invocation still running.
            self.push(self.busy_until, _CONTROL, tick)
            return
        batch: list[Sample] = []
        in_transit = self.in_transit
        while in_transit and in_transit[0][0] <= now:
            arrival, _, sample = heapq.heappop(in_transit)
            delivery = TelemetryDelivery(arrival, sample)
            self.deliveries.append(delivery)
            batch.append(sample)
        if batch:
            self.after_controller(now, self.policy.on_batch(batch, SIM_EPOCH + now))
        following = tick + 1
        while following * window <= now:  # windows that passed while an invocation ran
            following += 1
        self.push(following * window, _CONTROL, following)

    def tick(self, now: float, tick: int) -> None:
        if now < self.busy_until:
            self.push(self.busy_until, _TICK, tick)
            return
        self.after_controller(now, self.policy.on_tick(SIM_EPOCH + now))
        self.push((tick + 1) * self.scenario.controller_schedule_s, _TICK, tick + 1)

    def wake(self, now: float) -> None:
        """A wake-up's run: the tick's invocation, outside the schedule (no next one)."""
        if now < self.busy_until:
            self.push(self.busy_until, _WAKE, None)
            return
        self.after_controller(now, self.policy.on_tick(SIM_EPOCH + now))

    def after_controller(self, now: float, run: ControllerRun | None) -> None:
        """The mappings as the invocation left them; a change made later than ``now`` (its
        call waited for the control plane) at its own time; a run at each wake-up it asked for."""
        later: set[str] = set()
        if run is not None:
            self.busy_until = run.ended_at - SIM_EPOCH
            by_name = {queue.spec.name: queue for queue in self.queues}
            for at, name, setting in run.later_changes:
                later.add(name)
                self.push(at - SIM_EPOCH, _MAPPING, (by_name[name], setting))
            for at in run.wake_ups:
                self.push(at - SIM_EPOCH, _WAKE, None)
        self.apply_mappings(now, later)

    def remap(self, now: float, change: tuple[SimQueue, MappingSetting]) -> None:
        queue, setting = change
        queue.set_mapping(setting)
        self.dispatch(queue, now)
