"""A rate-limited HTTP API on loopback, the downstream the demo's workers call.

Its capacity follows a scenario schedule (``capacity_rps``: ``[[t, rps], ...]``). Each second of
its clock admits that many calls; calls above it are answered ``429`` with ``Retry-After``.
Every call, admitted or not, takes ``latency_ms`` (as a loaded API answers slowly either way).
It counts what it answered per second: those counters are the demo's evidence (goodput and
rejected share), so they are taken here, at the receiving end, not from the workers' reports.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Schedule:
    """A step function of time: ``[[t, value], ...]``, each value holding from its ``t`` on."""

    steps: tuple[tuple[float, float], ...]

    @classmethod
    def parse(cls, raw: Sequence[Sequence[float]], what: str) -> Schedule:
        try:
            steps = tuple(sorted((float(t), float(value)) for t, value in raw))
        except (TypeError, ValueError) as error:
            raise ValueError(f"{what} must be a list of [t, value] pairs, got {raw!r}") from error
        if not steps or steps[0][0] > 0:
            raise ValueError(f"{what} must start at t=0, got {raw!r}")
        if any(value < 0 for _, value in steps):
            raise ValueError(f"{what} values must not be negative, got {raw!r}")
        return cls(steps)

    def at(self, t: float) -> float:
        current = self.steps[0][1]
        for start, value in self.steps:
            if start > t:
                break
            current = value
        return current

    def drops(self) -> list[float]:
        """Times at which the value falls."""
        return [
            later[0] for earlier, later in itertools.pairwise(self.steps) if later[1] < earlier[1]
        ]

    def rises(self) -> list[float]:
        """Times at which the value goes up."""
        return [
            later[0] for earlier, later in itertools.pairwise(self.steps) if later[1] > earlier[1]
        ]


@dataclass(frozen=True, slots=True)
class DownstreamSpec:
    """The scenario contract's downstream definition."""

    name: str
    capacity: Schedule
    latency_ms: float = 0.0

    @classmethod
    def from_scenario(cls, raw: Mapping[str, Any]) -> DownstreamSpec:
        name = str(raw.get("name", "downstream"))
        latency_ms = float(raw.get("latency_ms", 0.0))
        if latency_ms < 0:
            raise ValueError(f"downstream {name}: latency_ms must not be negative")
        capacity = Schedule.parse(raw.get("capacity_rps", []), f"downstream {name}: capacity_rps")
        return cls(name=name, capacity=capacity, latency_ms=latency_ms)


@dataclass(slots=True)
class SecondCount:
    ok: int = 0
    rejected: int = 0


@dataclass(slots=True)
class Counters:
    """What the downstream answered, per whole second of its clock (second 0 = start)."""

    per_second: dict[int, SecondCount] = field(default_factory=dict)
    first_rejection_after_drop: dict[float, float] = field(default_factory=dict)

    @property
    def ok(self) -> int:
        return sum(count.ok for count in self.per_second.values())

    @property
    def rejected(self) -> int:
        return sum(count.rejected for count in self.per_second.values())

    @property
    def total(self) -> int:
        return self.ok + self.rejected


class Downstream:
    """The HTTP server. Use as a context manager; ``url`` is valid between start and stop.

    ``clock`` gives seconds since the scenario's start (the demo shares one clock with the
    load and the plot); by default it counts from ``start()``.
    """

    def __init__(
        self,
        spec: DownstreamSpec,
        *,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.spec = spec
        self._clock = clock
        self._sleep = sleep
        self._origin = 0.0
        self._lock = threading.Lock()
        self._counters = Counters()
        self._drops = spec.capacity.drops()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Downstream:
        self._origin = time.monotonic()
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

    def admit(self) -> tuple[bool, float]:
        """Decide one call: (admitted, seconds until the next second's allowance)."""
        now = self.now()
        second = math.floor(now)
        allowance = self.spec.capacity.at(second)
        with self._lock:
            count = self._counters.per_second.setdefault(second, SecondCount())
            admitted = count.ok < allowance
            if admitted:
                count.ok += 1
            else:
                count.rejected += 1
                self._note_rejection(now)
        return admitted, second + 1 - now

    def _note_rejection(self, now: float) -> None:
        # The first rejection after each capacity drop is where detection latency starts.
        firsts = self._counters.first_rejection_after_drop
        for drop in self._drops:
            if drop <= now and drop not in firsts:
                firsts[drop] = now

    def counters(self) -> Counters:
        """A consistent copy of the counters."""
        with self._lock:
            return Counters(
                per_second={
                    second: SecondCount(count.ok, count.rejected)
                    for second, count in self._counters.per_second.items()
                },
                first_rejection_after_drop=dict(self._counters.first_rejection_after_drop),
            )


def _handler_class(downstream: Downstream) -> type[BaseHTTPRequestHandler]:
    latency_s = downstream.spec.latency_ms / 1000.0

    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, so no idle keep-alive thread outlives a call.
        protocol_version = "HTTP/1.0"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            admitted, retry_after = downstream.admit()
            if latency_s:
                downstream._sleep(latency_s)
            if admitted:
                self._send(200, {"ok": True}, {})
            else:
                headers = {"Retry-After": str(max(1, math.ceil(retry_after)))}
                self._send(429, {"ok": False, "error": "over capacity"}, headers)

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
