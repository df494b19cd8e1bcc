"""`queuemesh bench worker`: what the worker's HTTP hooks add to each downstream call.

The same call (GET on a keep-alive connection to a downstream on 127.0.0.1) is timed with the
hooks removed and with them installed inside an open invocation (so every call is counted),
in alternating blocks in one process, for each client library (httpx both sync and async).
Each call is timed alone; ``overhead_us`` is the median over neighbouring block pairs of the
difference of their median call times, ``cpu_overhead_us`` the same in the calling thread's
CPU time (blind to the host's scheduling noise), and ``ratio`` the median over pairs of their
quotient. Switching the hooks rewrites the clients' classes, after which the interpreter
re-learns every call site that touches them (Python 3.11+ specialises, and gives a site up to
about 50 misses before it adapts); the hooks are installed once in a worker, so each block
starts after ``SETTLE_CALLS`` untimed calls and times the steady state on both sides.
The worst client is reported at the top; the target is at most 5 us per call.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from load.bench import BenchError

TARGET_OVERHEAD_US = 5.0
CLIENTS = ("http.client", "urllib3", "requests", "httpx", "httpx-async")
WARMUP_CALLS = 20
SETTLE_CALLS = 64


class _Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    body = b'{"ok":true}'
    disable_nagle_algorithm = True  # headers and body go out in two writes

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@contextmanager
def _downstream() -> Iterator[tuple[str, int]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield "127.0.0.1", int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def _client(name: str, host: str, port: int) -> Iterator[Callable[[], object]]:
    """A one-call function over one keep-alive connection of the named library."""
    url = f"http://{host}:{port}/"
    if name == "http.client":
        import http.client

        connection = http.client.HTTPConnection(host, port, timeout=5)

        def call() -> object:
            connection.request("GET", "/")
            response = connection.getresponse()
            response.read()
            return response.status

        try:
            yield call
        finally:
            connection.close()
    elif name == "urllib3":
        import urllib3

        with urllib3.HTTPConnectionPool(host, port, maxsize=1, retries=False) as pool:
            yield lambda: pool.request("GET", "/").status
    elif name == "requests":
        import requests

        with requests.Session() as session:
            yield lambda: session.get(url, timeout=5).status_code
    elif name == "httpx":
        import httpx

        with httpx.Client(timeout=5) as client:
            yield lambda: client.get(url).status_code
    else:
        import asyncio

        import httpx

        # One loop and one client for every call, as an async worker keeps them.
        with asyncio.Runner() as runner:
            async_client = httpx.AsyncClient(timeout=5)
            try:
                yield lambda: runner.run(async_client.get(url)).status_code
            finally:
                runner.run(async_client.aclose())


def _settle(call: Callable[[], object]) -> None:
    """Untimed calls while the interpreter re-learns the call sites of the switched classes."""
    for _ in range(SETTLE_CALLS):
        call()


def _block_medians(call: Callable[[], object], calls: int) -> tuple[float, float]:
    """Median wall time and median calling-thread CPU time of single calls, in microseconds."""
    wall: list[int] = []
    cpu: list[int] = []
    for _ in range(calls):
        started_wall, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
        call()
        cpu.append(time.thread_time_ns() - started_cpu)
        wall.append(time.perf_counter_ns() - started_wall)
    return statistics.median(wall) / 1000, statistics.median(cpu) / 1000


def _measure_client(name: str, host: str, port: int, calls: int, block: int) -> dict[str, Any]:
    """Alternate blocks of plain and hooked calls; compare each pair of neighbouring blocks.

    Pairing neighbours cancels the slow swings of a shared host's load; medians within a block
    shrug off its stalls; the median over pairs is the figure.
    """
    from worker import instrument

    invocation = instrument.Invocation(["bench"], environ={})
    plain_wall: list[float] = []
    hooked_wall: list[float] = []
    wall_differences: list[float] = []
    cpu_differences: list[float] = []
    ratios: list[float] = []
    with _client(name, host, port) as call:
        instrument.install()
        instrument.begin(invocation)
        _block_medians(call, WARMUP_CALLS)
        instrument.end()
        done = 0
        while done < calls:
            size = min(block, calls - done)
            instrument.uninstall()
            _settle(call)
            plain = _block_medians(call, size)
            instrument.install()
            _settle(call)  # outside the invocation: the counts stay those of timed calls
            instrument.begin(invocation)
            try:
                hooked = _block_medians(call, size)
            finally:
                instrument.end()
            plain_wall.append(plain[0])
            hooked_wall.append(hooked[0])
            wall_differences.append(hooked[0] - plain[0])
            cpu_differences.append(hooked[1] - plain[1])
            ratios.append(hooked[0] / plain[0])
            done += size
    counted = invocation.tallies["bench"].ok - WARMUP_CALLS
    if counted != calls:
        raise BenchError(
            f"the hooks counted {counted} of {calls} {name} calls: the measurement is not of "
            "instrumented calls; this is a QueueMesh bug, please report it"
        )
    plain_us, hooked_us = statistics.median(plain_wall), statistics.median(hooked_wall)
    return {
        "uninstrumented_us": round(plain_us, 2),
        "instrumented_us": round(hooked_us, 2),
        "overhead_us": round(statistics.median(wall_differences), 2),
        "cpu_overhead_us": round(statistics.median(cpu_differences), 2),
        "ratio": round(statistics.median(ratios), 4),
        "counted_calls": counted,
    }


def measure(*, calls: int, block: int, clients: tuple[str, ...]) -> dict[str, Any]:
    from worker import instrument

    was_installed = instrument.installed()
    results: dict[str, dict[str, Any]] = {}
    try:
        with _downstream() as (host, port):
            for name in dict.fromkeys(clients):
                results[name] = _measure_client(name, host, port, calls, block)
    finally:
        if was_installed:
            instrument.install()
        else:
            instrument.uninstall()
    worst = max(results.values(), key=lambda result: result["overhead_us"])
    return {
        "benchmark": "worker",
        "calls": calls,
        "block": block,
        "settle_calls": SETTLE_CALLS,
        "python": sys.version.split()[0],
        "clients": results,
        "overhead_us": worst["overhead_us"],
        "ratio": worst["ratio"],
        "target_overhead_us": TARGET_OVERHEAD_US,
        "meets_target": worst["overhead_us"] <= TARGET_OVERHEAD_US,
    }
