"""The aggregated form of a worker's EMF document (docs/telemetry.md, "Aggregated documents"):
one document for several invocations of one execution environment, all started in one second,
its latency a sum and a count. Validated like every other member: what is not valid skips the
document, counted, never raised."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from controller import schema
from controller.telemetry.results import SkipReason
from controller.telemetry.values import count_value

# An aggregated document's latency sum: one execution environment's calls over the invocations
# that started in one second, which may overlap (threads) but not beyond this.
MAX_LATENCY_SUM_MS: Final = 1e12
# How long before its timestamp an aggregated document's invocations may have started: the
# second they started in, then Lambda's longest invocation (900 s).
MAX_START_BEFORE_S: Final = 901.0

_INVOCATION_START: Final = schema.INVOCATION_START.name


def latency_sum_and_count(total: Any, count: Any) -> tuple[float, int] | None:
    """``DownstreamLatencySum`` and ``DownstreamLatencyCount`` (each a number or an array,
    summed); None unless both are there and valid (one without the other describes no calls,
    and a positive sum needs calls)."""
    if total is None or count is None:
        return None
    calls = count_value(count)
    summed = 0.0
    for item in total if type(total) is list else (total,):
        kind = type(item)
        if not (kind is float or kind is int) or not 0 <= item <= MAX_LATENCY_SUM_MS:
            return None
        summed += item
    if calls < 0 or summed > MAX_LATENCY_SUM_MS or (summed > 0 and calls == 0):
        return None
    return summed, calls


def aggregated_invocations(
    get: Callable[[str], Any], invocations: Any, emitted_s: float
) -> tuple[int, float | None] | SkipReason:
    """``Invocations`` (at least one) and ``InvocationStartSecond`` (None when absent: the
    document's start is then read as a per-flush document's, from its durations), or the
    reason to skip the document: ``bad_value`` for the count, ``bad_timestamp`` for a start
    that is no second its invocations can have started in (not a whole number of epoch
    seconds, after the document's timestamp, or more than ``MAX_START_BEFORE_S`` before it)."""
    count = count_value(invocations)
    if count < 1:
        return SkipReason.BAD_VALUE
    value = get(_INVOCATION_START)
    if value is None:
        return count, None
    if type(value) is list and len(value) == 1:
        value = value[0]
    kind = type(value)
    if not (kind is int or (kind is float and value.is_integer())):
        return SkipReason.BAD_TIMESTAMP
    second = float(value)
    if not emitted_s - MAX_START_BEFORE_S <= second <= emitted_s:
        return SkipReason.BAD_TIMESTAMP
    return count, second
