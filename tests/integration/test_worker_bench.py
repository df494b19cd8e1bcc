"""`queuemesh bench worker` measures instrumented calls (its timings are not asserted here)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import pytest

from load.bench import BenchError, worker_clients, worker_stats
from load.bench import worker as bench
from stack.cli import main
from worker import instrument
from worker.invocation import Invocation


def test_the_benchmark_times_counted_calls_and_leaves_the_hooks_as_it_found_them() -> None:
    instrument.install()
    report = bench.measure_in_process(calls=12, block=5, clients=("urllib3", "httpx"))

    assert set(report["clients"]) == {"urllib3", "httpx"}
    for result in report["clients"].values():
        assert result["counted_calls"] == 12
        assert result["rounds"] == 3  # 5 + 5 + 2 calls per side
        assert result["uninstrumented_cpu_us"] > 0
        low, high = result["cpu_overhead_ci95_us"]
        assert low <= result["cpu_overhead_us"] <= high
        assert result["target_shown"] in {"met", "missed", "not resolved"}
    assert report["cpu_overhead_us"] == max(
        r["cpu_overhead_us"] for r in report["clients"].values()
    )
    assert report["meets_target"] == all(r["meets_target"] for r in report["clients"].values())
    assert instrument.installed()


def three_calls(
    client: str, *, hooked: bool, answer: bytes = worker_clients.ANSWER
) -> tuple[list[object], Invocation]:
    """Three calls of the named client (or its plain twin) inside an invocation, with the
    hooks installed, answered ``answer``: their answers, and the invocation that saw them."""
    invocation = Invocation(["orders"], environ={})
    instrument.install()
    instrument.begin(invocation)
    try:
        with worker_clients.client(client, hooked=hooked, answer=answer) as call:
            statuses = [call() for _ in range(3)]
    finally:
        instrument.end()
    return statuses, invocation


@pytest.mark.parametrize("client", bench.CLIENTS)
def test_every_client_answers_over_the_in_process_transport_and_is_counted(client: str) -> None:
    statuses, invocation = three_calls(client, hooked=True)

    assert statuses == [200, 200, 200]
    tally = invocation.tallies["orders"]
    assert (tally.requests, tally.ok) == (3, 3)
    assert tally.downstreams == {f"{worker_clients.HOST}:{worker_clients.PORT}"}


@pytest.mark.parametrize("client", bench.CLIENTS)
def test_every_client_reads_the_rate_limit_headers_of_the_announced_answer(client: str) -> None:
    _, invocation = three_calls(client, hooked=True, answer=worker_clients.ANNOUNCED_ANSWER)

    limit = invocation.tallies["orders"].limit
    assert limit is not None
    assert (limit.remaining, limit.quota, limit.window_s) == (42, 100, 60)


def test_the_spread_brackets_the_median_with_order_statistics() -> None:
    median, iqr, (low, high) = worker_stats.spread([float(value) for value in range(1, 101)])

    assert median == 50.5
    assert iqr == pytest.approx(50.0, abs=1.0)
    # 95% of the time the median lies between the 40th and 61st of 100 ordered values.
    assert (low, high) == (40.0, 61.0)


@pytest.mark.parametrize(
    ("verdicts", "overall"),
    [
        (["met", "met"], "met"),
        (["met", "not resolved"], "not resolved"),
        (["not resolved", "missed"], "missed"),
    ],
)
def test_the_target_is_shown_met_on_every_client_or_missed_on_any(
    verdicts: list[str], overall: str
) -> None:
    assert worker_stats.overall_verdict(verdicts) == overall


@pytest.mark.parametrize(
    ("low", "high", "verdict"),
    [(1.0, 5.0, "met"), (5.1, 9.0, "missed"), (4.0, 6.0, "not resolved")],
)
def test_the_target_is_shown_only_by_the_whole_interval(
    low: float, high: float, verdict: str
) -> None:
    assert worker_stats.verdict(low, high) == verdict


def test_with_announced_answers_the_fold_that_reads_their_headers_is_counted() -> None:
    report = bench.measure(calls=4, block=2, clients=("httpx",), processes=1, announced=True)

    assert report["announced"] is True
    result = report["clients"]["httpx"]
    assert result["counted_calls"] == 4
    # The tallies' fold (where the headers are read) is part of the call's overhead.
    assert result["fold_cpu_us"] > 0


def test_the_calls_are_split_across_fresh_processes_and_every_one_is_counted() -> None:
    report = bench.measure(calls=7, block=3, clients=("http.client", "httpx-async"), processes=3)

    assert (report["calls"], report["processes"]) == (7, 3)
    for name, factor in (("http.client", 1), ("httpx-async", 4)):
        result = report["clients"][name]
        # 3 + 2 + 2 calls per side, each process's counted by its hooks
        assert result["calls"] == result["counted_calls"] == 7 * factor
        assert len(result["process_cpu_overheads_us"]) == 3
        low, high = result["cpu_overhead_ci95_us"]
        assert low <= result["cpu_overhead_us"] <= high
        # three processes are too few for a 95% interval: the target is neither shown
        assert result["target_shown"] == "not resolved"
    assert result["rounds"] == 4 + 3 + 3  # httpx async: 12, 8 and 8 pairs in rounds of 3


def process_report(overheads: dict[str, float], calls: int) -> dict[str, Any]:
    """What one process reports (``measure_in_process``), with the given overheads."""
    clients = {
        name: {
            "uninstrumented_us": 100.0 + overhead,
            "instrumented_us": 110.0 + overhead,
            "uninstrumented_cpu_us": 90.0 + overhead,
            "instrumented_cpu_us": 95.0 + overhead,
            "overhead_us": overhead + 1,
            "overhead_iqr_us": 1.0,
            "cpu_overhead_us": overhead,
            "cpu_overhead_iqr_us": 1.0,
            "cpu_overhead_ci95_us": [overhead - 1, overhead + 1],
            "ratio": 1.1,
            "cpu_ratio": 1.05,
            "fold_cpu_us": 0.5,
            "calls": calls,
            "rounds": 2,
            "counted_calls": calls,
            "meets_target": overhead <= worker_stats.TARGET_OVERHEAD_US,
            "target_shown": "met",
        }
        for name, overhead in overheads.items()
    }
    return bench._report(clients, calls=calls, block=25, processes=1, announced=False)


def test_the_figures_are_medians_over_processes_with_their_interval() -> None:
    # Ten processes: each measured urllib3 at 1..10 us and httpx at 10 us less.
    reports = [
        process_report({"urllib3": float(value), "httpx": value - 10.0}, calls=40)
        for value in (3, 7, 1, 10, 5, 2, 9, 4, 8, 6)
    ]

    report = bench._over_processes(reports)

    assert (report["calls"], report["processes"], report["block"]) == (400, 10, 25)
    urllib3 = report["clients"]["urllib3"]
    assert urllib3["cpu_overhead_us"] == 5.5
    assert urllib3["overhead_us"] == 6.5
    assert urllib3["uninstrumented_cpu_us"] == 95.5
    # Ten processes' median lies between the lowest and the highest 95% of the time and more:
    # the interval is theirs, not any one process's.
    assert urllib3["cpu_overhead_ci95_us"] == [1.0, 10.0]
    assert urllib3["process_cpu_overheads_us"] == [3, 7, 1, 10, 5, 2, 9, 4, 8, 6]
    assert (urllib3["calls"], urllib3["counted_calls"], urllib3["rounds"]) == (400, 400, 20)
    assert (urllib3["meets_target"], urllib3["target_shown"]) == (False, "not resolved")
    httpx = report["clients"]["httpx"]
    assert httpx["cpu_overhead_ci95_us"] == [-9.0, 0.0]
    assert (httpx["meets_target"], httpx["target_shown"]) == (True, "met")
    assert (report["worst_client"], report["cpu_overhead_us"]) == ("urllib3", 5.5)
    assert (report["meets_target"], report["target_shown"]) == (False, "not resolved")


def test_a_child_that_fails_or_hangs_fails_the_bench_in_one_line() -> None:
    with pytest.raises(BenchError, match=r"process 2 of 3 failed \(exit 1\): broken$"):
        bench._run_process(
            [sys.executable, "-c", "import sys; sys.exit('broken')"],
            timeout_s=60,
            label="process 2 of 3",
        )
    with pytest.raises(BenchError, match="process 1 of 3 gave no answer within 0 s"):
        bench._run_process(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            timeout_s=0.2,
            label="process 1 of 3",
        )


def test_the_command_prints_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    command = ["bench", "worker", "--calls", "6", "--block", "3", "--processes", "2"]
    assert main([*command, "--client", "http.client", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) >= {"overhead_us", "cpu_overhead_us", "ratio", "clients", "meets_target"}
    assert report["processes"] == 2
    assert report["clients"]["http.client"]["counted_calls"] == 6


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (["--calls", "0"], "--calls must be between 1 and 100000; got 0"),
        (
            ["--processes", "0"],
            "--processes must be between 1 and 100, and at most --calls (4000: each process "
            "makes at least one call); got 0",
        ),
        (
            ["--calls", "5", "--processes", "6"],
            "--processes must be between 1 and 100, and at most --calls (5: each process "
            "makes at least one call); got 6",
        ),
    ],
)
def test_bad_arguments_are_one_line_errors(
    arguments: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "worker", *arguments]) == 2
    assert capsys.readouterr().err.strip() == f"queuemesh bench: error: {error}"


@pytest.mark.parametrize("client", bench.CLIENTS)
def test_the_plain_twin_answers_the_same_and_the_hooks_do_not_see_it(client: str) -> None:
    statuses, invocation = three_calls(client, hooked=False)

    assert statuses == [200, 200, 200]
    assert invocation.tallies["orders"].requests == 0


def test_the_originals_are_the_methods_the_hooks_replaced_while_installed() -> None:
    import http.client

    instrument.uninstall()
    unhooked = http.client.HTTPConnection.__dict__["getresponse"]
    assert instrument.originals() == {}
    instrument.install()

    originals = instrument.originals()
    assert originals[(http.client.HTTPConnection, "getresponse")] is unhooked
    assert http.client.HTTPConnection.__dict__["getresponse"] is not unhooked


def test_a_round_weighs_both_call_orders_alike() -> None:
    # The second call of a pair is 10 us cheaper (warm caches); the hooks add 5 us.
    calls: list[str] = []

    def timed(side: str, cost_ns: int) -> Callable[[], tuple[int, int]]:
        def call() -> tuple[int, int]:
            calls.append(side)
            second = len(calls) % 2 == 0
            cost = cost_ns - (10_000 if second else 0)
            return cost, cost

        return call

    settle = Invocation(["bench"], environ={})
    invocation = Invocation(["bench"], environ={})
    result = bench._time_round(
        timed("plain", 100_000),
        timed("hooked", 105_000),
        5,  # three pairs in one order, two in the other
        hooked_first=True,
        settle=settle,
        invocation=invocation,
    )

    # The tallies' fold after the round (here of calls the fakes never made) counts too.
    assert result.cpu_overhead == pytest.approx(5.0 + result.fold_cpu)
    assert result.wall_overhead == pytest.approx(5.0 + result.fold_cpu)
    timed_calls = calls[2 * bench.SETTLE_CALLS :]
    assert timed_calls[:4] == ["hooked", "plain", "plain", "hooked"]
    # the untimed pairs keep the alternation: the first timed call follows its own side
    assert calls[2 * bench.SETTLE_CALLS - 1] == "hooked"
