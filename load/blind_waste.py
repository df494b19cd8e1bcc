"""How much of a family's waste no law that reacts to telemetry can avoid.

``python -m load.blind_waste --family mixed --seed 101 --draws 100`` runs the queuemesh law on
every draw and splits each draw's wasted share (calls refused or timed out over calls made, the
scorecard's ``wasted_ratio``) in two: the **blind** part, refused in the seconds after a change
that can hurt (the run's start at the mapping's cap, a fall of capacity, a rise of latency,
or its fall on an API that refuses) before any report of it can reach the controller, and the
rest. ``load.waste_split`` splits the rest further, by phase. Issue 29's waste targets are
family means; where the blind part's mean is near a target, no reacting law meets it, however
fast it cuts. Runs go to a pool of two processes, as ``queuemesh simulate --family`` does.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from load.arguments import draw_parser, parse_draws
from load.sim.engine import simulate
from load.sim.families import draw_scenario
from load.sim.scenario import DownstreamSpec, Scenario, Schedule
from load.simulate import SEED_WORKERS, make_policy


@dataclass(frozen=True, slots=True)
class DrawWaste:
    """One draw's calls under the law: made, wasted, and wasted in its blind seconds."""

    draw: int
    description: str
    calls: int
    wasted: int
    blind: int

    @property
    def wasted_share(self) -> float:
        return self.wasted / self.calls if self.calls else 0.0

    @property
    def blind_share(self) -> float:
        return self.blind / self.calls if self.calls else 0.0


def _changes(schedule: Schedule, worse: int) -> list[float]:
    """When ``schedule`` steps the way that hurts (``worse``: -1 a fall, +1 a rise)."""
    return [
        at
        for (_, before), (at, after) in itertools.pairwise(schedule)
        if (after - before) * worse > 0
    ]


def hurting_changes(downstream: DownstreamSpec) -> list[float]:
    """When ``downstream`` changes the way that can hurt a level that fitted: its capacity
    falls, its latency rises, or, on an API that refuses calls over its capacity, its latency
    falls (each invocation at an unchanged level then calls faster: mixed seed 100 draw 89,
    34 invocations fitted a slowdown's 1,060 ms, and its end at 319 ms refused 39% of their
    calls)."""
    changes = _changes(downstream.capacity_rps, -1) + _changes(downstream.latency_ms, +1)
    if downstream.answers_429:
        changes += _changes(downstream.latency_ms, -1)
    return sorted(changes)


def blind_seconds(scenario: Scenario) -> frozenset[int]:
    """The whole seconds in which the controller cannot yet know of a change that hurts
    (``hurting_changes``, and the run's start at the mapping's cap): from the change to the
    end of the second its first report arrives in (a document covers a whole second and
    travels at least the shortest telemetry delay), plus the Kinesis batch window it waits
    in."""
    changes = {0.0}
    for downstream in scenario.downstreams:
        changes.update(hurting_changes(downstream))
    known_after = 1.0 + scenario.telemetry_delay_s[0] + scenario.kinesis_batch_window_s
    return frozenset(
        second for at in changes for second in range(int(at), math.ceil(at + known_after))
    )


def draw_waste(job: tuple[str, int, int]) -> DrawWaste:
    """One (family, seed, draw) under the law: its calls, waste and blind waste."""
    family, seed, draw = job
    scenario = draw_scenario(family, seed, draw)
    result = simulate(scenario, make_policy("queuemesh", "adaptive"))
    blind = blind_seconds(scenario)
    traces = result.queues.values()
    return DrawWaste(
        draw,
        scenario.description,
        sum(trace.calls_total for trace in traces),
        sum(trace.calls_rejected for trace in traces),
        sum(
            refused
            for trace in traces
            for second, refused in enumerate(trace.rejected_per_s)
            if second in blind
        ),
    )


def render(family: str, seed: int, rows: Sequence[DrawWaste], most: int = 10) -> str:
    wasted = sum(row.wasted_share for row in rows) / len(rows)
    blind = sum(row.blind_share for row in rows) / len(rows)
    lines = [
        f"family {family}, seed {seed}, draws 1-{len(rows)}, queuemesh: mean wasted "
        f"{wasted:.4f} = blind {blind:.4f} + the rest {wasted - blind:.4f}",
        f"the {most} draws wasting most outside their blind seconds (draw: wasted / blind):",
    ]
    for row in sorted(rows, key=lambda r: r.blind_share - r.wasted_share)[:most]:
        lines.append(
            f"  {row.draw:4d}: {row.wasted_share:.3f} / {row.blind_share:.3f}  {row.description}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = draw_parser("load.blind_waste", __doc__, family="mixed", seed=101, draws=100)
    args = parse_draws(parser, argv)
    jobs = [(args.family, args.seed, draw) for draw in range(1, args.draws + 1)]
    with ProcessPoolExecutor(max_workers=SEED_WORKERS) as pool:
        rows = list(pool.map(draw_waste, jobs))
    print(render(args.family, args.seed, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
