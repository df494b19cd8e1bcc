"""`queuemesh simulate`: scenarios under several policies, side by side, on virtual time.

queuemesh simulate --scenario capacity-drop                  # table, every policy
queuemesh simulate --scenario all --json                     # the scorecards, as JSON
queuemesh simulate --scenario my.json --policy queuemesh --plot out.png --record out.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from stack.errors import CliError

POLICY_NAMES = ("static", "seed", "queuemesh")


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
    from load.progress import Progress
    from load.recording import record_deliveries, write_recording
    from load.scorecard import scorecard
    from load.sim.engine import SIM_EPOCH, SimResult, simulate
    from load.sim.policies import POLICIES, QueueMeshPolicy
    from load.sim.scenario import Scenario, ScenarioError, load_scenario, shipped_scenarios

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

    cards: list[dict[str, Any]] = []
    timings: list[float] = []
    runs: list[SimResult] = []
    total = len(scenarios) * len(policies)
    with Progress.for_command("simulate", json_output=args.json, stdout=stream) as progress:
        for scenario in scenarios:
            for name in policies:
                progress.update(len(runs), total, f"runs ({scenario.name}, {name})")
                policy = (
                    QueueMeshPolicy(algorithm=algorithm)
                    if name == "queuemesh"
                    else POLICIES[name]()
                )
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


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    return str(value)
