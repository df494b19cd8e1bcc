"""Which family draws the queuemesh law misses the hindsight bound rule on, and why.

``python -m load.bound_misses --family throttling --seed 1001 --draws 200`` runs the law and
the bound on every draw the bound applies to and prints one line per draw where the law is
outside the rule (docs/simulator.md, "The family scorecard"): the capacity's shape, the
telemetry delay, the 5xx noise, the law's and the bound's wasted share and drain ratio, the
limit missed (waste, drain or both), and what the two runs say of the cause: how much later the
law drains (``lag_s``), how many messages it had left to do when the bound had drained
(``behind``), its cap against the bound's then, a cause read from when the law fell behind
(``load.bound_misses.cause``), and whether the bound that learns a rise only a report later
(``hindsight-lagged``) is outside the rule on the draw too (``lagged``: ``out``; then the
telemetry round trip alone costs the draw, not the law's climb). Then the misses by shape, by
limit and by cause, and the lagged bound's count within the rule. The runs are
``queuemesh simulate --family``'s own, so the count within the rule is the scorecard's
``draws_within_bound_rule``. Runs go to a pool of two processes, as that command's do.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from load.arguments import draw_parser, parse_draws
from load.dead_letters import shape
from load.scorecard import bound_limits_missed, scorecard
from load.sim.engine import simulate
from load.sim.families import draw_scenario
from load.sim.policies import HindsightPolicy, LaggedHindsightPolicy
from load.sim.scenario import Schedule
from load.simulate import SEED_WORKERS, make_policy

# Each bounded draw's runs: the law, the bound, and the bound that learns a rise a report later.
COMPARED_POLICIES = ("queuemesh", HindsightPolicy.name, LaggedHindsightPolicy.name)
# A law behind the bound by fewer messages than this when the bound has drained is a tail: its
# last refusals and noise failures come back a visibility timeout later, in both runs alike.
TAIL_MESSAGES = 500


@dataclass(frozen=True, slots=True)
class Run:
    """What one (draw, policy) run leaves for the classification: its totals, its 2xx calls per
    second (every queue's), its first queue's cap per second, and its first downstream's
    capacity schedule."""

    totals: dict[str, Any]
    ok_per_s: tuple[int, ...]
    cap_per_s: tuple[int, ...]
    capacity: Schedule


def run(job: tuple[str, int, int, str]) -> Run:
    """One (family, seed, draw, policy) run, as ``queuemesh simulate --family`` runs it."""
    family, seed, draw, policy = job
    scenario = draw_scenario(family, seed, draw)
    result = simulate(scenario, make_policy(policy, "adaptive"))
    traces = list(result.queues.values())
    seconds = max(len(trace.ok_per_s) for trace in traces)
    ok = tuple(
        sum(trace.ok_per_s[second] for trace in traces if second < len(trace.ok_per_s))
        for second in range(seconds)
    )
    return Run(
        scorecard(result)["totals"],
        ok,
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
    """How many of a family's draws the bound applies to (``bounded``), on how many of them the
    lagged bound is within the rule, and a row per draw where the law is outside it."""

    bounded: int
    lagged_within: int
    rows: list[dict[str, Any]]


def classify(family: str, seed: int, draws: int) -> Misses:
    """The law's and the lagged bound's standing against the bound rule on ``family``'s draws
    1..``draws`` that the bound applies to."""
    bounded = [
        draw
        for draw in range(1, draws + 1)
        if HindsightPolicy.knows(draw_scenario(family, seed, draw))
    ]
    jobs = [(family, seed, draw, policy) for draw in bounded for policy in COMPARED_POLICIES]
    with ProcessPoolExecutor(max_workers=SEED_WORKERS) as pool:
        runs = dict(zip(jobs, pool.map(run, jobs), strict=True))
    rows = []
    lagged_within = 0
    for draw in bounded:
        law, bound, lagged = (runs[(family, seed, draw, policy)] for policy in COMPARED_POLICIES)
        lagged_missed = bool(bound_limits_missed(lagged.totals, bound.totals))
        lagged_within += not lagged_missed
        missed = bound_limits_missed(law.totals, bound.totals)
        if not missed:
            continue
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
                "missed": "both" if len(missed) == 2 else missed[0],
                **cause(law, bound),
                "lagged": "out" if lagged_missed else "in",
            }
        )
    return Misses(len(bounded), lagged_within, rows)


def render(rows: Sequence[dict[str, Any]]) -> str:
    head = (
        f"{'draw':>4} {'shape':<12} {'delay_s':>11} {'noise':>6} {'wasted':>6} {'bound':>6} "
        f"{'drain':>6} {'bound':>6} {'misses':<6} {'lag_s':>6} {'behind':>6} {'caps':>7} "
        f"{'cause':<13} lagged"
    )
    lines = [head]
    for row in rows:
        delay = "-".join(f"{value:g}" for value in row["delay_s"])
        lines.append(
            f"{row['draw']:>4} {row['shape']:<12} {delay:>11} {row['noise']:>6.3f} "
            f"{row['wasted']:>6.3f} {row['bound_wasted']:>6.3f} {_ratio(row['drain']):>6} "
            f"{_ratio(row['bound_drain']):>6} {row['missed']:<6} {_number(row['lag_s']):>6} "
            f"{_number(row['behind']):>6} {row['caps']:>7} {row['cause']:<13} {row['lagged']}"
        )
    return "\n".join(lines)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def summary(misses: Misses) -> str:
    """The count within the rule (the scorecard's), then the misses by shape (and limit), by
    limit and by cause (the drain misses'), then the lagged bound's count within the rule."""
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
            f"the bound a report late on rises (hindsight-lagged) within the rule: "
            f"{misses.lagged_within} of {bounded}; outside it on "
            f"{sum(row['lagged'] == 'out' for row in rows)} of the law's {len(rows)} misses",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = draw_parser("load.bound_misses", __doc__, family="throttling", seed=1001, draws=200)
    args = parse_draws(parser, argv)
    misses = classify(args.family, args.seed, args.draws)
    print(
        f"family {args.family}, seed {args.seed}, draws 1-{args.draws}: {len(misses.rows)} of "
        f"the {misses.bounded} draws the bound applies to outside the bound rule under queuemesh"
    )
    print(render(misses.rows))
    print(summary(misses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
