"""`queuemesh bench ...`: benchmarks (``load.bench``), each printed as a ratio to a floor
measured in the same run. One subcommand per benchmark: its arguments are checked here, its
``measure`` runs, and its report is printed (``--json``: as it is)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from load.bench import BenchError, decode, fleet, telemetry, worker
from stack.errors import CliError


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="measure QueueMesh's hot paths against a floor measured in the same run",
        description="Benchmarks. Each prints its throughput and its ratio to a floor.",
    )
    bench_subparsers = parser.add_subparsers(
        dest="benchmark", metavar="BENCHMARK", parser_class=type(parser)
    )
    for register_benchmark in (
        _register_decode,
        _register_fleet,
        _register_telemetry,
        _register_worker,
    ):
        register_benchmark(bench_subparsers)
    parser.set_defaults(func=lambda _args: _missing_benchmark(parser))


def _missing_benchmark(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _one_line(
    run: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """``run`` with a broken measurement (``BenchError``) as a one-line error."""

    def translated(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except BenchError as error:
            raise CliError(str(error)) from error

    return translated


def _summary(doc: str | None) -> str | None:
    """A module docstring's first paragraph, one line: its first line alone can stop
    mid-sentence (``bench telemetry``'s did)."""
    return " ".join(doc.split("\n\n")[0].split()) if doc else None


# --- decode ---------------------------------------------------------------------------------


def _register_decode(bench_subparsers: Any) -> None:
    parser = bench_subparsers.add_parser(
        "decode",
        help="telemetry decoder throughput and its ratio to the base64+gunzip+JSON floor",
        description=_summary(decode.__doc__),
    )
    parser.add_argument("--records", type=int, default=10_000, help="Kinesis records per batch")
    parser.add_argument(
        "--events", type=int, default=4, help="largest number of log events per record (>= 1)"
    )
    parser.add_argument("--queues", type=int, default=8, help="distinct queues in the batch")
    parser.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="timed tries of each side per chunk of records; the best try counts",
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.set_defaults(func=_one_line(_run_decode))


def _run_decode(args: argparse.Namespace) -> int:
    from load.replay.config import MAX_BATCH_SIZE

    # A batch holds at most what a Kinesis event source mapping delivers; the other ceilings
    # keep a mistyped number from building a batch for hours.
    for name, ceiling in (
        ("records", MAX_BATCH_SIZE),
        ("events", 100),
        ("queues", 10_000),
        ("repeat", 100),
    ):
        value = getattr(args, name)
        if not 1 <= value <= ceiling:
            raise CliError(f"--{name} must be at least 1 and at most {ceiling}; got {value}")
    report = decode.measure(
        records=args.records,
        max_events=args.events,
        queues=args.queues,
        repeat=args.repeat,
        seed=args.seed,
    )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"decode: {report['records']} records, {report['log_events']} log events, "
            f"{report['payload_mb']:.2f} MB compressed, {report['queues']} queues\n"
            f"  ours : {report['seconds'] * 1000:8.1f} ms  {report['mb_per_s']:6.2f} MB/s  "
            f"{report['records_per_s']:9.0f} records/s  {report['samples_per_s']:9.0f} samples/s\n"
            f"  floor: {report['floor_seconds'] * 1000:8.1f} ms  "
            f"{report['floor_mb_per_s']:6.2f} MB/s  (json.loads per payload and message)\n"
            f"  bare scanner floor: {report['scanner_floor_seconds'] * 1000:8.1f} ms  "
            f"ratio {report['scanner_floor_ratio']:.2f}\n"
            f"  floor_ratio {report['floor_ratio']:.2f} (target <= {decode.TARGET_FLOOR_RATIO}), "
            f"{report['mb_per_s']:.2f} MB/s (target >= {decode.TARGET_MB_PER_S}): "
            f"{'met' if report['meets_targets'] else 'MISSED'}"
        )
    return 1 if args.check and not report["meets_targets"] else 0


# --- fleet ----------------------------------------------------------------------------------


def _run_fleet_storm(args: argparse.Namespace) -> int:
    from load.bench import fleet_storm
    from load.progress import Progress

    with Progress.for_command("bench fleet", json_output=args.json) as progress:
        report = fleet_storm.measure(
            args.queues, args.storm, args.timeout, args.max_invocations, progress.update
        )
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"fleet of {report['queues']} queues, a storm on {report['storm']} "
        f"(control plane simulated, virtual time):\n"
        f"  decode  {report['decode_samples_per_core_s']:,} samples per CPU second\n"
        f"  decide  {report['decide_queues_per_core_s']:,} queues per CPU second; "
        f"{report['queues_decided']}/{report['queues_with_evidence']} queues with evidence "
        "decided\n"
        f"  cuts    {report['update_calls']} applied in {report['all_applied_s']:.1f} s over "
        f"{report['invocations_until_all_applied']} invocations: "
        f"{report['all_applied_ceiling_ratio']}x the {report['ceiling_per_s']}/s floor, "
        f"{report['all_applied_quota_ratio']}x the {report['quota_per_s']}/s quota floor; at "
        f"most {report['max_calls_in_any_1s']} calls in any second, "
        f"{report['control_plane_refused']} refused\n"
        f"  memory  the controller's {report['memory_growth_bytes']:,} bytes gained over "
        f"{report['memory_batches']} warm batches (held: {report['memory_bytes_held']}); "
        f"the twins' {report['twin_growth_bytes']:,} (held: {report['twin_bytes_held']})"
    )
    return 0


def _register_fleet(bench_subparsers: Any) -> None:
    parser = bench_subparsers.add_parser(
        "fleet",
        help="one telemetry batch for a fleet of managed queues, on the local emulator",
        description=(
            "Time decoding, deciding, the ledger and ESM updates for one batch that moves "
            "every queue of a fleet, on moto; follow invocations until every mapping reads back "
            "at its decided value; count control-plane calls per second."
        ),
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--queues", type=int, default=1000, help="managed queues (default 1000)")
    parser.add_argument(
        "--storm",
        type=int,
        default=None,
        help=(
            "a storm on this many of the queues, the rest calm, on the in-process twins with "
            "the account's control plane simulated on virtual time (issue 31: up to 20,000 "
            "queues), and a warm controller's memory over 200 batches; without it: every "
            "queue storms, on moto"
        ),
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        help="the controller invocation's time limit in seconds (template.yaml: 120)",
    )
    parser.add_argument(
        "--max-invocations", type=int, default=20, help="give up after this many invocations"
    )
    parser.add_argument(
        "--moto-deepcopy",
        action="store_true",
        help="keep moto's whole-table copy per DynamoDB transaction (slow: measures moto)",
    )
    parser.set_defaults(func=_one_line(_run_fleet))


def _run_fleet(args: argparse.Namespace) -> int:
    most = 5000 if args.storm is None else 20_000
    if not 1 <= args.queues <= most:
        raise CliError(f"--queues must be 1..{most}, got {args.queues}")
    if args.storm is not None and not 1 <= args.storm <= args.queues:
        raise CliError(f"--storm must be 1..{args.queues} (the queues), got {args.storm}")
    if not 5 <= args.timeout <= 900:
        raise CliError(f"--timeout must be 5..900 s (Lambda's range), got {args.timeout}")
    if not 1 <= args.max_invocations <= 100:
        raise CliError(f"--max-invocations must be 1..100, got {args.max_invocations}")
    if args.storm is not None:
        return _run_fleet_storm(args)
    from load.progress import Progress
    from stack.local.emulator import EmbeddedAws

    with (
        EmbeddedAws() as aws,
        Progress.for_command("bench fleet", json_output=args.json) as progress,
    ):
        report = fleet.measure(
            aws.endpoint,
            args.queues,
            args.timeout,
            args.max_invocations,
            args.moto_deepcopy,
            progress.update,
        )
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"fleet of {report['queues']} queues, one batch of {report['records']} records "
        f"({report['samples']} samples):\n"
        f"  decode  {report['decode_s']:.3f} s ({report['decode_floor_ratio']}x the "
        "base64+gunzip+JSON floor)\n"
        f"  decide  {report['decide_s']:.3f} s\n"
        f"  ledger  {report['ledger_s']:.2f} s, {report['ledger_ms_per_commit']} ms per commit "
        f"({report['commit_floor_ratio']}x a bare two-item transaction on the same table)\n"
        f"  actuate {report['actuate_s']:.1f} s for {report['control_plane_calls']} control-plane "
        f"calls ({report['update_calls']} updates, {report['list_calls']} list pages, "
        f"{report['get_calls']} reads: {report['calls_ratio']}x an update each plus the pages); "
        f"at most {report['max_calls_in_any_1s']} calls in any 1 s, first to last "
        f"{report['calls_span_s']:.1f} s\n"
        f"  first invocation: {report['first_invocation_changes']} changes in "
        f"{report['first_invocation_s']:.1f} s of a {report['timeout_s']:.0f} s timeout; all "
        f"applied after {report['invocations_until_all_applied']} invocations, "
        f"{report['all_applied_s']:.1f} s: {report['all_applied_quota_ratio']}x the "
        f"{report['quota_per_s']}/s quota floor, {report['all_applied_ceiling_ratio']}x the "
        f"{report['ceiling_per_s']}/s ceiling floor\n"
        f"  read back: {report['readback']['matching_ledger']}/{report['readback']['mappings']} "
        f"mappings match the ledger, {report['readback']['cut_below_start']} cut"
    )
    return 0


# --- telemetry ------------------------------------------------------------------------------


def _register_telemetry(bench_subparsers: Any) -> None:
    parser = bench_subparsers.add_parser(
        "telemetry",
        help="telemetry bytes per worker invocation before and after aggregation, and the "
        "decisions the simulator makes with either",
        description=_summary(telemetry.__doc__),
    )
    parser.add_argument(
        "--rate",
        type=float,
        action="append",
        help="invocations a second per execution environment (repeatable; default 1, 2, 5, 10)",
    )
    parser.add_argument(
        "--seconds", type=int, default=120, help="virtual seconds of invocations (default 120)"
    )
    parser.add_argument(
        "--scenario",
        action="append",
        help="scenario to simulate both ways (repeatable; default "
        f"{', '.join(telemetry.DEFAULT_SCENARIOS)})",
    )
    parser.add_argument("--seeds", default="1-3", help="seeds of each scenario (default 1-3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    parser.set_defaults(func=_one_line(_run_telemetry))


def _run_telemetry(args: argparse.Namespace) -> int:
    from load.sim.scenario import load_scenario
    from load.simulate import parse_seeds

    rates = args.rate or [1.0, 2.0, 5.0, 10.0]
    if not all(0.1 <= rate <= 1000 for rate in rates):
        raise CliError(f"--rate must be 0.1..1000 invocations a second; got {rates}")
    if not 10 <= args.seconds <= 3600:
        raise CliError(f"--seconds must be 10..3600; got {args.seconds}")
    scenarios = args.scenario or list(telemetry.DEFAULT_SCENARIOS)
    try:
        seeds = parse_seeds(args.seeds)
        for name in scenarios:
            load_scenario(name)
    except ValueError as error:  # a ScenarioError too
        raise CliError(str(error)) from error
    report = telemetry.measure(
        rates=sorted(rates), seconds=args.seconds, scenarios=scenarios, seeds=seeds
    )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        lines = [f"telemetry bytes per invocation ({report['calls_per_invocation']} calls each):"]
        for row in report["rates"]:
            lines.append(
                f"  {row['rate']:6.1f}/s per environment: before {row['before']:7.1f}  after "
                f"{row['after']:7.1f}  ratio {row['ratio']:.3f}  ({row['documents_before']} -> "
                f"{row['documents_after']} documents; evidence equal: {row['evidence_equal']})"
            )
        for run in report["decisions"]:
            card = run["scorecard"]
            lines.append(
                f"  {run['scenario']} seed {run['seed']}: {run['changes']} -> "
                f"{run['changes_aggregated']} changes, first difference at "
                f"{run['first_difference_s']} s (other delays: "
                f"{run['first_difference_other_delays_s']} s; replay: "
                f"{run['replay_first_difference_s']} s); "
                + ", ".join(f"{key} {before} -> {after}" for key, (before, after) in card.items())
            )
        for key, move in report["outcome_moves"].items():
            lines.append(
                f"  {key} moves on average {move['aggregated']} with aggregated telemetry, "
                f"{move['other_delays']} with other telemetry delays (the difference's "
                f"standard error {move['excess_se']})"
            )
        lines.append(
            f"  at {telemetry.TARGET_RATE:.0f}/s: {report['bytes_per_invocation']} bytes per "
            f"invocation (target <= {telemetry.TARGET_BYTES_PER_INVOCATION}): "
            f"{'met' if report['meets_target'] else 'MISSED'}; decisions equal: "
            f"{report['decisions_equal']}; replayed decisions equal: "
            f"{report['replay_decisions_equal']}; recording equal: {report['recording_equal']}; "
            f"outcomes within the delays' noise: {report['outcomes_within_delay_noise']}"
        )
        print("\n".join(lines))
    return 1 if args.check and not report["meets_target"] else 0


# --- worker ---------------------------------------------------------------------------------


# The clients whose calls spread wider get more of them (load/bench/worker.py).
_MORE_CALLS = ", ".join(f"{factor}x for {name}" for name, factor in worker.CALLS_FACTOR.items())


def _register_worker(bench_subparsers: Any) -> None:
    parser = bench_subparsers.add_parser(
        "worker",
        help="per-call overhead of the worker's HTTP hooks against the same call uninstrumented",
        description=_summary(worker.__doc__),
    )
    parser.add_argument(
        "--calls",
        type=int,
        default=4_000,
        help=f"timed calls per side per client, over all processes (default 4000; {_MORE_CALLS})",
    )
    parser.add_argument(
        "--block",
        type=int,
        default=25,
        help=f"timed pairs (hooked, plain) in a round, after {worker.SETTLE_CALLS} untimed pairs "
        "(default 25)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        help="fresh processes the calls are split across, run one after another (default "
        f"{worker.DEFAULT_PROCESSES}, or --calls if fewer; at least "
        f"{worker.MIN_PROCESSES_SHOWN} to show the target met or missed)",
    )
    parser.add_argument(
        "--client",
        action="append",
        choices=worker.CLIENTS,
        help="client library to measure (repeatable; default: all)",
    )
    parser.add_argument(
        "--announced",
        action="store_true",
        help="every answer carries rate-limit headers (IETF RateLimit and X-RateLimit), which "
        "the worker reads",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    parser.set_defaults(func=_one_line(_run_worker))


def _run_worker(args: argparse.Namespace) -> int:
    for name, ceiling in (("calls", 100_000), ("block", 10_000)):
        value = getattr(args, name)
        if not 1 <= value <= ceiling:
            raise CliError(f"--{name} must be between 1 and {ceiling}; got {value}")
    processes = (
        min(worker.DEFAULT_PROCESSES, args.calls) if args.processes is None else args.processes
    )
    if not 1 <= processes <= min(worker.MAX_PROCESSES, args.calls):
        raise CliError(
            f"--processes must be between 1 and {worker.MAX_PROCESSES}, and at most --calls "
            f"({args.calls}: each process makes at least one call); got {processes}"
        )
    report = worker.measure(
        calls=args.calls,
        block=args.block,
        clients=tuple(args.client or worker.CLIENTS),
        processes=processes,
        announced=args.announced,
    )
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        answers = "answers with rate-limit headers" if args.announced else "plain answers"
        lines = [
            f"worker hooks: {report['calls']} calls per side ({_MORE_CALLS}) split across "
            f"{report['processes']} fresh processes, in rounds of {report['block']} "
            f"back-to-back pairs (each after {report['settle_calls']} untimed pairs), "
            f"keep-alive GET over an in-process transport ({answers}); per process the "
            "median over rounds of hooked minus plain plus the tallies' fold, then the median "
            "over processes"
        ]
        for name, result in report["clients"].items():
            low, high = result["cpu_overhead_ci95_us"]
            per_process = result["process_cpu_overheads_us"]
            lines.append(
                f"  {name:<12} plain cpu {result['uninstrumented_cpu_us']:7.1f} us  "
                f"overhead cpu {result['cpu_overhead_us']:5.2f} us "
                f"(fold {result['fold_cpu_us']:.2f}) "
                f"(95% CI {low:.2f}..{high:.2f}; processes {min(per_process):.2f}.."
                f"{max(per_process):.2f}, IQR {result['cpu_overhead_iqr_us']:.2f})  "
                f"wall {result['overhead_us']:5.2f} us  ratio {result['cpu_ratio']:.4f}: "
                f"target {result['target_shown']}"
            )
        lines.append(
            f"  worst: {report['worst_client']} {report['cpu_overhead_us']:.2f} us cpu per call "
            f"(target <= {worker.TARGET_OVERHEAD_US:.0f} us on every client): medians "
            f"{'meet' if report['meets_target'] else 'MISS'} it; shown {report['target_shown']}"
        )
        print("\n".join(lines))
    return 1 if args.check and not report["meets_target"] else 0
