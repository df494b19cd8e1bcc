"""Sizing: how many invocations really run, and how far to cut when they overload."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

from controller.model import QueueStateName
from controller.policy.adaptive.memory import (
    AdaptiveMemory,
    AdaptiveSituation,
    AdaptiveVerdict,
    ceiling_above,
    hold,
    move,
)
from controller.policy.adaptive.pausing import Pausing, floor_pressure, share_bound
from controller.policy.adaptive.probing import backlog_decides, refused, reporting_lag
from controller.policy.base import clamp
from controller.policy.evidence import evidence_since
from controller.settings import PolicyParams
from controller.window import Second, WindowSnapshot, WindowStats


class Sizing(Pausing):
    """Cuts in proportion and their correction, built on pausing (a cut that would leave Cmin
    hard overloaded pauses instead)."""

    def in_use(self, situation: AdaptiveSituation) -> float:
        """Invocations really running, from their durations (the busiest pair of seconds); the
        cap once they fill it.

        Read over the evidence and the ``window_s`` before it: the evidence's newest seconds
        are still being reported and read low (with telemetry 3-36 s late, 24 running read as
        3 and were cut to 3). A poller still climbing runs more now than its newest reports
        show: from the last second it ran no more than it starts with, it adds
        ``poller_ramp_per_s`` a second (``ramp_start``).
        """
        state, stats, window = situation.state, situation.stats, situation.window
        since = stats.since - situation.params.window_s
        estimate = peak_concurrency(window, since, stats.until)
        cap = float(state.concurrency)
        if estimate is not None and estimate >= self.saturated_share * cap:
            return cap
        newest = stats.newest_event_time
        climbed = None if newest is None else self.climbed(window, since, stats.until, newest, cap)
        if climbed is None:
            # One second of evidence is no pair to read the concurrency from: the cap, unless
            # the poller's start is in view (below), which bounds what it can run by now.
            return cap if estimate is None else estimate
        return max(estimate or 0.0, climbed)

    def climbed(
        self, window: WindowSnapshot, since: float, until: float, at: float, cap: float
    ) -> float | None:
        """The invocations a poller climbing from its start in ``[since, until)``
        (``ramp_start``) runs at ``at``, at most ``cap`` (``None``: no climb in view)."""
        started = self.ramp_start(window, since, until)
        if started is None:
            return None
        return min(self.poller_start + self.poller_ramp_per_s * (at - started), cap)

    def ramp_start(self, window: WindowSnapshot, since: float, until: float) -> float | None:
        """The newest second in ``[since, until)`` before the busiest one in which the queue ran
        no more than the poller's first two steps (``None``: it ran more than that throughout,
        or never more, on a queue older than ``since``: no climb in view).

        A queue never above the poller's first steps is climbing only in its first reports;
        later its work keeps that few busy (read as climbing since the backlog it drained at
        its start, a stream running 2 of 85 had its cap cut 85 -> 17 over 250 s, refused
        meanwhile)."""
        seconds = window.seconds(since, until)
        # A queue whose first second of reports is all there is: that second is its start.
        pairs = _paired_busy(seconds) or [
            (second, totals.busy_ms / 1000.0) for second, totals in seconds
        ]
        if not pairs:
            return None
        peak = max(range(len(pairs)), key=lambda index: pairs[index][1])
        start_steps = 2 * self.poller_start
        if pairs[peak][1] <= start_steps and any(second < since for second, _ in window.buckets):
            return None
        for second, busy in reversed(pairs[: peak + 1]):
            if busy <= start_steps:
                return second
        return None

    def latest_pressure(self, situation: AdaptiveSituation) -> tuple[float, float]:
        """The pressure among the newest second of invocation starts, as (storm, sizing).

        A storm that began a moment ago shows there before it shows in the whole evidence's
        share: ``storm`` is that pressure when it is clear (enough calls, well above T1), else
        0. ``sizing`` is the same pressure on half the evidence, to size a cut the whole
        evidence has already called for, which the older, cleaner seconds would understate.
        """
        stats, params = situation.stats, situation.params
        newest = newest_start(stats)
        if newest is None:
            return 0.0, 0.0
        since = max(stats.since, newest - self.latest_s + 1)
        latest = situation.window.stats(since, newest + 1)
        pressure = latest.pressure_rate
        sizing = pressure if 2 * latest.requests >= params.min_samples else 0.0
        clear = (
            latest.requests >= 2 * params.min_samples and pressure >= self.storm_factor * params.t1
        )
        return (pressure if clear else 0.0), sizing

    def surge_pressure(self, situation: AdaptiveSituation) -> float:
        """The pressure since the storm's onset (the first second whose invocations met T1),
        when the evidence before it is clean (``clean_history``): a storm's first seconds of
        reports, thinned in the whole evidence by the clean history before them (0.0: no onset
        after a clean history, or too few calls since)."""
        stats, window, params = situation.stats, situation.window, situation.params
        onset = storm_onset(stats, window, params)
        if not self.clean_history(window.stats(stats.since, onset)):
            return 0.0
        since = window.stats(onset, stats.until)
        return since.pressure_rate if since.requests >= 2 * params.min_samples else 0.0

    def clean_history(self, history: WindowStats) -> bool:
        """``history`` holds ``clean_history_calls`` calls or more and stays under
        ``clean_below``: rejections after it are a storm's first reports, not a level just
        over the capacity."""
        calls = history.requests >= self.clean_history_calls
        return calls and history.pressure_rate < self.clean_below

    def cut(self, situation: AdaptiveSituation, latest_pressure: float) -> AdaptiveVerdict:
        """Cut to the accepted share of the invocations in use, and remember the level above
        as the ceiling; pause instead when that share of them overloads even Cmin hard."""
        state, stats, params = situation.state, situation.stats, situation.params
        current = state.concurrency
        pressure = max(stats.pressure_rate, latest_pressure)
        fresh = stats.pressure_rate < params.t1
        running = self.in_use(situation)
        by_refusals = refused(stats)
        if by_refusals:
            paused = self._pause_far_below(situation, stats, running)
            if paused is not None:
                return paused
        onset = storm_onset(stats, situation.window, params)
        if by_refusals:
            proportional = self.fitting_level(running, pressure, stats.requests)
            sized = (
                "one invocation too many explains it: step down one"
                if one_too_many(running, pressure)
                else "cut to the accepted share"
            )
        else:
            proportional = self.timeout_level(running, pressure, stats.requests, params)
            sized = "cut to the accepted share, to a quarter at most"
        target = clamp(min(current - 1, proportional), params)
        return self.cut_verdict(
            situation,
            correctable(situation, onset, running),
            stats,
            target,
            f"Overload: {'newest ' if fresh else ''}pressure {pressure:.1%} >= T1 "
            f"({params.t1:.1%}) with about {running:.1f} invocations in use; {sized}. Scaled "
            f"from {current} -> {target}.",
            by_refusals=by_refusals,
        )

    def fitting_level(self, running: float, pressure: float, requests: int) -> int:
        """The level that fits ``running`` invocations refused ``pressure`` of ``requests``
        calls: one under them when one invocation too many explains the pressure, else
        ``fitting`` rounded down. Such a level is just over a capacity that fits a fraction of
        a level more than the one under it (at 7.3, 8 draws 9% refused, over T1):
        ``fitting``'s margin and the rounding would cut it two, to a level whose way back up
        is a probe a backoff later."""
        if one_too_many(running, pressure):
            return math.ceil(running) - 1
        return math.floor(self.fitting(running, pressure, requests))

    def timeout_level(
        self, running: float, pressure: float, requests: int, params: PolicyParams
    ) -> int:
        """The level a cut on mostly timeouts goes to: ``running`` times the accepted share,
        to a quarter (``beta`` squared) at most. A downstream past its latency cliff fails
        every call however few too many there are, so that share says nothing of the level
        that fits. Halved, a slowdown or a fall of the capacity that times out every call
        was most often halved again a telemetry round trip of timeouts later (mixed seed 100:
        9 draws with timeouts wasted 0.964 of their calls in all halving, 0.739 quartering)."""
        fitting = self.fitting(running, pressure, requests)
        return math.floor(max(fitting, running * params.beta**2))

    def fitting(self, running: float, pressure: float, requests: int) -> float:
        """The invocations that fit: ``running`` times the accepted share, sized pessimistically
        (``sizing_z`` standard errors of ``pressure`` over ``requests`` calls): a decision on a
        few dozen calls would otherwise under-cut and need a second cut a settle period later,
        the storm going on meanwhile."""
        return running * (1.0 - share_bound(pressure, requests, self.sizing_z))

    def _pause_far_below(
        self, situation: AdaptiveSituation, stats: WindowStats, running: float
    ) -> AdaptiveVerdict | None:
        """A pause at once when the ``running`` invocations' accepted share over the whole of
        ``stats`` fits so few that Cmin would draw ``pause_at_once`` pressure (``None``: it
        does not). Not on the newest second's share: a storm's first reports, thinned, can
        show it all refused while Cmin still fits."""
        fit = self.fitting(running, stats.pressure_rate, stats.requests)
        if floor_pressure(fit, situation.params) < self.pause_at_once:
            return None
        return self.pause_far_below(situation, stats, running, fit)

    def cut_verdict(
        self,
        situation: AdaptiveSituation,
        memory: AdaptiveMemory,
        stats: WindowStats,
        target: int,
        reason: str,
        *,
        by_refusals: bool = False,
    ) -> AdaptiveVerdict:
        """A cut to ``target`` resting on ``stats``: the level above it is the ceiling and the
        level cut from the one that broke; probing starts over after a backoff.
        ``by_refusals``: the downstream refused the calls (429, 503), rather than answering
        them too slowly or not in time."""
        state = situation.state
        breaches = state.consecutive_breaches + 1
        name = QueueStateName.THROTTLED if breaches == 1 else QueueStateName.CRITICAL_BACKOFF
        backoff = memory.probe_backoff_s or self.probe_backoff_s[0]
        remembered = replace(
            memory,
            ceiling=ceiling_above(target),
            broke_at=state.concurrency,
            ceiling_refused=by_refusals,
            probe_streak=0,
            next_probe_at=situation.now + self.spread(situation, backoff),
            probe_backoff_s=backoff,
            judge_at=0.0,
            probe_step=0,
        )
        return move(target, name, reason, remembered, stats, breaches=breaches, wake_at=0.0)

    def step_down_near_end(
        self, situation: AdaptiveSituation, stats: WindowStats
    ) -> AdaptiveVerdict | None:
        """A level whose calls the downstream refuses in the band (under T1), steadily (in
        both halves of the seconds reported), where refused calls set the ceiling: one level
        down once the backlog is known to drain before a refused message would come back
        (``backlog_ends_first``); until it is known, the hold asks for it (``None``: neither).

        Each refused message comes back a visibility timeout later, after everything else
        near the end (issue 29's tails; throttling seed 100 draw 54: a probe to 20 passed
        clean, and 20 then refused 1% of its calls for the backlog's last 45 s, each message
        back 57 s later). The step is a cut of its own, corrected like one on the reports
        still coming from before it: a fall's first refusals read as a level just over the
        capacity, and the step would otherwise restart the evidence the storm's cut is sized
        on (seed 300 draw 12: a step on one refused call in 181 at 131 s held 22 invocations
        in a fall to 2.5 calls a second for a telemetry round trip).
        """
        current, params, memory = situation.state.concurrency, situation.params, situation.memory
        if current <= params.cmin or not refused(stats):
            return None
        if not backlog_decides(memory, stats):
            # The backlog a read would bring could not decide ``backlog_ends_first``.
            return None
        if not steady_refusals(situation.window, stats, self.clean_below):
            return None
        if situation.backlog is None:
            return replace(
                hold(
                    situation.state,
                    f"Within band: pressure {stats.pressure_rate:.1%} < T1 "
                    f"({params.t1:.1%}), refused steadily; holding at {current}, its backlog "
                    "to be read.",
                    memory,
                    stats,
                ),
                asks_backlog=True,
            )
        if not self.backlog_ends_first(situation, stats):
            return None
        return self.cut_verdict(
            situation,
            correctable(situation, stats.since, self.in_use(situation)),
            stats,
            current - 1,
            f"Near the backlog's end: pressure {stats.pressure_rate:.1%} < T1 "
            f"({params.t1:.1%}) but {situation.backlog.visible} messages waiting drain before a "
            f"refused one would come back ({situation.backlog.visibility_timeout_s:.0f}s "
            f"visibility timeout); stepping down {current} -> {current - 1}.",
            by_refusals=True,
        )

    def correction(self, situation: AdaptiveSituation) -> AdaptiveVerdict | None:
        """A cut sized on a storm's first reports, made again on all of them.

        The first reports of a storm come from the calls made early in each second, which the
        downstream still accepted: a cut on them falls short, and waiting for evidence from
        after it costs a settle period of the storm. The invocations that started before the
        cut keep reporting; once they hold ``correction_evidence`` times the calls the cut was
        sized on, their accepted share sizes the cut again; at once, before that, where it fits
        under ``correction_at_once`` of the level (``None``: none due, or the cut was deep
        enough: the level is at or under the target, or within what their accepted share
        fits).
        """
        state, memory, now = situation.state, situation.memory, situation.now
        window, params = situation.window, situation.params
        if not self.correction_due(situation):
            return None
        before = window.stats(memory.cut_evidence_since, memory.cut_at)
        if not refused(before):
            return None
        # The storm at full strength: its first second straddles the onset.
        worst_second, worst_at = max(
            (
                (bucket.pressure_rate, second)
                for second, bucket in window.seconds(memory.cut_evidence_since, memory.cut_at)
                if bucket.requests >= 2 * params.min_samples
            ),
            default=(0.0, None),
        )
        pressure = max(before.pressure_rate, worst_second)
        # The reports that came since may show more invocations running than those the cut
        # was sized from (a poller still climbing when the first reports left). A poller
        # climbing into the storm ran, in its worst second, what its ramp had reached there,
        # under the level that broke: the busy time reported so far reads less while the
        # reports trail (throttling seed 7 draw 45: 75 ran, read as 49.7 and 54.1, corrected
        # to 29 where 45 fit).
        running = max(
            memory.cut_running, peak_concurrency(window, before.since, before.until) or 0.0
        )
        if worst_at is not None and memory.broke_at:
            since = before.since - params.window_s
            reached = self.climbed(window, since, before.until, worst_at, memory.broke_at)
            running = max(running, reached or 0.0)
        current = state.concurrency
        # A second storm (the capacity falling again) inside the correction's period reports
        # among the evidence from before the cut, where the correction waits for twice the
        # calls and the guards for invocations started after it (throttling seed 100 draw 185:
        # corrected to 40 at 53 s, the cliff's seconds showed 95% refused at 55 s, cut at 68 s,
        # 40 invocations refused 90% meanwhile). A level far over what its worst second fits
        # is cut now, on reports that came since it (a storm's newest seconds, never the
        # evidence it was sized on again).
        settled = before.requests >= self.correction_evidence * memory.cut_requests
        second_storm = (
            before.requests > memory.cut_requests
            and worst_second >= params.t1
            and self.fitting(running, worst_second, before.requests)
            < self.correction_at_once * current
        )
        if not settled and not second_storm:
            return None
        paused = self._pause_far_below(situation, before, running)
        if paused is not None:
            return paused
        target = clamp(self.fitting_level(running, pressure, before.requests), params)
        # A cut sized on a storm's first reports can land low (the newest seconds read few of
        # the invocations in use: throttling 1001 draw 150, 70 running read as 6.8 and cut to
        # 5, then 3, where 15 fit): where the rest of them fit more than one level over it,
        # it is raised half the way to what they fit, below the level that broke, rather than
        # climbed back by probes, a telemetry round trip each. Half: the reports can read more
        # in use than ran, and a capacity still falling makes them stale (mixed 1001 draw
        # 193: 110 read where 98 ran, raised 55 -> 91 all the way); each correction after it,
        # on twice the calls, goes half the way again. Only from the level its own cut set
        # (the ceiling is the level above it): a group that set another since shares the
        # capacity out itself (shared 1001 draw 191: a member the group held at 17 raised to
        # 42).
        own_level = memory.ceiling == ceiling_above(current)
        if own_level and memory.broke_at > target > current + 1:
            target = current + math.ceil((target - current) / 2)
            raised = f"Correcting the cut up: the {before.requests} calls from before it show "
            return move(
                target,
                QueueStateName.CRITICAL_BACKOFF,
                f"{raised}pressure {pressure:.1%} with about {running:.1f} invocations in use. "
                f"Scaled from {current} -> {target}.",
                replace(
                    memory,
                    ceiling=ceiling_above(target),
                    cut_at=now,
                    cut_requests=before.requests,
                    cut_running=running,
                ),
                before,
                breaches=state.consecutive_breaches,
                wake_at=0.0,
                restores=True,
            )
        # A level the reports' own accepted share fits is kept: the margin ``fitting`` takes
        # is for a cut on a few dozen calls, and a level under what fits leaves capacity unused
        # until a probe finds it, a probe that then chains a step past it.
        if target >= current or current <= running * (1.0 - pressure):
            return None
        return move(
            target,
            QueueStateName.CRITICAL_BACKOFF,
            f"Correcting the cut: the {before.requests} calls from before it show pressure "
            f"{pressure:.1%} with about {running:.1f} invocations in use. Scaled "
            f"from {current} -> {target}.",
            replace(
                memory, ceiling=ceiling_above(target), cut_at=now, cut_requests=before.requests
            ),
            before,
            breaches=state.consecutive_breaches + 1,
            wake_at=0.0,
        )

    def correction_due(self, situation: AdaptiveSituation) -> bool:
        """The last change was a cut, made no longer ago than the correction period past the
        telemetry's lag: its own reports may still be arriving."""
        state, memory = situation.state, situation.memory
        return (
            memory.cut_at > 0
            and state.last_change_at == memory.cut_at
            and situation.now - memory.cut_at <= self.correction_s + reporting_lag(situation)
        )


def busy_concurrency(stats: WindowStats, min_span_s: float) -> float | None:
    """Busy time / elapsed time over the invocations the stats cover (``None``: too short)."""
    if not stats.timed_samples or stats.newest_event_time is None:
        return None
    mean_s = stats.mean_invocation_s
    first_start = max(math.ceil(stats.since), stats.first_second or -math.inf)
    last_start = stats.newest_event_time - mean_s
    span = last_start - first_start + mean_s
    if span < min_span_s:
        return None
    return stats.busy_ms / 1000.0 / span


def settled_use(situation: AdaptiveSituation, min_span_s: float) -> float | None:
    """The invocations in use at the level set last: the busiest pair of seconds since the
    change settled, or the busy time over the evidence where that is higher (``None``: too
    short to tell).

    Telemetry trails the starts: with reports 5-34 s late, a second of the last 30 s holds a
    third of its invocations on average, and the evidence's busy time read 1.0 of 3 in use
    for 550 s while 3 ran, 10,000 messages waiting (throttling 1001 draw 66). A second
    older than the delay is whole, so the busiest one since the change sees what runs."""
    averaged = busy_concurrency(situation.stats, min_span_s)
    if averaged is None:
        return None
    state, window = situation.state, situation.window
    since = evidence_since(state, state.last_change_at, situation.params)
    peak = peak_concurrency(window, since, situation.now + 1.0)
    return max(averaged, peak or 0.0)


def correctable(situation: AdaptiveSituation, since: float, running: float) -> AdaptiveMemory:
    """The memory of a cut made now on the evidence from ``since``, sized from ``running``
    invocations in use: what ``Sizing.correction`` reads the reports still coming from before
    the cut against."""
    return replace(
        situation.memory,
        cut_at=situation.now,
        cut_evidence_since=since,
        cut_requests=situation.window.stats(since, situation.stats.until).requests,
        cut_running=running,
    )


def peak_concurrency(window: WindowSnapshot, since: float, until: float) -> float | None:
    """The most invocations running at once over the invocations started in ``[since,
    until)``, by Little's law per second.

    Invocations started in one second, times their durations, are the concurrency of that
    second (``busy_ms`` of its bucket). Taken over pairs of seconds (start times fall unevenly
    between seconds) and the highest pair: the newest seconds are still being reported and
    read low, and a poller still ramping runs more now than on average over the evidence.
    """
    pairs = _paired_busy(window.seconds(since, until))
    return max(busy for _, busy in pairs) if pairs else None


def _paired_busy(seconds: tuple[Second, ...]) -> list[tuple[int, float]]:
    """Each second with the mean concurrency of it and the next."""
    return [
        (first, (one.busy_ms + two.busy_ms) / 2000.0)
        for (first, one), (_, two) in itertools.pairwise(seconds)
    ]


def newest_start(stats: WindowStats) -> int | None:
    """The second the newest reported invocations started in (``None``: none reported)."""
    if stats.newest_event_time is None:
        return None
    return math.floor(stats.newest_event_time - stats.mean_invocation_s)


def steady_refusals(window: WindowSnapshot, stats: WindowStats, share: float) -> bool:
    """Calls refused under ``stats`` in both halves of the seconds it has reports of, at
    least ``share`` of each half's: a level over the capacity, not the first reports of a fall
    (which come in its newest seconds alone)."""
    seconds = window.seconds(stats.since, stats.until)
    if len(seconds) < 2:
        return False
    middle = (seconds[0][0] + seconds[-1][0] + 1) / 2
    halves = (window.stats(stats.since, middle), window.stats(middle, stats.until))
    return all(half.pressure > 0 and half.pressure_rate >= share for half in halves)


def one_too_many(running: float, pressure: float) -> bool:
    """One invocation too many explains ``pressure``: the calls refused are no more than one of
    the ``running`` invocations makes. A capacity seldom fits a whole number of invocations,
    and the level above it draws just that."""
    return pressure * running <= 1.0


def storm_onset(stats: WindowStats, window: WindowSnapshot, params: PolicyParams) -> float:
    """The first second of the evidence whose invocations met pressure at T1 or above (the
    evidence's start when none did)."""
    for second, bucket in window.seconds(stats.since, stats.until):
        if bucket.requests and bucket.pressure_rate >= params.t1:
            return float(second)
    return stats.since
