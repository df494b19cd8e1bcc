"""Worker telemetry in, samples out: Kinesis -> CloudWatch Logs subscription -> EMF -> Sample.

The package's API, by concern: ``records`` (the Kinesis record, KPL de-aggregation and the
CloudWatch Logs gzip envelope, with ``TelemetryDecoder``, the decoder a long-lived caller
keeps), ``declarations`` (the shortcut past repeated metric declarations), ``emf`` (one EMF
document to at most one sample), ``results`` (what a decode gives and why it skipped what
it skipped) and ``reduced`` (the reducer's per-(queue, second) totals on the reduced stream,
encoded and decoded). Nothing on the stream is trusted: decoding never raises.

The functions below decode with a decoder of their own, for callers that keep none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from controller.model import Sample
from controller.telemetry.emf import DEFAULT_NAMESPACE, MAX_VALUE, EmfReader
from controller.telemetry.records import KPL_MAGIC, MAX_PAYLOAD_BYTES, TelemetryDecoder
from controller.telemetry.results import (
    ORDINARY_SKIPS,
    DecodeResult,
    LogEventKey,
    RecordOutcome,
    RecordStatus,
    SkipReason,
)


def decode_kinesis_event(
    event: Mapping[str, Any], *, namespace: str = DEFAULT_NAMESPACE
) -> DecodeResult:
    """Decode a Lambda Kinesis event (``{"Records": [{"kinesis": {"data": ...}}]}``)."""
    return TelemetryDecoder(namespace).decode_kinesis_event(event)


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
    decoder = TelemetryDecoder(namespace)
    return decoder.decode_record_data(data, sequence_number=sequence_number, into=into)


def samples_from_log_message(
    message: str,
    timestamp_ms: float | None,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    skipped: Counter[str] | None = None,
) -> list[Sample]:
    """The samples in one log line (one EMF document): zero or one (see
    ``EmfReader.samples_from_log_message``)."""
    return EmfReader(namespace).samples_from_log_message(message, timestamp_ms, skipped)


__all__ = [
    "DEFAULT_NAMESPACE",
    "KPL_MAGIC",
    "MAX_PAYLOAD_BYTES",
    "MAX_VALUE",
    "ORDINARY_SKIPS",
    "DecodeResult",
    "EmfReader",
    "LogEventKey",
    "RecordOutcome",
    "RecordStatus",
    "SkipReason",
    "TelemetryDecoder",
    "decode_kinesis_event",
    "decode_record_data",
    "samples_from_log_message",
]
