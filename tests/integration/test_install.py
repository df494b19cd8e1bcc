"""`pip install .` (not editable) gives a working `queuemesh`, scenarios included.

The project is copied out of the checkout and installed into a fresh virtualenv with
``--no-deps``; its dependencies come from this virtualenv through a ``.pth`` line (they are
what ``pyproject.toml`` asks for already, and installing them again would only cost time).
The command then runs from a folder outside the checkout, so nothing can be imported from it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path

from tests.paths import ROOT

LEFT_BEHIND = (".git", ".venv", ".sam-venv", "build", "*.egg-info", "__pycache__", ".*_cache")


def test_installed_queuemesh_simulates_a_shipped_scenario_outside_the_checkout(
    tmp_path: Path,
) -> None:
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*LEFT_BEHIND))
    environment = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(environment)
    bin_dir = environment / "bin"
    site_packages = Path(
        subprocess.run(
            [bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site_packages / "project-dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8"
    )
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(tmp_path)}
    # The build itself runs isolated, as a user's `pip install .` does (setuptools from the
    # index, per pyproject's build-system).
    installed = subprocess.run(
        [bin_dir / "python", "-m", "pip", "install", "--quiet", "--no-deps", str(source)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    shutil.rmtree(source)  # the installed copy is all that is left
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    command = ["simulate", "--scenario", "capacity-drop", "--policy", "static", "--json"]
    completed = subprocess.run(
        [bin_dir / "queuemesh", *command],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr[-2000:]
    card = json.loads(completed.stdout)
    assert (card["scenario"], card["policy"]) == ("capacity-drop", "static")
    assert card["totals"]["messages_total"] > 0
    located = subprocess.run(
        [bin_dir / "python", "-c", "import load.sim.scenario as m; print(m.__file__)"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(located).is_relative_to(site_packages), located
