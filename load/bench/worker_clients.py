"""The worker bench's clients: each client library (http.client, urllib3, requests, httpx sync
and async) making the same keep-alive GET over an in-process transport that answers every
request with the same canned response.

The client's own code and the hooks run, the kernel and a server do not, so a call takes tens
to hundreds of microseconds instead of milliseconds, and a difference of a few is not lost in
the noise of the network path (which the hooks do not touch). Each client comes hooked or as
its plain twin: a new subclass of every hooked class, holding the hooks on one side and the
libraries' own methods on the other (``_twin``), so plain calls run none of the hooks' code and
no class changes while the bench runs.
"""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

# The downstream the calls name: never connected to (the transport is in-process).
HOST, PORT = "127.0.0.1", 8080
URL = f"http://{HOST}:{PORT}/"
ANSWER = (
    b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'
)
# The same answer announcing its rate limit, as the IETF draft and X-RateLimit both do (more
# than one style on an answer: the worker reads every field, and takes the least remaining).
ANNOUNCED_ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n"
    b'RateLimit-Policy: "default";q=100;w=60\r\nRateLimit: "default";r=42;t=17\r\n'
    b"X-RateLimit-Limit: 100\r\nX-RateLimit-Remaining: 42\r\nX-RateLimit-Reset: 17\r\n"
    b'\r\n{"ok":true}'
)


class _CannedSocket:
    """A connected socket whose server has the answer ready as soon as it is asked."""

    def __init__(self, answer: bytes) -> None:
        self._answer = answer
        # urllib3 polls a pooled connection's descriptor before reusing it (a readable one was
        # closed by the server): one end of an idle pair never is.
        self._idle, self._peer = socket.socketpair()

    def sendall(self, data: bytes) -> None:
        """The request goes nowhere: the answer does not depend on it."""

    def makefile(self, mode: str) -> io.BytesIO:
        return io.BytesIO(self._answer)

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
def _http_client(*, hooked: bool, answer: bytes) -> Iterator[Callable[[], object]]:
    import http.client

    connection = _twin(http.client.HTTPConnection, hooked=hooked)(HOST, PORT)
    connection.sock = _CannedSocket(answer)  # connected: the connection never dials

    def call() -> object:
        connection.request("GET", "/")
        response = connection.getresponse()
        response.read()
        return response.status

    try:
        yield call
    finally:
        connection.close()


def _urllib3_pool_class(*, hooked: bool, answer: bytes) -> type[Any]:
    """urllib3's connection pool, its connections on canned sockets."""
    import http.client

    import urllib3
    from urllib3.connection import HTTPConnection

    # urllib3's connection class and http.client's are each hooked: the twin of each stands in
    # for it, http.client's between the two, where urllib3's ``super()`` calls find its methods.
    bases = (_twin(HTTPConnection, hooked=hooked), _twin(http.client.HTTPConnection, hooked=hooked))

    def canned_socket(connection: object) -> socket.socket:
        return cast(socket.socket, _CannedSocket(answer))

    connection_class = type("CannedConnection", bases, {"_new_conn": canned_socket})
    return type("CannedPool", (urllib3.HTTPConnectionPool,), {"ConnectionCls": connection_class})


def _httpx_transport(*, asynchronous: bool, hooked: bool, answer: bytes) -> Any:
    """httpx's sync or async transport, its connections on a canned stream."""
    import httpcore
    import httpx

    # httpx builds its transport's connection pool itself; the pool is replaced by the same
    # pool on a canned network backend, so httpx's and httpcore's own code run as they would.
    if not asynchronous:

        class CannedStream(httpcore.NetworkStream):
            def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
                return answer

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
            return answer

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
def client(
    name: str, *, hooked: bool = True, answer: bytes = ANSWER
) -> Iterator[Callable[[], object]]:
    """A one-call function over one keep-alive connection of the named library, answered
    ``answer``; with ``hooked`` False, over the plain twin, whose calls the hooks do not see."""
    if name == "http.client":
        with _http_client(hooked=hooked, answer=answer) as call:
            yield call
    elif name == "urllib3":
        pool_class = _urllib3_pool_class(hooked=hooked, answer=answer)
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
                "http": _urllib3_pool_class(hooked=hooked, answer=answer)
            }
            session.mount("http://", adapter)
            yield lambda: session.get(URL).status_code
    elif name == "httpx":
        import httpx

        transport = _httpx_transport(asynchronous=False, hooked=hooked, answer=answer)
        with httpx.Client(transport=transport) as httpx_client:
            yield lambda: httpx_client.get(URL).status_code
    else:
        with _async_client(hooked=hooked, answer=answer) as (runner, async_client):
            yield lambda: runner.run(async_client.get(URL)).status_code


@contextmanager
def _async_client(*, hooked: bool, answer: bytes) -> Iterator[tuple[Any, Any]]:
    """An event loop (an ``asyncio.Runner``) and an httpx async client on the canned transport:
    one loop and one client for every call, as an async worker keeps them."""
    import asyncio

    import httpx

    with asyncio.Runner() as runner:
        async_client = httpx.AsyncClient(
            transport=_httpx_transport(asynchronous=True, hooked=hooked, answer=answer)
        )
        try:
            yield runner, async_client
        finally:
            runner.run(async_client.aclose())


@contextmanager
def timed_client(
    name: str, *, hooked: bool, answer: bytes = ANSWER
) -> Iterator[Callable[[], tuple[int, int]]]:
    """The named client's call, timed: its calling-thread CPU time and wall time, in
    nanoseconds. An async call is timed inside the event loop, from the ``await`` to its
    answer: the loop's own start and stop around each call (a task, signal handlers, a poll
    of the selector: system calls whose cost swings with the host) run no hook code, and an
    async worker pays them once for many calls."""
    if name != "httpx-async":
        with client(name, hooked=hooked, answer=answer) as call:
            yield lambda: _time_call(call)
        return
    with _async_client(hooked=hooked, answer=answer) as (runner, async_client):

        async def timed_call() -> tuple[int, int]:
            started_wall, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
            await async_client.get(URL)
            return time.thread_time_ns() - started_cpu, time.perf_counter_ns() - started_wall

        yield lambda: runner.run(timed_call())


def _time_call(call: Callable[[], object]) -> tuple[int, int]:
    """One call's calling-thread CPU time and wall time, in nanoseconds."""
    started_wall, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
    call()
    return time.thread_time_ns() - started_cpu, time.perf_counter_ns() - started_wall
