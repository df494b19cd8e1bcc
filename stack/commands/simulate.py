"""`queuemesh simulate`: scenarios under several policies, side by side, on virtual time.

queuemesh simulate --scenario capacity-drop                  # table, every policy
queuemesh simulate --scenario all --json                     # the scorecards, as JSON
queuemesh simulate --scenario my.json --policy queuemesh --plot out.png --record out.jsonl
queuemesh simulate --scenario all --policy hindsight --seeds 1-10  # the bound: capacity known
queuemesh simulate --family healthy --draws 200 --seed 1001  # a family's scorecard
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from load.progress import Progress
from load.sim.families import FAMILIES, MAX_DRAWS, REPORTING_SEEDS
from load.simulate import (
    BOUND_POLICIES,
    PEER_POLICIES,
    POLICY_NAMES,
    compare_alone,
    parse_seeds,
    render_alone_table,
    render_family_table,
    render_seed_table,
    render_table,
    run_family,
    run_policies,
    run_seeds,
)
from stack.errors import CliError

if TYPE_CHECKING:
    from load.sim.scenario import Scenario


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="simulate a scenario under static, seed, queuemesh and peer policies; scorecards",
        description=(
            "Runs a scenario (SQS, the Lambda poller, workers, downstreams, telemetry delays) on "
            "virtual time under each policy and prints the scorecard side by side. The "
            "queuemesh policy is the real controller core with in-memory adapters; the peers "
            f"({', '.join(PEER_POLICIES)}) are the same core running Netflix "
            "concurrency-limits', Vector's and Envoy's rules."
        ),
    )
    parser.add_argument(
        "--scenario",
        metavar="NAME_OR_FILE",
        help="a shipped scenario name, a scenario JSON file, or 'all' for every shipped one",
    )
    parser.add_argument(
        "--family",
        choices=(*FAMILIES, "all"),
        help="instead of --scenario: random draws from a family of scenarios (or every family)",
    )
    parser.add_argument(
        "--draws",
        type=int,
        metavar="N",
        help=f"with --family: how many scenarios to draw (1-{MAX_DRAWS})",
    )
    parser.add_argument(
        "--emit",
        metavar="DIR",
        help="with --family: write each drawn scenario to DIR (family-seed-draw.json)",
    )
    parser.add_argument(
        "--policy",
        choices=(*POLICY_NAMES, *BOUND_POLICIES, "all"),
        default="all",
        help=(
            "which policy to run (default: all, every one but the bounds 'hindsight': the "
            "levels that fit the capacity, known from the controller's first cut on, "
            "'hindsight-lagged': the same, a rise known only a report later, and "
            "'hindsight-climbing': the same, a rise then climbed by doubling a report apart)"
        ),
    )
    parser.add_argument(
        "--algorithm",
        metavar="NAME",
        help="the queuemesh policy's limit algorithm (default: the simulator's, 'adaptive')",
    )
    parser.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help=(
            "override the scenario's seed; with --family, the family's seed (default "
            f"{REPORTING_SEEDS}: 1-{REPORTING_SEEDS - 1} are for tuning, {REPORTING_SEEDS}+ for "
            "reports)"
        ),
    )
    parser.add_argument(
        "--seeds",
        metavar="LIST",
        help="run every seed of a range or list (1-10, 3,5,8) and print the totals' mean and worst",
    )
    parser.add_argument(
        "--alone",
        metavar="QUEUE",
        help=(
            "with one --scenario: compare QUEUE's p99 message age in the scenario with its age "
            "alone on the same downstream (the other queues gone), per policy and seed"
        ),
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
    from load.sim.engine import SIM_EPOCH
    from load.sim.scenario import ScenarioError, load_scenario, shipped_scenarios

    stream = out or sys.stdout
    if (args.scenario is None) == (args.family is None):
        raise CliError("name either --scenario or --family (one of them)")
    if args.family is not None:
        return _run_family(args, stream)
    if args.draws is not None or args.emit is not None:
        raise CliError("--draws and --emit go with --family")
    names = shipped_scenarios() if args.scenario == "all" else [args.scenario]
    try:
        scenarios: list[Scenario] = [load_scenario(name) for name in names]
    except ScenarioError as error:
        raise CliError(str(error)) from error
    if (args.plot or args.record or args.alone is not None) and len(scenarios) != 1:
        raise CliError("--plot, --record and --alone take one scenario; name it instead of 'all'")
    policies = POLICY_NAMES if args.policy == "all" else (args.policy,)
    if args.record and "queuemesh" not in policies:
        raise CliError(
            "--record writes the queuemesh run's telemetry: use --policy queuemesh or all"
        )
    algorithm = args.algorithm or DEFAULT_ALGORITHM
    _check_algorithm(algorithm)
    if args.alone is not None:
        return _run_alone(args, scenarios[0], policies, algorithm, stream)
    for flag, target in (("--plot", args.plot), ("--record", args.record)):
        if target is not None and Path(target).is_dir():
            raise CliError(f"{flag} {target} is a directory; name a file in it")
    if args.seeds is not None:
        if args.plot or args.record:
            raise CliError("--seeds runs many seeds: leave out --seed, --plot and --record")
        summaries = run_seeds(scenarios, policies, algorithm, _seeds(args))
        if args.json:
            stream.write(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2))
            stream.write("\n")
        else:
            stream.write(render_seed_table(summaries))
        return 0

    with Progress.for_command("simulate", json_output=args.json, stdout=stream) as progress:
        runs = run_policies(scenarios, policies, algorithm, args.seed, progress.update)
    cards = [run.card for run in runs]
    if args.json:
        payload: object = cards[0] if len(cards) == 1 else cards
        stream.write(json.dumps(payload, indent=2) + "\n")
    else:
        stream.write(render_table(cards, [run.wall_s for run in runs]))
    try:
        if args.plot:
            path = plot_runs([run.result for run in runs], Path(args.plot))
            print(f"plot written to {path}", file=sys.stderr)
        if args.record:
            mesh = next(run.result for run in runs if run.result.policy == "queuemesh")
            lines = record_deliveries(
                (SIM_EPOCH + delivery.arrival, delivery.sample) for delivery in mesh.telemetry
            )
            count = write_recording(lines, Path(args.record))
            print(f"recording of {count} Kinesis records written to {args.record}", file=sys.stderr)
    except OSError as error:
        raise CliError(f"cannot write {error.filename}: {error.strerror}") from error
    return 0


def _seeds(args: argparse.Namespace) -> list[int]:
    """The seeds ``--seeds`` names (not with ``--seed``)."""
    if args.seed is not None:
        raise CliError("--seeds runs many seeds: leave out --seed, --plot and --record")
    try:
        return parse_seeds(args.seeds)
    except ValueError as error:
        raise CliError(f"--seeds {args.seeds!r}: {error}") from error


def _run_alone(
    args: argparse.Namespace,
    scenario: Scenario,
    policies: Sequence[str],
    algorithm: str,
    stream: IO[str],
) -> int:
    """``--alone QUEUE``: the queue's p99 message age in the scenario and alone, per policy."""
    if args.plot or args.record:
        raise CliError("--alone compares message ages: leave out --plot and --record")
    try:
        scenario.alone(args.alone)
    except ValueError as error:
        raise CliError(f"--alone: {error}") from error
    seeds = [scenario.seed if args.seed is None else args.seed]
    if args.seeds is not None:
        seeds = _seeds(args)
    summaries = compare_alone(scenario, args.alone, policies, algorithm, seeds)
    if args.json:
        stream.write(json.dumps(summaries[0] if len(summaries) == 1 else summaries, indent=2))
        stream.write("\n")
    else:
        stream.write(render_alone_table(summaries))
    return 0


def _run_family(args: argparse.Namespace, stream: IO[str]) -> int:
    """``--family``: draw, run, and print each family's scorecard."""
    from controller.policy import DEFAULT_ALGORITHM
    from load.sim.families import draw_document, draw_name

    if args.draws is None:
        raise CliError(f"--family needs --draws N (1-{MAX_DRAWS})")
    if not 1 <= args.draws <= MAX_DRAWS:
        raise CliError(f"--draws {args.draws}: draw 1-{MAX_DRAWS} scenarios")
    if args.seeds is not None or args.plot or args.record or args.alone is not None:
        raise CliError(
            "--family draws its scenarios: leave out --seeds, --plot, --record and --alone"
        )
    seed = REPORTING_SEEDS if args.seed is None else args.seed
    if seed < 1:
        raise CliError(f"--seed {seed}: a family's seed is 1 or more")
    algorithm = args.algorithm or DEFAULT_ALGORITHM
    _check_algorithm(algorithm)
    families = FAMILIES if args.family == "all" else (args.family,)
    if args.emit is not None:
        directory = Path(args.emit)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            for family in families:
                for draw in range(1, args.draws + 1):
                    document = draw_document(family, seed, draw)
                    path = directory / f"{draw_name(family, seed, draw)}.json"
                    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        except OSError as error:
            raise CliError(f"--emit {args.emit}: cannot write there ({error.strerror})") from error
    policies = POLICY_NAMES if args.policy == "all" else (args.policy,)
    summaries = []
    with Progress.for_command("simulate", json_output=args.json, stdout=stream) as progress:
        for family in families:
            summaries += run_family(family, seed, args.draws, policies, algorithm, progress.update)
    if args.json:
        stream.write(json.dumps(summaries, indent=2) + "\n")
    else:
        stream.write(render_family_table(summaries))
    return 0


def _check_algorithm(name: str) -> None:
    from controller.policy import algorithm_named

    try:
        algorithm_named(name)
    except ValueError as error:
        raise CliError(f"--algorithm: {error}") from error
