"""`queuemesh bench worker` measures instrumented calls (its timings are not asserted here)."""

from __future__ import annotations

import json

import pytest

from load.bench import worker as bench
from stack.cli import main
from worker import instrument


def test_the_benchmark_times_counted_calls_and_leaves_the_hooks_as_it_found_them() -> None:
    instrument.install()
    report = bench.measure(calls=12, block=5, clients=("urllib3", "httpx"))

    assert set(report["clients"]) == {"urllib3", "httpx"}
    for result in report["clients"].values():
        assert result["counted_calls"] == 12
        assert result["uninstrumented_us"] > 0
    assert report["overhead_us"] == max(r["overhead_us"] for r in report["clients"].values())
    assert instrument.installed()


def test_the_command_prints_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            ["bench", "worker", "--calls", "6", "--block", "3", "--client", "http.client", "--json"]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert set(report) >= {"overhead_us", "ratio", "clients", "meets_target"}
    assert report["clients"]["http.client"]["counted_calls"] == 6


def test_bad_arguments_are_one_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "worker", "--calls", "0"]) == 2
    assert capsys.readouterr().err.strip() == (
        "queuemesh bench: error: --calls must be between 1 and 100000; got 0"
    )
