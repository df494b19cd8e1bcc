"""Progress on long commands: a line on stderr while a person watches, nothing otherwise.

The commands run in a subprocess whose stdout is a pseudo-terminal (what a person sees) or a
pipe (what a script sees); the library functions report through their callbacks.
"""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
import threading

import pytest

from load.progress import REDRAW_S, Progress
from load.recording import read_recording
from load.replay import ReplayConfig, replay
from tests.factories import SIMULATED_POLICIES
from tests.paths import ROOT

ERASE = "\r\x1b[K"


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_draws_in_place_at_a_bounded_rate_and_erases_itself() -> None:
    stream, clock = io.StringIO(), FakeClock()
    with Progress("replay", stream, clock) as progress:
        progress.update(0, 10, "invocations")
        clock.now += REDRAW_S / 2
        progress.update(1, 10, "invocations")  # too soon: not drawn
        clock.now += 1.0
        progress.update(2, 10, "invocations")
        progress.update(10, 10, "invocations")  # the last step is always drawn
        clock.now += 1.0
        progress.update(12_345)  # no total known
    assert stream.getvalue() == (
        f"{ERASE}replay: 0/10 invocations{ERASE}replay: 2/10 invocations"
        f"{ERASE}replay: 10/10 invocations{ERASE}replay: 12,345{ERASE}"
    )


def test_progress_is_shown_only_to_a_terminal_and_never_with_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for stdout, json_output in ((io.StringIO(), False), (FakeTerminal(), True)):
        with Progress.for_command("simulate", json_output=json_output, stdout=stdout) as quiet:
            quiet.update(1, 2, "runs")
    assert capsys.readouterr().err == ""
    with Progress.for_command("simulate", stdout=FakeTerminal()) as shown:
        shown.update(1, 2, "runs")
    assert capsys.readouterr().err == f"{ERASE}simulate: 1/2 runs{ERASE}"


def run_cli(arguments: list[str], terminal: bool) -> tuple[str, str]:
    """``queuemesh ARGUMENTS`` with stdout on a pseudo-terminal or a pipe: (stdout, stderr).

    Bytes are decoded as they are: text mode would turn the progress line's carriage returns
    into newlines."""
    command = [sys.executable, "-m", "stack.cli", *arguments]
    if not terminal:
        completed = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=240, check=True)
        return completed.stdout.decode(), completed.stderr.decode()
    controller, attached = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal's other end closed
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        completed = subprocess.run(
            command,
            cwd=ROOT,
            stdout=attached,
            stderr=subprocess.PIPE,
            timeout=240,
            check=True,
        )
    finally:
        os.close(attached)
        reader.join(timeout=10)
        os.close(controller)
    return b"".join(chunks).decode().replace("\r\n", "\n"), completed.stderr.decode()


def test_simulate_shows_progress_on_a_terminal_and_prints_the_same_table() -> None:
    arguments = ["simulate", "--scenario", "capacity-drop", "--policy", "all"]
    table, progress = run_cli(arguments, terminal=True)
    assert progress.startswith(f"{ERASE}simulate: 0/8 runs (capacity-drop, static)")
    # Redraws are throttled, so a fast run's line may be skipped; those drawn are in order
    # and name the policy that ran, and the last says every run is done.
    drawn = [line for line in progress.split(ERASE) if line]
    expected = [
        f"simulate: {n}/8 runs (capacity-drop, {name})" for n, name in enumerate(SIMULATED_POLICIES)
    ]
    assert all(line in expected for line in drawn[:-1])
    assert drawn[:-1] == sorted(drawn[:-1], key=expected.index)
    assert drawn[-1] == "simulate: 8/8 runs"
    assert progress.endswith(ERASE)  # erased before the table
    piped_table, piped_stderr = run_cli(arguments, terminal=False)
    assert piped_stderr == ""
    # The table's timing column differs run to run; its rows and columns do not.
    assert [line.split()[:1] for line in table.splitlines()] == [
        line.split()[:1] for line in piped_table.splitlines()
    ]


def test_simulate_json_on_a_terminal_has_no_progress() -> None:
    arguments = ["simulate", "--scenario", "capacity-drop", "--policy", "static", "--json"]
    output, stderr = run_cli(arguments, terminal=True)
    assert stderr == ""
    assert json.loads(output)["policy"] == "static"


def test_replay_reports_each_controller_invocation() -> None:
    records = read_recording(ROOT / "tests" / "golden" / "storm.jsonl").records
    heard: list[tuple[int, int, str]] = []
    replay(records, ReplayConfig(), progress=lambda *step: heard.append(step))
    total = heard[0][1]
    assert total > 10
    assert heard == [(done, total, "controller invocations") for done in range(total)]


def test_bench_fleet_reports_setup_and_every_mapping_update() -> None:
    from load.bench.fleet import measure
    from stack.local.emulator import EmbeddedAws

    heard: list[tuple[int, int, str]] = []
    with EmbeddedAws() as aws:
        report = measure(
            aws.endpoint, 4, timeout_s=30, max_invocations=3, progress=lambda *s: heard.append(s)
        )
    assert heard[0] == (0, 4, "setting up queues, mappings and registrations")
    updates = heard[1:]
    assert updates == [(n, 4, "mappings updated") for n in range(1, report["update_calls"] + 1)]
    assert report["update_calls"] >= 4
