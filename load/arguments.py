"""Command-line parsing shared by the ``queuemesh`` CLI and the ``python -m load.*`` tools.

A bad argument is one line on stderr (what is wrong, where to look) and exit status 2, never
argparse's usage block or a traceback.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import NoReturn

from load.sim.families import FAMILIES, MAX_DRAWS


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus an error; a bad argument deserves a single line."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def tool_parser(module: str, doc: str) -> OneLineParser:
    """The parser of ``python -m <module>``, described by ``doc``'s first paragraph."""
    return OneLineParser(prog=f"python -m {module}", description=doc.split("\n\n")[0])


def draw_parser(module: str, doc: str, *, family: str, seed: int, draws: int) -> OneLineParser:
    """:func:`tool_parser` for a tool that runs a family's draws, with ``--family``, ``--seed``
    and ``--draws`` at the tool's defaults. Add the tool's own arguments, then read them with
    :func:`parse_draws`."""
    parser = tool_parser(module, doc)
    parser.add_argument("--family", default=family, choices=FAMILIES)
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("--draws", type=int, default=draws, help=f"1 to {MAX_DRAWS}")
    return parser


def parse_draws(parser: OneLineParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser``'s arguments, with ``--draws`` refused (one line, exit 2) outside 1..MAX_DRAWS."""
    args = parser.parse_args(argv)
    if not 1 <= args.draws <= MAX_DRAWS:
        parser.error(f"--draws {args.draws}: give 1 to {MAX_DRAWS} draws")
    return args
