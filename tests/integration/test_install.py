"""What `pip install queuemesh` gives, and what `pip install 'queuemesh[local]'` adds.

The project is copied out of the checkout, built into a wheel once (in isolation, as a user's
`pip install .` builds it) and installed with its dependencies into one fresh virtualenv,
from the package index through pip's cache. The commands then run from a folder outside the
checkout, so nothing can be imported from it.

One virtualenv serves both steps, in this order: the plain install first (the operator's
commands, the simulator, no local stack), then the local extra on top of it (the demo).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import venv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.paths import ROOT

LEFT_BEHIND = (".git", ".venv", ".sam-venv", "build", "*.egg-info", "__pycache__", ".*_cache")
# What only the local extra brings (distribution names).
LOCAL_ONLY = ("moto", "matplotlib", "aws-sam-translator")
NEEDS_LOCAL = "needs the local extra: pip install 'queuemesh[local]'"


@dataclass(frozen=True, slots=True)
class Installed:
    """A fresh virtualenv holding the queuemesh wheel built from this checkout."""

    bin_dir: Path
    wheel: Path
    site_packages: Path
    home: Path
    elsewhere: Path

    def pip(self, *arguments: str) -> None:
        pip(self.bin_dir, *arguments)

    def run(self, command: Sequence[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``command`` from a folder outside the checkout, with a HOME of its own."""
        return subprocess.run(
            [self.bin_dir / command[0], *command[1:]],
            cwd=self.elsewhere,
            env={"PATH": f"{self.bin_dir}{os.pathsep}{os.environ['PATH']}", "HOME": str(self.home)},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def distributions(self) -> set[str]:
        listed = self.run(["python", "-m", "pip", "list", "--format", "json"])
        assert listed.returncode == 0, listed.stderr
        return {item["name"].lower() for item in json.loads(listed.stdout)}


def pip(bin_dir: Path, *arguments: str) -> None:
    """pip of the virtualenv at ``bin_dir``, with the user's settings and cache (their HOME):
    the packages come from the cache."""
    completed = subprocess.run(
        [bin_dir / "python", "-m", "pip", *arguments],
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """`pip install <wheel>`: the plain install, dependencies included."""
    tmp_path = tmp_path_factory.mktemp("install")
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*LEFT_BEHIND))
    environment = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(environment)
    for folder in ("home", "elsewhere"):
        (tmp_path / folder).mkdir()
    bin_dir = environment / "bin"
    site_packages = subprocess.run(
        [bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    wheels = tmp_path / "wheels"
    pip(bin_dir, "wheel", "--quiet", "--no-deps", "--wheel-dir", str(wheels), str(source))
    shutil.rmtree(source)  # the wheel is all that is left of the checkout
    (wheel,) = wheels.glob("queuemesh-*.whl")
    pip(bin_dir, "install", "--quiet", str(wheel))
    return Installed(bin_dir, wheel, Path(site_packages), tmp_path / "home", tmp_path / "elsewhere")


def test_the_plain_install_runs_the_operator_commands_and_the_simulator_without_the_local_stack(
    installed: Installed,
) -> None:
    assert installed.distributions().isdisjoint(LOCAL_ONLY)
    for command in (["--help"], ["register", "--help"], ["status", "--help"], ["demo", "--help"]):
        completed = installed.run(["queuemesh", *command])
        assert completed.returncode == 0, completed.stderr[-2000:]
        assert completed.stdout.startswith("usage: queuemesh"), completed.stdout
    # An operator command reaches the point of calling AWS (and says why it cannot).
    status = installed.run(["queuemesh", "status", "--table", "t", "--region", "us-east-1"])
    assert status.returncode == 2, status.stderr
    assert status.stderr.startswith("queuemesh status: error: ")
    assert status.stderr.count("\n") == 1, status.stderr

    command = ["simulate", "--scenario", "capacity-drop", "--policy", "static", "--json"]
    simulated = installed.run(["queuemesh", *command])
    assert simulated.returncode == 0, simulated.stderr[-2000:]
    card = json.loads(simulated.stdout)
    assert (card["scenario"], card["policy"]) == ("capacity-drop", "static")
    assert card["totals"]["messages_total"] > 0
    located = installed.run(["python", "-c", "import load.sim.scenario as m; print(m.__file__)"])
    assert Path(located.stdout.strip()).is_relative_to(installed.site_packages), located

    for command in (["demo", "--headless"], ["dashboard"]):
        refused = installed.run(["queuemesh", *command])
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert refused.stderr == f"queuemesh {command[0]}: {NEEDS_LOCAL}\n"


def test_the_local_extra_adds_the_demo(installed: Installed) -> None:
    installed.pip("install", "--quiet", f"{installed.wheel}[local]")
    assert set(LOCAL_ONLY) <= installed.distributions()
    plot = installed.elsewhere / "demo.png"

    demo = installed.run(
        ["queuemesh", "demo", "--headless", "--duration", "5", "--grace", "0", "--plot", str(plot)],
        timeout=300,
    )

    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-3000:]
    assert "QueueMesh demo summary: scenario demo" in demo.stdout
    # The workers ran the example function from the installed packages.
    done = re.search(r"messages: \d+ sent, (\d+) done", demo.stdout)
    assert done is not None and int(done.group(1)) > 0, demo.stdout
    assert plot.stat().st_size > 0
    assert "Traceback" not in demo.stderr and "Warning" not in demo.stderr, demo.stderr[-3000:]
