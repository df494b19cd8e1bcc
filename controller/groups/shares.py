"""Dividing one downstream's estimate among the queues that share it (docs/algorithms.md,
"Groups: queues sharing one downstream").

- **Who runs.** At Cmin every member with work sends its floor (``Claim.floor_rps``). When the
  floors of all of them do not fit the estimate, the group time-shares: it runs the members
  whose floors fit, in order (``running_set``): first any member about to wait paused longer
  than its bound (a member resumed less than ``SHORTEST_TURN_S`` ago still counts the wait its
  resume ended: a turn taken back before it ran is no turn), then by priority (the higher
  first), then those still within their slice, then the one that waited longest; a member
  that has run its slice yields to one waiting. ``staggered`` (a group protecting a
  priority), a waiting member resumes only into room no yielding member still takes: a
  member paused runs out its invocations for a second more, and a turn that overlaps it is
  refused calls, the priority queue's too.
- **Max-min fair shares.** The running members get their floors first, then what is left goes
  by priority class (the higher first) and, within a class, max-min fairly by weight up to
  each member's demand (water-filling); what no demand takes is spread by weight up to each
  member's Cmax. The shares add up to the estimate at most (the floors of a lone running
  member excepted: one member always runs).
- **Levels.** A share over the member's calls per invocation-second is its level; levels are
  rounded down, then raised one by one (the largest remainders first) while the group's calls
  stay within the shares, each within Cmin..Cmax.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# A running member keeps running at least this long before it yields its place: its
# invocations must run and report before the group can judge what it sends.
MIN_SLICE_S = 15.0
# A paused member this close to its bound runs now, whatever else waits: the bound is judged
# when its mapping resumes, a batch or two after it is decided, and among many members at
# their bound together a forced one may wait a turn (fleet-below-floor at 5 s: 122 s).
FORCE_AHEAD_S = 8.0
# A member resumed and paused again within this long had no turn: its wait counts on from
# when it began. Short: where few members fit at once and many reach their bound together,
# each must still get its turn within the bound (fleet-below-floor: 5 s took it to 127 s).
SHORTEST_TURN_S = 2.0


@dataclass(frozen=True, slots=True)
class Claim:
    """One member's claim on the downstream, in calls a second.

    ``floor_rps``: what it sends at Cmin (0 for a member with no work: it sends nothing);
    ``demand_rps``: what it would send (its Cmax's calls when its allowance is in use, else a
    little more than it sends); ``pace``: its calls per invocation-second; ``since``: when it
    began to run, or to wait paused (``running``), by the group's time-sharing;
    ``paused_since``: when its wait began, whoever paused it (for a running member, the wait
    its last resume ended; 0: none).
    """

    queue: str
    priority: int
    weight: float
    floor_rps: float
    demand_rps: float
    pace: float
    cmin: int
    cmax: int
    running: bool
    since: float
    paused_since: float = 0.0


def running_set(
    capacity: float,
    claims: Sequence[Claim],
    now: float,
    bound_s: Mapping[str, float],
    staggered: bool = False,
) -> set[str]:
    """The members that run: all of them when their floors fit ``capacity``, else those whose
    floors fit, chosen as the module says; ``bound_s``: each member's longest pause;
    ``staggered``: those it resumes fit beside those it pauses."""
    wanting = [claim for claim in claims if claim.floor_rps > 0]
    if sum(claim.floor_rps for claim in wanting) <= capacity:
        return {claim.queue for claim in claims}
    slice_s = _slice_s(capacity, wanting, bound_s)

    def order(claim: Claim) -> tuple[int, int, int, float]:
        waiting = not claim.running or (
            claim.paused_since > 0 and now - claim.since < SHORTEST_TURN_S
        )
        forced = waiting and now - claim.paused_since + FORCE_AHEAD_S >= bound_s[claim.queue]
        if forced or not claim.running:
            return (0 if forced else 1, -claim.priority, 1, claim.paused_since)
        in_slice = now - claim.since < slice_s
        # Past its slice, the member that ran longest yields first.
        return (1, -claim.priority, 0 if in_slice else 1, now + (now - claim.since))

    # A member with no work sends nothing: it costs the running set nothing.
    running = {claim.queue for claim in claims if claim.floor_rps <= 0}
    load = 0.0
    for claim in sorted(wanting, key=order):
        if load == 0.0 or load + claim.floor_rps <= capacity:
            running.add(claim.queue)
            load += claim.floor_rps
    if staggered:
        load += sum(c.floor_rps for c in wanting if c.running and c.queue not in running)
        for claim in sorted(wanting, key=order, reverse=True):
            if load <= capacity:
                break
            if not claim.running and claim.queue in running:
                running.discard(claim.queue)
                load -= claim.floor_rps
    return running


def _slice_s(capacity: float, wanting: Sequence[Claim], bound_s: Mapping[str, float]) -> float:
    """How long a member runs before it yields: the slots that fit run in turn, each long
    enough that nobody waits past the shortest bound, and never shorter than
    ``MIN_SLICE_S``."""
    floors = sorted(claim.floor_rps for claim in wanting)
    slots = max(1, math.floor(capacity / floors[len(floors) // 2]))
    waiting = max(1, len(wanting) - slots)
    shortest = min(bound_s[claim.queue] for claim in wanting)
    return max(MIN_SLICE_S, min(shortest / 2, shortest * slots / waiting))


def fair_shares(capacity: float, claims: Sequence[Claim]) -> dict[str, float]:
    """Each claim's share of ``capacity`` (calls a second): floors, then by priority and
    weight up to the demands, then what is left by weight up to each Cmax's calls."""
    shares = {claim.queue: claim.floor_rps for claim in claims}
    left = max(0.0, capacity - sum(shares.values()))
    for priority in sorted({claim.priority for claim in claims}, reverse=True):
        members = [claim for claim in claims if claim.priority == priority]
        wants = {c.queue: max(0.0, c.demand_rps - c.floor_rps) for c in members}
        given = _water_fill(left, members, wants)
        for queue, extra in given.items():
            shares[queue] += extra
        left -= sum(given.values())
    room = {c.queue: max(0.0, c.cmax * c.pace - shares[c.queue]) for c in claims}
    for queue, extra in _water_fill(max(0.0, left), claims, room).items():
        shares[queue] += extra
    return shares


def _water_fill(
    amount: float, claims: Sequence[Claim], wants: Mapping[str, float]
) -> dict[str, float]:
    """``amount`` split max-min fairly by weight: no claim gets more than it wants, and
    those that want more share what is left in proportion to their weights."""
    given = dict.fromkeys(wants, 0.0)
    hungry = sorted(
        (claim for claim in claims if wants[claim.queue] > 0),
        key=lambda claim: wants[claim.queue] / claim.weight,
    )
    weights = sum(claim.weight for claim in hungry)
    for claim in hungry:
        fair = amount * claim.weight / weights
        given[claim.queue] = max(0.0, min(wants[claim.queue], fair))
        amount -= given[claim.queue]
        weights -= claim.weight
    return given


def levels(
    shares: Mapping[str, float], claims: Sequence[Claim], current: Mapping[str, int]
) -> dict[str, int]:
    """The ``MaximumConcurrency`` each share comes to: rounded down, then raised one by one
    while the calls stay within the shares, members already at the higher level first (a
    remainder that moves a little from batch to batch moves no mapping), then the largest
    remainders; within Cmin..Cmax."""
    raw = {claim.queue: shares[claim.queue] / claim.pace for claim in claims}
    chosen = {queue: math.floor(value) for queue, value in raw.items()}
    spare = sum(shares.values()) - sum(chosen[c.queue] * c.pace for c in claims)

    def order(claim: Claim) -> tuple[bool, float]:
        kept = current.get(claim.queue) == chosen[claim.queue] + 1
        return (not kept, chosen[claim.queue] - raw[claim.queue])

    for claim in sorted(claims, key=order):
        if claim.pace <= spare and raw[claim.queue] > chosen[claim.queue]:
            chosen[claim.queue] += 1
            spare -= claim.pace
    return {c.queue: max(c.cmin, min(c.cmax, chosen[c.queue])) for c in claims}
