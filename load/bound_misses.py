"""Which family draws the queuemesh law misses the hindsight bound rule on, and why.

``python -m load.bound_misses --family throttling --seed 1001 --draws 200`` runs the law and
the bound on every draw the bound applies to and prints one line per draw where the law is
outside the rule (docs/simulator.md, "The family scorecard"): the capacity's shape, the
telemetry delay, the 5xx noise, the law's and the bound's wasted share and drain ratio, the
limit missed (waste, drain or both), and what the two runs say of the cause: how much later the
law drains (``lag_s``), how many messages it had left to do when the bound had drained
(``behind``), its cap against the bound's then, a cause read from when the law fell behind
(``load.bound_misses.cause``), and whether the two bounds that learn a rise later are
outside the rule on the draw too: ``hindsight-lagged``, a report later (``lagged``: ``out``;
then the telemetry round trip alone costs the draw, not the law's climb), and
``hindsight-climbing``, by doubling a level a round trip from there (``climbing``: ``out``;
then a law that climbs as it learns misses the draw however well it climbs). Then the misses
by shape, by limit and by cause, and each of those bounds' count within the rule.

A draw is one realization of its scenario: its seed draws the 5xx noise, the order the queue
hands messages out and the telemetry delays, call after call, so two policies' runs meet other
luck once their calls part. ``--realizations K`` runs the law and the bound again on each
draw with the scenario's seed moved by 1..K (every drawn parameter kept) and says, per miss,
on how many of them the law misses again (``again``), and in all how many draws the law
misses on every realization and how often the bound under other dice falls outside the rule
judged against its own first run: the share of the verdicts that is chance. The runs are
``queuemesh simulate --family``'s own, so the count within the rule is the scorecard's
``draws_within_bound_rule``. Runs go to a pool of two processes, as that command's do.
"""

from __future__ import annotations

import dataclasses
import sys
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Any

from load.arguments import draw_parser, parse_draws
from load.dead_letters import shape
from load.scorecard import bound_limits_missed, scorecard
from load.sim.engine import simulate
from load.sim.families import draw_scenario
from load.sim.policies import ClimbingHindsightPolicy, HindsightPolicy, LaggedHindsightPolicy
from load.sim.scenario import Scenario, Schedule
from load.sim.trace import summed_per_second
from load.simulate import SEED_WORKERS, make_policy

# The bounds that learn a rise later than ``hindsight``: each one's column and summary words.
LATER_BOUNDS = {
    LaggedHindsightPolicy.name: ("lagged", "the bound a report late on rises"),
    ClimbingHindsightPolicy.name: ("climbing", "the bound that learns a rise by doubling"),
}
LATER_COLUMNS = tuple(column for column, _ in LATER_BOUNDS.values())
# Each bounded draw's runs: the law, the bound, and the bounds that learn a rise later.
COMPARED_POLICIES = ("queuemesh", HindsightPolicy.name, *LATER_BOUNDS)
# A law behind the bound by fewer messages than this when the bound has drained is a tail: its
# last refusals and noise failures come back a visibility timeout later, in both runs alike.
TAIL_MESSAGES = 500
# At most this many other realizations a draw: each costs two more runs of every bounded draw.
MAX_REALIZATIONS = 5


@dataclass(frozen=True, slots=True)
class Run:
    """What one (draw, policy) run leaves for the classification: its totals, its 2xx calls per
    second (every queue's), its first queue's cap per second, and its first downstream's
    capacity schedule."""

    totals: dict[str, Any]
    ok_per_s: tuple[int, ...]
    cap_per_s: tuple[int, ...]
    capacity: Schedule


def realization(family: str, seed: int, draw: int, shift: int) -> Scenario:
    """The draw's scenario with its own seed moved by ``shift`` (0: the draw as the family
    scorecard runs it): the same parameters, other dice."""
    scenario = draw_scenario(family, seed, draw)
    return replace(scenario, seed=scenario.seed + shift) if shift else scenario


def run(job: tuple[str, int, int, str, int]) -> Run:
    """One (family, seed, draw, policy, realization) run; realization 0 as ``queuemesh
    simulate --family`` runs it."""
    family, seed, draw, policy, shift = job
    scenario = realization(family, seed, draw, shift)
    result = simulate(scenario, make_policy(policy, "adaptive"))
    traces = list(result.queues.values())
    return Run(
        scorecard(result)["totals"],
        tuple(summed_per_second(trace.ok_per_s for trace in traces)),
        tuple(traces[0].cap_per_s),
        scenario.downstreams[0].capacity_rps,
    )


def cause(law: Run, bound: Run) -> dict[str, Any]:
    """Where the law's drain lags the bound's, read from the two runs' 2xx calls per second.

    ``behind``: the messages the law had still to do when the bound had drained; ``cause``:
    ``tail`` when that is under ``TAIL_MESSAGES``, else ``slow climb`` when most of it was lost
    after the capacity's first return (its first rise after a fall), else ``before return``
    (cuts landing low, or no return at all); ``-`` when the bound never drained.
    """
    end = bound.totals["drain_s"]
    law_drain = law.totals["drain_s"]
    lag = None if end is None or law_drain is None else round(law_drain - end, 1)
    if end is None:
        return {"lag_s": lag, "behind": None, "caps": "-", "cause": "-"}
    last = int(end)
    law_done = list(accumulate(law.ok_per_s))
    bound_done = list(accumulate(bound.ok_per_s))

    def gap(second: int) -> int:
        return _at(bound_done, second) - _at(law_done, second)

    behind = gap(last)
    returned = next(
        (
            at
            for (at, rate), (_, before) in zip(law.capacity[1:], law.capacity, strict=False)
            if rate > before and at < end
        ),
        None,
    )
    if behind < TAIL_MESSAGES:
        why = "tail"
    elif returned is not None and behind - gap(int(returned)) > behind / 2:
        why = "slow climb"
    else:
        why = "before return"
    caps = f"{_at(law.cap_per_s, last)}/{_at(bound.cap_per_s, last)}"
    return {"lag_s": lag, "behind": behind, "caps": caps, "cause": why}


def _at(series: Sequence[int], second: int) -> int:
    """A per-second series' value at ``second`` (its last value past its end; 0 when empty)."""
    return series[min(second, len(series) - 1)] if series else 0


@dataclass(frozen=True, slots=True)
class Misses:
    """How many of a family's draws the bound applies to (``bounded``), on how many of them each
    bound that learns a rise later is within the rule (``later_within``, by its column name),
    and a row per draw where the law is outside it."""

    bounded: int
    later_within: dict[str, int]
    rows: list[dict[str, Any]]
    # With other realizations (``classify``'s ``realizations``), per realization 1..K: the
    # draws the law is within the rule on, and those the bound is outside it on, judged against
    # its own first run; and the draws the law misses on every realization, the first too.
    law_within_again: list[int] = dataclasses.field(default_factory=list)
    bound_outside_again: list[int] = dataclasses.field(default_factory=list)
    missed_on_every: int = 0


def classify(family: str, seed: int, draws: int, realizations: int = 0) -> Misses:
    """The law's and the later bounds' standing against the bound rule on ``family``'s draws
    1..``draws`` that the bound applies to, and where ``realizations`` (K), the law's and the
    bound's on the draws' other realizations 1..K."""
    bounded = [
        draw
        for draw in range(1, draws + 1)
        if HindsightPolicy.knows(draw_scenario(family, seed, draw))
    ]
    law_name, bound_name = COMPARED_POLICIES[:2]
    shifts = range(1, realizations + 1)
    jobs = [(family, seed, draw, policy, 0) for draw in bounded for policy in COMPARED_POLICIES]
    jobs += [
        (family, seed, draw, policy, shift)
        for shift in shifts
        for draw in bounded
        for policy in (law_name, bound_name)
    ]
    with ProcessPoolExecutor(max_workers=SEED_WORKERS) as pool:
        runs = dict(zip(jobs, pool.map(run, jobs), strict=True))

    def missed(
        policy: str, draw: int, shift: int = 0, bound_shift: int | None = None
    ) -> tuple[str, ...]:
        """The limits ``policy`` misses on the draw's realization ``shift``, judged against the
        bound on realization ``bound_shift`` (the same one where ``None``)."""
        bound = runs[
            (family, seed, draw, bound_name, shift if bound_shift is None else bound_shift)
        ]
        return bound_limits_missed(runs[(family, seed, draw, policy, shift)].totals, bound.totals)

    rows = []
    for draw in bounded:
        limits = missed(law_name, draw)
        if not limits:
            continue
        law, bound = (
            runs[(family, seed, draw, law_name, 0)],
            runs[(family, seed, draw, bound_name, 0)],
        )
        described = shape(family, seed, draw)
        rows.append(
            {
                "draw": draw,
                "shape": described["shape"],
                "delay_s": described["delay_s"],
                "noise": described["noise"],
                "wasted": law.totals["wasted_ratio"],
                "bound_wasted": bound.totals["wasted_ratio"],
                "drain": law.totals["drain_ratio"],
                "bound_drain": bound.totals["drain_ratio"],
                "missed": "both" if len(limits) == 2 else limits[0],
                **cause(law, bound),
                **{
                    column: "out" if missed(later, draw) else "in"
                    for later, (column, _) in LATER_BOUNDS.items()
                },
                "again": (
                    sum(bool(missed(law_name, draw, shift)) for shift in shifts)
                    if realizations
                    else None
                ),
            }
        )
    return Misses(
        len(bounded),
        {
            column: sum(not missed(later, draw) for draw in bounded)
            for later, (column, _) in LATER_BOUNDS.items()
        },
        rows,
        law_within_again=[
            sum(not missed(law_name, draw, shift) for draw in bounded) for shift in shifts
        ],
        bound_outside_again=[
            sum(bool(missed(bound_name, draw, shift, bound_shift=0)) for draw in bounded)
            for shift in shifts
        ],
        missed_on_every=sum(row["again"] == realizations for row in rows if realizations),
    )


def render(rows: Sequence[dict[str, Any]]) -> str:
    head = (
        f"{'draw':>4} {'shape':<12} {'delay_s':>11} {'noise':>6} {'wasted':>6} {'bound':>6} "
        f"{'drain':>6} {'bound':>6} {'misses':<6} {'lag_s':>6} {'behind':>6} {'caps':>7} "
        f"{'cause':<13} {' '.join(LATER_COLUMNS)} again"
    )
    lines = [head]
    for row in rows:
        delay = "-".join(f"{value:g}" for value in row["delay_s"])
        lines.append(
            f"{row['draw']:>4} {row['shape']:<12} {delay:>11} {row['noise']:>6.3f} "
            f"{row['wasted']:>6.3f} {row['bound_wasted']:>6.3f} {_ratio(row['drain']):>6} "
            f"{_ratio(row['bound_drain']):>6} {row['missed']:<6} {_number(row['lag_s']):>6} "
            f"{_number(row['behind']):>6} {row['caps']:>7} {row['cause']:<13} "
            f"{' '.join(f'{row[column]:<{len(column)}}' for column in LATER_COLUMNS)} "
            f"{_number(row['again'])}"
        )
    return "\n".join(lines)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def summary(misses: Misses) -> str:
    """The count within the rule (the scorecard's), then the misses by shape (and limit), by
    limit and by cause (the drain misses'), then each later bound's count within the rule."""
    bounded, rows = misses.bounded, misses.rows

    def counted(values: Sequence[str]) -> str:
        return ", ".join(f"{name} {count}" for name, count in sorted(Counter(values).items()))

    shapes = sorted({row["shape"] for row in rows})
    return "\n".join(
        [
            f"within the rule: {bounded - len(rows)} of {bounded} draws the bound applies to",
            "by shape: "
            + "; ".join(
                f"{name} {sum(row['shape'] == name for row in rows)} "
                f"({counted([row['missed'] for row in rows if row['shape'] == name])})"
                for name in shapes
            ),
            f"by limit: {counted([row['missed'] for row in rows])}",
            f"by cause (drain alone): "
            f"{counted([row['cause'] for row in rows if row['missed'] == 'drain'])}",
            *(
                f"{words} ({later}) within the rule: {misses.later_within[column]} of {bounded}; "
                f"outside it on {sum(row[column] == 'out' for row in rows)} of the law's "
                f"{len(rows)} misses"
                for later, (column, words) in LATER_BOUNDS.items()
            ),
            *_realizations(misses),
        ]
    )


def _realizations(misses: Misses) -> list[str]:
    """The summary's lines on the other realizations (none where there were none)."""
    count = len(misses.law_within_again)
    if not count:
        return []
    return [
        f"under {count} other realization{'s' if count > 1 else ''} of each draw (its "
        f"scenario's seed {'+1' if count == 1 else f'+1..+{count}'}): the law within the rule on "
        f"{', '.join(map(str, misses.law_within_again))}; outside it on every realization on "
        f"{misses.missed_on_every} draws; the bound outside the rule judged against its own "
        f"first run on {', '.join(map(str, misses.bound_outside_again))}"
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = draw_parser("load.bound_misses", __doc__, family="throttling", seed=1001, draws=200)
    parser.add_argument(
        "--realizations",
        type=int,
        default=0,
        help=f"0 to {MAX_REALIZATIONS}: other realizations of each draw to rerun (default 0)",
    )
    args = parse_draws(parser, argv)
    if not 0 <= args.realizations <= MAX_REALIZATIONS:
        parser.error(
            f"--realizations {args.realizations}: give 0 to {MAX_REALIZATIONS} other realizations"
        )
    misses = classify(args.family, args.seed, args.draws, args.realizations)
    print(
        f"family {args.family}, seed {args.seed}, draws 1-{args.draws}: {len(misses.rows)} of "
        f"the {misses.bounded} draws the bound applies to outside the bound rule under queuemesh"
    )
    print(render(misses.rows))
    print(summary(misses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
