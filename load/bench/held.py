"""What an object graph holds in memory: the bytes of every object reachable from a root.

The fleet benchmark tells a warm controller's own memory (its book, its readers, its pacing)
from the twins it runs beside (the in-memory ledger's items, the mappings), which hold what AWS
would. Allocation sites cannot tell them apart: a ledger item the controller's code built is
held by the twin. Reachability can: the controller's memory is what is reachable from it once
the twins are left out, and each twin's is what is reachable from the twin.
"""

from __future__ import annotations

import gc
import sys
import types
from collections.abc import Iterable
from typing import Any

# Code and the interpreter's own objects: reachable from almost anything (a function reaches
# its module's globals), held by no one instance.
_SHARED = (
    type,
    types.ModuleType,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.CodeType,
    types.FrameType,
    types.MethodType,
)


def held_bytes(root: object, leave_out: Iterable[object] = ()) -> int:
    """``sys.getsizeof`` summed over the objects reachable from ``root`` (each once), not
    going into ``leave_out``, code, modules, classes or loggers."""
    seen = {id(item) for item in leave_out}
    total = 0
    stack: list[Any] = [root]
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, _SHARED) or _is_logger(item):
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        stack.extend(gc.get_referents(item))
    return total


def _is_logger(item: object) -> bool:
    return type(item).__name__ in ("Logger", "RootLogger") or type(item).__module__.startswith(
        ("logging", "aws_lambda_powertools.logging")
    )
