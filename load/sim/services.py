"""The simulated services: an SQS queue with the Lambda poller that reads it, and a downstream
API (load/sim/engine.py runs them on virtual time; its docstring says what is modelled)."""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from typing import TYPE_CHECKING

from controller.model import Backlog
from load.announce import HeaderStyle
from load.latency import pareto_factor, queueing_latency
from load.sim.scenario import DownstreamSpec, QueueSpec, Schedule, value_at

if TYPE_CHECKING:
    from load.sim.trace import MappingSetting, QueueTrace

POLLER_START = 5
POLLER_STEP_PER_S = 5
# The window of an announced quota: the simulated capacity is enforced per calendar second, a
# fixed window of one second, so a quota of ``capacity`` calls per second is announced exactly.
ANNOUNCED_WINDOW_S = 1.0


class SimDownstream:
    """A downstream API: its capacity each second, its latency, its 5xx noise, and the quota it
    announces (``announces_quota``; ``remaining`` and ``quota``: as of the last answer)."""

    __slots__ = (
        "announces_quota",
        "answers_429",
        "capacity",
        "in_progress",
        "latency_s",
        "names_429_kind",
        "noise",
        "noise_rng",
        "queueing",
        "quota",
        "remaining",
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
        # Every style but Stripe's announces the quota; Stripe's names each 429's kind only.
        self.announces_quota = spec.announce not in (None, HeaderStyle.STRIPE)
        # Its limit is a rate: Stripe's reason on each 429 names a rate limit.
        self.names_429_kind = spec.announce is HeaderStyle.STRIPE
        self.quota = 0.0
        self.remaining = 0.0
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
            self.quota, self.remaining = capacity, 0.0
            return 429, latency
        self.used += 1
        self.quota, self.remaining = capacity, max(0.0, capacity - self.used)
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


class Announcement:
    """What an invocation reports of the quota its answers announced, as the worker does: its
    latest answer's remaining, quota and end of window. Every answer announces the one limit
    of a one-second window, so the worker reports the latest (worker.announced ``newer``: the
    least of a batch straddling a reset is of a window gone)."""

    __slots__ = ("quota", "remaining", "reset_at")

    def __init__(self, downstream: SimDownstream, now: float) -> None:
        self.remaining = downstream.remaining
        self.quota = downstream.quota
        self.reset_at = (math.floor(now / ANNOUNCED_WINDOW_S) + 1) * ANNOUNCED_WINDOW_S


class SimQueue:
    """An SQS queue (never-received and returned messages) and its mapping's poller."""

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

    def __init__(
        self, spec: QueueSpec, downstream: SimDownstream, seed: str, trace: QueueTrace
    ) -> None:
        self.spec = spec
        self.downstream = downstream
        self.trace = trace
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

    def receive(self, now: float) -> list[tuple[int, float]]:
        """Up to one batch of visible messages at ``now``: (receive count after this receive,
        arrival); a message past its ``maxReceiveCount`` goes to the dead-letter queue instead.

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
                self.trace.dead_lettered_at.append(now)
                continue
            batch.append((count + 1, arrived))
        return batch

    @property
    def visible(self) -> int:
        """Messages a receive could take now (SQS's ``ApproximateNumberOfMessagesVisible``)."""
        return self.fresh + len(self.retry)

    @property
    def backlog(self) -> Backlog:
        """What SQS's ``GetQueueAttributes`` answers now: the visible messages and the
        queue's visibility timeout."""
        return Backlog(self.visible, self.spec.visibility_timeout_s)

    @property
    def waiting(self) -> int:
        """Messages not done and not in flight: visible, or invisible after a failed call."""
        return self.fresh + len(self.retry) + self.pending_returns


# Messages by which a quiet time falls short of the exact one: a float sum of a schedule is off
# by far less (a millionth of a message), so a read skipped before it never missed one.
QUIET_MARGIN = 1e-6


def arrived_by(backlog: int, arrivals: Schedule, t: float) -> int:
    """Messages that have entered a queue by time ``t`` (the backlog is there at 0)."""
    return Arrivals(backlog, arrivals).by(t)


class Arrivals:
    """A queue's arrivals read at times that never go back (the engine's arrival steps).

    Each read goes on from the segment of the schedule the last one fell in, where summing the
    schedule from its start cost a fleet's every queue a pass over its steps ten times a
    simulated second. The sum of the segments already passed is kept in the order a sum from
    the start makes it, so each count is exactly the one such a sum gives. ``quiet_until``:
    no read before it can count a new message (at the fastest rate still to come, the next
    message is not in before then), so the engine need not read.
    """

    __slots__ = ("backlog", "before", "index", "peaks", "quiet_until", "schedule")

    def __init__(self, backlog: int, schedule: Schedule) -> None:
        self.backlog = backlog
        self.schedule = schedule
        # The segment the last read fell in, and the messages of the segments before it.
        self.index = 0
        self.before = 0.0
        # The fastest rate from each segment on.
        self.peaks = list(itertools.accumulate((rate for _, rate in reversed(schedule)), max))[::-1]
        self.quiet_until = 0.0

    def by(self, t: float) -> int:
        """Messages that have entered the queue by ``t`` (at or after the last read's time)."""
        schedule = self.schedule
        while self.index + 1 < len(schedule) and schedule[self.index + 1][0] < t:
            start, rate = schedule[self.index]
            self.before += rate * (schedule[self.index + 1][0] - start)
            self.index += 1
        start, rate = schedule[self.index]
        total = self.before
        if start < t:
            end = schedule[self.index + 1][0] if self.index + 1 < len(schedule) else math.inf
            total += rate * (min(t, end) - start)
        count = self.backlog + math.floor(total + 1e-9)
        peak = self.peaks[self.index]
        # The messages still to come before the count grows, less a margin far above the
        # rounding of the sums, at the fastest rate still to come.
        short = count + 1 - self.backlog - 1e-9 - total - QUIET_MARGIN
        self.quiet_until = math.inf if peak <= 0 else t + max(0.0, short) / peak
        return count


def arrivals_end(arrivals: Schedule, duration_s: float) -> float:
    """When a queue's last arrival happens (0 when only the backlog arrives)."""
    end = 0.0
    for index, (_start, rate) in enumerate(arrivals):
        if rate > 0:
            next_start = arrivals[index + 1][0] if index + 1 < len(arrivals) else duration_s
            end = max(end, min(next_start, duration_s))
    return end
