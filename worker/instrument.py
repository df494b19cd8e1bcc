"""HTTP client hooks: count the downstream calls an invocation makes, per queue.

Each call is counted once, at the layer that sees its status and its headers most cheaply:
urllib3's connections (and so requests') at urllib3's ``getresponse``, whose answer holds its
headers in a dict by lowercase name; other http.client connections at http.client's
``getresponse`` (urllib3's connections are http.client connections, and the call its hook has
counted passes through the one below); httpx's transports (httpx does not use http.client).
A call's start is noted by http.client's ``putrequest``, which every one of those connections
runs, and taken by the first ``getresponse`` hook that sees it, so nothing is counted twice.
What a call counts as, and for which queue, is the invocation's (``worker.invocation``). An
answer's headers are kept as the client's own object and read for announced rate limits when
the calls are folded into the tallies (``worker.announced``), except httpx's, read as they come,
while they are in the cache, and kept only where the answer announces a remaining quota (the
tallies read its whole limit once, for the answer they keep) or is a 429 (whose kind of limit
the fold reads).

Hooks cost one global read while no invocation is in progress. Their own failures are
swallowed, counted and logged once: instrumentation never breaks the application.
"""

from __future__ import annotations

import email.utils
import http.client
import importlib
import importlib.util
import math
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from operator import attrgetter
from time import perf_counter
from typing import Any
from urllib.parse import urlsplit

from worker.announced import remaining_reader
from worker.invocation import (
    FOLD_EVERY,
    UNREAD,
    Invocation,
    current_record,
    failures,
)

# The invocation in progress (one at a time per Lambda process), read by every hook: a module
# global, so that a hook outside an invocation costs one global read.
_active: Invocation | None = None


def begin(invocation: Invocation) -> None:
    """Count the calls made from now on for ``invocation``."""
    global _active
    _active = invocation


def end() -> None:
    """Count no more calls (until the next ``begin``)."""
    global _active
    _active = None


def active() -> Invocation | None:
    """The invocation in progress, or None."""
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


# http.client, urllib3 (and so requests) -----------------------------------------------------
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
                    downstream = invocation.routes[self]
                except KeyError:
                    downstream = invocation.routes[self] = _connection_route(invocation, self)
                if downstream is not None and "://" in url and url[:1] != "/":
                    downstream = _proxied_target(invocation, url)
                if downstream is None:
                    invocation.in_flight.pop(self, None)
                else:
                    invocation.in_flight[self] = (downstream, perf_counter())
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
                    call = invocation.in_flight.pop(self, None)
                except Exception as failure:
                    failures.swallow(failure)
                    call = None
                if call is not None:
                    _count_failure(invocation, *call, error)
            raise

    return endheaders


def _hook_getresponse(
    original: Callable[..., Any],
    headers_of: Callable[[Any], Any],
    retry_after_of: Callable[[Any], object],
) -> Callable[..., Any]:
    """``getresponse`` hooked: http.client's, and urllib3's above it (``install``). Whichever
    runs first takes the call out of ``in_flight`` and counts it, so a urllib3 call is counted
    once, at urllib3's layer, where its answer's headers are a dict by lowercase name (read for
    rate limits with one membership test: ``worker.announced``), and the http.client hook
    below passes it through. ``headers_of`` is the answer's header object, ``retry_after_of``
    its Retry-After value (all of them, joined), which the fold reads for rate limits: a
    dict (urllib3's) or a list of (name, value) (http.client's) costs less to read there, the
    reader's code warm from the answers before, than in a hook whose code the client's own
    evicts (unlike httpx's: ``_count_httpx_answer``)."""

    def getresponse(self: http.client.HTTPConnection) -> Any:
        invocation = _active
        if invocation is None:
            return original(self)
        # The whole per-call path is inline, down to the tuple ``Invocation.count`` appends: a
        # helper's frame costs more than the work it would hold.
        try:
            call = invocation.in_flight.pop(self, None)
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
            answered = perf_counter()
            status = response.status
            held = invocation.calls
            held.append(
                (
                    current_record.get(),
                    status,
                    (answered - call[1]) * 1000.0,
                    parse_retry_after(retry_after_of(response))
                    if status == 429 or status >= 500
                    else None,
                    call[0],
                    False,
                    # Read when the calls are folded (worker.announced), not here.
                    headers_of(response),
                    UNREAD,
                    answered,
                )
            )
            if len(held) >= FOLD_EVERY:
                invocation.fold_unless_folding()
        except Exception as error:
            failures.swallow(error)
        return response

    return getresponse


def _http_client_retry_after(response: http.client.HTTPResponse) -> str | None:
    return response.getheader("Retry-After")


def _urllib3_retry_after(response: Any) -> object:
    return response.headers.get("Retry-After")


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
        return invocation.httpx_names[origin]
    except KeyError:
        name = invocation.httpx_names[origin] = invocation.downstream_name(
            url.host, url.port, default_port=443 if url.scheme == "https" else 80
        )
        return name


def _count_httpx_answer(
    invocation: Invocation,
    downstream: str,
    started: float,
    response: Any,
    headers_type: type,
    read_remaining: Callable[[Any], float | None],
) -> None:
    """Count an httpx answer (the sync and async transports alike); never raises. The tuple
    ``Invocation.count`` appends, appended here: a frame less on every call. httpx's answers
    hold httpx's header class, read by ``read_remaining``, its reader chosen once when the
    hooks are installed (0.3-0.9 us off an httpx call with rate-limit headers on every answer
    against a lookup per answer: docs/worker.md, "Where httpx's base cost goes"); any other
    header object is read through ``remaining_reader``."""
    try:
        answered = perf_counter()
        status = response.status_code
        headers = response.headers
        # The answer's announced quota, read now, while its headers are in the cache: httpx's
        # are some 30 objects an answer (triples of bytes), which the calls in between push out
        # of it before a fold (``worker.announced``). Kept only if it announces one (or is a
        # 429, whose kind the fold reads): the rest are let go with the answer.
        try:
            remaining = (
                read_remaining if type(headers) is headers_type else remaining_reader(headers)
            )(headers)
        except Exception as error:
            failures.swallow(error)
            remaining = None
        held = invocation.calls
        held.append(
            (
                current_record.get(),
                status,
                (answered - started) * 1000.0,
                parse_retry_after(headers.get("retry-after"))
                if status == 429 or status >= 500
                else None,
                downstream,
                False,
                headers if remaining is not None or status == 429 else None,
                remaining,
                answered,
            )
        )
        if len(held) >= FOLD_EVERY:
            invocation.fold_unless_folding()
    except Exception as error:
        failures.swallow(error)


def _hook_httpx_handle_request(
    original: Callable[..., Any], headers_type: type, read_remaining: Callable[[Any], float | None]
) -> Callable[..., Any]:
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
        _count_httpx_answer(invocation, downstream, started, response, headers_type, read_remaining)
        return response

    return handle_request


def _hook_httpx_handle_async_request(
    original: Callable[..., Any], headers_type: type, read_remaining: Callable[[Any], float | None]
) -> Callable[..., Any]:
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
        _count_httpx_answer(invocation, downstream, started, response, headers_type, read_remaining)
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
            _patch(
                http.client.HTTPConnection,
                "getresponse",
                lambda original: _hook_getresponse(
                    original, attrgetter("msg"), _http_client_retry_after
                ),
            )
            urllib3_connection = (
                importlib.import_module("urllib3.connection")
                if importlib.util.find_spec("urllib3") is not None
                else None
            )
            # urllib3 2 answers from its connection's own ``getresponse``; urllib3 1 used
            # http.client's, whose hook then counts its calls.
            if urllib3_connection is not None and "getresponse" in vars(
                urllib3_connection.HTTPConnection
            ):
                _patch(
                    urllib3_connection.HTTPConnection,
                    "getresponse",
                    lambda original: _hook_getresponse(
                        original, attrgetter("headers"), _urllib3_retry_after
                    ),
                )
            if importlib.util.find_spec("httpx") is not None:
                httpx = importlib.import_module("httpx")
                # The reader of httpx's header class, chosen from an empty one: its hooks'.
                read_remaining = remaining_reader(httpx.Headers())
                _patch(
                    httpx.HTTPTransport,
                    "handle_request",
                    lambda original: _hook_httpx_handle_request(
                        original, httpx.Headers, read_remaining
                    ),
                )
                _patch(
                    httpx.AsyncHTTPTransport,
                    "handle_async_request",
                    lambda original: _hook_httpx_handle_async_request(
                        original, httpx.Headers, read_remaining
                    ),
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
