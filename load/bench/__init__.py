"""`queuemesh bench ...`: benchmarks, each printed as a ratio to a floor measured in the same run.

Each module listed in ``BENCHMARKS`` exposes ``register(bench_subparsers)`` and adds one
subcommand, the same shape as a top-level command module.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

BENCHMARKS: tuple[str, ...] = ("load.bench.decode", "load.bench.fleet", "load.bench.worker")


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="measure QueueMesh's hot paths against a floor measured in the same run",
        description="Benchmarks. Each prints its throughput and its ratio to a floor.",
    )
    bench_subparsers = parser.add_subparsers(
        dest="benchmark", metavar="BENCHMARK", parser_class=type(parser)
    )
    for module_name in BENCHMARKS:
        importlib.import_module(module_name).register(bench_subparsers)
    parser.set_defaults(func=lambda _args: _missing_benchmark(parser))


def _missing_benchmark(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2
