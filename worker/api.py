"""The explicit API, for teams that prefer code to configuration.

``instrumented`` decorates the Lambda handler (instead of setting the handler to
``worker.wrapper.handler``); ``record`` reports a call the hooks cannot see (another protocol,
an unhooked client); ``processing`` attributes the calls made inside it to one SQS message,
for handlers that fan messages out to threads. All feed the counters the hooks feed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from worker import announced, instrument
from worker.invocation import attributed_to, failures, record_ref
from worker.wrapper import instrumented

__all__ = ["instrumented", "processing", "record"]


def record(
    status: int,
    latency_ms: float,
    retry_after: float | str | None = None,
    downstream: str | None = None,
    headers: Any = None,
) -> None:
    """Count one downstream call answered ``status`` after ``latency_ms``.

    ``retry_after`` is seconds or the header's text (delta seconds or an HTTP date).
    ``headers`` are the answer's header fields, as a mapping, as (name, value) pairs (gRPC's
    metadata among them) or as the client's own headers object: read as the hooks read an
    answer's, for the quota the API announces (docs/telemetry.md) and, where ``retry_after``
    is not given, for its Retry-After. Outside an instrumented invocation there is no queue to
    charge, and the call is not counted. Never raises.
    """
    invocation = instrument.active()
    if invocation is None:
        return
    try:
        if retry_after is None and headers is not None:
            retry_after = _retry_after_in(headers)
        invocation.count(
            int(status),
            float(latency_ms),
            instrument.parse_retry_after(retry_after),
            downstream,
            headers=headers,
        )
    except Exception as error:
        failures.swallow(error)


def _retry_after_in(headers: Any) -> str | None:
    """The first Retry-After field among an answer's headers (any case, str or bytes)."""
    for name, value in announced.header_pairs(headers):
        text = name.decode("latin-1") if isinstance(name, bytes) else name
        if text.lower() == "retry-after":
            return value.decode("latin-1") if isinstance(value, bytes) else value
    return None


@contextlib.contextmanager
def processing(record: object) -> Iterator[None]:
    """Attribute the calls made inside the block to this SQS record (dict or SQSRecord)."""
    with attributed_to(record_ref(record)):
        yield
