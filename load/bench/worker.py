"""`queuemesh bench worker`: what the worker's HTTP hooks add to each downstream call.

Each client library (http.client, urllib3, requests, httpx sync and async) makes the same
keep-alive GET over an in-process transport that answers every request with the same canned
response: the client's own code and the hooks run, the kernel and a server do not, so a call
takes tens to hundreds of microseconds instead of milliseconds, and a difference of a few is
not lost in the noise of the network path (which the hooks do not touch).

The hooks are installed once, as in a worker, and every timed call runs inside an open
invocation (so every hooked call is counted). The plain side is a twin of the same client: each
side's client gets a new subclass of every hooked class, holding the hooks on one side and the
libraries' own methods on the other (``_twin``), so plain calls run none of the hooks' code and
no class changes while the bench runs. The two clients then take turns call by call: calls are
timed in pairs, one hooked and one plain back to back (which goes first alternating from pair
to pair, and a round's figure taking both orders alike: ``_time_round``), in rounds of ``block``
pairs; the twins are rebuilt every
``SEGMENT_ROUNDS`` rounds, the side built first alternating, so neither side keeps a lucky place
in memory or in the interpreter's caches. Removing and reinstalling the hooks between blocks
instead rewrites the clients' classes, after which the interpreter re-learns every call site for
some 64 calls: that put tens of milliseconds between the two sides, over which a shared host's
speed swings by several percent (hundreds of microseconds on a requests call), far more than
the hooks cost. Two calls in a row see the same host. An async call is timed inside its event
loop, from the ``await`` to the answer (``_timed_client``).

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
that bracket it, as ``_spread`` does); the plain and hooked times, ``ratio`` and ``cpu_ratio``
(a round's median hooked call over its median plain call, medians over rounds) are medians over
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
import io
import json
import math
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, NamedTuple, cast

from load.bench import BenchError

TARGET_OVERHEAD_US = 5.0
CLIENTS = ("http.client", "urllib3", "requests", "httpx", "httpx-async")
# Times the calls per side for the clients whose calls vary most from one to the next (the
# longest: an httpx async call also passes through the event loop three times), so that their
# intervals come closer to the others' width.
CALLS_FACTOR = {"requests": 2, "httpx-async": 4}
WARMUP_CALLS = 20  # per side, before the first round of a segment
SEGMENT_ROUNDS = 16  # rounds on the same pair of clients
SETTLE_CALLS = 4  # per side, untimed, at the start of every round
CONFIDENCE_Z = 1.96  # of a 95% confidence interval
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
# The downstream the calls name: never connected to (the transport is in-process).
HOST, PORT = "127.0.0.1", 8080
ANSWER = (
    b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'
)


class _CannedSocket:
    """A connected socket whose server has the answer ready as soon as it is asked."""

    def __init__(self) -> None:
        # urllib3 polls a pooled connection's descriptor before reusing it (a readable one was
        # closed by the server): one end of an idle pair never is.
        self._idle, self._peer = socket.socketpair()

    def sendall(self, data: bytes) -> None:
        """The request goes nowhere: the answer does not depend on it."""

    def makefile(self, mode: str) -> io.BytesIO:
        return io.BytesIO(ANSWER)

    def settimeout(self, timeout: float | None) -> None:
        """Nothing waits."""

    def fileno(self) -> int:
        return self._idle.fileno()

    def close(self) -> None:
        self._idle.close()
        self._peer.close()


def _twin(cls: type[Any], *, hooked: bool) -> type[Any]:
    """A new subclass of ``cls`` holding the methods the hooks replaced on ``cls``: the hooks
    when ``hooked``, else the methods as the library defines them (calls run none of the
    hooks' code). The two sides' classes are built alike, and anew for each segment."""
    from worker import instrument

    methods = {
        name: vars(cls)[name] if hooked else original
        for (owner, name), original in instrument.originals().items()
        if owner is cls
    }
    return type(f"{'Hooked' if hooked else 'Unhooked'}{cls.__name__}", (cls,), methods)


@contextmanager
def _http_client(*, hooked: bool) -> Iterator[Callable[[], object]]:
    import http.client

    connection = _twin(http.client.HTTPConnection, hooked=hooked)(HOST, PORT)
    connection.sock = _CannedSocket()  # connected: the connection never dials

    def call() -> object:
        connection.request("GET", "/")
        response = connection.getresponse()
        response.read()
        return response.status

    try:
        yield call
    finally:
        connection.close()


def _canned_socket(connection: object) -> socket.socket:
    return cast(socket.socket, _CannedSocket())


def _urllib3_pool_class(*, hooked: bool) -> type[Any]:
    """urllib3's connection pool, its connections on canned sockets."""
    import http.client

    import urllib3
    from urllib3.connection import HTTPConnection

    # The twin of http.client's (hooked) connection class goes between it and urllib3's, where
    # urllib3's ``super()`` calls find the twin's methods.
    bases = (HTTPConnection, _twin(http.client.HTTPConnection, hooked=hooked))
    connection_class = type("CannedConnection", bases, {"_new_conn": _canned_socket})
    return type("CannedPool", (urllib3.HTTPConnectionPool,), {"ConnectionCls": connection_class})


def _httpx_transport(*, asynchronous: bool, hooked: bool) -> Any:
    """httpx's sync or async transport, its connections on a canned stream."""
    import httpcore
    import httpx

    # httpx builds its transport's connection pool itself; the pool is replaced by the same
    # pool on a canned network backend, so httpx's and httpcore's own code run as they would.
    if not asynchronous:

        class CannedStream(httpcore.NetworkStream):
            def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
                return ANSWER

            def write(self, buffer: bytes, timeout: float | None = None) -> None:
                """The request goes nowhere: the answer does not depend on it."""

            def close(self) -> None:
                """Nothing to release."""

        class CannedBackend(httpcore.NetworkBackend):
            def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
                return CannedStream()

        transport = _twin(httpx.HTTPTransport, hooked=hooked)()
        transport._pool = httpcore.ConnectionPool(network_backend=CannedBackend())
        return transport

    class AsyncCannedStream(httpcore.AsyncNetworkStream):
        async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return ANSWER

        async def write(self, buffer: bytes, timeout: float | None = None) -> None:
            """The request goes nowhere: the answer does not depend on it."""

        async def aclose(self) -> None:
            """Nothing to release."""

    class AsyncCannedBackend(httpcore.AsyncNetworkBackend):
        async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.AsyncNetworkStream:
            return AsyncCannedStream()

    async_transport = _twin(httpx.AsyncHTTPTransport, hooked=hooked)()
    async_transport._pool = httpcore.AsyncConnectionPool(network_backend=AsyncCannedBackend())
    return async_transport


@contextmanager
def _client(name: str, *, hooked: bool = True) -> Iterator[Callable[[], object]]:
    """A one-call function over one keep-alive connection of the named library; with
    ``hooked`` False, over the plain twin, whose calls the hooks do not see."""
    url = f"http://{HOST}:{PORT}/"
    if name == "http.client":
        with _http_client(hooked=hooked) as call:
            yield call
    elif name == "urllib3":
        pool_class = _urllib3_pool_class(hooked=hooked)
        with pool_class(HOST, PORT, maxsize=1, retries=False) as pool:
            yield lambda: pool.request("GET", "/").status
    elif name == "requests":
        import requests

        with requests.Session() as session:
            # No proxies or .netrc from the environment: their lookups are file system calls
            # on every request, kernel work the hooks do not add to.
            session.trust_env = False
            adapter = requests.adapters.HTTPAdapter()
            adapter.poolmanager.pool_classes_by_scheme = {
                "http": _urllib3_pool_class(hooked=hooked)
            }
            session.mount("http://", adapter)
            yield lambda: session.get(url).status_code
    elif name == "httpx":
        import httpx

        transport = _httpx_transport(asynchronous=False, hooked=hooked)
        with httpx.Client(transport=transport) as client:
            yield lambda: client.get(url).status_code
    else:
        with _async_client(hooked=hooked) as (runner, async_client):
            yield lambda: runner.run(async_client.get(url)).status_code


@contextmanager
def _async_client(*, hooked: bool) -> Iterator[tuple[Any, Any]]:
    """An event loop (an ``asyncio.Runner``) and an httpx async client on the canned transport:
    one loop and one client for every call, as an async worker keeps them."""
    import asyncio

    import httpx

    with asyncio.Runner() as runner:
        async_client = httpx.AsyncClient(
            transport=_httpx_transport(asynchronous=True, hooked=hooked)
        )
        try:
            yield runner, async_client
        finally:
            runner.run(async_client.aclose())


@contextmanager
def _timed_client(name: str, *, hooked: bool) -> Iterator[Callable[[], tuple[int, int]]]:
    """The named client's call, timed: its calling-thread CPU time and wall time, in
    nanoseconds. An async call is timed inside the event loop, from the ``await`` to its
    answer: the loop's own start and stop around each call (a task, signal handlers, a poll
    of the selector: system calls whose cost swings with the host) run no hook code, and an
    async worker pays them once for many calls."""
    if name != "httpx-async":
        with _client(name, hooked=hooked) as call:
            yield lambda: _time_call(call)
        return
    url = f"http://{HOST}:{PORT}/"
    with _async_client(hooked=hooked) as (runner, async_client):

        async def timed_call() -> tuple[int, int]:
            started_wall, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
            await async_client.get(url)
            return time.thread_time_ns() - started_cpu, time.perf_counter_ns() - started_wall

        yield lambda: runner.run(timed_call())


class _Round(NamedTuple):
    """Medians of one round's pairs, in microseconds."""

    cpu_overhead: float  # of hooked minus plain, pair by pair
    wall_overhead: float
    plain_cpu: float
    hooked_cpu: float
    plain_wall: float
    hooked_wall: float


def _time_call(call: Callable[[], object]) -> tuple[int, int]:
    """One call's calling-thread CPU time and wall time, in nanoseconds."""
    started_wall, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
    call()
    return time.thread_time_ns() - started_cpu, time.perf_counter_ns() - started_wall


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
    finally:
        instrument.end()
        gc.enable()
    timed = by_order[True] + by_order[False]

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
        cpu_overhead=overhead(0),
        wall_overhead=overhead(1),
        plain_cpu=statistics.median(p[0] for p, _ in timed) / 1000,
        hooked_cpu=statistics.median(h[0] for _, h in timed) / 1000,
        plain_wall=statistics.median(p[1] for p, _ in timed) / 1000,
        hooked_wall=statistics.median(h[1] for _, h in timed) / 1000,
    )


def _spread(values: list[float]) -> tuple[float, float, tuple[float, float]]:
    """Median, interquartile range and 95% confidence interval of the median of per-round
    figures (distribution-free: the order statistics that bracket the median)."""
    ordered = sorted(values)
    count = len(ordered)
    lower, _, upper = statistics.quantiles(ordered, n=4) if count > 1 else ordered * 3
    # The ranks floor((n - z sqrt n) / 2) and n + 1 minus it, counted from 1.
    outside = max(0, math.floor((count - CONFIDENCE_Z * math.sqrt(count)) / 2) - 1)
    return (
        statistics.median(ordered),
        upper - lower,
        (ordered[outside], ordered[count - 1 - outside]),
    )


def _verdict(low: float, high: float) -> str:
    """Whether a confidence interval shows the target met, missed, or neither."""
    if high <= TARGET_OVERHEAD_US:
        return "met"
    if low > TARGET_OVERHEAD_US:
        return "missed"
    return "not resolved"


def _overall_verdict(verdicts: list[str]) -> str:
    """Met when shown met on every client, missed when shown missed on any."""
    if "missed" in verdicts:
        return "missed"
    if all(verdict == "met" for verdict in verdicts):
        return "met"
    return "not resolved"


def _measure_client(name: str, calls: int, block: int) -> dict[str, Any]:
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
                is_hooked: clients.enter_context(_timed_client(name, hooked=is_hooked))
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
        "ratio": round(statistics.median(r.hooked_wall / r.plain_wall for r in rounds), 4),
        "cpu_ratio": round(statistics.median(r.hooked_cpu / r.plain_cpu for r in rounds), 4),
        "calls": calls,
        "rounds": len(rounds),
        "counted_calls": counted,
        **_overheads(
            [r.cpu_overhead for r in rounds], [r.wall_overhead for r in rounds], can_show=True
        ),
    }


def _overheads(cpu: list[float], wall: list[float], *, can_show: bool) -> dict[str, Any]:
    """A client's overhead keys from its per-round or per-process figures: the medians, their
    spread (``_spread``) and the verdict on the target, shown only when ``can_show``."""
    cpu_overhead, cpu_iqr, (cpu_low, cpu_high) = _spread(cpu)
    wall_overhead, wall_iqr, _ = _spread(wall)
    return {
        "overhead_us": round(wall_overhead, 2),
        "overhead_iqr_us": round(wall_iqr, 2),
        "cpu_overhead_us": round(cpu_overhead, 2),
        "cpu_overhead_iqr_us": round(cpu_iqr, 2),
        "cpu_overhead_ci95_us": [round(cpu_low, 2), round(cpu_high, 2)],
        "meets_target": cpu_overhead <= TARGET_OVERHEAD_US,
        "target_shown": _verdict(cpu_low, cpu_high) if can_show else "not resolved",
    }


def measure_in_process(*, calls: int, block: int, clients: tuple[str, ...]) -> dict[str, Any]:
    """One process's measurement (what a child of ``measure`` runs): ``calls`` timed pairs
    per client (times ``CALLS_FACTOR``), medians over rounds."""
    from worker import instrument

    was_installed = instrument.installed()
    results: dict[str, dict[str, Any]] = {}
    instrument.install()
    gc.freeze()  # what the imports built: a collection before each round walks only the rest
    try:
        for name in dict.fromkeys(clients):
            results[name] = _measure_client(name, calls * CALLS_FACTOR.get(name, 1), block)
    finally:
        gc.unfreeze()
        if not was_installed:
            instrument.uninstall()
    return _report(results, calls=calls, block=block, processes=1)


def measure(*, calls: int, block: int, clients: tuple[str, ...], processes: int) -> dict[str, Any]:
    """``calls`` timed pairs per client (times ``CALLS_FACTOR``) split across ``processes``
    fresh interpreters run one after another, each measuring every client; per client the
    median and 95% interval over processes (``_client_over_processes``)."""
    names = tuple(dict.fromkeys(clients))
    shares = [calls // processes + (index < calls % processes) for index in range(processes)]
    reports = []
    for index, share in enumerate(shares):
        pairs = share * sum(CALLS_FACTOR.get(name, 1) for name in names)
        arguments = {"calls": share, "block": block, "clients": names}
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
            name: _client_over_processes([report["clients"][name] for report in reports])
            for name in reports[0]["clients"]
        },
        calls=sum(report["calls"] for report in reports),
        block=reports[0]["block"],
        processes=len(reports),
    )


def _client_over_processes(per_process: list[dict[str, Any]]) -> dict[str, Any]:
    """One client's figures over processes: medians of the processes' figures, the 95%
    interval of the median overhead (``_spread``), each process's overhead in run order, and
    the calls, rounds and counted calls summed. The target is shown met or missed only by
    enough processes (``MIN_PROCESSES_SHOWN``)."""
    cpu_overheads = [result["cpu_overhead_us"] for result in per_process]
    medians = {
        key: round(statistics.median(result[key] for result in per_process), digits)
        for key, digits in (
            ("uninstrumented_us", 2),
            ("instrumented_us", 2),
            ("uninstrumented_cpu_us", 2),
            ("instrumented_cpu_us", 2),
            ("ratio", 4),
            ("cpu_ratio", 4),
        )
    }
    totals = {
        key: sum(result[key] for result in per_process)
        for key in ("calls", "rounds", "counted_calls")
    }
    return {
        **medians,
        "process_cpu_overheads_us": cpu_overheads,
        **totals,
        **_overheads(
            cpu_overheads,
            [result["overhead_us"] for result in per_process],
            can_show=len(per_process) >= MIN_PROCESSES_SHOWN,
        ),
    }


def _report(
    results: dict[str, dict[str, Any]], *, calls: int, block: int, processes: int
) -> dict[str, Any]:
    """The whole report around the clients' results: the worst client's figures first."""
    worst = max(results, key=lambda name: results[name]["cpu_overhead_us"])
    return {
        "benchmark": "worker",
        "transport": "in-process canned answer",
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
        "target_shown": _overall_verdict([result["target_shown"] for result in results.values()]),
    }


def _main(argument: str) -> int:
    """A child of ``measure``: ``measure_in_process`` with the JSON ``argument``'s calls,
    block and clients, its report printed as JSON (a ``BenchError`` as its message)."""
    arguments = json.loads(argument)
    try:
        report = measure_in_process(
            calls=arguments["calls"], block=arguments["block"], clients=tuple(arguments["clients"])
        )
    except BenchError as error:
        print(error, file=sys.stderr)
        return 1
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1]))
