"""The unit tier: pure tests (the control core, decoders, simulator, in-memory twins).

No moto, no servers, no subprocesses. ``make unit`` (and ``make test``) run this tier with
``QUEUEMESH_NO_MOTO=1``, which makes importing moto here an error, so a test that needs the
emulated AWS cannot slip into it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from types import ModuleType


class _NoMoto(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "moto" or fullname.startswith("moto."):
            raise ImportError(
                f"the unit tier runs without moto (imported {fullname}): "
                "move the test to tests/integration"
            )
        return None


if os.environ.get("QUEUEMESH_NO_MOTO") == "1":
    sys.meta_path.insert(0, _NoMoto())
