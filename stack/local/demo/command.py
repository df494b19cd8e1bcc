"""`queuemesh demo`: its arguments, the scenario it runs, and what it prints (docs/demo.md)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import threading
from pathlib import Path
from typing import Any, TextIO

from controller.policy import ALGORITHMS
from load.announce import HeaderStyle
from load.sim.scenario import SCENARIO_DIR
from stack.errors import CliError
from stack.local.demo.run import run_demo
from stack.local.demo.summary import (
    bound_not_shown,
    print_summary,
    simulated_cards,
    simulated_runs,
    write_plot,
)
from stack.local.demo.view import LiveView

DEMO_SCENARIO = SCENARIO_DIR / "demo.json"
# Shipped scenarios sized for the demo (minutes, a few dozen local worker processes) under the
# shipped scenario's file name: `--scenario NAME` runs the variant when there is one.
DEMO_VARIANTS = DEMO_SCENARIO.parent / "demo-variants"
# `--scenario announced`: the default demo's capacity drop, from an API that announces its limit
# on every answer in the IETF draft's RateLimit headers (docs/demo.md).
ANNOUNCED_DEMO = "announced"
ANNOUNCED_STYLE = HeaderStyle.IETF
DEFAULT_PLOT_DIR = Path("out")
DEFAULT_GRACE_S = 60.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the whole loop on an embedded local AWS (no account needed)",
        description=(
            "Deploy template.yaml onto an embedded AWS (moto) on 127.0.0.1, run the example "
            "worker against a rate-limited local API whose capacity changes as the scenario's "
            "capacity_rps says (the default scenario's drops to less than half at 20 s), and "
            "watch the controller steer the mapping's MaximumConcurrency."
        ),
    )
    parser.add_argument(
        "--scenario",
        default=str(DEMO_SCENARIO),
        help=f"scenario name or JSON file (default: the two-minute demo scenario; "
        f"{ANNOUNCED_DEMO}: the same capacity drop from an API that announces its limit in "
        "RateLimit headers)",
    )
    parser.add_argument(
        "--duration", type=float, metavar="S", help="run for S seconds instead of the scenario's"
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_S,
        metavar="S",
        help="after the scenario, keep running up to S seconds until the queue is drained "
        f"(default {DEFAULT_GRACE_S:.0f})",
    )
    parser.add_argument(
        "--headless", action="store_true", help="no live view: periodic status lines on stderr"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    parser.add_argument(
        "--plot", metavar="PNG", help="where to write the plot (default: out/demo-<scenario>.png)"
    )
    parser.add_argument("--no-plot", action="store_true", help="do not write a plot")
    parser.add_argument(
        "--template", metavar="FILE", help="SAM template to deploy (default: template.yaml)"
    )
    parser.add_argument(
        "--algorithm",
        choices=sorted(ALGORITHMS),
        help="the controller's algorithm (the template's PolicyAlgorithm; default: its default)",
    )
    parser.add_argument(
        "--telemetry-shards",
        type=int,
        default=1,
        metavar="N",
        help="shards of the telemetry stream (the template's TelemetryShardCount, 1..64; "
        "default 1): the reducer reads them all, the controller still decides each queue whole",
    )
    parser.add_argument(
        "--parallelization-factor",
        type=int,
        default=1,
        metavar="P",
        help="concurrent batches per shard of each stream (the template's "
        "TelemetryParallelizationFactor and ControllerParallelizationFactor, 1..10; default 1)",
    )
    parser.add_argument(
        "--record",
        metavar="JSONL",
        help="also write the telemetry stream as a recording (for queuemesh replay)",
    )
    parser.add_argument(
        "--dashboard",
        action="store_true",
        help="also serve the template's dashboard and the ledger on 127.0.0.1 (its URL is "
        "printed); it stays up after the summary until Ctrl-C",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    scenario, variant = demo_scenario(args.scenario)
    if len(scenario.downstreams) != 1:
        raise CliError(
            f"scenario {scenario.name} has {len(scenario.downstreams)} downstreams; the demo "
            "runs the template's example worker, which calls one: pass a scenario file with "
            "one downstream (its queues each get a mapping to the worker)"
        )
    duration = scenario.duration_s if args.duration is None else args.duration
    # Written so that nan fails too; the run is in real time, so both are finite.
    if not (0 < duration < math.inf and 0 <= args.grace < math.inf):
        raise CliError(
            "--duration must be a positive number of seconds and --grace a non-negative one, "
            "both finite"
        )
    if not 1 <= args.telemetry_shards <= 64 or not 1 <= args.parallelization_factor <= 10:
        raise CliError(
            "--telemetry-shards must be 1..64 and --parallelization-factor 1..10, got "
            f"{args.telemetry_shards} and {args.parallelization_factor}"
        )
    plot = (
        None if args.no_plot else Path(args.plot or DEFAULT_PLOT_DIR / f"demo-{scenario.name}.png")
    )
    out: TextIO = sys.stderr if args.json else sys.stdout
    live = not args.headless and not args.json and out.isatty()
    template = Path(args.template) if args.template else None
    record = Path(args.record) if args.record else None
    view = LiveView(out, live=live)
    announce = ANNOUNCED_STYLE if args.scenario == ANNOUNCED_DEMO else None
    if announce is not None:
        view.note(
            f"running {ANNOUNCED_DEMO}: the demo's capacity drop, the API announcing its limit "
            f"on every answer ({announce} RateLimit headers)"
        )
    if variant is not None:
        view.note(
            f"running {scenario.name}, {args.scenario} sized for the demo "
            f"({scenario.duration_s:.0f} s of load); for the full scenario pass its file, "
            f"load/scenarios/{args.scenario}.json"
        )

    def report(result: dict[str, Any]) -> None:
        # QueueMesh's card runs the algorithm the live controller ran.
        runs = simulated_runs(scenario, result["policy"].removeprefix("queuemesh-"))
        result["simulated"] = simulated_cards(runs)
        result["bound_not_shown"] = bound_not_shown(scenario)
        if plot is not None:
            result["plot"] = str(write_plot(result, plot, runs["static"].result))
        if args.json:
            print(json.dumps(result, indent=2, default=str), flush=True)
        else:
            print_summary(result, out)
        if args.dashboard:
            _hold_dashboard(result["dashboard"], sys.stderr if args.json else out)

    run_demo(
        scenario,
        duration,
        args.grace,
        view=view,
        template=template,
        record=record,
        algorithm=args.algorithm,
        dashboard=args.dashboard,
        telemetry_shards=args.telemetry_shards,
        parallelization_factor=args.parallelization_factor,
        on_result=report,
        announce=announce,
    )
    return 0


def demo_scenario(name_or_file: str) -> tuple[Any, Path | None]:
    """The scenario to run, and the demo variant file when a shipped name has one;
    ``ANNOUNCED_DEMO`` names the default demo's scenario with its first queue alone (its
    downstream announcing)."""
    from load.sim.scenario import ScenarioError, load_scenario, shipped_scenarios

    if name_or_file == ANNOUNCED_DEMO:
        # The default demo's main queue alone: the announced quota is measured on one queue.
        demo = load_scenario(str(DEMO_SCENARIO))
        return dataclasses.replace(demo, name=ANNOUNCED_DEMO, queues=demo.queues[:1]), None
    shipped = shipped_scenarios()
    path = Path(name_or_file)
    if name_or_file not in shipped and path.suffix != ".json" and not path.exists():
        raise CliError(
            f"unknown scenario {name_or_file!r}; --scenario takes one of "
            f"{', '.join(sorted([ANNOUNCED_DEMO, *shipped]))} or a scenario .json file"
        )
    variant = DEMO_VARIANTS / f"{name_or_file}.json"
    chosen = variant if name_or_file in shipped and variant.is_file() else None
    try:
        return load_scenario(str(chosen or name_or_file)), chosen
    except ScenarioError as error:
        raise CliError(str(error)) from error


def _hold_dashboard(url: str, out: TextIO) -> None:
    """Keep the stack and the page up for a look after the run, until Ctrl-C."""
    out.write(f"queuemesh demo: the dashboard stays up at {url}; Ctrl-C to stop\n")
    out.flush()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        out.write("queuemesh demo: stopping\n")
