"""The calls of one invocation: which SQS message each belongs to, which are downstream calls,
and the tallies per queue they become.

The hooks (``worker.instrument``) only append what they saw to the invocation in progress; the
calls are classified into tallies when those are read or ``FOLD_EVERY`` have piled up.
Instrumentation's own failures are swallowed, counted and logged once (``failures``): they never
break the application.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final
from urllib.parse import urlsplit

from worker import announced
from worker.tally import Tally

logger = logging.getLogger("queuemesh")

AWS_HOST_SUFFIXES = ("amazonaws.com", "amazonaws.com.cn", "api.aws")
# Calls an invocation holds as the hooks saw them before the tallies take them in: however many
# calls an invocation makes, the hooks keep at most this many (about 100 bytes each).
FOLD_EVERY = 4096


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


current_record: ContextVar[RecordRef | None] = ContextVar("queuemesh_record", default=None)


class Unread(Enum):
    """An answer whose announced quota the fold reads (``UNREAD``), not its hook."""

    UNREAD = "unread"


UNREAD: Final = Unread.UNREAD
# One call as a hook saw it: the record it was attributed to, status (None: no answer), latency
# in ms, Retry-After in seconds, downstream, whether it timed out, the answer's headers (the
# client's own object; None where it was read as it came and neither announces a remaining
# quota nor is a 429), the least remaining quota it announces (``worker.announced``; None: none;
# ``UNREAD``: the fold reads it from the headers), and when it came (``perf_counter``)
# (``Invocation.count``).
_Call = tuple[
    RecordRef | None,
    int | None,
    float | None,
    float | None,
    str | None,
    bool,
    Any,
    float | Unread | None,
    float,
]


@contextlib.contextmanager
def attributed_to(ref: RecordRef | None) -> Iterator[None]:
    token = current_record.set(ref)
    try:
        yield
    finally:
        current_record.reset(token)


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
                current_record.set(record_ref(record))
                yield record
        finally:
            current_record.set(None)


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
    calls from threads the application starts are counted too. The hooks' state (``routes``,
    ``in_flight``, ``httpx_names``, ``calls``) is public: the hooks (``worker.instrument``) read
    and write it inline, where a method's call would cost more than the work it holds.
    """

    def __init__(self, queues: list[str], environ: Mapping[str, str] | None = None) -> None:
        self.default_queue = queues[0] if queues else None
        self._aws_endpoints = _aws_endpoints(os.environ if environ is None else environ)
        # Connections are reused (keep-alive): name each (host, port) once per invocation.
        self._names: dict[tuple[str | None, int | None, int], str | None] = {}
        # The same per httpx origin (scheme, host, port), as httpx parsed it.
        self.httpx_names: dict[tuple[str, str, int | None], str | None] = {}
        # Per http.client connection used in this invocation: what its requests count as (None:
        # not a downstream), decided on its first call.
        self.routes: dict[object, str | None] = {}
        # The downstream call in flight per http.client connection: downstream and start time.
        self.in_flight: dict[object, tuple[str, float]] = {}
        # The calls as the hooks saw them, classified into the tallies only when those are
        # read (when the invocation's documents are written) or ``FOLD_EVERY`` have piled up: a
        # hook only appends, and ``list.append`` is atomic, so calls from several threads need
        # no lock.
        self.calls: list[_Call] = []
        self._tallies: dict[str, Tally] = {queue: Tally() for queue in queues}
        self._retry_after_by_message: dict[str, float] = {}
        self._unattributed_retry_after: dict[str, float] = {}
        self._fold_lock = threading.Lock()
        # Epoch seconds at ``perf_counter`` 0: when an answer came, on the wall clock.
        self._wall_offset = time.time() - time.perf_counter()

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
        headers: Any = None,
        answered_at: float | None = None,
    ) -> None:
        """Count one call for the queue being worked on, as ``Tally.add`` classifies it, with
        the answer's ``headers`` (None: no answer) that came at ``answered_at``
        (``perf_counter``; None: now), read now for the least remaining quota they announce.

        The hooks, the hottest callers, append the same tuple themselves, inline.
        """
        remaining = None
        if headers is not None:
            try:
                remaining = announced.least_remaining(headers)
            except Exception as error:
                failures.swallow(error)
        held = self.calls
        held.append(
            (
                current_record.get(),
                status,
                latency_ms,
                retry_after_s,
                downstream,
                timed_out,
                headers if remaining is not None or status == 429 else None,
                remaining,
                time.perf_counter() if answered_at is None else answered_at,
            )
        )
        if len(held) >= FOLD_EVERY:
            self.fold_unless_folding()

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

    def fold_unless_folding(self) -> None:
        """``_fold`` for a hook, which never waits: while a fold is in progress (in another
        thread, or in this one, when a failure it logs makes a call) that one takes the calls
        in, or the next call's or the read's will."""
        if self._fold_lock.acquire(blocking=False):
            try:
                self._fold_held()
            finally:
                self._fold_lock.release()

    def _fold_held(self) -> None:
        """The fold itself, with ``_fold_lock`` held: each call into its queue's tally, inline
        (a method's call per call was a fifth of the fold's time)."""
        calls = self.calls
        end = len(calls)
        tallies, default_queue, wall_offset = self._tallies, self.default_queue, self._wall_offset
        # The reader of the last header type read here: a worker's calls go through one client.
        header_type: type | None = None
        read_remaining: Callable[[Any], float | None] = announced.least_remaining
        for (
            ref,
            status,
            latency_ms,
            retry_after_s,
            downstream,
            timed_out,
            headers,
            remaining,
            at,
        ) in calls[:end]:
            try:
                queue = ref.queue if ref is not None else default_queue
                if queue is None:
                    continue
                tally = tallies.get(queue)
                if tally is None:
                    tally = tallies[queue] = Tally()
                tally.add(status, latency_ms, retry_after_s, downstream, timed_out)
                if remaining is UNREAD:
                    # As a hook reads it: a reader's failure costs the announcement only.
                    try:
                        if type(headers) is not header_type:
                            header_type = type(headers)
                            read_remaining = announced.remaining_reader(headers)
                        remaining = read_remaining(headers)
                    except Exception as error:
                        failures.swallow(error)
                        remaining = None
                # The answer with the least remaining quota is kept (on a tie the later one's:
                # the fresher reset), and the latest, to be read whole once (``Tally.limit``).
                if remaining is not None:
                    answer = tally.latest = (headers, at + wall_offset)
                    if tally.least_remaining is None or remaining <= tally.least_remaining:
                        tally.least_remaining = remaining
                        tally.announcing = answer
                if status == 429:
                    if headers is not None:
                        tally.throttled_by(announced.limit_kind(headers))
                    if retry_after_s is not None:
                        self._note_retry_after(ref, queue, retry_after_s)
            except Exception as error:
                failures.swallow(error)
        # One operation under the GIL: calls appended meanwhile, past ``end``, stay.
        del calls[:end]

    def _note_retry_after(self, ref: RecordRef | None, queue: str, retry_after_s: float) -> None:
        """A 429's Retry-After, per message (or per queue, for calls attributed to none)."""
        if ref is not None and ref.message_id is not None:
            evidence = self._retry_after_by_message
            key = ref.message_id
        else:
            evidence = self._unattributed_retry_after
            key = queue
        evidence[key] = max(evidence.get(key, 0.0), retry_after_s)
