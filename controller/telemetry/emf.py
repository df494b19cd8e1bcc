"""EMF documents in, samples out: one worker log line (an Embedded Metric Format document) is at
most one :class:`~controller.model.Sample`.

Nothing in a document is trusted: what cannot be read is skipped and counted under a
:class:`~controller.telemetry.results.SkipReason`, never raised. ``EmfReader`` owns the one
memory the parse keeps (the queue names already seen valid), so each decoder has its own.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any, Final

from controller import schema
from controller.cache import LruCache
from controller.constants import CACHED_QUEUES, is_queue_name
from controller.model import Sample
from controller.telemetry.aggregated import aggregated_invocations, latency_sum_and_count
from controller.telemetry.announced import announced_limit
from controller.telemetry.results import SkipReason
from controller.telemetry.values import MAX_VALUE, count_value

DEFAULT_NAMESPACE: Final = schema.NAMESPACE

# Epoch milliseconds later than this (year 5138) are not a timestamp.
MAX_TIMESTAMP_MS: Final = 1e14

# Cheap test before parsing: an EMF document has an ``_aws`` member, a plain log line has not.
EMF_MARKER: Final = '"_aws"'
# The stdlib parser's own scanner, the one json.loads ends in: called directly it skips two
# Python frames and two regex matches per call, a tenth of the parse of an EMF line.
Scanner = Callable[[str, int], tuple[Any, int]]
scan_json: Final[Scanner] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
JSON_ERRORS: Final = (ValueError, StopIteration, RecursionError)
JSON_WHITESPACE: Final = " \t\n\r"

_QUEUE: Final = schema.QUEUE_DIMENSION
_DOWNSTREAM: Final = schema.DOWNSTREAM_DIMENSION
# The order EmfReader.sample_from_document unpacks them in.
_COUNT_NAMES: Final = tuple(
    metric.name
    for metric in (
        schema.OK,
        schema.THROTTLED,
        schema.SERVER_ERRORS,
        schema.CLIENT_ERRORS,
        schema.OVERLOADED,
        schema.REQUESTS,
    )
)
_ABSENT: Final = [None] * len(_COUNT_NAMES)
# Counts as powertools writes them (integral floats), read by lookup: a count this small is
# the common case, and a lookup is a third of the float checks and conversion it replaces.
_SMALL_COUNTS: Final = {float(count): count for count in range(1024)}
# Read apart from the counts above: a document from a worker that predates it has no such
# member, and the inline path above would lose its shape for it.
_TIMED_OUT: Final = schema.TIMED_OUT.name
_MEASURE_NAMES: Final = tuple(
    metric.name for metric in (schema.LATENCY, schema.RETRY_AFTER, schema.INVOCATION_DURATION)
)
# The announced-limit members (docs/telemetry.md, "Announced limits"), optional: a document
# without them pays one lookup, and the kinds' two beside some 429s (the quota's others are
# looked up beside a remaining quota).
_REMAINING: Final = schema.RATE_LIMIT_REMAINING.name
_THROTTLED_CONCURRENCY: Final = schema.THROTTLED_CONCURRENCY.name
_THROTTLED_RATE: Final = schema.THROTTLED_RATE.name
# The aggregated form (docs/telemetry.md, "Aggregated documents"), optional: a per-invocation
# document pays two lookups for it (the latency sum, the invocations).
_LATENCY_SUM: Final = schema.LATENCY_SUM.name
_LATENCY_COUNT: Final = schema.LATENCY_COUNT.name
_INVOCATIONS: Final = schema.INVOCATIONS.name


def parse_json(text: str) -> Any:
    """``json.loads`` for a str, through the scanner directly."""
    start = 0
    if text[:1] in JSON_WHITESPACE:
        start = len(text) - len(text.lstrip(JSON_WHITESPACE))
    value, end = scan_json(text, start)
    if end != len(text) and text[end:].strip(JSON_WHITESPACE):
        raise ValueError(f"extra data after the JSON value at {end}")
    return value


def strip_prefix(message: str) -> str | None:
    """The JSON object at the end of a line, or None.

    EMF written to stdout is the bare JSON line; a line logged through ``logging`` carries a
    prefix (level, time, request id) before it, tolerated when whitespace ends it.
    """
    start = message.find("{")
    if start < 0 or (start > 0 and message[start - 1] not in " \t"):
        return None
    return message[start:]


class EmfReader:
    """Reads the EMF documents of one namespace into samples.

    It remembers the queue names already seen to be valid: a worker names the same few queues
    in every document, and a lookup is a fifth of the check. Bounded like every per-queue
    memory of a container (``CACHED_QUEUES``).
    """

    def __init__(self, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.namespace = namespace
        self._valid_queue_names: LruCache[str, bool] = LruCache(CACHED_QUEUES)

    def samples_from_log_message(
        self, message: str, timestamp_ms: float | None, skipped: Counter[str] | None = None
    ) -> list[Sample]:
        """The samples in one log line (one EMF document): zero or one.

        ``timestamp_ms`` is the log event's timestamp, used when the document has no
        ``_aws.Timestamp``.
        """
        counter: Counter[str] = Counter() if skipped is None else skipped
        if not isinstance(message, str):
            counter[SkipReason.BAD_LOG_EVENT] += 1
            return []
        if EMF_MARKER not in message:
            counter[SkipReason.NOT_EMF] += 1
            return []
        try:
            sample = self._sample_from_message(message, timestamp_ms, counter)
        except Exception:
            counter[SkipReason.INTERNAL_ERROR] += 1
            return []
        return [] if sample is None else [sample]

    def _sample_from_message(
        self, message: str, timestamp_ms: float | None, skipped: Counter[str]
    ) -> Sample | None:
        """Parse a log line that passed the ``_aws`` prefilter (the payload loop of
        ``controller.telemetry.records`` inlines this)."""
        if message[:1] != "{":
            stripped = strip_prefix(message)
            if stripped is None:
                skipped[SkipReason.NOT_EMF] += 1
                return None
            message = stripped
        try:
            document = parse_json(message)
        except JSON_ERRORS:
            skipped[SkipReason.BAD_JSON] += 1
            return None
        if type(document) is not dict:
            skipped[SkipReason.NOT_EMF] += 1
            return None
        return self.sample_from_document(document, timestamp_ms, skipped)

    def sample_from_document(
        self, document: dict[str, Any], timestamp_ms: float | None, skipped: Counter[str]
    ) -> Sample | None:
        """The sample a parsed document holds, or None with the reason counted in ``skipped``."""
        metadata = document.get("_aws")
        if type(metadata) is not dict:
            skipped[SkipReason.NOT_EMF] += 1
            return None
        directives = metadata.get("CloudWatchMetrics")
        if type(directives) is not list:
            skipped[SkipReason.BAD_EMF] += 1
            return None
        ours = False
        for directive in directives:
            if type(directive) is not dict or type(directive.get("Metrics")) is not list:
                skipped[SkipReason.BAD_EMF] += 1
                return None
            if directive.get("Namespace") == self.namespace:
                ours = True
        if not ours:
            skipped[SkipReason.OTHER_NAMESPACE] += 1
            return None

        get = document.get
        queue = get(_QUEUE)
        if type(queue) is not str or not queue:
            skipped[SkipReason.MISSING_QUEUE] += 1
            return None
        if self._valid_queue_names.get(queue) is None:
            if not is_queue_name(queue):
                skipped[SkipReason.BAD_QUEUE_NAME] += 1
                return None
            self._valid_queue_names[queue] = True
        downstream = get(_DOWNSTREAM)
        if downstream is not None and type(downstream) is not str:
            skipped[SkipReason.BAD_DIMENSION] += 1
            return None

        emitted_ms = metadata.get("Timestamp")
        if emitted_ms is None:
            emitted_ms = timestamp_ms
        if (
            emitted_ms is None
            or type(emitted_ms) not in (int, float)
            or not 0 < emitted_ms < MAX_TIMESTAMP_MS
        ):
            skipped[SkipReason.BAD_TIMESTAMP] += 1
            return None

        # Read inline: the shape powertools writes, each count an array of one small integral float.
        # Anything else (None where absent or null) goes through _counts.
        values = map(get, _COUNT_NAMES)
        try:
            (ok,), (throttled,), (server_errors,), (client_errors,), (overloaded,), (requests,) = (
                values  # type: ignore[misc]
            )
            inline = (
                float
                is type(ok)
                is type(throttled)
                is type(server_errors)
                is type(client_errors)
                is type(overloaded)
                is type(requests)
            )
        except (TypeError, ValueError):
            inline = False
        counts: list[int | None] | None = None
        if inline:
            small = _SMALL_COUNTS.get
            counts = [
                small(ok),
                small(throttled),
                small(server_errors),
                small(client_errors),
                small(overloaded),
                small(requests),
            ]
            if None in counts:
                counts = None
        if counts is None:
            counts = _counts(list(map(get, _COUNT_NAMES)))
            if counts is None:
                skipped[SkipReason.BAD_VALUE] += 1
                return None
        ok, throttled, server_errors, client_errors, overloaded, requests = counts
        latency, retry_after, duration = map(get, _MEASURE_NAMES)
        latency_total = get(_LATENCY_SUM)
        timed_out = get(_TIMED_OUT)
        if timed_out is not None:
            timed_out = count_value(timed_out)
            if timed_out < 0:
                skipped[SkipReason.BAD_VALUE] += 1
                return None
        elif (
            latency is None
            and latency_total is None
            and retry_after is None
            and duration is None
            and counts == _ABSENT
        ):
            skipped[SkipReason.NO_TELEMETRY] += 1
            return None

        latency_sum, latency_count = 0.0, 0
        if type(latency) is list:
            # One value per call: the longest array of a document, summed here rather than in
            # _sum_and_count to save a call per document.
            for item in latency:
                kind = type(item)
                if (kind is float or kind is int) and 0 <= item <= MAX_VALUE:
                    latency_sum += item
                else:
                    skipped[SkipReason.BAD_VALUE] += 1
                    return None
            latency_count = len(latency)
        elif latency is not None:
            latency_sum, latency_count = _sum_and_count(latency)
            if latency_count < 0:
                skipped[SkipReason.BAD_VALUE] += 1
                return None
        if latency_total is not None or get(_LATENCY_COUNT) is not None:
            summed = latency_sum_and_count(latency_total, get(_LATENCY_COUNT))
            if summed is None:
                skipped[SkipReason.BAD_VALUE] += 1
                return None
            latency_sum += summed[0]
            latency_count += summed[1]
        retry_after_s = 0.0
        if retry_after is not None:
            retry_after_s = _largest(retry_after)
            if retry_after_s < 0:
                skipped[SkipReason.BAD_VALUE] += 1
                return None
        invocation_ms = None
        if duration is not None:
            # Several durations in one document (a per-flush document) are summed: the total is
            # what the in-use concurrency estimate needs, and the start it implies is earlier,
            # never later, than the real one, so the sample is never mistaken for a newer one.
            if type(duration) is list and len(duration) == 1 and type(duration[0]) is float:
                # One duration as powertools writes it: read inline, a call less per document.
                invocation_ms = duration[0]
                duration_count = 1 if 0.0 <= invocation_ms <= MAX_VALUE else -1
            else:
                invocation_ms, duration_count = _sum_and_count(duration)
            if duration_count < 0 or invocation_ms > MAX_VALUE:
                skipped[SkipReason.BAD_VALUE] += 1
                return None

        aggregated = get(_INVOCATIONS)
        if aggregated is not None:
            invocations_and_start = aggregated_invocations(get, aggregated, emitted_ms / 1000.0)
            if isinstance(invocations_and_start, SkipReason):
                skipped[invocations_and_start] += 1
                return None

        ok = ok or 0
        throttled = throttled or 0
        remaining = get(_REMAINING)
        # The kinds are 429s: read beside some, never more than they.
        concurrency_429 = get(_THROTTLED_CONCURRENCY) if throttled else None
        rate_429 = get(_THROTTLED_RATE) if throttled else None
        limit = kinds = None
        if remaining is not None or concurrency_429 is not None or rate_429 is not None:
            limit = announced_limit(get, remaining)
            kinds = _counts([concurrency_429, rate_429])
            if limit is None or kinds is None or (kinds[0] or 0) + (kinds[1] or 0) > throttled:
                skipped[SkipReason.BAD_VALUE] += 1
                return None
        client_errors = client_errors or 0
        server_errors = server_errors or 0
        if overloaded is not None and overloaded > server_errors:
            server_errors = overloaded  # 503s are 5xx: a worker reporting only 503s still has them
        timed_out = timed_out or 0
        counted = ok + throttled + server_errors + client_errors + timed_out
        if requests is None or requests < counted:
            requests = counted
        if requests > MAX_VALUE:
            skipped[SkipReason.BAD_VALUE] += 1
            return None

        sample = Sample(
            queue,
            emitted_ms / 1000.0,
            requests,
            ok,
            throttled,
            server_errors,
            overloaded,
            client_errors,
            latency_sum,
            latency_count,
            retry_after_s,
            invocation_ms,
            downstream,
            timed_out,
        )
        if limit is not None and kinds is not None:
            (
                sample.quota_remaining,
                sample.quota_limit,
                sample.quota_window_s,
                sample.quota_reset_s,
            ) = limit
            sample.throttled_concurrency = kinds[0] or 0
            sample.throttled_rate = kinds[1] or 0
        if aggregated is not None and not isinstance(invocations_and_start, SkipReason):
            sample.invocations, sample.started = invocations_and_start
        return sample


def _counts(values: list[Any]) -> list[int | None] | None:
    """Count members (None where absent); None when one is not a count."""
    counts: list[int | None] = []
    for value in values:
        if value is None:
            counts.append(None)
            continue
        count = count_value(value)
        if count < 0:
            return None
        counts.append(count)
    return counts


def _sum_and_count(value: Any) -> tuple[float, int]:
    """Sum and number of a value or array of values; count -1 when it is not one."""
    if type(value) is list:
        total = 0.0
        for item in value:
            kind = type(item)
            if (kind is float or kind is int) and 0 <= item <= MAX_VALUE:
                total += item
            else:
                return 0.0, -1
        return total, len(value)
    kind = type(value)
    if (kind is float or kind is int) and 0 <= value <= MAX_VALUE:
        return float(value), 1
    return 0.0, -1


def _largest(value: Any) -> float:
    """Largest of a value or array of values; -1 when it is not one."""
    largest = 0.0
    for item in value if type(value) is list else (value,):
        if type(item) not in (int, float) or not 0 <= item <= MAX_VALUE:
            return -1.0
        largest = max(largest, float(item))
    return largest
