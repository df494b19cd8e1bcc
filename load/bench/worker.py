"""`queuemesh bench worker`: what the worker's HTTP hooks add to each downstream call.

Each client library (http.client, urllib3, requests, httpx sync and async) makes the same
keep-alive GET over an in-process transport that answers every request with the same canned
response: the client's own code and the hooks run, the kernel and a server do not, so a call
takes tens to hundreds of microseconds instead of milliseconds, and a difference of a few is
not lost in the noise of the network path (which the hooks do not touch). Calls are timed in paired
rounds in one process: a block with the hooks removed and a block with them installed inside
an open invocation (so every call is counted), their order alternating from round to round.
Switching the hooks rewrites the clients' classes, after which the interpreter re-learns every
call site that touches them (Python 3.11+ specialises, and gives a site up to about 50 misses
before it adapts); the hooks are installed once in a worker, so each block starts after
``SETTLE_CALLS`` untimed calls and times the steady state on both sides.

A block's figure is the median of its single calls' calling-thread CPU time (the time the host
gives other work does not count) and, beside it, wall time. ``cpu_overhead_us`` and
``overhead_us`` are the medians over rounds of hooked minus plain; ``cpu_overhead_iqr_us`` says
how far rounds disagree and ``cpu_overhead_ci95_us`` how precisely the median is known;
``ratio`` and ``cpu_ratio`` are the medians over rounds of hooked over plain. The target, at
most 5 us per call, is judged on every client's ``cpu_overhead_us`` (``meets_target``) and on
its whole interval (``target_shown``).
"""

from __future__ import annotations

import io
import math
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from load.bench import BenchError

TARGET_OVERHEAD_US = 5.0
CLIENTS = ("http.client", "urllib3", "requests", "httpx", "httpx-async")
WARMUP_CALLS = 20
SETTLE_CALLS = 64
CONFIDENCE_Z = 1.96  # of a 95% confidence interval
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


@contextmanager
def _http_client() -> Iterator[Callable[[], object]]:
    import http.client

    connection = http.client.HTTPConnection(HOST, PORT)
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


def _urllib3_pool_class() -> type[Any]:
    """urllib3's connection pool, its connections on canned sockets."""
    import urllib3
    from urllib3.connection import HTTPConnection

    class CannedConnection(HTTPConnection):
        def _new_conn(self) -> socket.socket:
            return cast(socket.socket, _CannedSocket())

    class CannedPool(urllib3.HTTPConnectionPool):
        ConnectionCls = CannedConnection

    return CannedPool


def _httpx_transport(*, asynchronous: bool) -> Any:
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

        transport = httpx.HTTPTransport()
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

    async_transport = httpx.AsyncHTTPTransport()
    async_transport._pool = httpcore.AsyncConnectionPool(network_backend=AsyncCannedBackend())
    return async_transport


@contextmanager
def _client(name: str) -> Iterator[Callable[[], object]]:
    """A one-call function over one keep-alive connection of the named library."""
    url = f"http://{HOST}:{PORT}/"
    if name == "http.client":
        with _http_client() as call:
            yield call
    elif name == "urllib3":
        with _urllib3_pool_class()(HOST, PORT, maxsize=1, retries=False) as pool:
            yield lambda: pool.request("GET", "/").status
    elif name == "requests":
        import requests

        with requests.Session() as session:
            # No proxies or .netrc from the environment: their lookups are file system calls
            # on every request, kernel work the hooks do not add to.
            session.trust_env = False
            adapter = requests.adapters.HTTPAdapter()
            adapter.poolmanager.pool_classes_by_scheme = {"http": _urllib3_pool_class()}
            session.mount("http://", adapter)
            yield lambda: session.get(url).status_code
    elif name == "httpx":
        import httpx

        with httpx.Client(transport=_httpx_transport(asynchronous=False)) as client:
            yield lambda: client.get(url).status_code
    else:
        import asyncio

        import httpx

        # One loop and one client for every call, as an async worker keeps them.
        with asyncio.Runner() as runner:
            async_client = httpx.AsyncClient(transport=_httpx_transport(asynchronous=True))
            try:
                yield lambda: runner.run(async_client.get(url)).status_code
            finally:
                runner.run(async_client.aclose())


def _time_side(call: Callable[[], object], calls: int, invocation: Any) -> tuple[float, float]:
    """Median CPU and wall time of the single calls of a block, in microseconds: with the hooks
    counting for ``invocation``, or without hooks when it is None. The median is the typical
    call's: it shrugs off the calls that found the caches cold after the host ran other work."""
    from worker import instrument

    if invocation is None:
        instrument.uninstall()
    else:
        instrument.install()
    for _ in range(SETTLE_CALLS):  # outside the invocation: the counts are of timed calls
        call()
    cpu: list[int] = []
    wall: list[int] = []
    if invocation is not None:
        instrument.begin(invocation)
    try:
        for _ in range(calls):
            started_wall, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
            call()
            cpu.append(time.thread_time_ns() - started_cpu)
            wall.append(time.perf_counter_ns() - started_wall)
    finally:
        instrument.end()
    return statistics.median(cpu) / 1000, statistics.median(wall) / 1000


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
    """Paired rounds of plain and hooked blocks, in alternating order; medians over rounds.

    Pairing neighbours cancels the slow swings of a shared host's load, alternating the order
    cancels a drift within a round, and the median over rounds shrugs off a disturbed round.
    """
    from worker import instrument

    invocation = instrument.Invocation(["bench"], environ={})
    plain: list[tuple[float, float]] = []
    hooked: list[tuple[float, float]] = []
    with _client(name) as call:
        instrument.install()
        instrument.begin(invocation)
        try:
            for _ in range(WARMUP_CALLS):
                call()
        finally:
            instrument.end()
        done = 0
        while done < calls:
            size = min(block, calls - done)
            if len(plain) % 2 == 0:
                plain.append(_time_side(call, size, None))
                hooked.append(_time_side(call, size, invocation))
            else:
                hooked.append(_time_side(call, size, invocation))
                plain.append(_time_side(call, size, None))
            done += size
    counted = invocation.tallies["bench"].ok - WARMUP_CALLS
    if counted != calls:
        raise BenchError(
            f"the hooks counted {counted} of {calls} {name} calls: the measurement is not of "
            "instrumented calls; this is a QueueMesh bug, please report it"
        )
    pairs = list(zip(plain, hooked, strict=True))
    cpu_overhead, cpu_iqr, (cpu_low, cpu_high) = _spread([h[0] - p[0] for p, h in pairs])
    wall_overhead, wall_iqr, _ = _spread([h[1] - p[1] for p, h in pairs])
    return {
        "uninstrumented_us": round(statistics.median(p[1] for p in plain), 2),
        "instrumented_us": round(statistics.median(h[1] for h in hooked), 2),
        "uninstrumented_cpu_us": round(statistics.median(p[0] for p in plain), 2),
        "instrumented_cpu_us": round(statistics.median(h[0] for h in hooked), 2),
        "overhead_us": round(wall_overhead, 2),
        "overhead_iqr_us": round(wall_iqr, 2),
        "cpu_overhead_us": round(cpu_overhead, 2),
        "cpu_overhead_iqr_us": round(cpu_iqr, 2),
        "cpu_overhead_ci95_us": [round(cpu_low, 2), round(cpu_high, 2)],
        "ratio": round(statistics.median(h[1] / p[1] for p, h in pairs), 4),
        "cpu_ratio": round(statistics.median(h[0] / p[0] for p, h in pairs), 4),
        "rounds": len(pairs),
        "counted_calls": counted,
        "meets_target": cpu_overhead <= TARGET_OVERHEAD_US,
        "target_shown": _verdict(cpu_low, cpu_high),
    }


def measure(*, calls: int, block: int, clients: tuple[str, ...]) -> dict[str, Any]:
    from worker import instrument

    was_installed = instrument.installed()
    results: dict[str, dict[str, Any]] = {}
    try:
        for name in dict.fromkeys(clients):
            results[name] = _measure_client(name, calls, block)
    finally:
        if was_installed:
            instrument.install()
        else:
            instrument.uninstall()
    worst = max(results, key=lambda name: results[name]["cpu_overhead_us"])
    return {
        "benchmark": "worker",
        "transport": "in-process canned answer",
        "calls": calls,
        "block": block,
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
