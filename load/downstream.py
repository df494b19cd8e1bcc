"""A real HTTP API on loopback, the downstream the demo's workers call, running a scenario's
downstream (docs/architecture.md, "Scenario files"; docs/simulator.md for the optional keys).

Each second of its clock admits ``capacity_rps`` calls; unless ``answers_429`` is false, the
calls above it are answered ``429`` with ``Retry-After``, else they are served like the others.
Every call, admitted or not, takes the scenario's latency: ``latency_ms`` (a number or a
schedule), with a heavy tail if ``latency_tail`` is set, and with ``latency_model: "queueing"``
growing with the calls in progress, by the same formula as the simulator's (load/latency.py).
A client that gives up before the answer (its timeout) is seen hanging up and the call is
counted as timed out. It counts what it answered per second: those counters are the demo's
evidence (goodput, rejected and timed-out share), so they are taken here, at the receiving end,
not from the workers' reports.

It may announce its limit (``announce``, a ``load.announce.HeaderStyle``): the real headers of
that style on every answer (Stripe's style: the reason on each 429), for a quota of
``capacity x window`` calls per fixed window of ``window_s`` seconds; it then admits that many
calls per window (with the default window of one second, what it admits anyway).
"""

from __future__ import annotations

import contextlib
import heapq
import json
import math
import random
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from load.announce import HeaderStyle
from load.latency import pareto_factor, queueing_latency
from load.sim.scenario import DownstreamSpec, value_at

Clock = Callable[[], float]

# No answer is held longer than this (a heavy tail has no upper bound of its own); far beyond
# any client timeout a worker sets, so it never decides an outcome.
MAX_ANSWER_S = 30.0


@dataclass(slots=True)
class SecondCount:
    ok: int = 0
    # Answered 429 (over capacity).
    rejected: int = 0
    # The client hung up before the answer: its timeout. Waste, like a 429.
    timed_out: int = 0


@dataclass(slots=True)
class Counters:
    """What the downstream answered, per whole second of its clock (second 0 = start), each call
    in the second it arrived."""

    per_second: dict[int, SecondCount] = field(default_factory=dict)
    # Per capacity drop: when the first call after it was rejected or timed out.
    first_rejection_after_drop: dict[float, float] = field(default_factory=dict)

    @property
    def ok(self) -> int:
        return sum(count.ok for count in self.per_second.values())

    @property
    def rejected(self) -> int:
        return sum(count.rejected for count in self.per_second.values())

    @property
    def timed_out(self) -> int:
        return sum(count.timed_out for count in self.per_second.values())

    @property
    def total(self) -> int:
        return self.ok + self.rejected + self.timed_out


@dataclass(frozen=True, slots=True)
class Call:
    """One call as decided when it arrives: admitted or not, how long its answer takes, and
    the window's quota, what is left of it and the seconds until the window ends."""

    arrived: float
    admitted: bool
    latency_s: float
    retry_after_s: float
    quota: int = 0
    remaining: int = 0

    @property
    def second(self) -> int:
        return math.floor(self.arrived)


class Downstream:
    """The HTTP server. Use as a context manager; ``url`` is valid between start and stop.

    ``clock`` gives seconds since the scenario's start (the demo shares one clock with the
    load and the plot); by default it counts from ``start()``. ``sleep`` holds an answer for
    its latency (by default a wait that ``stop()`` cuts short); ``seed`` seeds the latency
    tail's draws.
    """

    def __init__(
        self,
        spec: DownstreamSpec,
        *,
        clock: Clock | None = None,
        sleep: Callable[[float], None] | None = None,
        seed: int = 0,
        announce: HeaderStyle | None = None,
        window_s: int = 1,
    ) -> None:
        if window_s < 1:
            raise ValueError(f"window_s must be a whole number of seconds >= 1; got {window_s}")
        self.spec = spec
        self.announce = announce
        self.window_s = window_s
        self._clock = clock
        self._stopping = threading.Event()
        self._sleep = sleep or self._hold
        self._origin = 0.0
        self._lock = threading.Lock()
        self._counters = Counters()
        self._drops = [
            start
            for (start, value), (_, before) in zip(
                spec.capacity_rps[1:], spec.capacity_rps, strict=False
            )
            if value < before
        ]
        self._tail_rng = random.Random(f"{seed}:latency:{spec.name}")
        # The calls admitted in the current window, against its quota.
        self._window = -1
        self._admitted = 0
        # When each admitted call of a queueing downstream is done (a heap, on its clock).
        self._in_progress: list[float] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Downstream:
        self._origin = time.monotonic()
        self._stopping.clear()
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_class(self))
        # Handler threads are joined on close (block_on_close), so nothing outlives stop().
        server.daemon_threads = False
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"downstream-{self.spec.name}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None or thread is None:
            return
        # Answers still being held end now, so the handler threads can be joined.
        self._stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

    def __enter__(self) -> Downstream:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the downstream is not running")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    # -- behaviour -------------------------------------------------------------------------

    def now(self) -> float:
        if self._clock is not None:
            return self._clock()
        return time.monotonic() - self._origin

    def capacity_at(self, t: float) -> float:
        return value_at(self.spec.capacity_rps, t)

    def arrive(self) -> Call:
        """Decide one call as it arrives: admitted (or 429), and its latency, as the
        simulator's downstream does (load/sim/services.py)."""
        now = self.now()
        second = math.floor(now)
        capacity = self.capacity_at(second)
        window = second // self.window_s
        window_end = (window + 1) * self.window_s
        quota = math.ceil(self.capacity_at(window * self.window_s) * self.window_s)
        latency = value_at(self.spec.latency_ms, second) / 1000.0
        with self._lock:
            if self.spec.latency_tail is not None:
                latency *= pareto_factor(self.spec.latency_tail, self._tail_rng.random())
            if self.spec.latency_model == "queueing":
                in_progress = self._in_progress
                while in_progress and in_progress[0] <= now:
                    heapq.heappop(in_progress)
                latency = queueing_latency(latency, len(in_progress), capacity)
            if window != self._window:
                self._window, self._admitted = window, 0
            admitted = not self.spec.answers_429 or self._admitted < quota
            if admitted:
                self._admitted += 1
                if self.spec.latency_model == "queueing":
                    heapq.heappush(self._in_progress, now + latency)
            remaining = max(0, quota - self._admitted)
        return Call(now, admitted, min(latency, MAX_ANSWER_S), window_end - now, quota, remaining)

    def count(self, call: Call, *, answered: bool) -> None:
        """Count a call's outcome in the second it arrived: ``answered`` is false when the
        client hung up before its answer."""
        with self._lock:
            count = self._counters.per_second.setdefault(call.second, SecondCount())
            if not answered:
                count.timed_out += 1
            elif call.admitted:
                count.ok += 1
            else:
                count.rejected += 1
            if not (answered and call.admitted):
                self._note_rejection(call.arrived)

    def _note_rejection(self, arrived: float) -> None:
        # The first rejection after each capacity drop is where detection latency starts.
        firsts = self._counters.first_rejection_after_drop
        for drop in self._drops:
            if drop <= arrived and (drop not in firsts or arrived < firsts[drop]):
                firsts[drop] = arrived

    def _hold(self, seconds: float) -> None:
        self._stopping.wait(seconds)

    def counters(self) -> Counters:
        """A consistent copy of the counters."""
        with self._lock:
            return Counters(
                per_second={
                    second: SecondCount(count.ok, count.rejected, count.timed_out)
                    for second, count in self._counters.per_second.items()
                },
                first_rejection_after_drop=dict(self._counters.first_rejection_after_drop),
            )


def _handler_class(downstream: Downstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, so no idle keep-alive thread outlives a call.
        protocol_version = "HTTP/1.0"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            call = downstream.arrive()
            if call.latency_s > 0:
                downstream._sleep(call.latency_s)
            if self._client_gone():
                downstream.count(call, answered=False)
                self.close_connection = True
                return
            downstream.count(call, answered=True)
            # A client hanging up between the look and the answer is not the server's error.
            # The window's end, as seen from the answer (its latency later than the arrival).
            reset_s = max(0.0, call.arrived + call.retry_after_s - downstream.now())
            headers = announcement(downstream.announce, call, downstream.window_s, reset_s)
            with contextlib.suppress(ConnectionError):
                if call.admitted:
                    self._send(200, {"ok": True}, headers)
                else:
                    headers["Retry-After"] = str(max(1, math.ceil(call.retry_after_s)))
                    self._send(429, {"ok": False, "error": "over capacity"}, headers)

        def _client_gone(self) -> bool:
            """Whether the client hung up while its call was served (its timeout). The whole
            request has been read, so a readable socket can only be its end or a reset."""
            try:
                readable, _, _ = select.select([self.connection], [], [], 0)
                return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                return True

        def _send(self, status: int, body: dict[str, object], headers: dict[str, str]) -> None:
            payload = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = _answer

        def log_message(self, format: str, *args: Any) -> None:
            """Silent: the counters are the record, and the terminal belongs to the demo."""

    return Handler


def announcement(
    style: HeaderStyle | None, call: Call, window_s: int, reset_s: float
) -> dict[str, str]:
    """The rate-limit headers of ``style`` for the answer to ``call`` (none without a style):
    the window's quota and what was left of it when the call arrived, and ``reset_s``, the
    seconds from the answer to the window's end.

    The reset is whole seconds, rounded up, as every style sends it: the IETF draft's ``t`` is
    an integer, and GitHub's reset the epoch second the window ends in.
    """
    if style is None:
        return {}
    if style is HeaderStyle.STRIPE:
        return {} if call.admitted else {"Stripe-Rate-Limited-Reason": "global-rate"}
    quota, remaining = str(call.quota), str(call.remaining)
    reset = str(math.ceil(reset_s))
    if style is HeaderStyle.IETF:
        return {
            "RateLimit-Policy": f'"default";q={quota};w={window_s}',
            "RateLimit": f'"default";r={remaining};t={reset}',
        }
    if style is HeaderStyle.IETF_LEGACY:
        return {
            "RateLimit-Limit": f"{quota}, {quota};w={window_s}",
            "RateLimit-Remaining": remaining,
            "RateLimit-Reset": reset,
        }
    if style is HeaderStyle.GITHUB:
        reset = str(math.ceil(time.time() + reset_s))
    return {
        "X-RateLimit-Limit": quota,
        "X-RateLimit-Remaining": remaining,
        "X-RateLimit-Reset": reset,
    }
