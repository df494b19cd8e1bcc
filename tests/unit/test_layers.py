"""Layers import one way: `stack/` -> `load/` -> `controller/`, `worker/`.

Every import of every module is read with ``ast`` (function-local and ``TYPE_CHECKING`` ones
included, and ``importlib.import_module`` of a constant name), so an import against the
direction fails here even where a local import would have kept it from being a cycle.
`controller/` and `worker/` are each a Lambda CodeUri: they import nothing of the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import ROOT

# What each layer may import of the project, besides itself.
ALLOWED: dict[str, frozenset[str]] = {
    "stack": frozenset({"load", "controller", "worker"}),
    "load": frozenset({"controller", "worker"}),
    "controller": frozenset(),
    "worker": frozenset(),
}


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """``(line, module name)`` of every import in ``source`` (the text of ``module``)."""
    package = module.rsplit(".", 1)[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.append((node.lineno, name))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def violations(source: str, module: str) -> list[str]:
    """The imports of ``module`` that go against the layers' direction."""
    layer = module.split(".")[0]
    wrong = []
    for line, name in imported_modules(source, module):
        target = name.split(".")[0]
        if target in ALLOWED and target != layer and target not in ALLOWED[layer]:
            wrong.append(f"{module}:{line} imports {name}")
    return wrong


def project_modules() -> list[tuple[str, Path]]:
    modules = []
    for layer in ALLOWED:
        for path in sorted((ROOT / layer).rglob("*.py")):
            # A package's __init__ keeps its name: its relative imports start at the package.
            modules.append((".".join(path.relative_to(ROOT).with_suffix("").parts), path))
    return modules


def test_every_layer_has_modules_to_check() -> None:
    layers = {module.split(".")[0] for module, _ in project_modules()}
    assert layers == set(ALLOWED)


def test_no_module_imports_against_the_layers() -> None:
    wrong = [
        message
        for module, path in project_modules()
        for message in violations(path.read_text(encoding="utf-8"), module)
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("load.replay.engine", "def run():\n    from stack.errors import CliError\n"),
        ("load.sim.policies", "import stack.ops\n"),
        ("controller.loop", "from load.recording import kinesis_event\n"),
        ("controller.app", "from worker import emf\n"),
        ("worker.emf", "import controller.model\n"),
        ("load.bench.fleet", "from ...stack import emulator\n"),
        ("controller.handler", "import importlib\nimportlib.import_module('stack.cli')\n"),
        (
            "load.simulate",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from stack import ops\n",
        ),
    ],
)
def test_an_import_against_the_layers_is_found(module: str, source: str) -> None:
    assert len(violations(source, module)) == 1


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("stack.cli", "from load.replay import replay\nimport controller.model\n"),
        ("load.replay.engine", "from controller.app import ControllerApp\nfrom . import config\n"),
        ("worker.wrapper", "from worker import emf\nimport boto3\n"),
    ],
)
def test_imports_along_the_layers_pass(module: str, source: str) -> None:
    assert violations(source, module) == []


def test_the_operator_commands_import_nothing_of_the_local_stack() -> None:
    """`pip install queuemesh` runs stack/ops/ without the local extra (moto, samtranslator)."""
    operator_side = [
        (m, p) for m, p in project_modules() if m.startswith(("stack.ops", "stack.aws"))
    ]
    assert operator_side
    local = [
        f"{module}:{line} imports {name}"
        for module, path in operator_side
        for line, name in imported_modules(path.read_text(encoding="utf-8"), module)
        if name.startswith("stack.local")
    ]
    assert local == []


def test_the_ledger_knows_no_algorithm() -> None:
    """Storage does not depend on the algorithms: the memory types are its builder's to hand
    in (docs/ledger.md)."""
    package = ROOT / "controller" / "ledger"
    imported = {
        name
        for path in package.glob("*.py")
        for _, name in imported_modules(
            path.read_text(encoding="utf-8"), f"controller.ledger.{path.stem}"
        )
    }
    assert "controller.model" in imported
    assert not {name for name in imported if name.startswith("controller.policy")}
