"""`queuemesh bench worker`: what the worker's HTTP hooks add to each downstream call.

Each client library (http.client, urllib3, requests, httpx sync and async) makes the same
keep-alive GET over an in-process transport that answers every request with the same canned
response (``load.bench.worker_clients``), so a difference of a few microseconds is not lost in
the noise of the network path (which the hooks do not touch).

The hooks are installed once, as in a worker, and every timed call runs inside an open
invocation (so every hooked call is counted). The plain side is a twin of the same client (a new
subclass of every hooked class, holding the libraries' own methods), so plain calls run none of
the hooks' code and no class changes while the bench runs. The two clients then take turns call
by call: calls are timed in pairs, one hooked and one plain back to back (which goes first
alternating from pair to pair, and a round's figure taking both orders alike: ``_time_round``),
in rounds of ``block`` pairs; the twins are rebuilt every ``SEGMENT_ROUNDS`` rounds, the side
built first alternating, so neither side keeps a lucky place in memory or in the interpreter's
caches. Removing and reinstalling the hooks between blocks
instead rewrites the clients' classes, after which the interpreter re-learns every call site for
some 64 calls: that put tens of milliseconds between the two sides, over which a shared host's
speed swings by several percent (hundreds of microseconds on a requests call), far more than
the hooks cost. Two calls in a row see the same host. An async call is timed inside its event
loop, from the ``await`` to the answer (``worker_clients.timed_client``).

Each round starts with a garbage collection and ``SETTLE_CALLS`` untimed pairs (the collection
evicts the caches), and the collector is off while the round's pairs are timed, on both sides:
otherwise a collection lands in some calls and not others. A hooked call leaves one object the
collector tracks: the tuple it appends to the invocation, kept until the tallies take it in
(when the invocation's documents are written, or after ``FOLD_EVERY`` calls). That is one more
young-generation object a call than the plain call leaves, on every client (the plain call
itself leaves up to about 1 on http.client, urllib3 and requests, and about 42 on httpx, in
reference cycles of its own): one more young collection (700 objects, some 8 us) per 700 calls,
about 0.01 us a call, and none while pairs are timed here. In the bench the round's untimed
collection walks the tuples and stops tracking them (with no message to attribute them to, they
hold nothing it tracks); in a worker, whose tuples hold the message's ``RecordRef``, they stay
tracked until the tallies take them in. The heap the imports built is frozen (``gc.freeze``) for
the run, so a collection walks only what the calls left.

The hooks only keep what they saw; the tallies take it in later (when the invocation's
documents are written, or ``FOLD_EVERY`` calls have piled up), and that is where http.client's,
urllib3's and requests' answers' rate-limit headers are read (httpx's are read in its hooks).
So each round ends by taking its calls into the tallies, timed, and that fold's CPU time per call
is added to the round's overhead (``fold_cpu_us`` shows its share): the figure is the whole work a
call costs, now or deferred. With ``announced`` every answer carries rate-limit headers (IETF
and X-RateLimit: ``worker_clients.ANNOUNCED_ANSWER``), the worst case for reading them.

A pair's figure is hooked minus plain calling-thread CPU time (the time the host gives other
work does not count) and, beside it, wall time; a round's figure is the median of its pairs',
and a process's the median of its rounds' (``measure_in_process``), with a 95% interval that
says how precisely that process's figure is known. It does not say how the figure varies from
process to process, and it varies more than that: the interpreter's type attribute cache is
indexed by addresses, so which lookups collide, and with them a call's cost by thousands of
instructions, changes with the memory layout, drawn anew in every process (short runs of the
same code in fresh processes: requests 1.2-10.8 us, httpx async -3.9 to 17 us). So ``measure``
splits ``calls`` across ``processes`` fresh interpreters (``python -m`` this module), run one
after another (side by side they would disturb each other), each measuring every client and
printing its report; a child that fails, or does not answer within its time limit, fails the
bench (``BenchError``). Every figure of the report is over processes: ``cpu_overhead_us`` and
``overhead_us`` are the medians of the processes' figures, ``process_cpu_overheads_us`` lists
those figures in run order, ``cpu_overhead_iqr_us`` says how far processes disagree and
``cpu_overhead_ci95_us`` how precisely the median over processes is known (the order statistics
that bracket it: ``worker_stats.spread``); the plain and hooked times, ``ratio`` and ``cpu_ratio``
(a round's median hooked call plus its share of the fold over its median plain call, medians
over rounds; before 2026-12-03 23:00 the fold was left out of the ratios) are medians over
processes, and ``calls``, ``rounds`` and ``counted_calls`` are summed. The clients whose calls
vary most from one call to the next get a multiple of ``calls`` (``CALLS_FACTOR``; an httpx
async pair's difference spreads over some 200 us between its quartiles, against 25 us for
urllib3): what is measured is the same, only known more precisely. The target, at most 5 us per
call, is judged on every client's ``cpu_overhead_us`` (``meets_target``) and on its whole
interval (``target_shown``; fewer than ``MIN_PROCESSES_SHOWN`` processes show it neither met
nor missed).
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, NamedTuple, cast

from load.bench import BenchError
from load.bench.worker_clients import ANNOUNCED_ANSWER, ANSWER, timed_client
from load.bench.worker_stats import (
    TARGET_OVERHEAD_US,
    client_over_processes,
    overall_verdict,
    overheads,
)

CLIENTS = ("http.client", "urllib3", "requests", "httpx", "httpx-async")
# Times the calls per side for the clients whose calls vary most from one to the next (the
# longest: an httpx async call also passes through the event loop three times), so that their
# intervals come closer to the others' width.
CALLS_FACTOR = {"requests": 2, "httpx-async": 4}
WARMUP_CALLS = 20  # per side, before the first round of a segment
SEGMENT_ROUNDS = 16  # rounds on the same pair of clients
SETTLE_CALLS = 4  # per side, untimed, at the start of every round
# Fresh processes the calls are split across. With ten, the 95% interval of the median over
# processes is their whole range, so one process drawing an unlucky layout sets a bound; eleven
# and more leave out the lowest and the highest. Their starts (under a second each) are small
# beside the measurement.
DEFAULT_PROCESSES = 12
MAX_PROCESSES = 100
# The fewest processes whose range holds the median over processes 95% of the time
# (1 - 2 / 2**n): with fewer, the target is shown neither met nor missed.
MIN_PROCESSES_SHOWN = 6
# A child's time limit: its start, then a generous allowance per timed pair (an httpx async
# pair, the longest, takes about 2 ms of CPU with its untimed share; a busy host, a few times
# that), so a child that hangs fails the bench instead of stalling it.
PROCESS_START_ALLOWANCE_S = 60.0
PAIR_ALLOWANCE_S = 0.02


class _Round(NamedTuple):
    """Medians of one round's pairs, in microseconds."""

    cpu_overhead: float  # of hooked minus plain, pair by pair, plus the fold's share
    fold_cpu: float  # taking the round's calls into the tallies, per call
    wall_overhead: float
    plain_cpu: float
    hooked_cpu: float
    plain_wall: float
    hooked_wall: float


def _time_round(
    plain: Callable[[], tuple[int, int]],
    hooked: Callable[[], tuple[int, int]],
    pairs: int,
    *,
    hooked_first: bool,
    settle: Any,
    invocation: Any,
) -> _Round:
    """``pairs`` pairs of timed calls, hooked and plain back to back, which goes first
    alternating from pair to pair (``hooked_first``: in the first pair); the hooked calls
    counted for ``invocation``, the settling ones for ``settle``.

    The second call of a pair runs on caches the first left warm, so the pairs are told apart
    by which side went first and the round's overhead is the mean of the two orders' medians:
    the warm-cache advantage is on the plain side in one and the hooked side in the other, and
    cancels (a single median of both would take the order that has more pairs, or that the
    caches favour more). Medians shrug off the calls that found the caches cold after the host
    ran other work.
    """
    from worker import instrument

    def hooked_goes_first(pair: int) -> bool:
        return (pair % 2 == 0) == hooked_first

    gc.collect()
    instrument.begin(settle)
    try:
        # The untimed pairs run in the same alternating order as the timed ones that follow,
        # so every first call of a timed pair follows a call of its own side, as in the rest.
        for pair in range(-SETTLE_CALLS, 0):
            first, second = (hooked, plain) if hooked_goes_first(pair) else (plain, hooked)
            first()
            second()
    finally:
        instrument.end()
    # (plain, hooked) times of each pair, by whether the hooked call went first
    by_order: dict[bool, list[tuple[tuple[int, int], tuple[int, int]]]] = {True: [], False: []}
    gc.disable()
    instrument.begin(invocation)
    try:
        for pair in range(pairs):
            first_is_hooked = hooked_goes_first(pair)
            if first_is_hooked:
                hooked_time = hooked()
                plain_time = plain()
            else:
                plain_time = plain()
                hooked_time = hooked()
            by_order[first_is_hooked].append((plain_time, hooked_time))
        # The hooks keep what they saw for the tallies to take in later (reading every client's
        # answers' rate-limit headers but httpx's among it): that fold is the calls' work too,
        # deferred, so its CPU time per call counts on the hooked side.
        fold_started = time.thread_time_ns()
        invocation.tallies  # noqa: B018 (the read folds the calls)
        fold_ns = time.thread_time_ns() - fold_started
    finally:
        instrument.end()
        gc.enable()
    timed = by_order[True] + by_order[False]
    fold_us = fold_ns / pairs / 1000

    def overhead(clock: int) -> float:
        return (
            statistics.mean(
                statistics.median(h[clock] - p[clock] for p, h in order)
                for order in by_order.values()
                if order
            )
            / 1000
        )

    return _Round(
        cpu_overhead=overhead(0) + fold_us,
        fold_cpu=fold_us,
        wall_overhead=overhead(1) + fold_us,
        plain_cpu=statistics.median(p[0] for p, _ in timed) / 1000,
        hooked_cpu=statistics.median(h[0] for _, h in timed) / 1000,
        plain_wall=statistics.median(p[1] for p, _ in timed) / 1000,
        hooked_wall=statistics.median(h[1] for _, h in timed) / 1000,
    )


def _measure_client(name: str, calls: int, block: int, answer: bytes) -> dict[str, Any]:
    """Rounds of paired calls, hooked and plain; medians over rounds.

    Pairing neighbouring calls cancels the swings of a shared host's speed, alternating the
    order within a pair cancels what the first call of a pair leaves warm for the second, and
    the median over rounds shrugs off a disturbed round.
    """
    from worker import instrument

    settle = instrument.Invocation(["bench"], environ={})
    invocation = instrument.Invocation(["bench"], environ={})
    rounds: list[_Round] = []
    done = 0
    while done < calls:
        # Which side's client is built first (its classes, its objects' places in memory)
        # alternates from segment to segment.
        plain_first = len(rounds) % (2 * SEGMENT_ROUNDS) == 0
        with ExitStack() as clients:
            sides = {
                is_hooked: clients.enter_context(
                    timed_client(name, hooked=is_hooked, answer=answer)
                )
                for is_hooked in ((False, True) if plain_first else (True, False))
            }
            plain, hooked = sides[False], sides[True]
            instrument.begin(settle)
            try:
                for _ in range(WARMUP_CALLS):
                    plain()
                    hooked()
            finally:
                instrument.end()
            for _ in range(SEGMENT_ROUNDS):
                if done == calls:
                    break
                size = min(block, calls - done)
                rounds.append(
                    _time_round(
                        plain,
                        hooked,
                        size,
                        hooked_first=len(rounds) % 2 == 0,
                        settle=settle,
                        invocation=invocation,
                    )
                )
                done += size
    counted = invocation.tallies["bench"].ok
    if counted != calls:
        raise BenchError(
            f"the hooks counted {counted} of {calls} {name} calls: the measurement is not of "
            "instrumented calls; this is a QueueMesh bug, please report it"
        )
    return {
        "uninstrumented_us": round(statistics.median(r.plain_wall for r in rounds), 2),
        "instrumented_us": round(statistics.median(r.hooked_wall for r in rounds), 2),
        "uninstrumented_cpu_us": round(statistics.median(r.plain_cpu for r in rounds), 2),
        "instrumented_cpu_us": round(statistics.median(r.hooked_cpu for r in rounds), 2),
        # The hooked call with its share of the fold (deferred work) over the plain call.
        "ratio": round(
            statistics.median((r.hooked_wall + r.fold_cpu) / r.plain_wall for r in rounds), 4
        ),
        "cpu_ratio": round(
            statistics.median((r.hooked_cpu + r.fold_cpu) / r.plain_cpu for r in rounds), 4
        ),
        "fold_cpu_us": round(statistics.median(r.fold_cpu for r in rounds), 2),
        "calls": calls,
        "rounds": len(rounds),
        "counted_calls": counted,
        **overheads(
            [r.cpu_overhead for r in rounds], [r.wall_overhead for r in rounds], can_show=True
        ),
    }


def measure_in_process(
    *, calls: int, block: int, clients: tuple[str, ...], announced: bool = False
) -> dict[str, Any]:
    """One process's measurement (what a child of ``measure`` runs): ``calls`` timed pairs
    per client (times ``CALLS_FACTOR``), medians over rounds; with ``announced``, every answer
    carries rate-limit headers."""
    from worker import instrument

    was_installed = instrument.installed()
    results: dict[str, dict[str, Any]] = {}
    instrument.install()
    gc.freeze()  # what the imports built: a collection before each round walks only the rest
    try:
        for name in dict.fromkeys(clients):
            results[name] = _measure_client(
                name,
                calls * CALLS_FACTOR.get(name, 1),
                block,
                ANNOUNCED_ANSWER if announced else ANSWER,
            )
    finally:
        gc.unfreeze()
        if not was_installed:
            instrument.uninstall()
    return _report(results, calls=calls, block=block, processes=1, announced=announced)


def measure(
    *,
    calls: int,
    block: int,
    clients: tuple[str, ...],
    processes: int,
    announced: bool = False,
) -> dict[str, Any]:
    """``calls`` timed pairs per client (times ``CALLS_FACTOR``) split across ``processes``
    fresh interpreters run one after another, each measuring every client; per client the
    median and 95% interval over processes (``worker_stats.client_over_processes``). With
    ``announced``, every answer carries rate-limit headers (IETF and X-RateLimit)."""
    names = tuple(dict.fromkeys(clients))
    shares = [calls // processes + (index < calls % processes) for index in range(processes)]
    reports = []
    for index, share in enumerate(shares):
        pairs = share * sum(CALLS_FACTOR.get(name, 1) for name in names)
        arguments = {"calls": share, "block": block, "clients": names, "announced": announced}
        reports.append(
            _run_process(
                [sys.executable, "-m", __name__, json.dumps(arguments)],
                timeout_s=PROCESS_START_ALLOWANCE_S + pairs * PAIR_ALLOWANCE_S,
                label=f"process {index + 1} of {processes}",
            )
        )
    return _over_processes(reports)


def _run_process(command: list[str], *, timeout_s: float, label: str) -> dict[str, Any]:
    """The JSON report ``command`` prints, run from the directory holding this package (so
    ``-m`` imports the same code as this process, whichever directory the bench was started
    in); a child that fails, or has not answered within ``timeout_s``, is a ``BenchError``."""
    try:
        finished = subprocess.run(
            command,
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise BenchError(
            f"worker bench {label} gave no answer within {timeout_s:.0f} s and was stopped"
        ) from error
    if finished.returncode != 0:
        last_line = (finished.stderr.strip().splitlines() or ["no message"])[-1]
        raise BenchError(f"worker bench {label} failed (exit {finished.returncode}): {last_line}")
    try:
        return cast(dict[str, Any], json.loads(finished.stdout))
    except ValueError as error:
        raise BenchError(f"worker bench {label} printed no JSON report: {error}") from error


def _over_processes(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The report over several processes' reports (``measure_in_process``, in run order)."""
    return _report(
        {
            name: client_over_processes(
                [report["clients"][name] for report in reports],
                can_show=len(reports) >= MIN_PROCESSES_SHOWN,
            )
            for name in reports[0]["clients"]
        },
        calls=sum(report["calls"] for report in reports),
        block=reports[0]["block"],
        processes=len(reports),
        announced=reports[0]["announced"],
    )


def _report(
    results: dict[str, dict[str, Any]],
    *,
    calls: int,
    block: int,
    processes: int,
    announced: bool,
) -> dict[str, Any]:
    """The whole report around the clients' results: the worst client's figures first."""
    worst = max(results, key=lambda name: results[name]["cpu_overhead_us"])
    return {
        "benchmark": "worker",
        "transport": "in-process canned answer",
        "announced": announced,
        "calls": calls,
        "block": block,
        "processes": processes,
        "settle_calls": SETTLE_CALLS,
        "python": sys.version.split()[0],
        "clients": results,
        "worst_client": worst,
        "overhead_us": max(result["overhead_us"] for result in results.values()),
        "cpu_overhead_us": results[worst]["cpu_overhead_us"],
        "ratio": max(result["ratio"] for result in results.values()),
        "cpu_ratio": max(result["cpu_ratio"] for result in results.values()),
        "target_overhead_us": TARGET_OVERHEAD_US,
        "meets_target": all(result["meets_target"] for result in results.values()),
        "target_shown": overall_verdict([result["target_shown"] for result in results.values()]),
    }


def _main(argument: str) -> int:
    """A child of ``measure``: ``measure_in_process`` with the JSON ``argument``'s calls,
    block and clients, its report printed as JSON (a ``BenchError`` as its message)."""
    arguments = json.loads(argument)
    try:
        report = measure_in_process(
            calls=arguments["calls"],
            block=arguments["block"],
            clients=tuple(arguments["clients"]),
            announced=arguments["announced"],
        )
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
