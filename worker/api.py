"""The explicit API, for teams that prefer code to configuration.

``instrumented`` decorates the Lambda handler (instead of setting the handler to
``worker.wrapper.handler``); ``record`` reports a call the hooks cannot see (another protocol,
an unhooked client); ``processing`` attributes the calls made inside it to one SQS message,
for handlers that fan messages out to threads. All feed the counters the hooks feed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from worker import instrument
from worker.invocation import attributed_to, failures, record_ref
from worker.wrapper import instrumented

__all__ = ["instrumented", "processing", "record"]


def record(
    status: int,
    latency_ms: float,
    retry_after: float | str | None = None,
    downstream: str | None = None,
) -> None:
    """Count one downstream call answered ``status`` after ``latency_ms``.

    ``retry_after`` is seconds or the header's text (delta seconds or an HTTP date). Outside an
    instrumented invocation there is no queue to charge, and the call is not counted. Never
    raises.
    """
    invocation = instrument.active()
    if invocation is None:
        return
    try:
        invocation.count(
            int(status),
            float(latency_ms),
            instrument.parse_retry_after(retry_after),
            downstream,
        )
    except Exception as error:
        failures.swallow(error)


@contextlib.contextmanager
def processing(record: object) -> Iterator[None]:
    """Attribute the calls made inside the block to this SQS record (dict or SQSRecord)."""
    with attributed_to(record_ref(record)):
        yield
