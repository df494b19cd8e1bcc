"""Worker telemetry in, samples out: Kinesis -> CloudWatch Logs subscription -> EMF -> Sample.

The path of one Kinesis record: base64 (Lambda's event encoding) -> KPL deaggregation when the
record carries the KPL magic -> gzip -> a CloudWatch Logs subscription payload (``messageType``
``DATA_MESSAGE`` or ``CONTROL_MESSAGE``, ``logEvents[]``) -> one EMF document per log event ->
at most one :class:`~controller.model.Sample` per document.

Nothing on the stream is trusted. Whatever cannot be read is skipped and counted under a
:class:`SkipReason` in a ``Counter``; decoding never raises and never turns a bad input into a
sample, so one poison record cannot stall a shard. This is the controller's hot path: see
``queuemesh bench decode`` for its cost against the bare base64 + gunzip + JSON floor.
"""

from __future__ import annotations

import binascii
import json
import zlib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final, NamedTuple

from controller import schema
from controller.cache import LruCache
from controller.constants import CACHED_QUEUES, is_queue_name
from controller.model import Sample

DEFAULT_NAMESPACE: Final = schema.NAMESPACE

# Upper bound for any one count, latency or duration value of a document (and for a count's
# array sum). A worker invocation makes far fewer calls and Lambda runs at most 900,000 ms;
# anything larger is a broken or hostile producer, not evidence.
MAX_VALUE: Final = 1_000_000
# CloudWatch Logs sends at most ~1 MB of log events per payload; a record that inflates past this
# is a decompression bomb, not telemetry.
MAX_PAYLOAD_BYTES: Final = 8 * 1024 * 1024
# Epoch milliseconds later than this (year 5138) are not a timestamp.
MAX_TIMESTAMP_MS: Final = 1e14

KPL_MAGIC: Final = b"\xf3\x89\x9a\xc2"
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
# Cheap test before parsing: an EMF document has an ``_aws`` member, a plain log line has not.
_EMF_MARKER: Final = '"_aws"'
# The stdlib parser's own scanner, the one json.loads ends in: called directly it skips two
# Python frames and two regex matches per call, a tenth of the parse of an EMF line.
_Scanner = Callable[[str, int], tuple[Any, int]]
_scan_json: Final[_Scanner] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_JSON_ERRORS: Final = (ValueError, StopIteration, RecursionError)
_JSON_WHITESPACE: Final = " \t\n\r"
# The key of a directive's metric declarations, as it reads inside a payload's message string.
_DECLARATIONS_KEY: Final = '\\"Metrics\\":['
# Declarations seen to be flat objects, escaped and with their closing bracket (see
# _without_known_declarations), newest first.
_MAX_KNOWN_DECLARATIONS: Final = 16
_known_declarations: list[str] = []

_QUEUE: Final = schema.QUEUE_DIMENSION
# Queue names already seen to be valid: a worker names the same few queues in every document,
# and a lookup is a fifth of the check. Bounded like every per-queue memory of a container.
_valid_queue_names: LruCache[str, bool] = LruCache(CACHED_QUEUES)
_DOWNSTREAM: Final = schema.DOWNSTREAM_DIMENSION
# The order _sample_from_document unpacks them in.
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


class SkipReason(StrEnum):
    """Why an input produced no sample. Record-level reasons count once per Kinesis (user)
    record, event-level reasons once per log event."""

    # record level
    BAD_RECORD = "bad_record"
    BAD_BASE64 = "bad_base64"
    BAD_AGGREGATE = "bad_aggregate"
    BAD_GZIP = "bad_gzip"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    BAD_PAYLOAD = "bad_payload"
    CONTROL_MESSAGE = "control_message"
    UNKNOWN_MESSAGE_TYPE = "unknown_message_type"
    # log event level
    BAD_LOG_EVENT = "bad_log_event"
    NOT_EMF = "not_emf"
    BAD_JSON = "bad_json"
    BAD_EMF = "bad_emf"
    OTHER_NAMESPACE = "other_namespace"
    MISSING_QUEUE = "missing_queue"
    BAD_QUEUE_NAME = "bad_queue_name"
    BAD_DIMENSION = "bad_dimension"
    BAD_TIMESTAMP = "bad_timestamp"
    BAD_VALUE = "bad_value"
    NO_TELEMETRY = "no_telemetry"
    # counted by the application, which remembers the log events it has windowed
    DUPLICATE_LOG_EVENT = "duplicate_log_event"
    INTERNAL_ERROR = "internal_error"


# Skips that are the stream's ordinary traffic, not faults: CloudWatch Logs' health checks, a
# worker's plain log lines and other EMF, at-least-once redelivery. The rest mean something sent
# the controller what it cannot read (the controller's `TelemetryUnreadable` metric).
ORDINARY_SKIPS: Final = frozenset(
    {
        SkipReason.CONTROL_MESSAGE,
        SkipReason.NOT_EMF,
        SkipReason.OTHER_NAMESPACE,
        SkipReason.NO_TELEMETRY,
        SkipReason.DUPLICATE_LOG_EVENT,
    }
)

# Which log event a sample came from: log group, log stream, the event's id (a string in AWS,
# an int in moto) and the sample's event time. CloudWatch Logs delivers at least once, so the
# same log event can arrive again in a new Kinesis record; the id alone is unique in AWS, the
# time guards against producers that number ids per payload (emulators, hand-made recordings).
LogEventKey = tuple[tuple[str, str], str | int, float]


class RecordStatus(StrEnum):
    """What became of one Kinesis record. None of these asks for a retry: a record that
    cannot be read now cannot be read later either."""

    DECODED = "DECODED"  # yielded at least one sample
    NO_SAMPLES = "NO_SAMPLES"  # readable, but nothing in it was QueueMesh telemetry
    SKIPPED = "SKIPPED"  # unreadable as a whole (bad base64, gzip, payload, ...)


class RecordOutcome(NamedTuple):
    """One Kinesis record's result (a named tuple: one is made per record, on the hot path)."""

    sequence_number: str | None
    status: RecordStatus
    samples: int
    log_events: int


@dataclass(slots=True)
class DecodeResult:
    """Everything decoded from one batch, plus the bookkeeping to explain what was not.

    ``records`` counts Kinesis records as delivered (a KPL-aggregated record counts once);
    ``log_event_keys`` says which log event each sample came from (for redelivery checks);
    ``payload_bytes`` is their decoded (still compressed) size. Every record is fully processed
    when decoding returns: ``outcomes`` says, per sequence number, what it gave.
    """

    samples: list[Sample] = field(default_factory=list)
    # One per sample, in the same order: its log event, None when the payload does not say.
    log_event_keys: list[LogEventKey | None] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    records: int = 0
    log_events: int = 0
    payload_bytes: int = 0
    outcomes: list[RecordOutcome] = field(default_factory=list)


def decode_kinesis_event(
    event: Mapping[str, Any], *, namespace: str = DEFAULT_NAMESPACE
) -> DecodeResult:
    """Decode a Lambda Kinesis event (``{"Records": [{"kinesis": {"data": ...}}]}``)."""
    result = DecodeResult()
    records = event.get("Records") if isinstance(event, Mapping) else None
    if not isinstance(records, list):
        result.skipped[SkipReason.BAD_RECORD] += 1
        return result
    for record in records:
        result.records += 1
        sequence_number, raw = _record_bytes(record, result.skipped)
        if raw is None:
            result.outcomes.append(RecordOutcome(sequence_number, RecordStatus.SKIPPED, 0, 0))
            continue
        _decode_into(raw, sequence_number, namespace, result)
    return result


def decode_record_data(
    data: bytes,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    sequence_number: str | None = None,
    into: DecodeResult | None = None,
) -> DecodeResult:
    """Decode one Kinesis record's data as Kinesis holds it (before Lambda's base64).

    Pass ``into`` to accumulate several records into one result (as replay does).
    """
    result = DecodeResult() if into is None else into
    result.records += 1
    if not isinstance(data, bytes | bytearray | memoryview):
        result.skipped[SkipReason.BAD_RECORD] += 1
        result.outcomes.append(RecordOutcome(sequence_number, RecordStatus.SKIPPED, 0, 0))
        return result
    _decode_into(bytes(data), sequence_number, namespace, result)
    return result


def samples_from_log_message(
    message: str,
    timestamp_ms: float | None,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    skipped: Counter[str] | None = None,
) -> list[Sample]:
    """The samples in one log line (one EMF document): zero or one.

    ``timestamp_ms`` is the log event's timestamp, used when the document has no
    ``_aws.Timestamp``.
    """
    counter: Counter[str] = Counter() if skipped is None else skipped
    if not isinstance(message, str):
        counter[SkipReason.BAD_LOG_EVENT] += 1
        return []
    if _EMF_MARKER not in message:
        counter[SkipReason.NOT_EMF] += 1
        return []
    try:
        sample = _sample_from_message(message, timestamp_ms, namespace, counter)
    except Exception:
        counter[SkipReason.INTERNAL_ERROR] += 1
        return []
    return [] if sample is None else [sample]


# --- records and payloads -------------------------------------------------------------------


def _record_bytes(record: Any, skipped: Counter[str]) -> tuple[str | None, bytes | None]:
    if type(record) is not dict and not isinstance(record, Mapping):
        skipped[SkipReason.BAD_RECORD] += 1
        return None, None
    kinesis = record.get("kinesis")
    if type(kinesis) is not dict and not isinstance(kinesis, Mapping):
        skipped[SkipReason.BAD_RECORD] += 1
        return None, None
    sequence_number = kinesis.get("sequenceNumber")
    if type(sequence_number) is not str and sequence_number is not None:
        sequence_number = str(sequence_number)
    data = kinesis.get("data")
    if type(data) is not str and not isinstance(data, str | bytes):
        skipped[SkipReason.BAD_RECORD] += 1
        return sequence_number, None
    try:
        return sequence_number, binascii.a2b_base64(data)
    except (binascii.Error, ValueError):
        skipped[SkipReason.BAD_BASE64] += 1
        return sequence_number, None


def _decode_into(
    raw: bytes, sequence_number: str | None, namespace: str, result: DecodeResult
) -> None:
    result.payload_bytes += len(raw)
    samples_before = len(result.samples)
    events_before = result.log_events
    readable = False
    try:
        if raw.startswith(KPL_MAGIC):
            for user_data in _deaggregate(raw, sequence_number, result.skipped):
                readable |= _decode_payload(user_data, namespace, result)
        else:
            readable = _decode_payload(raw, namespace, result)
    except Exception:
        result.skipped[SkipReason.INTERNAL_ERROR] += 1
    produced = len(result.samples) - samples_before
    if produced:
        status = RecordStatus.DECODED
    elif readable:
        status = RecordStatus.NO_SAMPLES
    else:
        status = RecordStatus.SKIPPED
    result.outcomes.append(
        RecordOutcome(sequence_number, status, produced, result.log_events - events_before)
    )


def _deaggregate(raw: bytes, sequence_number: str | None, skipped: Counter[str]) -> list[bytes]:
    # Imported on first use: it pulls in protobuf (cold start) and edits sys.path on import.
    from aws_kinesis_agg import deaggregator

    boto3_shaped = {
        "SequenceNumber": sequence_number or "",
        "PartitionKey": "",
        "ApproximateArrivalTimestamp": 0,
        "Data": raw,
    }
    user_records = list(deaggregator.iter_deaggregate_records(boto3_shaped, data_format="Boto3"))
    # A record that fails its digest or protobuf parse comes back unchanged, not aggregated.
    if not user_records or not user_records[0]["kinesis"].get("aggregated"):
        skipped[SkipReason.BAD_AGGREGATE] += 1
        return []
    return [binascii.a2b_base64(r["kinesis"]["data"]) for r in user_records]


def _decode_payload(compressed: bytes, namespace: str, result: DecodeResult) -> bool:
    """Decode one CloudWatch Logs subscription payload; say whether it was readable."""
    skipped = result.skipped
    inflater = zlib.decompressobj(_GZIP_WBITS)
    try:
        text = inflater.decompress(compressed, MAX_PAYLOAD_BYTES)
    except zlib.error:
        skipped[SkipReason.BAD_GZIP] += 1
        return False
    if not inflater.eof:
        skipped[
            SkipReason.PAYLOAD_TOO_LARGE if inflater.unconsumed_tail else SkipReason.BAD_GZIP
        ] += 1
        return False
    try:
        payload = _parse_json(_without_known_declarations(text.decode()))
    except (*_JSON_ERRORS, UnicodeDecodeError):
        skipped[SkipReason.BAD_PAYLOAD] += 1
        return False
    if type(payload) is not dict:
        skipped[SkipReason.BAD_PAYLOAD] += 1
        return False
    message_type = payload.get("messageType")
    if message_type != "DATA_MESSAGE":
        skipped[
            SkipReason.CONTROL_MESSAGE
            if message_type == "CONTROL_MESSAGE"
            else SkipReason.UNKNOWN_MESSAGE_TYPE
        ] += 1
        return message_type == "CONTROL_MESSAGE"
    log_events = payload.get("logEvents")
    if type(log_events) is not list:
        skipped[SkipReason.BAD_PAYLOAD] += 1
        return False
    result.log_events += len(log_events)
    group, stream = payload.get("logGroup"), payload.get("logStream")
    source = (group, stream) if type(group) is str and type(stream) is str else None
    append = result.samples.append
    append_key = result.log_event_keys.append
    scan = _scan_json
    for log_event in log_events:
        if type(log_event) is not dict:
            skipped[SkipReason.BAD_LOG_EVENT] += 1
            continue
        message = log_event.get("message")
        if type(message) is not str:
            skipped[SkipReason.BAD_LOG_EVENT] += 1
            continue
        if _EMF_MARKER not in message:
            skipped[SkipReason.NOT_EMF] += 1
            continue
        if message[:1] != "{":
            message = _strip_prefix(message)
            if message is None:
                skipped[SkipReason.NOT_EMF] += 1
                continue
        try:
            document, end = scan(message, 0)
        except _JSON_ERRORS:
            skipped[SkipReason.BAD_JSON] += 1
            continue
        if end != len(message) and message[end:].strip(_JSON_WHITESPACE):
            skipped[SkipReason.BAD_JSON] += 1
            continue
        if type(document) is not dict:
            skipped[SkipReason.NOT_EMF] += 1
            continue
        sample = _sample_from_document(document, log_event.get("timestamp"), namespace, skipped)
        if sample is not None:
            append(sample)
            event_id = log_event.get("id")
            if source is not None and (type(event_id) is str or type(event_id) is int):
                append_key((source, event_id, sample.event_time))
            else:
                append_key(None)
    return True


def _without_known_declarations(text: str) -> str:
    """The payload with the metric declarations it repeats from earlier ones left out.

    EMF's declarations (``"Metrics":[{"Name": ..., "Unit": ...}, ...]`` in each directive) are
    a third of a worker document and the decoder needs nothing of them but a list. A worker
    repeats the same declarations in every document, so the decoder remembers the few it has
    seen parse as a list of flat objects and, where a payload's message repeats one, cuts it:
    that document reads ``"Metrics":[]``. The outcome is that of a full parse, whatever the
    payload: the cut text is a valid string's content by itself (so the payload parses, or
    fails, alike) and a valid list's content once unescaped (so the message does), and where
    the key's escaped quotes are not inside a string, the payload is not JSON either way.
    """
    at = text.find(_DECLARATIONS_KEY)
    if at < 0:
        return text
    pieces = []
    kept_from = 0
    while at >= 0:
        start = at + len(_DECLARATIONS_KEY)
        for known in _known_declarations:
            if text.startswith(known, start):
                end = start + len(known) - 1  # the closing bracket stays
                break
        else:
            end = _learn_declarations(text, start)
        if end > start:
            pieces.append(text[kept_from:start])
            kept_from = end
        at = text.find(_DECLARATIONS_KEY, start)
    if not pieces:
        return text
    pieces.append(text[kept_from:])
    return "".join(pieces)


def _learn_declarations(text: str, start: int) -> int:
    """Where the declarations starting at ``start`` end (their ``]``), remembered, if they
    are flat objects; -1 if not."""
    end = text.find("]", start)
    if end <= start or not _flat_objects(text[start:end]):
        return -1
    _known_declarations.insert(0, text[start : end + 1])
    del _known_declarations[_MAX_KNOWN_DECLARATIONS:]
    return end


def _flat_objects(escaped: str) -> bool:
    """Whether ``escaped`` is, as a JSON string's content, a list's content of objects that
    hold only scalars."""
    try:
        content, end = _scan_json(f'"{escaped}"', 0)
        if end != len(escaped) + 2:
            return False
        items, end = _scan_json(f"[{content}]", 0)
    except _JSON_ERRORS:
        return False
    return end == len(content) + 2 and all(
        type(item) is dict and all(type(v) in (str, int, float) for v in item.values())
        for item in items
    )


# --- EMF documents --------------------------------------------------------------------------


def _sample_from_message(
    message: str, timestamp_ms: float | None, namespace: str, skipped: Counter[str]
) -> Sample | None:
    """Parse a log line that passed the ``_aws`` prefilter (the hot loop inlines this)."""
    if message[:1] != "{":
        stripped = _strip_prefix(message)
        if stripped is None:
            skipped[SkipReason.NOT_EMF] += 1
            return None
        message = stripped
    try:
        document = _parse_json(message)
    except _JSON_ERRORS:
        skipped[SkipReason.BAD_JSON] += 1
        return None
    if type(document) is not dict:
        skipped[SkipReason.NOT_EMF] += 1
        return None
    return _sample_from_document(document, timestamp_ms, namespace, skipped)


def _parse_json(text: str) -> Any:
    """``json.loads`` for a str, through the scanner directly."""
    start = 0
    if text[:1] in _JSON_WHITESPACE:
        start = len(text) - len(text.lstrip(_JSON_WHITESPACE))
    value, end = _scan_json(text, start)
    if end != len(text) and text[end:].strip(_JSON_WHITESPACE):
        raise ValueError(f"extra data after the JSON value at {end}")
    return value


def _strip_prefix(message: str) -> str | None:
    """The JSON object at the end of a line, or None.

    EMF written to stdout is the bare JSON line; a line logged through ``logging`` carries a
    prefix (level, time, request id) before it, tolerated when whitespace ends it.
    """
    start = message.find("{")
    if start < 0 or (start > 0 and message[start - 1] not in " \t"):
        return None
    return message[start:]


def _sample_from_document(
    document: dict[str, Any], timestamp_ms: float | None, namespace: str, skipped: Counter[str]
) -> Sample | None:
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
        if directive.get("Namespace") == namespace:
            ours = True
    if not ours:
        skipped[SkipReason.OTHER_NAMESPACE] += 1
        return None

    get = document.get
    queue = get(_QUEUE)
    if type(queue) is not str or not queue:
        skipped[SkipReason.MISSING_QUEUE] += 1
        return None
    if _valid_queue_names.get(queue) is None:
        if not is_queue_name(queue):
            skipped[SkipReason.BAD_QUEUE_NAME] += 1
            return None
        _valid_queue_names[queue] = True
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
        (ok,), (throttled,), (server_errors,), (client_errors,), (overloaded,), (requests,) = values  # type: ignore[misc]
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
    timed_out = get(_TIMED_OUT)
    if timed_out is not None:
        timed_out = _count(timed_out)
        if timed_out < 0:
            skipped[SkipReason.BAD_VALUE] += 1
            return None
    elif latency is None and retry_after is None and duration is None and counts == _ABSENT:
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

    ok = ok or 0
    throttled = throttled or 0
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

    return Sample(
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


def _counts(values: list[Any]) -> list[int | None] | None:
    """Count members (None where absent); None when one is not a count."""
    counts: list[int | None] = []
    for value in values:
        if value is None:
            counts.append(None)
            continue
        count = _count(value)
        if count < 0:
            return None
        counts.append(count)
    return counts


def _count(value: Any) -> int:
    """A count member (a number or an array of numbers, summed); -1 when it is not one."""
    kind = type(value)
    if kind is list:
        # Powertools writes every metric as an array, mostly of one value: keep that path short.
        if len(value) != 1:
            return _count_array(value)
        value = value[0]
        kind = type(value)
    if kind is float:
        return int(value) if 0.0 <= value <= MAX_VALUE and value.is_integer() else -1
    if kind is int:
        return value if 0 <= value <= MAX_VALUE else -1
    return -1


def _count_array(values: list[Any]) -> int:
    total = 0
    for item in values:
        kind = type(item)
        if kind is float and 0.0 <= item <= MAX_VALUE and item.is_integer():
            total += int(item)
        elif kind is int and 0 <= item <= MAX_VALUE:
            total += item
        else:
            return -1
    return total if total <= MAX_VALUE else -1


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


__all__ = [
    "DEFAULT_NAMESPACE",
    "MAX_VALUE",
    "DecodeResult",
    "LogEventKey",
    "RecordOutcome",
    "RecordStatus",
    "SkipReason",
    "decode_kinesis_event",
    "decode_record_data",
    "samples_from_log_message",
]
