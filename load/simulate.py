"""`queuemesh simulate`: scenarios under several policies, side by side, on virtual time.

queuemesh simulate --scenario capacity-drop                  # table, every policy
queuemesh simulate --scenario all --json                     # the scorecards, as JSON
queuemesh simulate --scenario my.json --policy queuemesh --plot out.png --record out.jsonl
queuemesh simulate --scenario all --seeds 1-10               # mean and worst over seeds
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from stack.errors import CliError

if TYPE_CHECKING:
    from load.sim.engine import SimPolicy
    from load.sim.scenario import Scenario

POLICY_NAMES = ("static", "seed", "queuemesh")
# Seeds run in a small process pool: the simulator is CPU-bound, one run per core.
SEED_WORKERS = 2
MAX_SEEDS = 100


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="simulate a scenario under static, seed and queuemesh policies; print a scorecard",
        description=(
            "Runs a scenario (SQS, the Lambda poller, workers, downstreams, telemetry delays) on "
            "virtual time under each policy and prints the scorecard side by side. The "
            "queuemesh policy is the real controller core with in-memory adapters."
        ),
    )
    parser.add_argument(
        "--scenario",
        required=True,
        metavar="NAME_OR_FILE",
        help="a shipped scenario name, a scenario JSON file, or 'all' for every shipped one",
    )
    parser.add_argument(
        "--policy",
        choices=(*POLICY_NAMES, "all"),
        default="all",
        help="which policy to run (default: all three)",
    )
    parser.add_argument(
        "--algorithm",
        metavar="NAME",
        help="the queuemesh policy's limit algorithm (default: the simulator's, 'adaptive')",
    )
    parser.add_argument("--seed", type=int, metavar="N", help="override the scenario's seed")
    parser.add_argument(
        "--seeds",
        metavar="LIST",
        help="run every seed of a range or list (1-10, 3,5,8) and print the totals' mean and worst",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the scorecard JSON instead of a table"
    )
    parser.add_argument(
        "--plot", metavar="FILE.png", help="write a plot of the runs (one scenario)"
    )
    parser.add_argument(
        "--record",
        metavar="FILE.jsonl",
        help="write the queuemesh run's telemetry as a recording (one scenario)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, out: IO[str] | None = None) -> int:
    from controller.policy import DEFAULT_ALGORITHM
    from load.plot import plot_runs
    from load.recording import record_deliveries, write_recording
    from load.scorecard import scorecard
    from load.sim.engine import SIM_EPOCH, SimResult, simulate
    from load.sim.scenario import ScenarioError, load_scenario, shipped_scenarios

    stream = out or sys.stdout
    names = shipped_scenarios() if args.scenario == "all" else [args.scenario]
    try:
        scenarios: list[Scenario] = [load_scenario(name) for name in names]
    except ScenarioError as error:
        raise CliError(str(error)) from error
    if (args.plot or args.record) and len(scenarios) != 1:
        raise CliError("--plot and --record take one scenario; name it instead of 'all'")
    policies = POLICY_NAMES if args.policy == "all" else (args.policy,)
    if args.record and "queuemesh" not in policies:
        raise CliError(
            "--record writes the queuemesh run's telemetry: use --policy queuemesh or all"
        )
    algorithm = args.algorithm or DEFAULT_ALGORITHM
    _check_algorithm(algorithm)
    if args.seeds is not None:
        if args.seed is not None or args.plot or args.record:
            raise CliError("--seeds runs many seeds: leave out --seed, --plot and --record")
        try:
            seeds = parse_seeds(args.seeds)
        except ValueError as error:
            raise CliError(f"--seeds {args.seeds!r}: {error}") from error
        summaries = run_seeds(scenarios, policies, algorithm, seeds)
        if args.json:
            stream.write(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2))
            stream.write("\n")
        else:
            stream.write(render_seed_table(summaries))
        return 0

    cards: list[dict[str, Any]] = []
    timings: list[float] = []
    runs: list[SimResult] = []
    for scenario in scenarios:
        for name in policies:
            policy = make_policy(name, algorithm)
            started = time.perf_counter()
            result = simulate(scenario, policy, seed=args.seed)
            timings.append(time.perf_counter() - started)
            runs.append(result)
            cards.append(scorecard(result))

    if args.json:
        payload: object = cards[0] if len(cards) == 1 else cards
        stream.write(json.dumps(payload, indent=2) + "\n")
    else:
        stream.write(render_table(cards, timings))
    if args.plot:
        path = plot_runs(runs, Path(args.plot))
        print(f"plot written to {path}", file=sys.stderr)
    if args.record:
        mesh = next(result for result in runs if result.policy == "queuemesh")
        lines = record_deliveries(
            (SIM_EPOCH + delivery.arrival, delivery.sample) for delivery in mesh.telemetry
        )
        count = write_recording(lines, Path(args.record))
        print(f"recording of {count} Kinesis records written to {args.record}", file=sys.stderr)
    return 0


def make_policy(name: str, algorithm: str) -> SimPolicy:
    """A fresh policy by its ``--policy`` name (queuemesh with the limit ``algorithm``)."""
    from load.sim.policies import POLICIES, QueueMeshPolicy

    return QueueMeshPolicy(algorithm=algorithm) if name == "queuemesh" else POLICIES[name]()


def parse_seeds(text: str) -> list[int]:
    """``1-10`` or ``3,5,8`` (or both: ``1-3,7``) as a list of seeds, in the order given.

    Raises ``ValueError`` saying what is wrong and how to write it.
    """
    how = "write a range like 1-10 or a list like 3,5,8"
    seeds: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"{part.strip()!r} is not a seed or a range of seeds; {how}")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"the range {part.strip()} runs backwards; {how}")
        if len(seeds) + last - first + 1 > MAX_SEEDS:
            raise ValueError(f"more than {MAX_SEEDS} seeds; name fewer")
        for seed in range(first, last + 1):
            if seed in seeds:
                raise ValueError(f"seed {seed} is named twice; name each seed once")
            seeds.append(seed)
    return seeds


def run_seeds(
    scenarios: Sequence[Scenario], policies: Sequence[str], algorithm: str, seeds: Sequence[int]
) -> list[dict[str, Any]]:
    """One ``seed_summary`` per (scenario, policy), each over every seed."""
    from load.scorecard import seed_summary

    jobs = [
        (scenario, policy, algorithm, seed)
        for scenario in scenarios
        for policy in policies
        for seed in seeds
    ]
    if len(jobs) > 1:
        with ProcessPoolExecutor(max_workers=SEED_WORKERS) as pool:
            totals = list(pool.map(_seed_totals, jobs))
    else:
        totals = [_seed_totals(job) for job in jobs]
    summaries = []
    for index in range(0, len(jobs), len(seeds)):
        scenario, policy, _, _ = jobs[index]
        runs = list(zip(seeds, totals[index : index + len(seeds)], strict=True))
        summaries.append(seed_summary(scenario.name, policy, runs))
    return summaries


def _seed_totals(job: tuple[Scenario, str, str, int]) -> dict[str, Any]:
    """One run's totals (a top-level function, so the process pool can call it)."""
    from load.scorecard import scorecard
    from load.sim.engine import simulate

    scenario, policy, algorithm, seed = job
    totals: dict[str, Any] = scorecard(
        simulate(scenario, make_policy(policy, algorithm), seed=seed)
    )["totals"]
    return totals


def _check_algorithm(name: str) -> None:
    from controller.policy import ALGORITHMS

    if name not in ALGORITHMS:
        raise CliError(f"unknown algorithm {name!r}; choose one of {', '.join(sorted(ALGORITHMS))}")


_COLUMNS = (
    ("policy", "policy", "<"),
    ("queue", "queue", "<"),
    ("msgs", "messages_total", ">"),
    ("done", "messages_done", ">"),
    ("dlq", "dlq_messages", ">"),
    ("calls", "calls_total", ">"),
    ("rejected", "calls_rejected", ">"),
    ("wasted", "wasted_ratio", ">"),
    ("drain_s", "drain_s", ">"),
    ("ideal_s", "ideal_drain_s", ">"),
    ("ratio", "drain_ratio", ">"),
    ("esm", "esm_updates", ">"),
    ("react_s", "reaction_s", ">"),
)


def render_table(cards: Sequence[dict[str, Any]], timings: Sequence[float]) -> str:
    """The scorecards side by side, a block per scenario, with each run's wall time."""
    blocks: list[str] = []
    by_scenario: dict[str, list[tuple[dict[str, Any], float]]] = {}
    for card, wall in zip(cards, timings, strict=True):
        by_scenario.setdefault(card["scenario"], []).append((card, wall))
    for scenario, entries in by_scenario.items():
        rows: list[list[str]] = []
        for card, wall in entries:
            queues = card["queues"]
            named = list(queues.items())
            if len(named) > 1:
                named.append(("(total)", card["totals"]))
            for queue, score in named:
                row = [card["policy"], queue]
                row += [_cell(score[key]) for _, key, _ in _COLUMNS[2:]]
                row.append(f"{wall:.2f}")
                rows.append(row)
        headers = [title for title, _, _ in _COLUMNS] + ["wall_s"]
        aligns = [align for _, _, align in _COLUMNS] + [">"]
        widths = [max(len(headers[i]), *(len(row[i]) for row in rows)) for i in range(len(headers))]
        lines = [f"scenario {scenario} (seed {entries[0][0]['seed']})"]
        lines.append(
            "  ".join(f"{h:{a}{w}}" for h, a, w in zip(headers, aligns, widths, strict=True))
        )
        for row in rows:
            lines.append(
                "  ".join(f"{c:{a}{w}}" for c, a, w in zip(row, aligns, widths, strict=True))
            )
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


_SEED_COLUMNS = (
    ("done", "messages_done"),
    ("dlq", "dlq_messages"),
    ("rejected", "calls_rejected"),
    ("timed_out", "calls_timed_out"),
    ("wasted", "wasted_ratio"),
    ("ratio", "drain_ratio"),
    ("age_p50", "age_p50_s"),
    ("age_p99", "age_p99_s"),
    ("goodput", "goodput_share"),
    ("esm", "esm_updates"),
)


def render_seed_table(summaries: Sequence[dict[str, Any]]) -> str:
    """Per scenario, a mean and a worst row per policy over the seeds' totals."""
    blocks: list[str] = []
    by_scenario: dict[str, list[dict[str, Any]]] = {}
    for summary in summaries:
        by_scenario.setdefault(summary["scenario"], []).append(summary)
    for scenario, entries in by_scenario.items():
        headers = ["policy", "over"] + [title for title, _ in _SEED_COLUMNS]
        rows = [
            [summary["policy"], stat] + [_cell(summary[stat][key]) for _, key in _SEED_COLUMNS]
            for summary in entries
            for stat in ("mean", "worst")
        ]
        widths = [max(len(headers[i]), *(len(row[i]) for row in rows)) for i in range(len(headers))]
        aligns = ["<", "<"] + [">"] * len(_SEED_COLUMNS)
        seeds = ",".join(str(seed) for seed in entries[0]["seeds"])
        lines = [f"scenario {scenario} (seeds {seeds}: mean and worst of the totals)"]
        for row in [headers, *rows]:
            lines.append(
                "  ".join(f"{c:{a}{w}}" for c, a, w in zip(row, aligns, widths, strict=True))
            )
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    return str(value)
