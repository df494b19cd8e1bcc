"""The discrete-event simulation: SQS, the Lambda SQS poller, workers, downstreams, telemetry.

Virtual time in seconds from the scenario's start; the controller sees ``SIM_EPOCH + t``. One
event per downstream call, so calls from every invocation and queue meet each downstream's
per-second capacity in time order. Everything random draws from generators seeded by the
scenario's seed, one per purpose, so the same scenario and seed give the same run.

What is modelled (AWS's documented behaviour where there is one):
- SQS standard queue: a receive takes visible messages in no particular order (uniformly at
  random here); a received message is invisible for the visibility timeout; a message whose
  receive count has reached ``max_receive_count`` moves to the dead-letter queue instead of
  being delivered again.
- The poller: starts at 5 concurrent batches, adds up to 5 per second while messages wait,
  never above ``MaximumConcurrency``; when the cap drops, running invocations finish and no new
  one starts above it; ``Enabled=false`` stops new polls (re-enabling starts again from 5);
  with the queue empty it scales down to what is running.
- A worker invocation: the poller's overhead, then one downstream call per message, in turn;
  a call answered 429 or 5xx fails its message (a partial batch response), which returns after
  the visibility timeout; one telemetry sample per invocation.
- A downstream: answers 429 to the calls above its capacity in each second (unless it never
  answers 429); optionally answers a share of the others with a 500 that is not overload
  (noise); a 429 takes as long as a 200. Its latency is constant, or grows with load (the
  queueing model: the no-load latency plus the calls already in progress at the downstream over
  its capacity), optionally with a heavy (Pareto) tail. A call that takes longer than the
  worker's client timeout ends for the worker at the timeout and fails its message like a 429;
  the downstream still works on it until its latency has passed.
- Telemetry: each sample reaches Kinesis after a uniform random delay in
  ``telemetry_delay_s``; the controller's Kinesis mapping delivers what arrived in each batching
  window (no invocation when nothing arrived). The controller also runs on a schedule (an
  EventBridge rule: ``controller_schedule_s``, first at time 0) with no records, which wakes
  queues that asked for it (a paused mapping sends no telemetry).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from controller.model import Sample
from load.latency import pareto_factor, queueing_latency
from load.sim.scenario import DownstreamSpec, QueueSpec, Scenario, Schedule, value_at

# 2026-01-01T00:00:00Z: virtual time 0, as epoch seconds, for the controller and recordings.
SIM_EPOCH = 1_767_225_600.0
POLLER_START = 5
POLLER_STEP_PER_S = 5
ARRIVAL_STEP_S = 0.1
# The status of a call the worker gave up on at its client timeout (no answer, no HTTP status).
TIMED_OUT = 0

_CALL, _END, _RETURN, _ARRIVALS, _SECOND, _CONTROL, _TICK = range(7)


@dataclass(frozen=True, slots=True)
class MappingSetting:
    """What the simulated poller reads from a queue's event source mapping."""

    max_concurrency: int
    enabled: bool = True


class SimPolicy(Protocol):
    """Something that sets each queue's mapping from telemetry batches."""

    name: str

    def start(self, scenario: Scenario) -> None:
        """Attach to the scenario's mappings (called once, before time 0)."""
        ...

    def on_batch(self, samples: Sequence[Sample], now: float) -> None:
        """One controller invocation by its Kinesis mapping at epoch time ``now``."""
        ...

    def on_tick(self, now: float) -> None:
        """One scheduled controller invocation (no records) at epoch time ``now``."""
        ...

    def mappings(self) -> Mapping[str, MappingSetting]: ...

    def esm_updates(self) -> Mapping[str, int]: ...


@dataclass(frozen=True, slots=True)
class TelemetryDelivery:
    """One sample as the controller's Kinesis stream receives it (virtual seconds)."""

    arrival: float
    sample: Sample


@dataclass(slots=True)
class QueueTrace:
    """What happened to one queue; per-second series are indexed by whole virtual seconds."""

    name: str
    downstream: str
    messages_total: int = 0
    messages_done: int = 0
    dlq_messages: int = 0
    calls_total: int = 0
    calls_rejected: int = 0
    calls_timed_out: int = 0
    calls_noise: int = 0
    last_done_at: float | None = None
    pending_at_end: int = 0
    calls_per_s: list[int] = field(default_factory=list)
    rejected_per_s: list[int] = field(default_factory=list)
    ok_per_s: list[int] = field(default_factory=list)
    cap_per_s: list[int] = field(default_factory=list)
    running_per_s: list[int] = field(default_factory=list)
    enabled_per_s: list[bool] = field(default_factory=list)
    # Per whole second: messages left waiting at its end (visible, or invisible after a failed
    # call), not counting those in flight; the goodput share's "work waiting".
    waiting_end_per_s: list[int] = field(default_factory=list)
    # Per message done: its age when done (arrival to the end of its invocation), in seconds.
    ages_s: list[float] = field(default_factory=list)


@dataclass(slots=True)
class SimResult:
    scenario: Scenario
    policy: str
    seed: int
    ended_at: float
    queues: dict[str, QueueTrace]
    esm_updates: dict[str, int]
    telemetry: list[TelemetryDelivery]


class _Downstream:
    __slots__ = (
        "answers_429",
        "capacity",
        "in_progress",
        "latency_s",
        "noise",
        "noise_rng",
        "queueing",
        "second",
        "tail_rng",
        "tail_shape",
        "used",
    )

    def __init__(self, spec: DownstreamSpec, seconds: int, seed: int) -> None:
        self.capacity = [value_at(spec.capacity_rps, s) for s in range(seconds)]
        self.latency_s = [value_at(spec.latency_ms, s) / 1000.0 for s in range(seconds)]
        self.noise = [value_at(spec.noise_5xx_rate, s) for s in range(seconds)]
        self.noise_rng = random.Random(f"{seed}:noise:{spec.name}")
        self.tail_rng = random.Random(f"{seed}:latency:{spec.name}")
        self.tail_shape = spec.latency_tail
        self.queueing = spec.latency_model == "queueing"
        self.answers_429 = spec.answers_429
        # When each accepted call of a queueing downstream is done (a heap).
        self.in_progress: list[float] = []
        self.second = -1
        self.used = 0

    def answer(self, now: float) -> tuple[int, float]:
        """The status code of a call made at ``now``, and how long the answer takes (s)."""
        second = int(now)
        if second != self.second:
            self.second = second
            self.used = 0
        index = min(second, len(self.capacity) - 1)
        capacity = self.capacity[index]
        latency = self.latency_s[index]
        if self.tail_shape is not None:
            latency *= pareto_factor(self.tail_shape, self.tail_rng.random())
        if self.queueing:
            latency = self.queued(now, latency, capacity)
        if self.answers_429 and self.used >= capacity:
            return 429, latency
        self.used += 1
        if self.queueing:
            heapq.heappush(self.in_progress, now + latency)
        noise = self.noise[index]
        if noise > 0.0 and self.noise_rng.random() < noise:
            return 500, latency
        return 200, latency

    def queued(self, now: float, no_load_s: float, capacity: float) -> float:
        """The queueing model's latency of a call made at ``now`` (load/latency.py)."""
        in_progress = self.in_progress
        while in_progress and in_progress[0] <= now:
            heapq.heappop(in_progress)
        return queueing_latency(no_load_s, len(in_progress), capacity)


class _Queue:
    __slots__ = (
        "arrivals",
        "downstream",
        "enabled",
        "fresh",
        "fresh_arrivals",
        "in_flight",
        "in_flight_messages",
        "level",
        "limit",
        "max_concurrency",
        "pending_returns",
        "pick_rng",
        "retry",
        "spec",
        "timeout_s",
        "trace",
    )

    def __init__(self, spec: QueueSpec, downstream: _Downstream, seed: str) -> None:
        self.spec = spec
        self.downstream = downstream
        self.trace = QueueTrace(name=spec.name, downstream=spec.downstream)
        # Never-received messages: a count, and their arrival times as [time, count] runs,
        # oldest first (standard queues' best-effort ordering among them).
        self.fresh = 0
        self.fresh_arrivals: deque[list[float]] = deque()
        # Messages back from a failed receive: (receive count, arrival time).
        self.retry: list[tuple[int, float]] = []
        self.in_flight = 0
        self.in_flight_messages = 0
        self.pending_returns = 0
        self.max_concurrency = spec.max_concurrency
        self.enabled = True
        self.level = min(POLLER_START, spec.max_concurrency)
        self.limit = self.level
        self.pick_rng = random.Random(seed)
        self.arrivals = 0
        self.timeout_s = None if spec.timeout_ms is None else spec.timeout_ms / 1000.0

    def set_mapping(self, setting: MappingSetting) -> None:
        if setting.enabled and not self.enabled:
            self.level = POLLER_START
        self.enabled = setting.enabled
        self.max_concurrency = setting.max_concurrency
        self.level = min(self.level, self.max_concurrency)
        self._refresh_limit()

    def scale(self) -> None:
        """The poller's once-a-second scaling step."""
        if not self.enabled:
            return
        if self.fresh or self.retry:
            self.level = min(self.max_concurrency, self.level + POLLER_STEP_PER_S)
        else:
            self.level = max(min(POLLER_START, self.max_concurrency), self.in_flight)
        self._refresh_limit()

    def _refresh_limit(self) -> None:
        self.limit = min(self.level, self.max_concurrency) if self.enabled else 0

    def arrive(self, count: int, now: float) -> None:
        self.fresh += count
        self.fresh_arrivals.append([now, count])

    def take_fresh(self, count: int) -> list[tuple[int, float]]:
        """The ``count`` oldest never-received messages, received once."""
        taken: list[tuple[int, float]] = []
        runs = self.fresh_arrivals
        while len(taken) < count:
            run = runs[0]
            take = min(count - len(taken), int(run[1]))
            taken.extend([(1, run[0])] * take)
            run[1] -= take
            if not run[1]:
                runs.popleft()
        self.fresh -= count
        return taken

    def receive(self) -> list[tuple[int, float]]:
        """Up to one batch of visible messages: (receive count after this receive, arrival).

        Each pick is uniform over the visible messages: one draw both chooses between the
        never-received ones and those back from a failed receive, and indexes the latter.
        """
        batch: list[tuple[int, float]] = []
        size = self.spec.batch_size
        limit = self.spec.max_receive_count
        retry = self.retry
        draw = self.pick_rng.random
        while len(batch) < size:
            waiting = len(retry)
            if not waiting:
                batch.extend(self.take_fresh(min(size - len(batch), self.fresh)))
                break
            point = draw() * (self.fresh + waiting)
            if point >= waiting:
                batch.extend(self.take_fresh(1))
                continue
            index = int(point)
            retry[index], retry[-1] = retry[-1], retry[index]
            count, arrived = retry.pop()
            if count >= limit:
                self.trace.dlq_messages += 1
                continue
            batch.append((count + 1, arrived))
        return batch

    @property
    def waiting(self) -> int:
        """Messages not done and not in flight: visible, or invisible after a failed call."""
        return self.fresh + len(self.retry) + self.pending_returns


class _Invocation:
    __slots__ = (
        "busy_ms",
        "done_arrivals",
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

    def __init__(self, queue: _Queue, messages: list[tuple[int, float]], started: float) -> None:
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


def arrived_by(backlog: int, arrivals: Schedule, t: float) -> int:
    """Messages that have entered a queue by time ``t`` (the backlog is there at 0)."""
    total = 0.0
    for index, (start, rate) in enumerate(arrivals):
        if start >= t:
            break
        end = arrivals[index + 1][0] if index + 1 < len(arrivals) else math.inf
        total += rate * (min(t, end) - start)
    return backlog + math.floor(total + 1e-9)


def arrivals_end(arrivals: Schedule, duration_s: float) -> float:
    """When a queue's last arrival happens (0 when only the backlog arrives)."""
    end = 0.0
    for index, (_start, rate) in enumerate(arrivals):
        if rate > 0:
            next_start = arrivals[index + 1][0] if index + 1 < len(arrivals) else duration_s
            end = max(end, min(next_start, duration_s))
    return end


def simulate(
    scenario: Scenario,
    policy: SimPolicy,
    *,
    seed: int | None = None,
) -> SimResult:
    """Run ``scenario`` under ``policy``; ``seed`` overrides the scenario's."""
    return _Run(scenario, policy, scenario.seed if seed is None else seed).run()


class _Run:
    def __init__(self, scenario: Scenario, policy: SimPolicy, seed: int) -> None:
        self.scenario = scenario
        self.policy = policy
        self.seed = seed
        seconds = math.ceil(scenario.duration_s) + 1
        self.seconds = seconds
        self.downstreams = {
            spec.name: _Downstream(spec, seconds, seed) for spec in scenario.downstreams
        }
        self.queues = [
            _Queue(spec, self.downstreams[spec.downstream], f"{seed}:sqs:{spec.name}")
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
        self.in_transit: list[tuple[float, int, Sample]] = []
        self.deliveries: list[TelemetryDelivery] = []
        self.arrivals_over = max(
            (arrivals_end(spec.arrivals_rps, scenario.duration_s) for spec in scenario.queues),
            default=0.0,
        )

    def push(self, time: float, kind: int, payload: object) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (time, self.sequence, kind, payload))

    def run(self) -> SimResult:
        scenario = self.scenario
        self.policy.start(scenario)
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
            else:
                self.tick(now, payload)  # type: ignore[arg-type]
        # Samples still on their way when the run ends complete the telemetry (a recording
        # holds every invocation); the controller never saw them.
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
        )

    def apply_mappings(self) -> None:
        settings = self.policy.mappings()
        for queue in self.queues:
            queue.set_mapping(settings[queue.spec.name])

    def dispatch(self, queue: _Queue, now: float) -> None:
        while queue.in_flight < queue.limit and (queue.fresh or queue.retry):
            messages = queue.receive()
            if not messages:
                return
            queue.in_flight += 1
            queue.in_flight_messages += len(messages)
            invocation = _Invocation(queue, messages, now)
            self.push(now + queue.spec.invocation_overhead_ms / 1000.0, _CALL, invocation)

    def call(self, now: float, invocation: _Invocation) -> None:
        queue = invocation.queue
        status, latency = queue.downstream.answer(now)
        timeout = queue.timeout_s
        if timeout is not None and latency > timeout:
            status, latency = TIMED_OUT, timeout
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
        low, high = self.scenario.telemetry_delay_s
        arrival = now + self.delay_rng.uniform(low, high)
        self.sequence += 1
        heapq.heappush(self.in_transit, (arrival, self.sequence, self.sample(invocation, now)))
        self.dispatch(queue, now)

    def sample(self, invocation: _Invocation, now: float) -> Sample:
        """The one place an invocation becomes telemetry (what its worker would emit): its
        429s, its client-side timeouts (``DownstreamTimeout``) and the other failures."""
        calls = len(invocation.messages)
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
        )

    def returned(self, now: float, payload: tuple[_Queue, list[tuple[int, float]]]) -> None:
        queue, counts = payload
        queue.pending_returns -= len(counts)
        queue.retry.extend(counts)
        self.dispatch(queue, now)

    def arrive(self, now: float, step: int) -> None:
        for queue in self.queues:
            spec = queue.spec
            total = arrived_by(spec.backlog, spec.arrivals_rps, now)
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
        batch: list[Sample] = []
        in_transit = self.in_transit
        while in_transit and in_transit[0][0] <= now:
            arrival, _, sample = heapq.heappop(in_transit)
            delivery = TelemetryDelivery(arrival, sample)
            self.deliveries.append(delivery)
            batch.append(sample)
        if batch:
            self.policy.on_batch(batch, SIM_EPOCH + now)
            self.after_controller(now)
        self.push((tick + 1) * self.scenario.kinesis_batch_window_s, _CONTROL, tick + 1)

    def tick(self, now: float, tick: int) -> None:
        self.policy.on_tick(SIM_EPOCH + now)
        self.after_controller(now)
        self.push((tick + 1) * self.scenario.controller_schedule_s, _TICK, tick + 1)

    def after_controller(self, now: float) -> None:
        self.apply_mappings()
        for queue in self.queues:
            self.dispatch(queue, now)
