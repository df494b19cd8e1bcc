"""One estimate per downstream: what the queues sharing it learn together (docs/algorithms.md,
"Groups: queues sharing one downstream").

The members' evidence is pooled second by second (invocation starts). A second in which the
group's calls were refused (at least ``REFUSED_SHARE`` of them) says what the downstream
accepted: its 2xx calls. The estimate is their mean over the complete seconds of the span (a
second is complete once every invocation that started in it has reported: ``LAG_S`` later);
outside a probe a reading above the estimate moves it half way, one below it whole while its
refusals are fresh (the newest second it measured is among the span's newest ``FRESH_S``),
else not at all: a span sliding past the end of the refusals keeps only their last seconds,
whose starts thinned after a cut and were refused beside the calls of the seconds before
them, so that their 2xx are what they sent, not what the downstream takes.
While no second is refused the estimate is held; the group raises it (a probe of the whole
downstream, not of each queue) only when its members want more than it allows, the span is
clean, and no probe is being judged. A probe passes once two seconds since it took more
than the members were given before it (``UTILISATION`` of the estimate), nothing refused
(the next may follow at once), or once its seconds are complete and clean; one that meets
refusals goes back to what the downstream took in them (at least where it began) and
doubles the wait before the next one (``PROBE_INTERVAL_S``), one that passes resets it.
Near the rate that last broke (``ceiling_rps``) a probe grows the estimate gently, far below
it fast; a probe that began at it or past it and passed expires it.

A group protecting a priority (members of more than one ``Priority`` with work) cannot wait
for complete seconds: every call the downstream refuses may be the priority queue's. It
learns a first estimate from the newest seconds' refusals (``Pooled.fresh_accepted_rps``),
a probe fails at the first second refused after it, and every probe is gentle.

Pure: the memory is a frozen record the caller keeps: the ledger's, which every container
reads before it decides the group and stores where it changed (``ControlLoop``), with a copy
in the warm container (``QueueBook``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from controller.window import WindowSnapshot

# Invocations that started this recently may not all have reported (their run, then the
# telemetry's delay): their seconds are judged for pressure only, never counted as complete.
LAG_S = 10.0
# The complete seconds an estimate, and each member's use, is measured on.
SPAN_S = 8.0
# A second is refused when this share of the group's calls in it were refused; two of them
# make the span unclean (one second's calls bunching is not a capacity).
REFUSED_SHARE = 0.02
REFUSED_SECONDS = 2
# A second refused this much says what the downstream accepts (one refused less may be the
# group cutting into the capacity, its 2xx calls fewer than the downstream takes).
MEASURED_SHARE = 0.10
# Outside a probe, a reading below the estimate lowers it only while the newest second it
# measured is among the complete span's newest this many seconds (the module says why).
FRESH_S = 3.0
# The wait between the group's probes: the first, and the longest after failed ones.
PROBE_INTERVAL_S = (10.0, 20.0)
# The longest wait after failed probes of a group protecting a priority: each failed probe
# refuses the priority queue's calls too.
PROTECTING_PROBE_INTERVAL_S = 60.0
# A probe's growth of the estimate: with no rate known to break, below the one that last
# broke (up to just under it), and near it.
FREE_GROWTH = 0.5
FAST_GROWTH = 0.25
GENTLE_GROWTH = 0.05
UNDER_CEILING = 0.97
# The group probes only while it sends this share of its estimate (else the estimate does not
# bind: growing it would learn nothing).
USED_SHARE = 0.75
# Calls a second of the estimate the members are given: the rest absorbs calls bunching
# within a second (the downstream counts its capacity per second).
UTILISATION = 0.95
# A probe is judged once its level has run this long in complete seconds.
PROBE_JUDGED_AFTER_S = 3.0


@dataclass(frozen=True, slots=True)
class GroupMemory:
    """What the controller remembers of one group between batches (the ledger's MEMORY item).

    ``capacity_rps``: the estimate (``None``: nothing refused yet, so no estimate: each member
    is decided alone); ``ceiling_rps``: the group's calls a second when it was last refused
    (0: none, or a probe passed above it); the probe's pacing; and, per member, since when it
    runs or waits paused while the group time-shares (``controller.groups.shares``).
    """

    capacity_rps: float | None = None
    ceiling_rps: float = 0.0
    probe_interval_s: float = PROBE_INTERVAL_S[0]
    next_probe_at: float = 0.0
    # When the probe being judged raised the estimate (0: none), and from what.
    probed_at: float = 0.0
    probed_from: float = 0.0
    running_since: Mapping[str, float] = field(default_factory=dict)
    paused_since: Mapping[str, float] = field(default_factory=dict)
    # Per member resumed within its first slice, since when it waited before (the wait counts
    # on if the group takes the resume back).
    resumed_from: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Pooled:
    """The group's evidence, all members' seconds added up.

    ``accepted_rps``: the mean 2xx calls of the complete seconds refused enough to measure
    (``None``: fewer than ``REFUSED_SECONDS``); ``refused_sent_rps``: the calls sent in those
    seconds; ``sent_rps``: the calls a second over the complete span; ``clean``: no second of
    the complete span was refused; ``pressed``: the seconds too recent to be complete already
    show refusals; ``took_rps``: the mean 2xx calls of the refused complete seconds, however
    little refused (0: none), what a probe that met refusals found the downstream takes;
    ``peak_ok_rps``: the 2xx calls that two seconds since the probe being judged reached,
    complete or not (0: no probe); ``fresh_accepted_rps``: the complete span's calls a second
    times the share accepted in the lower half of the newest seconds refused enough to measure
    (``None``: fewer than ``REFUSED_SECONDS``), what the downstream takes if the group still
    sends as it did (those seconds' reports are not all in, but the share accepted needs none
    missing); ``last_refused_at``: the newest second with ``REFUSED_SHARE`` of its calls
    refused (0: none in the span); ``measured_until``: the newest complete second refused
    enough to measure (0: none).
    """

    accepted_rps: float | None
    refused_sent_rps: float
    sent_rps: float
    clean: bool
    pressed: bool
    took_rps: float = 0.0
    peak_ok_rps: float = 0.0
    fresh_accepted_rps: float | None = None
    last_refused_at: float = 0.0
    measured_until: float = 0.0


def pooled(windows: Iterable[WindowSnapshot], now: float, probed_at: float = 0.0) -> Pooled:
    """The members' ``windows`` added up second by second, as of ``now``; ``probed_at``:
    when the probe being judged began (0: none)."""
    complete_from, recent_from = now - LAG_S - SPAN_S, now - LAG_S
    calls: dict[int, int] = {}
    ok: dict[int, int] = {}
    refused: dict[int, int] = {}
    for window in windows:
        for second, stats in window.buckets:
            if second < complete_from:
                continue
            calls[second] = calls.get(second, 0) + stats.requests
            ok[second] = ok.get(second, 0) + stats.ok
            refused[second] = refused.get(second, 0) + stats.pressure
    complete = [second for second in calls if second < recent_from]
    refused_at = {s for s in calls if refused[s] >= REFUSED_SHARE * calls[s] > 0}
    refused_seconds = [s for s in complete if s in refused_at]
    measured = [s for s in refused_seconds if refused[s] >= MEASURED_SHARE * calls[s]]
    recent = [second for second in calls if second >= recent_from]
    recent_calls = sum(calls[s] for s in recent)
    recent_refused = sum(refused[s] for s in recent)
    fresh = [s for s in recent if refused[s] >= MEASURED_SHARE * calls[s] > 0]
    sent = sum(calls[s] for s in complete) / SPAN_S
    fresh_accepted = None
    if len(fresh) >= REFUSED_SECONDS and sent > 0:
        # The lower half: a second of starts that met the refusals only late has more 2xx.
        lower = sorted(fresh, key=lambda s: ok[s] / calls[s])[: len(fresh) // 2]
        fresh_accepted = sent * sum(ok[s] for s in lower) / sum(calls[s] for s in lower)

    def upper(seconds: list[int]) -> list[int]:
        # The upper half: seconds of starts straddle the downstream's seconds, and one that
        # met a refused second late has fewer 2xx calls than the downstream takes.
        return sorted(seconds, key=lambda s: ok[s])[len(seconds) // 2 :]

    accepted = None
    refused_sent = 0.0
    if len(measured) >= REFUSED_SECONDS:
        top = upper(measured)
        accepted = sum(ok[s] for s in top) / len(top)
        refused_sent = sum(calls[s] for s in top) / len(top)
    took = upper(refused_seconds)
    # The 2xx calls two seconds since the probe reached (one second's bunching is no rise).
    risen = sorted((ok[s] for s in ok if s >= probed_at), reverse=True)[:REFUSED_SECONDS]
    return Pooled(
        accepted_rps=accepted,
        refused_sent_rps=refused_sent,
        sent_rps=sent,
        clean=len(refused_seconds) < REFUSED_SECONDS,
        pressed=recent_refused >= REFUSED_SHARE * recent_calls > 0,
        took_rps=sum(ok[s] for s in took) / len(took) if took else 0.0,
        peak_ok_rps=float(risen[-1]) if probed_at and len(risen) == REFUSED_SECONDS else 0.0,
        fresh_accepted_rps=fresh_accepted,
        last_refused_at=max(refused_at, default=0.0),
        measured_until=max(measured, default=0.0),
    )


def estimated(
    memory: GroupMemory,
    pool: Pooled,
    wanting: bool,
    step_rps: float,
    now: float,
    protecting: bool = False,
) -> GroupMemory:
    """The group's memory after this batch's evidence: the estimate measured where the
    downstream refused, a probe judged where it did not, and grown where the members want
    more than it (``wanting``), use it, and it is time to probe; a probe grows it by
    ``step_rps`` at least (what one more member at its floor, or one more invocation, sends:
    less would change nothing). ``protecting`` a priority, the newest seconds' refusals
    already set a first estimate and fail a probe."""
    low, high = PROBE_INTERVAL_S
    if protecting:
        high = PROTECTING_PROBE_INTERVAL_S
    probing = memory.probed_at > 0
    failed = replace(
        memory,
        probe_interval_s=min(high, 2 * memory.probe_interval_s),
        next_probe_at=now + min(high, 2 * memory.probe_interval_s),
        probed_at=0.0,
    )
    if pool.accepted_rps is not None:
        after = failed if probing else replace(memory, next_probe_at=now + memory.probe_interval_s)
        measured = pool.accepted_rps
        if not probing and memory.capacity_rps is not None:
            # Outside a probe a higher reading is mostly the upper half picking seconds whose
            # bunched calls spilled into the next: it moves the estimate half way (a rise that
            # holds is reached within a few batches); a lower one is taken whole, unless the
            # refusals it read are over: then it reads their last seconds, and is no fall.
            measured = min(measured, (measured + memory.capacity_rps) / 2)
            if measured < memory.capacity_rps and pool.measured_until < now - LAG_S - FRESH_S:
                return after
        return replace(
            after,
            capacity_rps=measured,
            ceiling_rps=max(pool.refused_sent_rps, pool.accepted_rps),
        )
    estimate = memory.capacity_rps
    if protecting:
        if estimate is None and pool.pressed and pool.fresh_accepted_rps is not None:
            return replace(
                memory,
                capacity_rps=pool.fresh_accepted_rps,
                ceiling_rps=pool.sent_rps,
                next_probe_at=now + memory.probe_interval_s,
            )
        if probing and estimate is not None and pool.last_refused_at >= memory.probed_at:
            return replace(failed, capacity_rps=memory.probed_from, ceiling_rps=estimate)
    if estimate is None:
        return memory
    if not pool.clean:
        # Refused, but too little to measure: a probe that did this failed, and goes back to
        # what the downstream took in its refused seconds (at least where it began); else hold.
        if probing:
            back = min(estimate, max(memory.probed_from, pool.took_rps))
            return replace(failed, capacity_rps=back, ceiling_rps=estimate)
        return replace(memory, next_probe_at=max(memory.next_probe_at, now + low))
    if pool.pressed:
        return memory
    # Two seconds since the probe in which the downstream took more than the members were
    # given before it, and nothing refused since: the probe passed, and its use is shown.
    risen = probing and pool.peak_ok_rps > UTILISATION * memory.probed_from
    if probing:
        if not risen and now - memory.probed_at < LAG_S + PROBE_JUDGED_AFTER_S:
            return memory
        # Risen, or the probe's seconds complete and none refused: the raised estimate
        # holds, and the next probe may follow at once. A ceiling expires only under a probe
        # that began at it or past it: one that merely reached it shows the rate that broke,
        # read a little high (calls bunch within seconds), fits, not that more does.
        past_ceiling = memory.ceiling_rps and memory.probed_from >= memory.ceiling_rps
        memory = replace(
            memory,
            probed_at=0.0,
            probe_interval_s=low,
            next_probe_at=now,
            ceiling_rps=0.0 if past_ceiling else memory.ceiling_rps,
        )
    used = risen or pool.sent_rps >= USED_SHARE * estimate
    if not wanting or not used or now < memory.next_probe_at:
        return memory
    return replace(
        memory,
        capacity_rps=max(grown(estimate, memory.ceiling_rps, protecting), estimate + step_rps),
        probed_at=now,
        probed_from=estimate,
        next_probe_at=now + memory.probe_interval_s,
    )


def grown(estimate: float, ceiling: float, gently: bool = False) -> float:
    """A probe's estimate: half as much again with no rate known to break; a quarter more,
    but no further than just under the rate that last broke; past that gently, and always
    ``gently`` for a group protecting a priority (its every failed probe refuses the
    priority queue's calls too)."""
    gentle = estimate * (1.0 + GENTLE_GROWTH)
    if gently:
        return gentle
    if ceiling <= 0:
        return estimate * (1.0 + FREE_GROWTH)
    return max(gentle, min(estimate * (1.0 + FAST_GROWTH), ceiling * UNDER_CEILING))
