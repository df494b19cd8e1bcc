"""The `queuemesh` command line.

Each command lives in its own module exposing ``register(subparsers)``; the module sets
``func`` (``(argparse.Namespace) -> int``) as the parser default. Modules are imported when the
parser is built, and keep heavy imports inside their ``func`` so ``--help`` stays fast, and
works without the optional dependencies: a command that needs the local extra and finds it
missing says so in one line.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence

from load.arguments import OneLineParser
from stack.errors import CliError, quoted

COMMAND_MODULES: tuple[str, ...] = (
    "stack.commands.bench",
    "stack.commands.record",
    "stack.commands.replay",
    "stack.commands.simulate",
    "stack.local.dashboard",
    "stack.local.demo.command",
    "stack.ops.commands",
    "stack.commands.doctor",
)
# pyproject.toml's optional dependencies for the local stack (stack/local/) and the plots.
LOCAL_EXTRA = "local"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="queuemesh",
        description="Adaptive MaximumConcurrency for SQS -> Lambda workers.",
    )
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=OneLineParser
    )
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    # Left-over arguments are the command's error, not the top-level parser's.
    args, unknown = parser.parse_known_args(argv)
    if not hasattr(args, "func"):
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        parser.print_help(sys.stderr)
        return 2
    prog = f"queuemesh {args.command}"
    if unknown:
        shown = quoted(" ".join(unknown))
        print(
            f"{prog}: error: unrecognized arguments: {shown} (see '{prog} --help')",
            file=sys.stderr,
        )
        return 2
    try:
        return int(args.func(args))
    except CliError as error:
        # One line, whatever third-party text (botocore's, say) the message carries.
        message = " ".join(str(error).split())
        print(f"{prog}: error: {message}", file=sys.stderr)
        return 2
    except ModuleNotFoundError:
        if not missing_extra_packages(LOCAL_EXTRA):
            raise
        print(
            f"{prog}: needs the {LOCAL_EXTRA} extra: pip install 'queuemesh[{LOCAL_EXTRA}]'",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def missing_extra_packages(extra: str) -> list[str]:
    """The packages the installed queuemesh declares for ``extra`` that are not installed
    (none when queuemesh itself is not installed: then nothing tells what is missing)."""
    from importlib import metadata

    try:
        requirements = metadata.requires("queuemesh") or []
    except metadata.PackageNotFoundError:
        return []
    missing = []
    for requirement in requirements:
        specifier, _, marker = requirement.partition(";")
        if re.search(rf"""extra\s*==\s*["']{re.escape(extra)}["']""", marker) is None:
            continue
        name = re.split(r"[\s\[<>=!~;(]", specifier.strip(), maxsplit=1)[0]
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


if __name__ == "__main__":
    sys.exit(main())
