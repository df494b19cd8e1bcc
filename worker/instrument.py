"""HTTP client hooks: count the downstream calls an invocation makes, per queue.

One hook layer sees every exchange once: http.client's connection methods (urllib3's and so
requests' connections are http.client connections, and call the base methods through
``super()``), and httpx's transports (httpx does not use http.client). Nothing stacks, so a
call made through requests -> urllib3 -> http.client is counted once, at the wire.

Hooks cost one global read while no invocation is in progress. Their own failures are
swallowed, counted and logged once: instrumentation never breaks the application.
"""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import importlib
import importlib.util
import logging
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from time import perf_counter
from typing import Any
from urllib.parse import urlsplit

logger = logging.getLogger("queuemesh")

AWS_HOST_SUFFIXES = ("amazonaws.com", "amazonaws.com.cn", "api.aws")
# Calls an invocation holds as the hooks saw them before the tallies take them in: however many
# calls an invocation makes, the hooks keep at most this many (about 100 bytes each).
FOLD_EVERY = 4096
# Latencies a tally holds: whenever that many have piled up, each pair becomes its mean (a value
# then stands for twice as many calls in a row), so however many calls an invocation makes a
# queue's tally holds at most this many; its EMF document sends at most 99.
LATENCIES_HELD = 4096  # even: the values pair up


@dataclass(slots=True)
class Tally:
    """What one queue's share of an invocation's downstream calls answered."""

    requests: int = 0
    ok: int = 0
    throttled: int = 0
    server_errors: int = 0
    overloaded: int = 0
    client_errors: int = 0
    timed_out: int = 0
    # In the order the calls came: each value the mean latency of ``latency_run`` calls in a row
    # (one call each until ``LATENCIES_HELD`` have been held), then the next run's calls so far.
    latencies_ms: list[float] = field(default_factory=list)
    latency_run: int = 1
    pending_latency_ms: float = 0.0  # their sum
    pending_latencies: int = 0
    retry_after_s: float = 0.0
    downstreams: set[str] = field(default_factory=set)

    def add(
        self,
        status: int | None,
        latency_ms: float | None,
        retry_after_s: float | None,
        downstream: str | None,
        timed_out: bool = False,
    ) -> None:
        """Count one call; ``status`` None is a transport failure (no answer), ``timed_out``
        one where the client gave up waiting (connect or read), with the time it waited."""
        # The common answer (2xx) is decided first: this runs on every call.
        if status is not None:
            if status < 300:
                if status < 200:
                    return  # 1xx is not an answer
                self.ok += 1
            elif status < 400:
                return  # a redirect is followed by the call that counts
            elif status == 429:
                self.throttled += 1
            elif status < 500:
                self.client_errors += 1
            else:
                self.server_errors += 1
                if status == 503:
                    self.overloaded += 1
        elif timed_out:
            self.timed_out += 1
            retry_after_s = None  # no answer to say it
        else:
            latency_ms = retry_after_s = None  # no answer, and no wait worth a latency
        self.requests += 1
        if downstream and downstream not in self.downstreams:
            self.downstreams.add(downstream)
        if latency_ms is not None:
            self._add_latency(latency_ms)
        if retry_after_s is not None and retry_after_s > self.retry_after_s:
            self.retry_after_s = retry_after_s

    def _add_latency(self, latency_ms: float) -> None:
        if self.latency_run == 1:
            self.latencies_ms.append(latency_ms)
        else:
            self.pending_latency_ms += latency_ms
            self.pending_latencies += 1
            if self.pending_latencies < self.latency_run:
                return
            self.latencies_ms.append(self.pending_latency_ms / self.latency_run)
            self.pending_latency_ms, self.pending_latencies = 0.0, 0
        if len(self.latencies_ms) >= LATENCIES_HELD:
            held = self.latencies_ms
            self.latencies_ms = [
                (first + second) / 2 for first, second in zip(held[::2], held[1::2], strict=True)
            ]
            self.latency_run *= 2

    @property
    def latency_count(self) -> int:
        """The calls with a latency."""
        return self.latency_run * len(self.latencies_ms) + self.pending_latencies

    def latency_runs(self) -> Iterator[tuple[float, int]]:
        """The latencies in the order the calls came, as (sum in ms, calls) of runs of calls in
        a row: one call each until ``LATENCIES_HELD`` have been held."""
        for mean in self.latencies_ms:
            yield mean * self.latency_run, self.latency_run
        if self.pending_latencies:
            yield self.pending_latency_ms, self.pending_latencies


@dataclass(frozen=True, slots=True)
class RecordRef:
    """The SQS message a piece of work belongs to."""

    queue: str
    message_id: str | None


def record_ref(record: object) -> RecordRef | None:
    """The queue and message id of an SQS record (a dict or a powertools SQSRecord)."""
    if not isinstance(record, Mapping):
        return None
    queue = queue_from_arn(record.get("eventSourceARN"))
    if queue is None:
        return None
    message_id = record.get("messageId")
    return RecordRef(queue, message_id if isinstance(message_id, str) else None)


def queue_from_arn(arn: object) -> str | None:
    """The queue name of an SQS ARN (``arn:<partition>:sqs:<region>:<account>:<name>``)."""
    if not isinstance(arn, str):
        return None
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "sqs":
        return None  # another event source (Kinesis, DynamoDB streams, ...): not a queue
    return parts[5] or None


_current_record: ContextVar[RecordRef | None] = ContextVar("queuemesh_record", default=None)
# One call as a hook saw it: the record it was attributed to, status (None: no answer), latency
# in ms, Retry-After in seconds, downstream, and whether it timed out (``Invocation.count``).
_Call = tuple[RecordRef | None, int | None, float | None, float | None, str | None, bool]


@contextlib.contextmanager
def attributed_to(ref: RecordRef | None) -> Iterator[None]:
    token = _current_record.set(ref)
    try:
        yield
    finally:
        _current_record.reset(token)


class TrackedRecords(list[Any]):
    """``event["Records"]`` that notes which message the application is working on.

    Iterating yields the records unchanged; while the application handles a record taken from
    the loop, calls it makes (in the same thread or task) are attributed to that record. Once
    the loop ends, attribution falls back to the invocation (work fanned out to threads or
    gathered tasks after the loop cannot be told apart).
    """

    def __iter__(self) -> Iterator[Any]:
        try:
            for record in super().__iter__():
                _current_record.set(record_ref(record))
                yield record
        finally:
            _current_record.set(None)


def _aws_endpoints(environ: Mapping[str, str]) -> frozenset[tuple[str, int | None]]:
    """(host, port) of the AWS endpoints configured for the SDK and of the Lambda runtime API."""
    endpoints: set[tuple[str, int | None]] = set()
    for name, value in environ.items():
        if name == "AWS_ENDPOINT_URL" or name.startswith("AWS_ENDPOINT_URL_"):
            parts = urlsplit(value)
            if parts.hostname:
                default_port = 443 if parts.scheme == "https" else 80
                endpoints.add((parts.hostname.lower(), parts.port or default_port))
    runtime_api = environ.get("AWS_LAMBDA_RUNTIME_API")
    if runtime_api:
        parts = urlsplit(f"//{runtime_api}")
        if parts.hostname:
            endpoints.add((parts.hostname.lower(), parts.port or 80))
    return frozenset(endpoints)


def is_aws_host(host: str) -> bool:
    host = host.lower().rstrip(".")
    return any(host == suffix or host.endswith("." + suffix) for suffix in AWS_HOST_SUFFIXES)


class Invocation:
    """The calls of one invocation, per queue, and the Retry-After evidence per message.

    Lambda runs one invocation at a time per process, so the invocation in progress is global:
    calls from threads the application starts are counted too.
    """

    def __init__(self, queues: list[str], environ: Mapping[str, str] | None = None) -> None:
        self.default_queue = queues[0] if queues else None
        self._aws_endpoints = _aws_endpoints(os.environ if environ is None else environ)
        # Connections are reused (keep-alive): name each (host, port) once per invocation.
        self._names: dict[tuple[str | None, int | None, int], str | None] = {}
        # The same per httpx origin (scheme, host, port), as httpx parsed it.
        self._httpx_names: dict[tuple[str, str, int | None], str | None] = {}
        # Per http.client connection used in this invocation: what its requests count as (None:
        # not a downstream), decided on its first call.
        self._routes: dict[object, str | None] = {}
        # The downstream call in flight per http.client connection: downstream and start time.
        self._in_flight: dict[object, tuple[str, float]] = {}
        # The calls as the hooks saw them, classified into the tallies only when those are
        # read (when the invocation's documents are written) or ``FOLD_EVERY`` have piled up: a
        # hook only appends, and ``list.append`` is atomic, so calls from several threads need
        # no lock.
        self._calls: list[_Call] = []
        self._tallies: dict[str, Tally] = {queue: Tally() for queue in queues}
        self._retry_after_by_message: dict[str, float] = {}
        self._unattributed_retry_after: dict[str, float] = {}
        self._fold_lock = threading.Lock()

    def downstream_name(
        self, host: str | None, port: int | None, *, default_port: int
    ) -> str | None:
        """The downstream's name for counting, or None for AWS endpoints (not downstream)."""
        key = (host, port, default_port)
        try:
            return self._names[key]
        except KeyError:
            name = self._names[key] = self._resolve_name(host, port, default_port)
            return name

    def _resolve_name(self, host: str | None, port: int | None, default_port: int) -> str | None:
        if not host:
            return None
        host = host.lower().rstrip(".")
        if is_aws_host(host) or (host, port or default_port) in self._aws_endpoints:
            return None
        if port is None or port in (80, 443):
            return host
        return f"{host}:{port}"

    def count(
        self,
        status: int | None,
        latency_ms: float | None,
        retry_after_s: float | None,
        downstream: str | None,
        timed_out: bool = False,
    ) -> None:
        """Count one call for the queue being worked on, as ``Tally.add`` classifies it.

        The http.client hook, the hottest, appends the same tuple itself, inline.
        """
        held = self._calls
        held.append(
            (_current_record.get(), status, latency_ms, retry_after_s, downstream, timed_out)
        )
        if len(held) >= FOLD_EVERY:
            self._fold_unless_folding()

    @property
    def tallies(self) -> dict[str, Tally]:
        """The calls so far per queue (the queues the invocation began with first)."""
        self._fold()
        return self._tallies

    @property
    def retry_after_by_message(self) -> dict[str, float]:
        """The largest Retry-After of a 429 per message the calls were attributed to."""
        self._fold()
        return self._retry_after_by_message

    @property
    def unattributed_retry_after(self) -> dict[str, float]:
        """The largest Retry-After of a 429 per queue, among calls attributed to no message."""
        self._fold()
        return self._unattributed_retry_after

    def _fold(self) -> None:
        """Classify the calls not yet in the tallies, in the order they were counted, and let
        them go."""
        with self._fold_lock:
            self._fold_held()

    def _fold_unless_folding(self) -> None:
        """``_fold`` for a hook, which never waits: while a fold is in progress (in another
        thread, or in this one, when a failure it logs makes a call) that one takes the calls
        in, or the next call's or the read's will."""
        if self._fold_lock.acquire(blocking=False):
            try:
                self._fold_held()
            finally:
                self._fold_lock.release()

    def _fold_held(self) -> None:
        """The fold itself, with ``_fold_lock`` held."""
        calls = self._calls
        end = len(calls)
        for index in range(end):
            try:
                self._add(*calls[index])
            except Exception as error:
                failures.swallow(error)
        # One operation under the GIL: calls appended meanwhile, past ``end``, stay.
        del calls[:end]

    def _add(
        self,
        ref: RecordRef | None,
        status: int | None,
        latency_ms: float | None,
        retry_after_s: float | None,
        downstream: str | None,
        timed_out: bool,
    ) -> None:
        queue = ref.queue if ref is not None else self.default_queue
        if queue is None:
            return
        try:
            tally = self._tallies[queue]
        except KeyError:
            tally = self._tallies[queue] = Tally()
        tally.add(status, latency_ms, retry_after_s, downstream, timed_out)
        if status == 429 and retry_after_s is not None:
            if ref is not None and ref.message_id is not None:
                evidence = self._retry_after_by_message
                key = ref.message_id
            else:
                evidence = self._unattributed_retry_after
                key = queue
            evidence[key] = max(evidence.get(key, 0.0), retry_after_s)


_active: Invocation | None = None


def begin(invocation: Invocation) -> None:
    global _active
    _active = invocation


def end() -> None:
    global _active
    _active = None


def active() -> Invocation | None:
    return _active


def parse_retry_after(value: object) -> float | None:
    """Seconds to wait, from a Retry-After value (delta seconds or an HTTP date)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return max(0.0, float(value)) if math.isfinite(value) else None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - datetime.now(UTC)).total_seconds())
    return max(0.0, seconds) if math.isfinite(seconds) else None


class _Failures:
    """Instrumentation's own failures: counted, logged once, never raised."""

    def __init__(self) -> None:
        self.count = 0

    def swallow(self, error: BaseException) -> None:
        self.count += 1
        if self.count == 1:
            logger.warning(
                "QueueMesh instrumentation failed and is skipping this call; the application "
                "is unaffected (logged once): %r",
                error,
                exc_info=error,
            )


failures = _Failures()


def _count_failure(
    invocation: Invocation, downstream: str, started: float, error: BaseException
) -> None:
    """Count a call that raised instead of answering: a timeout, with the time it waited, or
    another transport failure. Only failures pay for telling them apart."""
    try:
        if is_timeout(error):
            latency_ms = (perf_counter() - started) * 1000.0
            invocation.count(None, latency_ms, None, downstream, timed_out=True)
        else:
            invocation.count(None, None, None, downstream)
    except Exception as failure:
        failures.swallow(failure)


def is_timeout(error: BaseException) -> bool:
    """Whether a client gave up waiting for the downstream (connect or read).

    ``socket.timeout`` is the builtin ``TimeoutError`` (http.client's reads and connects);
    urllib3 turns a connect timeout into its ``ConnectTimeoutError``, whose subclass
    ``NewConnectionError`` is a refused connection, not a timeout; httpx raises its
    ``TimeoutException``. A client's module is looked up only if it is already loaded: an
    error cannot come from a library nobody imported.
    """
    if isinstance(error, TimeoutError):
        return True
    urllib3_errors = sys.modules.get("urllib3.exceptions")
    if urllib3_errors is not None and isinstance(error, urllib3_errors.TimeoutError):
        return not isinstance(error, urllib3_errors.NewConnectionError)
    httpx = sys.modules.get("httpx")
    return httpx is not None and isinstance(error, httpx.TimeoutException)


# http.client (and so urllib3 and requests) -----------------------------------------------------
# The hooks repeat the stdlib signatures: forwarding ``*args, **kwargs`` would build a dict and
# leave the interpreter's fast call path on every request, hooked or not.


_sdk_connection_classes: dict[type, bool] = {}


def _is_sdk_connection(connection: object) -> bool:
    """The AWS SDK's own connections, whatever endpoint they were given."""
    cls = type(connection)
    known = _sdk_connection_classes.get(cls)
    if known is None:
        known = _sdk_connection_classes[cls] = cls.__module__.startswith("botocore")
    return known


def _connection_route(invocation: Invocation, connection: http.client.HTTPConnection) -> str | None:
    if _is_sdk_connection(connection):
        return None
    tunnel_host: str | None = getattr(connection, "_tunnel_host", None)
    if tunnel_host:
        tunnel_port: int | None = getattr(connection, "_tunnel_port", None)
        return invocation.downstream_name(tunnel_host, tunnel_port, default_port=443)
    return invocation.downstream_name(
        connection.host, connection.port, default_port=connection.default_port
    )


def _proxied_target(invocation: Invocation, url: str) -> str | None:
    """The real target of a request through a forwarding proxy (an absolute URL)."""
    parts = urlsplit(url)
    default_port = 443 if parts.scheme == "https" else 80
    return invocation.downstream_name(parts.hostname, parts.port, default_port=default_port)


def _hook_putrequest(original: Callable[..., Any]) -> Callable[..., Any]:
    def putrequest(
        self: http.client.HTTPConnection,
        method: str,
        url: str,
        skip_host: bool = False,
        skip_accept_encoding: bool = False,
    ) -> Any:
        result = original(self, method, url, skip_host, skip_accept_encoding)
        invocation = _active
        if invocation is not None:
            # Inline rather than a helper's call: this runs on every request of the invocation.
            try:
                try:
                    downstream = invocation._routes[self]
                except KeyError:
                    downstream = invocation._routes[self] = _connection_route(invocation, self)
                if downstream is not None and "://" in url and url[:1] != "/":
                    downstream = _proxied_target(invocation, url)
                if downstream is None:
                    invocation._in_flight.pop(self, None)
                else:
                    invocation._in_flight[self] = (downstream, perf_counter())
            except Exception as error:
                failures.swallow(error)
        return result

    return putrequest


def _hook_endheaders(original: Callable[..., Any]) -> Callable[..., Any]:
    def endheaders(
        self: http.client.HTTPConnection,
        message_body: Any = None,
        *,
        encode_chunked: bool = False,
    ) -> Any:
        try:
            return original(self, message_body, encode_chunked=encode_chunked)
        except Exception as error:
            # Connecting happens here: a refused or timed-out connection is a failed call.
            invocation = _active
            if invocation is not None:
                try:
                    call = invocation._in_flight.pop(self, None)
                except Exception as failure:
                    failures.swallow(failure)
                    call = None
                if call is not None:
                    _count_failure(invocation, *call, error)
            raise

    return endheaders


def _hook_getresponse(original: Callable[..., Any]) -> Callable[..., Any]:
    def getresponse(self: http.client.HTTPConnection) -> Any:
        invocation = _active
        if invocation is None:
            return original(self)
        # The whole per-call path is inline, down to the tuple ``Invocation.count`` appends: a
        # helper's frame costs more than the work it would hold.
        try:
            call = invocation._in_flight.pop(self, None)
        except Exception as error:
            failures.swallow(error)
            call = None
        if call is None:
            return original(self)
        try:
            response = original(self)
        except Exception as error:
            _count_failure(invocation, *call, error)
            raise
        try:
            status = response.status
            held = invocation._calls
            held.append(
                (
                    _current_record.get(),
                    status,
                    (perf_counter() - call[1]) * 1000.0,
                    parse_retry_after(response.getheader("Retry-After"))
                    if status == 429 or status >= 500
                    else None,
                    call[0],
                    False,
                )
            )
            if len(held) >= FOLD_EVERY:
                invocation._fold_unless_folding()
        except Exception as error:
            failures.swallow(error)
        return response

    return getresponse


# httpx -------------------------------------------------------------------------------------------


def _httpx_downstream(invocation: Invocation, request: Any) -> str | None:
    url = request.url
    try:
        # httpx keeps the parsed URL as a (private) named tuple: reading it spares the public
        # properties' three Python calls on every request; they name each origin once.
        parsed = url._uri_reference
        origin = (parsed.scheme, parsed.host, parsed.port)
    except AttributeError:
        origin = (url.scheme, url.host, url.port)
    try:
        return invocation._httpx_names[origin]
    except KeyError:
        name = invocation._httpx_names[origin] = invocation.downstream_name(
            url.host, url.port, default_port=443 if url.scheme == "https" else 80
        )
        return name


def _count_httpx_answer(
    invocation: Invocation, downstream: str, started: float, response: Any
) -> None:
    """Count an httpx answer (the sync and async transports alike); never raises."""
    try:
        status = response.status_code
        invocation.count(
            status,
            (perf_counter() - started) * 1000.0,
            parse_retry_after(response.headers.get("retry-after"))
            if status == 429 or status >= 500
            else None,
            downstream,
        )
    except Exception as error:
        failures.swallow(error)


def _hook_httpx_handle_request(original: Callable[..., Any]) -> Callable[..., Any]:
    def handle_request(self: Any, request: Any) -> Any:
        invocation = _active
        if invocation is None:
            return original(self, request)
        try:
            downstream = _httpx_downstream(invocation, request)
        except Exception as error:
            failures.swallow(error)
            downstream = None
        if downstream is None:
            return original(self, request)
        started = perf_counter()
        try:
            response = original(self, request)
        except Exception as error:
            _count_failure(invocation, downstream, started, error)
            raise
        _count_httpx_answer(invocation, downstream, started, response)
        return response

    return handle_request


def _hook_httpx_handle_async_request(original: Callable[..., Any]) -> Callable[..., Any]:
    async def handle_async_request(self: Any, request: Any) -> Any:
        invocation = _active
        if invocation is None:
            return await original(self, request)
        try:
            downstream = _httpx_downstream(invocation, request)
        except Exception as error:
            failures.swallow(error)
            downstream = None
        if downstream is None:
            return await original(self, request)
        started = perf_counter()
        try:
            response = await original(self, request)
        except Exception as error:
            _count_failure(invocation, downstream, started, error)
            raise
        _count_httpx_answer(invocation, downstream, started, response)
        return response

    return handle_async_request


# installation ------------------------------------------------------------------------------------

_installed: dict[tuple[type, str], Callable[..., Any]] = {}
_install_lock = threading.Lock()


def _patch(
    owner: type, name: str, hook: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> None:
    original = owner.__dict__[name]
    _installed[(owner, name)] = original
    setattr(owner, name, hook(original))


def install() -> None:
    """Hook the HTTP clients (once; later calls do nothing)."""
    if _installed:
        return
    with _install_lock:
        if _installed:
            return
        try:
            _patch(http.client.HTTPConnection, "putrequest", _hook_putrequest)
            _patch(http.client.HTTPConnection, "endheaders", _hook_endheaders)
            _patch(http.client.HTTPConnection, "getresponse", _hook_getresponse)
            if importlib.util.find_spec("httpx") is not None:
                httpx = importlib.import_module("httpx")
                _patch(httpx.HTTPTransport, "handle_request", _hook_httpx_handle_request)
                _patch(
                    httpx.AsyncHTTPTransport,
                    "handle_async_request",
                    _hook_httpx_handle_async_request,
                )
        except Exception as error:
            failures.swallow(error)


def uninstall() -> None:
    """Put the HTTP clients back as they were (benchmarks compare with and without hooks)."""
    with _install_lock:
        for (owner, name), original in _installed.items():
            setattr(owner, name, original)
        _installed.clear()


def installed() -> bool:
    return bool(_installed)


def originals() -> dict[tuple[type, str], Callable[..., Any]]:
    """The methods the hooks replaced, by (class, name), as their libraries define them (empty
    while the hooks are not installed): the benchmark's unhooked twin of each client."""
    with _install_lock:
        return dict(_installed)
