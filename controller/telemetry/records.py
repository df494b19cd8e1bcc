"""Kinesis records in, EMF log lines out: the record, KPL and CloudWatch Logs layers.

The path of one Kinesis record: base64 (Lambda's event encoding) -> KPL de-aggregation when the
record carries the KPL magic -> gzip -> a CloudWatch Logs subscription payload (``messageType``
``DATA_MESSAGE`` or ``CONTROL_MESSAGE``, ``logEvents[]``) -> one EMF document per log event,
read by ``controller.telemetry.emf``.

Nothing on the stream is trusted. Whatever cannot be read is skipped and counted under a
``SkipReason``; decoding never raises and never turns a bad input into a sample, so one poison
record cannot stall a shard. This is the controller's hot path: see ``queuemesh bench decode``
for its cost against the bare base64 + gunzip + JSON floor.
"""

from __future__ import annotations

import binascii
import zlib
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

from controller.telemetry.declarations import KnownDeclarations
from controller.telemetry.emf import (
    DEFAULT_NAMESPACE,
    EMF_MARKER,
    JSON_ERRORS,
    JSON_WHITESPACE,
    EmfReader,
    parse_json,
    scan_json,
    strip_prefix,
)
from controller.telemetry.results import DecodeResult, RecordOutcome, RecordStatus, SkipReason

# CloudWatch Logs sends at most ~1 MB of log events per payload; a record that inflates past this
# is a decompression bomb, not telemetry.
MAX_PAYLOAD_BYTES: Final = 8 * 1024 * 1024
KPL_MAGIC: Final = b"\xf3\x89\x9a\xc2"
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS


class TelemetryDecoder:
    """Decodes the telemetry of one namespace: Lambda Kinesis events, or records' data.

    It owns what decoding learns as it goes, the metric declarations workers repeat
    (``KnownDeclarations``) and the queue names seen valid (``EmfReader``): a warm container's
    decoder keeps them between batches, and two decoders share nothing. What it learns only
    saves work; the outcome of a decode is the same, warm or cold.
    """

    def __init__(self, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.emf = EmfReader(namespace)
        self.declarations = KnownDeclarations()

    def decode_kinesis_event(self, event: Mapping[str, Any]) -> DecodeResult:
        """Decode a Lambda Kinesis event (``{"Records": [{"kinesis": {"data": ...}}]}``)."""
        result = DecodeResult()
        records = event.get("Records") if isinstance(event, Mapping) else None
        if not isinstance(records, list):
            result.skipped[SkipReason.BAD_RECORD] += 1
            return result
        for record in records:
            result.records += 1
            sequence_number, raw = record_bytes(record, result.skipped)
            if raw is None:
                result.outcomes.append(RecordOutcome(sequence_number, RecordStatus.SKIPPED, 0, 0))
                continue
            self._decode_into(raw, sequence_number, result)
        return result

    def decode_record_data(
        self,
        data: bytes,
        *,
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
        self._decode_into(bytes(data), sequence_number, result)
        return result

    def _decode_into(self, raw: bytes, sequence_number: str | None, result: DecodeResult) -> None:
        result.payload_bytes += len(raw)
        samples_before = len(result.samples)
        events_before = result.log_events
        readable = False
        try:
            if raw.startswith(KPL_MAGIC):
                for user_data in deaggregate(raw, sequence_number, result.skipped):
                    readable |= self._decode_payload(user_data, result)
            else:
                readable = self._decode_payload(raw, result)
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

    def _decode_payload(self, compressed: bytes, result: DecodeResult) -> bool:
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
            payload = parse_json(self.declarations.cut(text.decode()))
        except (*JSON_ERRORS, UnicodeDecodeError):
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
        scan = scan_json
        sample_from_document = self.emf.sample_from_document
        for log_event in log_events:
            if type(log_event) is not dict:
                skipped[SkipReason.BAD_LOG_EVENT] += 1
                continue
            message = log_event.get("message")
            if type(message) is not str:
                skipped[SkipReason.BAD_LOG_EVENT] += 1
                continue
            if EMF_MARKER not in message:
                skipped[SkipReason.NOT_EMF] += 1
                continue
            if message[:1] != "{":
                message = strip_prefix(message)
                if message is None:
                    skipped[SkipReason.NOT_EMF] += 1
                    continue
            try:
                document, end = scan(message, 0)
            except JSON_ERRORS:
                skipped[SkipReason.BAD_JSON] += 1
                continue
            if end != len(message) and message[end:].strip(JSON_WHITESPACE):
                skipped[SkipReason.BAD_JSON] += 1
                continue
            if type(document) is not dict:
                skipped[SkipReason.NOT_EMF] += 1
                continue
            sample = sample_from_document(document, log_event.get("timestamp"), skipped)
            if sample is not None:
                append(sample)
                event_id = log_event.get("id")
                if source is not None and (type(event_id) is str or type(event_id) is int):
                    append_key((source, event_id, sample.event_time))
                else:
                    append_key(None)
        return True


def record_bytes(record: Any, skipped: Counter[str]) -> tuple[str | None, bytes | None]:
    """A Lambda Kinesis record's sequence number and data (None: unreadable, counted)."""
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


def deaggregate(raw: bytes, sequence_number: str | None, skipped: Counter[str]) -> list[bytes]:
    """The user records of a KPL aggregate (none: unreadable, counted)."""
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
