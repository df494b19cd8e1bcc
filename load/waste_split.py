"""Where a family's waste comes from: refused or timed out, by draw shape and by phase.

``python -m load.waste_split --family mixed --seed 100 --draws 100`` runs a policy (the
queuemesh law unless ``--policy`` names another) on every draw and classifies each wasted call
(refused, or timed out) by the invocation that made it: when it started against the draw's
changes that hurt and the policy's own decisions (the ledger's audit trail, the mapping's cap
each second). The phases, first match wins:

- ``blind``: in a blind second (``load.blind_waste.blind_seconds``): no report of the change
  can have reached the controller yet.
- ``unseen`` / ``seen``: after that, but before the policy's first cut since the change; no
  report of a wasted call had arrived since it yet (an invocation of timeouts reports only
  when its last call gave up, a report can take the draw's longest delay), or one had
  (``seen``: the reaction).
- ``no level`` (timeouts only): the downstream's own latency was at or past the client's
  timeout then: every level times out, only a pause avoids them.
- ``at Cmin``: the mapping at Cmin (a test of Cmin after a pause, or cut to the floor).
- ``raised``: the policy's last change before it raised the level (growth, a probe, whose
  pulse's end back to the level it probed from counts as the probe's, a cut corrected up, a
  resume).
- ``held``: its last change cut the level, which still does not fit.

A policy with no ledger (``static``) makes no cut: all it wastes after the blind seconds is
``unseen`` or ``seen``. Runs go to a pool of two processes, as ``queuemesh simulate --family``
does.
"""

from __future__ import annotations

import bisect
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from controller.model import Action, AuditEntry
from load.arguments import draw_parser, parse_draws
from load.blind_waste import blind_seconds, hurting_changes
from load.sim.engine import SIM_EPOCH, simulate
from load.sim.families import draw_scenario
from load.sim.policies import QueueMeshPolicy
from load.sim.scenario import value_at
from load.simulate import POLICY_NAMES, SEED_WORKERS, make_policy

PHASES = ("blind", "unseen", "seen", "no level", "at Cmin", "raised", "held")
REFUSED, TIMED_OUT = 0, 1


@dataclass(frozen=True, slots=True)
class DrawSplit:
    """One draw's calls and its wasted calls by (phase, kind): kind 0 refused, 1 timed out."""

    draw: int
    description: str
    latency_model: str
    calls: int
    wasted: dict[tuple[str, int], int]

    def share(self, phase: str | None = None, kind: int | None = None) -> float:
        """The wasted calls of ``phase`` and ``kind`` (``None``: any) over the draw's calls."""
        if not self.calls:
            return 0.0
        picked = sum(
            count
            for (one, how), count in self.wasted.items()
            if phase in (None, one) and kind in (None, how)
        )
        return picked / self.calls

    @property
    def shape(self) -> str:
        """The draw's description up to its first comma (``mixed: drop capacity``), and its
        first downstream's latency model."""
        return f"{self.description.split(',')[0]} ({self.latency_model})"


def level_changes(trail: Sequence[AuditEntry]) -> list[tuple[float, bool]]:
    """A queue's changes of level in its audit trail, oldest first, as (virtual second,
    raised): a pause is a cut and a resume a raise; a pulse's end is its probe's, neither a
    cut nor a raise of its own."""
    return sorted(
        (
            entry.timestamp - SIM_EPOCH,
            entry.new_value > entry.previous_value or entry.action == Action.RESUME,
        )
        for entry in trail
        if entry.action != Action.PROBE_END
        and (
            entry.new_value != entry.previous_value or entry.action in (Action.PAUSE, Action.RESUME)
        )
    )


def draw_split(job: tuple[str, int, int, str]) -> DrawSplit:
    """One (family, seed, draw, policy) run, its wasted calls classified."""
    family, seed, draw, name = job
    scenario = draw_scenario(family, seed, draw)
    policy = make_policy(name, "adaptive")
    result = simulate(scenario, policy)
    blind = blind_seconds(scenario)
    specs = {spec.name: spec for spec in scenario.queues}
    downstreams = {spec.name: spec for spec in scenario.downstreams}
    changes = {
        name: sorted({0.0, *hurting_changes(downstream)})
        for name, downstream in downstreams.items()
    }
    moves = {
        queue: level_changes(
            policy.ledger.audit_trail(queue) if isinstance(policy, QueueMeshPolicy) else []
        )
        for queue in specs
    }
    reported = defaultdict(list)
    for delivery in result.telemetry:
        if delivery.sample.throttled or delivery.sample.timed_out:
            reported[delivery.sample.queue].append(delivery.arrival)
    for arrivals in reported.values():
        arrivals.sort()
    wasted: Counter[tuple[str, int]] = Counter()
    for delivery in result.telemetry:
        sample = delivery.sample
        if not (sample.throttled or sample.timed_out):
            continue
        spec, trace = specs[sample.queue], result.queues[sample.queue]
        downstream = downstreams[spec.downstream]
        ended = sample.event_time - SIM_EPOCH
        started = ended - (sample.invocation_ms or 0.0) / 1000.0
        started -= spec.invocation_overhead_ms / 1000.0
        second = max(0, int(started))
        changed = changes[spec.downstream][
            bisect.bisect_right(changes[spec.downstream], started) - 1
        ]
        queue_moves = moves[sample.queue]
        before = queue_moves[: bisect.bisect_right(queue_moves, (started, True))]
        cut_since = any(not raised for at, raised in before if at > changed)
        arrivals = reported[sample.queue]
        newest = bisect.bisect_right(arrivals, started)
        seen = newest > 0 and arrivals[newest - 1] > changed
        cap = trace.cap_per_s[min(second, len(trace.cap_per_s) - 1)]
        timeout_s = None if spec.timeout_ms is None else spec.timeout_ms / 1000.0
        for kind, count in ((REFUSED, sample.throttled), (TIMED_OUT, sample.timed_out)):
            if not count:
                continue
            if second in blind:
                phase = "blind"
            elif (
                kind == TIMED_OUT
                and timeout_s is not None
                and value_at(downstream.latency_ms, started) / 1000.0 >= timeout_s
            ):
                phase = "no level"
            elif not cut_since:
                phase = "seen" if seen else "unseen"
            elif cap <= spec.min_concurrency:
                phase = "at Cmin"
            else:
                phase = "raised" if before and before[-1][1] else "held"
            wasted[phase, kind] += count
    return DrawSplit(
        draw,
        scenario.description,
        scenario.downstreams[0].latency_model,
        sum(trace.calls_total for trace in result.queues.values()),
        dict(wasted),
    )


def render(family: str, seed: int, policy: str, rows: Sequence[DrawSplit], most: int = 10) -> str:
    """The mean wasted share split by kind and phase, then by shape, then the draws wasting
    most after their blind seconds."""
    count = len(rows)

    def mean(
        phase: str | None = None, kind: int | None = None, among: Sequence[DrawSplit] = rows
    ) -> float:
        return sum(row.share(phase, kind) for row in among) / count

    lines = [
        f"family {family}, seed {seed}, draws 1-{count}, {policy}: mean wasted {mean():.4f} = "
        f"refused {mean(kind=REFUSED):.4f} + timed out {mean(kind=TIMED_OUT):.4f}",
        "phase      refused  timed out",
    ]
    lines += [
        f"{phase:9s} {mean(phase, REFUSED):8.4f} {mean(phase, TIMED_OUT):10.4f}" for phase in PHASES
    ]
    shapes: dict[str, list[DrawSplit]] = defaultdict(list)
    for row in rows:
        shapes[row.shape].append(row)
    lines.append("by shape (its draws' part of the mean): draws, wasted, " + ", ".join(PHASES))
    for shape, among in sorted(shapes.items()):
        parts = " ".join(f"{mean(phase, among=among):.4f}" for phase in PHASES)
        lines.append(f"  {shape:40s} {len(among):3d} {mean(among=among):.4f}  {parts}")
    lines.append(f"the {most} draws wasting most after their blind seconds (draw: wasted / blind):")
    for row in sorted(rows, key=lambda r: r.share("blind") - r.share())[:most]:
        lines.append(
            f"  {row.draw:4d}: {row.share():.3f} / {row.share('blind'):.3f}  {row.description}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = draw_parser("load.waste_split", __doc__, family="mixed", seed=101, draws=100)
    parser.add_argument("--policy", default="queuemesh", choices=POLICY_NAMES)
    args = parse_draws(parser, argv)
    jobs = [(args.family, args.seed, draw, args.policy) for draw in range(1, args.draws + 1)]
    with ProcessPoolExecutor(max_workers=SEED_WORKERS) as pool:
        rows = list(pool.map(draw_split, jobs))
    print(render(args.family, args.seed, args.policy, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
