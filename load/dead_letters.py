"""Which family draws dead-letter messages under the queuemesh law, and who else loses them.

``python -m load.dead_letters --family throttling --seed 7 --draws 60`` runs the law on every
draw, then ``static``, the hindsight bound (where it applies) and the peers on the draws where
the law dead-lettered any message, and prints one line per such draw: its shape, what makes a
message run out of receives (batch, visibility timeout, ``maxReceiveCount``, telemetry delay,
5xx noise, the lowest capacity over what Cmin invocations send), when the law's dead letters
went and at which levels, and how many each other policy lost on the same draw. A draw the
bound or every policy dead-letters too is out of any law's reach as the target is worded.
Runs go to a pool of two processes, as ``queuemesh simulate --family`` does.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from load.arguments import draw_parser, parse_draws
from load.sim.draw_parts import MIN_CONCURRENCY, calls_sent
from load.sim.engine import simulate
from load.sim.families import draw_document, draw_scenario
from load.sim.policies import HindsightPolicy
from load.sim.scenario import Scenario
from load.sim.trace import SimResult
from load.simulate import PEER_POLICIES, SEED_WORKERS, make_policy

# The dead letters 5xx noise alone expects from which a draw is likely to lose a message
# whatever the policy: a one-in-ten chance of at least one (1 - e^-0.1).
NOISE_LIKELY = 0.1


@dataclass(frozen=True, slots=True)
class DeadLetters:
    """One run's dead letters: each message's (virtual second, the mapping's cap then), and
    how many 5xx noise alone would dead-letter (``noise_alone``)."""

    policy: str
    events: tuple[tuple[float, int], ...]
    noise_alone: float

    @property
    def messages(self) -> int:
        return len(self.events)


def dead_letters(job: tuple[str, int, int, str, float | None]) -> DeadLetters:
    """One (family, seed, draw, policy, schedule) run's dead letters, from each queue's trace;
    ``schedule``, where not ``None``, is the controller's scheduled run's period instead of
    the draw's."""

    family, seed, draw, policy, schedule = job
    scenario = draw_scenario(family, seed, draw)
    if schedule is not None:
        scenario = replace(scenario, controller_schedule_s=schedule)
    result = simulate(scenario, make_policy(policy, "adaptive"))
    events = sorted(
        (at, trace.cap_per_s[min(int(at), len(trace.cap_per_s) - 1)])
        for trace in result.queues.values()
        for at in trace.dead_lettered_at
    )
    return DeadLetters(policy, tuple(events), noise_alone(scenario, result))


def noise_alone(scenario: Scenario, result: SimResult) -> float:
    """The dead letters 5xx noise alone expects in a run: a message whose every receive's call
    fails on noise runs out of receives whatever the cap, so each queue's messages times its
    downstream's highest noise rate to the power of its ``maxReceiveCount``, summed."""
    expected = 0.0
    for spec in scenario.queues:
        noise = max(rate for _, rate in scenario.downstream(spec.downstream).noise_5xx_rate)
        expected += result.queues[spec.name].messages_total * noise**spec.max_receive_count
    return expected


def shape(family: str, seed: int, draw: int) -> dict[str, Any]:
    """What a draw is made of, as far as dead letters go (its first queue's settings)."""

    document = draw_document(family, seed, draw)
    downstream, queue = document["downstreams"][0], document["queues"][0]
    latency = downstream["latency_ms"]
    base_ms = latency if isinstance(latency, int | float) else latency[0][1]
    capacity = downstream["capacity_rps"]
    lowest = capacity if isinstance(capacity, int | float) else min(rate for _, rate in capacity)
    cmin_sends = sum(calls_sent(spec, base_ms, MIN_CONCURRENCY) for spec in document["queues"])
    return {
        "shape": next(
            part.split()[-2]
            for part in document["description"].split(", ")
            if part.endswith("capacity")
        ),
        "queues": len(document["queues"]),
        "batch": queue["batch_size"],
        "visibility_s": queue["visibility_timeout_s"],
        "receives": queue["max_receive_count"],
        "delay_s": document["telemetry_delay_s"],
        "noise": downstream.get("noise_5xx_rate", 0.0),
        "floor": lowest / cmin_sends,
    }


def classify(
    family: str, seed: int, draws: int, peers: Sequence[str], schedule: float | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The law's dead-letter draws of ``family`` and what every other policy loses on each
    (``schedule``: as ``dead_letters``'), and on how many of all the draws noise alone is
    likely to dead-letter some (``NOISE_LIKELY``)."""

    with ProcessPoolExecutor(max_workers=SEED_WORKERS) as pool:
        law = list(
            pool.map(
                dead_letters,
                [(family, seed, draw, "queuemesh", schedule) for draw in range(1, draws + 1)],
            )
        )
        lost = [draw for draw in range(1, draws + 1) if law[draw - 1].messages]
        others: dict[int, list[str]] = {}
        for draw in lost:
            known = HindsightPolicy.knows(draw_scenario(family, seed, draw))
            others[draw] = ["static", *(["hindsight"] if known else []), *peers]
        jobs = [(family, seed, draw, policy, schedule) for draw in lost for policy in others[draw]]
        runs = dict(zip(jobs, pool.map(dead_letters, jobs), strict=True))
    rows = []
    for draw in lost:
        events = law[draw - 1].events
        rows.append(
            {
                "draw": draw,
                **shape(family, seed, draw),
                "queuemesh": law[draw - 1].messages,
                "from_s": events[0][0],
                "to_s": events[-1][0],
                "at_cmin": sum(1 for _, cap in events if cap <= MIN_CONCURRENCY),
                "by_noise": law[draw - 1].noise_alone,
                **{
                    policy: runs[(family, seed, draw, policy, schedule)].messages
                    for policy in others[draw]
                },
            }
        )
    return rows, sum(1 for run in law if run.noise_alone >= NOISE_LIKELY)


def render(rows: Sequence[dict[str, Any]], peers: Sequence[str]) -> str:
    head = (
        f"{'draw':>4} {'shape':<12} {'q':>1} {'batch':>5} {'vis':>4} {'mrc':>3} "
        f"{'delay_s':>11} {'noise':>6} {'floor':>6} {'by_noise':>8} {'qm':>5} {'when_s':>9} "
        f"{'@cmin':>5} {'static':>6} {'bound':>5} " + " ".join(f"{peer[:8]:>8}" for peer in peers)
    )
    lines = [head]
    for row in rows:
        delay = "-".join(f"{value:g}" for value in row["delay_s"])
        lines.append(
            f"{row['draw']:>4} {row['shape']:<12} {row['queues']:>1} {row['batch']:>5} "
            f"{row['visibility_s']:>4} {row['receives']:>3} {delay:>11} {row['noise']:>6.3f} "
            f"{row['floor']:>6.2f} {row['by_noise']:>8.2f} {row['queuemesh']:>5} "
            f"{row['from_s']:>4.0f}-{row['to_s']:<4.0f} {row['at_cmin']:>5} {row['static']:>6} "
            f"{row.get('hindsight', '-'):>5} " + " ".join(f"{row[peer]:>8}" for peer in peers)
        )
    return "\n".join(lines)


def summary(rows: Sequence[dict[str, Any]], peers: Sequence[str]) -> str:
    """The law's dead letters by who else loses some on the same draw: the bound (no law
    avoids those), static and every peer run, none; and those under the floor (the lowest
    capacity under what Cmin invocations send)."""
    others = ["static", "hindsight", *peers]

    def line(title: str, chosen: list[dict[str, Any]]) -> str:
        messages = sum(row["queuemesh"] for row in chosen)
        return f"{title}: {len(chosen)} draws, {messages} messages"

    return "\n".join(
        [
            line("the bound too", [row for row in rows if row.get("hindsight", 0) > 0]),
            line(
                "static and every peer too",
                [row for row in rows if all(row[name] > 0 for name in ["static", *peers])],
            ),
            line(
                "no other policy",
                [row for row in rows if not any(row.get(name, 0) > 0 for name in others)],
            ),
            line("under the floor", [row for row in rows if row["floor"] < 1]),
            line(
                f"noise alone expects {NOISE_LIKELY:g} or more",
                [row for row in rows if row["by_noise"] >= NOISE_LIKELY],
            ),
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = draw_parser("load.dead_letters", __doc__, family="throttling", seed=7, draws=60)
    parser.add_argument(
        "--peers", default=",".join(PEER_POLICIES), help="comma-separated; empty for none"
    )
    parser.add_argument(
        "--schedule-s",
        type=float,
        help="the controller's scheduled run every this many seconds (default: the draw's, "
        "60): with 1, a paused mapping's pause and test end within a second of when the law "
        "asks to be woken",
    )
    args = parse_draws(parser, argv)
    peers = [name for name in args.peers.split(",") if name]
    unknown = [name for name in peers if name not in PEER_POLICIES]
    if unknown:
        parser.error(f"--peers: unknown peer {unknown[0]!r}; peers: {', '.join(PEER_POLICIES)}")
    rows, noisy = classify(args.family, args.seed, args.draws, peers, args.schedule_s)
    every = "" if args.schedule_s is None else f", a controller run every {args.schedule_s:g} s"
    print(
        f"family {args.family}, seed {args.seed}, draws 1-{args.draws}{every}: "
        f"{len(rows)} draws with dead letters under queuemesh; on {noisy} draws noise alone "
        f"expects {NOISE_LIKELY:g} or more"
    )
    print(render(rows, peers))
    print(summary(rows, peers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
