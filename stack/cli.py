"""The `queuemesh` command line.

Each command lives in its own module exposing ``register(subparsers)``; the module sets
``func`` (``(argparse.Namespace) -> int``) as the parser default. Modules are imported when the
parser is built, and keep heavy imports inside their ``func`` so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from stack.errors import CliError, quoted

COMMAND_MODULES: tuple[str, ...] = (
    "stack.commands.bench",
    "stack.commands.record",
    "stack.commands.replay",
    "stack.commands.simulate",
    "stack.dashboard",
    "stack.demo",
    "stack.commands.ops",
    "stack.commands.doctor",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus an error; a bad argument deserves a single line."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


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
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
