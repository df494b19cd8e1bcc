"""What decoding gives: samples, and the bookkeeping that explains every input that gave none."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, NamedTuple

from controller.model import Sample


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
    # a reduced record already windowed, put again by a retried reducer batch
    DUPLICATE_RECORD = "duplicate_record"
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
        SkipReason.DUPLICATE_RECORD,
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
