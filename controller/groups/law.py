"""The group law: the queues sharing one downstream decided as one, around whatever limit
algorithm decided each of them alone (docs/algorithms.md, "Groups: queues sharing one
downstream").

Each member is first decided alone (the algorithm, through the shared guards); the group then
adjusts the members' decisions, as Netflix's ``WindowedLimit`` wraps a limit:

- With no estimate yet (nothing refused), every decision stands.
- With one (``controller.groups.estimate``), each member's level is its share
  (``controller.groups.shares``). A member whose allowance is in use goes to its level, up or
  down; any other keeps its own decision, capped at its level. A cut the algorithm makes on
  its own evidence goes through at once (the group's estimate learns a fall only once its
  seconds are complete), and while the newest seconds show refusals the group raises nobody.
  Outside its own probe, it does not raise a member making most of the group's calls back to
  a level that member's refused calls just cut it from. It does not probe where the members'
  known backlogs drain before a probe could pay (``_backlogs_end_first``).
- Below the group's floor the members the group does not run are paused, the others resumed
  at their level; a pause or resume the algorithm asks for gives way to the group's (a pause
  the group does not carry out leaves the algorithm's memory as it was).
- A group whose members with work have more than one ``Priority`` protects the highest: the
  estimate learns from the newest seconds' refusals, the lower priorities are cut and paused
  and take the probes, and the protected members are not cut while a lower one runs.

Pure: the members' decisions, windows and the group's memory in, decisions and memory out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from controller.groups.estimate import (
    LAG_S,
    PROBE_JUDGED_AFTER_S,
    SPAN_S,
    UTILISATION,
    GroupMemory,
    Pooled,
    estimated,
    pooled,
)
from controller.groups.shares import (
    FORCE_AHEAD_S,
    SHORTEST_TURN_S,
    Claim,
    fair_shares,
    levels,
    running_set,
)
from controller.model import Backlog, Decision, GroupReport, GroupShare, QueueConfig, QueueState
from controller.model import QueueStateName as Name
from controller.policy.base import Verdict
from controller.policy.guards import decision_from
from controller.settings import PolicyParams
from controller.window import WindowSnapshot, calls_per_invocation_second

# A member whose invocations in use reach this share of its level wants more than it has.
SATURATED = 0.75
# An allowance not in use is given this much headroom over what the member sends.
HEADROOM = 1.2
# The complete seconds at its level a member's use is judged on.
JUDGED_AFTER_S = 2.0
# The seconds a member's pace (its calls per invocation-second) is measured on.
PACE_SPAN_S = 120.0
# A member that starts nothing still has work where this share of its newest calls (this many
# at least) were refused (429s, 503s): their messages come back (5xx noise alone is far under
# it; a member whose calls time out is decided on its timeouts' evidence, as before).
RETURNING_SHARE = 0.5
RETURNING_CALLS = 20


@dataclass(frozen=True, slots=True)
class Member:
    """One queue of a group as this batch decided it alone."""

    config: QueueConfig
    state: QueueState
    decision: Decision
    params: PolicyParams
    window: WindowSnapshot
    backlog: Backlog | None = None


@dataclass(frozen=True, slots=True)
class Governed:
    """What the group decided: the members' decisions it changed, what it reports, and the
    memory to keep."""

    decisions: Mapping[str, Decision]
    report: GroupReport
    memory: GroupMemory


def govern(group: str, members: Sequence[Member], memory: GroupMemory, now: float) -> Governed:
    """Decide ``members`` (queues sharing the downstream ``group``) together."""
    pool = pooled((member.window for member in members), now, memory.probed_at)
    paces = _paces(members, now)
    claims = [_claim(member, paces[member.config.queue], memory, pool, now) for member in members]
    protected = _protected(claims)
    estimate = memory.capacity_rps
    wanting = (
        estimate is not None
        and sum(c.demand_rps for c in claims) > UTILISATION * estimate
        and not _backlogs_end_first(members, pool, now)
    )
    # A probe smaller than one invocation's calls would move no level.
    step_rps = min(claim.pace for claim in claims)
    memory = estimated(memory, pool, wanting, step_rps, now, protecting=bool(protected))
    estimate = memory.capacity_rps
    if estimate is None:
        report = GroupReport(group, now, None, tuple(_measured(member, now) for member in members))
        return Governed({}, report, memory)
    budget = UTILISATION * estimate
    bounds = {member.config.queue: member.params.group_pause_max_s for member in members}
    running = running_set(budget, claims, now, bounds, staggered=bool(protected))
    if protected:
        # The members paused now run out their invocations: nobody takes their room yet.
        budget -= sum(c.floor_rps for c in claims if c.running and c.queue not in running)
    # Once no lower priority runs, the protected members are cut like any.
    lower = [c for c in claims if c.queue in running and c.queue not in protected]
    shielded = protected if any(claim.demand_rps > 0 for claim in lower) else set()
    shares = fair_shares(budget, [claim for claim in claims if claim.queue in running])
    current = {member.config.queue: member.state.concurrency for member in members}
    levels_of = levels(shares, [claim for claim in claims if claim.queue in running], current)
    decisions: dict[str, Decision] = {}
    reported = []
    for member, claim in zip(members, claims, strict=True):
        queue = member.config.queue
        share = shares.get(queue, 0.0)
        level = levels_of.get(queue, member.state.concurrency)
        standing = (queue in running, queue in shielded)
        decision = _decided(
            member, claim, level, share, standing, estimate, pool, now, memory.probed_at > 0
        )
        if decision is not member.decision:
            decisions[queue] = decision
        reported.append(GroupShare(queue, round(share, 3), level, queue not in running))
    runs, waits, resumed = _standing(claims, running, now)
    memory = replace(memory, running_since=runs, paused_since=waits, resumed_from=resumed)
    return Governed(decisions, GroupReport(group, now, round(estimate, 3), tuple(reported)), memory)


def _backlogs_end_first(members: Sequence[Member], pool: Pooled, now: float) -> bool:
    """Whether the members whose backlogs are known (read before their own raises), making at
    least half of the group's calls, would drain them at the calls they make before a group
    probe could pay: before it is judged, or before a message it had refused would come back
    (their visibility timeouts). Never while a member waits its turn paused: the group's work
    is then more than what runs."""
    if not all(member.state.enabled for member in members):
        return False
    verdict_s = LAG_S + PROBE_JUDGED_AFTER_S
    # Per known member: its messages waiting, its calls a second, the wait a probe must pay.
    known = [
        (m.backlog.visible, _sent_rps(m, now), max(verdict_s, m.backlog.visibility_timeout_s))
        for m in members
        if m.backlog is not None
    ]
    if not _most_of_the_calls(sum(rate for _, rate, _ in known), pool):
        return False
    return sum(visible for visible, _, _ in known) < sum(rate * wait for _, rate, wait in known)


def _protected(claims: Sequence[Claim]) -> set[str]:
    """The members the group protects: those of the highest ``Priority`` among the members
    with work, when some member with work has a lower one (none otherwise)."""
    working = [claim for claim in claims if claim.demand_rps > 0]
    priorities = {claim.priority for claim in working}
    if len(priorities) < 2:
        return set()
    return {claim.queue for claim in working if claim.priority == max(priorities)}


def _paces(members: Sequence[Member], now: float) -> dict[str, float]:
    """Each member's calls per invocation-second, measured over ``PACE_SPAN_S`` (a member
    that reported none: the group's median, or one call a second)."""
    measured = {}
    for member in members:
        since = now - PACE_SPAN_S
        calls = samples = timed = 0
        busy_ms = 0.0
        # One pass over the buckets (a span's stats would sort and copy them).
        for second, stats in member.window.buckets:
            if second >= since:
                calls += stats.requests
                samples += stats.samples
                timed += stats.timed_samples
                busy_ms += stats.busy_ms
        measured[member.config.queue] = calls_per_invocation_second(calls, samples, busy_ms, timed)
    known = [pace for pace in measured.values() if pace]
    fallback = statistics.median(known) if known else 1.0
    return {queue: pace or fallback for queue, pace in measured.items()}


def _claim(member: Member, pace: float, memory: GroupMemory, pool: Pooled, now: float) -> Claim:
    """What ``member`` claims of the downstream, from its evidence over the complete span
    since it began to run. A member paused, or resumed too recently for that to hold
    ``JUDGED_AFTER_S``, wants to run (its pause was the controller's: a queue the operator
    disabled is no member, ``planner.governed``); one that has run ``LAG_S`` and started
    nothing since has no work."""
    state, params, queue = member.state, member.params, member.config.queue
    running = state.enabled
    since = memory.running_since.get(queue, 0.0) if running else memory.paused_since.get(queue, now)
    # The wait counts from its first pause, whoever made it, through a resume the group took
    # back before the member had a turn (``SHORTEST_TURN_S``).
    if running:
        paused_since = memory.resumed_from.get(queue, 0.0) if now - since < SHORTEST_TURN_S else 0.0
    else:
        paused_since = min(start for start in (state.paused_since, since) if start > 0)
    judged_from = max(since, now - LAG_S - SPAN_S)
    judged_s = now - LAG_S - judged_from
    calls, busy_ms, started = _since(member.window, judged_from, now - LAG_S)
    sent = calls / judged_s if judged_s > 0 else 0.0
    in_use = busy_ms / 1000.0 / judged_s if judged_s > 0 else 0.0
    # The level the span ran at: a change within it ran partly at the level before.
    during = state.concurrency
    if state.last_change_at > judged_from:
        during = min(during, state.previous_concurrency)
    unjudged = not running or judged_s < JUDGED_AFTER_S
    idle = running and now - since >= LAG_S and not started
    nothing_waiting = member.backlog is not None and member.backlog.visible == 0
    saturated = not nothing_waiting and not idle and (unjudged or in_use >= SATURATED * during)
    if idle:
        sent = 0.0
    demand = params.cmax * pace if saturated else HEADROOM * sent
    floor = params.cmin * pace
    # Refused messages come back a visibility timeout later: a member that starts nothing, most
    # of its last calls refused, still has work (though nothing shows waiting), and runs at its
    # floor when they are back. Where the floors do not fit, it waits its turn for them.
    claims_floor = saturated or (idle and _last_calls_refused(member.window))
    return Claim(
        queue=queue,
        priority=member.config.priority,
        weight=member.config.weight,
        floor_rps=floor if claims_floor else min(floor, demand),
        demand_rps=max(demand, floor if claims_floor else 0.0),
        pace=pace,
        cmin=params.cmin,
        cmax=params.cmax,
        running=running,
        since=since,
        paused_since=paused_since,
    )


def _last_calls_refused(window: WindowSnapshot) -> bool:
    """Whether at least ``RETURNING_SHARE`` of the newest ``RETURNING_CALLS`` calls the window
    holds (whole seconds of starts, newest first) were refused by the downstream (timeouts
    are the client's)."""
    calls = refused = 0
    for _, stats in reversed(window.seconds(-math.inf, math.inf)):
        calls += stats.requests
        refused += stats.pressure - stats.timed_out
        if calls >= RETURNING_CALLS:
            break
    return calls >= RETURNING_CALLS and refused >= RETURNING_SHARE * calls


def _since(window: WindowSnapshot, since: float, until: float) -> tuple[int, float, bool]:
    """The calls and busy milliseconds of the invocations that started in ``[since,
    until)``, and whether any started at ``until`` or later: one pass over the buckets (a
    span's stats would add up every field)."""
    calls, busy_ms, started = 0, 0.0, False
    for second, stats in window.buckets:
        if second >= until:
            started = True
        elif second >= since:
            calls += stats.requests
            busy_ms += stats.busy_ms
    return calls, busy_ms, started


def _decided(
    member: Member,
    claim: Claim,
    level: int,
    share: float,
    standing: tuple[bool, bool],
    estimate: float,
    pool: Pooled,
    now: float,
    probing: bool,
) -> Decision:
    """``member``'s decision under the group's: the algorithm's where it stands, else one
    that carries out the group's level, pause or resume. ``standing``: whether the group runs
    it, and whether it shields it (protected while a lower priority runs): a shielded member
    is cut by nobody, its level goes up to its share or its algorithm's, never down (the lower
    priorities are cut instead; its calls are bounded by its work, and counted in its
    claim). ``probing``: the group is probing the downstream."""
    state, alone = member.state, member.decision
    runs, shielded = standing
    current = state.concurrency
    why = f"Group {member.config.group or 'downstream'}: ~{estimate:.0f} calls/s accepted"
    if not runs:
        if not state.enabled and not alone.enabled:
            return alone
        waiting_since = claim.paused_since or now
        reason = (
            f"{why}, below the floor of the queues with work: paused while others run "
            f"(waited {now - waiting_since:.0f}s of {member.params.group_pause_max_s:.0f}s)."
        )
        bound_at = waiting_since + member.params.group_pause_max_s
        return _carried(
            member, current, False, Name.THROTTLED, reason, bound_at - FORCE_AHEAD_S, now
        )
    share_text = f"share {share:.1f} calls/s fits {level}"
    if not state.enabled:
        target = min(level, current) if now < state.hold_until else level
        reason = f"{why}; {share_text}: resuming at {target} (its turn to run)."
        return _carried(member, target, True, Name.RECOVERING, reason, 0.0, now)
    wanted = alone.target if alone.enabled else current
    if wanted < current:
        target = min(wanted, level)
    elif claim.demand_rps >= claim.cmax * claim.pace and not pool.pressed:
        # Outside the group's probe, a member making most of the group's calls is not raised
        # back to a level its own calls were just refused at: those calls are most of what
        # the estimate reads, and the estimate reads high (its upper half of bunched seconds;
        # the README demo's `orders` went 7 -> 8 on 36 calls/s where 30 fit, was refused and
        # cut back, about every 15 s). A member making fewer saw its part of a refused second
        # only, and the estimate, read on every member's seconds, says more (a fleet's).
        # The group's probe raises every member.
        refused_there = (
            not probing
            and _just_cut_from(member, level, now)
            and _makes_most_calls(member, pool, now)
        )
        target = min(wanted, level) if refused_there else level
    else:
        target = min(wanted, level)
    if shielded:
        target = max(target, wanted, current)
    if target > current and (pool.pressed or now < state.hold_until):
        target = current
    if target == alone.target and alone.enabled:
        return alone
    if not alone.enabled:
        return _overruled(member, target, f"{why}; {share_text}", now)
    if target == current:
        reason = f"{why}; {share_text}: holding at {current}. ({alone.reason})"
        return _carried(member, current, True, alone.state, reason, None, now)
    direction = "raising" if target > current else "cutting"
    reason = f"{why}; {share_text}: {direction} {current} -> {target}."
    name = Name.THROTTLED if target < current else Name.RECOVERING
    return _carried(member, target, True, name, reason, None, now)


def _just_cut_from(member: Member, level: int, now: float) -> bool:
    """Whether ``member``'s last change, less than ``LAG_S`` and ``SPAN_S`` ago (the span the
    estimate reads), cut it from ``level`` or above where the downstream refused its calls (at
    least T1 of them, 429s and 503s, in the ``SPAN_S`` of starts before the change; timeouts
    are its client's, which the estimate does not read)."""
    state = member.state
    if not state.concurrency < level <= state.previous_concurrency:
        return False
    if now - state.last_change_at >= LAG_S + SPAN_S:
        return False
    before = member.window.stats(state.last_change_at - SPAN_S, state.last_change_at)
    refused = before.pressure - before.timed_out
    return before.requests > 0 and refused >= member.params.t1 * before.requests


def _makes_most_calls(member: Member, pool: Pooled, now: float) -> bool:
    """Whether ``member`` made at least half of the group's calls over the complete seconds
    the estimate reads (``pool``'s)."""
    return _most_of_the_calls(_sent_rps(member, now), pool)


def _most_of_the_calls(sent_rps: float, pool: Pooled) -> bool:
    """Whether ``sent_rps`` calls a second (over the span of ``Pooled.sent_rps``) are at least
    half of the group's."""
    return sent_rps > 0 and sent_rps >= pool.sent_rps / 2


def _sent_rps(member: Member, now: float) -> float:
    """``member``'s calls a second over the complete seconds the estimate reads (the span of
    ``Pooled.sent_rps``, the group's)."""
    return member.window.stats(now - LAG_S - SPAN_S, now - LAG_S).requests / SPAN_S


def _overruled(member: Member, target: int, why: str, now: float) -> Decision:
    """The decision that runs ``member`` at ``target`` where its algorithm, alone, asked to
    pause it: while the floors of the queues with work fit, the refusals it sees at its floor
    are the group's, and the group cuts where there is room (a pause would only hand the others
    its share). The pause not carried out, neither is its memory: kept as it was before, or
    the algorithm would go on testing and judging a pause that never was while the group runs
    the queue, and its reason ("pausing the mapping") would stand in the ledger."""
    state, alone = member.state, member.decision
    current = state.concurrency
    pressure = f"{alone.pressure_rate:.1%} refused would pause it alone"
    if target == current:
        reason = f"{why}: holding at {current}, not paused ({pressure}): the group runs it."
        name = state.state
    else:
        reason = f"{why}: cutting {current} -> {target}, not paused ({pressure})."
        name = Name.THROTTLED
    verdict: Verdict[object] = Verdict(
        target,
        name,
        reason,
        state.memory,
        enabled=True,
        pressure_rate=alone.pressure_rate,
        success_rate=alone.success_rate,
    )
    return decision_from(state, verdict, now)


def _carried(
    member: Member,
    target: int,
    enabled: bool,
    name: Name,
    reason: str,
    wake_at: float | None,
    now: float,
) -> Decision:
    """The decision that sets ``member``'s mapping as the group wants, keeping the memory the
    algorithm left (the algorithm decides on from where the group put the mapping)."""
    alone = member.decision
    after = alone.new_state
    verdict: Verdict[object] = Verdict(
        target,
        name,
        reason,
        after.memory,
        enabled=enabled,
        consecutive_breaches=after.consecutive_breaches,
        wake_at=after.wake_at if wake_at is None else wake_at,
        pressure_rate=alone.pressure_rate,
        success_rate=alone.success_rate,
    )
    return decision_from(
        member.state, verdict, now, after.algorithm or None, hold_until=after.hold_until
    )


def _measured(member: Member, now: float) -> GroupShare:
    """A member's line in a report with no estimate: the calls a second it sends, at the level
    it was decided alone."""
    decision = member.decision
    sent = round(_sent_rps(member, now), 3)
    return GroupShare(member.config.queue, sent, decision.target, not decision.enabled)


def _standing(
    claims: Sequence[Claim], running: set[str], now: float
) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Since when each member runs or waits paused after this batch, and, for a member in
    its first turn (a running claim's ``paused_since``, ``_claim``), since when it waited
    before (``GroupMemory.resumed_from``)."""
    runs: dict[str, float] = {}
    waits: dict[str, float] = {}
    resumed: dict[str, float] = {}
    for claim in claims:
        if claim.queue in running:
            # Running since before the group knew it (0): long enough to be judged.
            runs[claim.queue] = claim.since if claim.running else now
            if claim.paused_since > 0:
                resumed[claim.queue] = claim.paused_since
        else:
            waits[claim.queue] = claim.since if not claim.running else claim.paused_since or now
    return runs, waits, resumed
