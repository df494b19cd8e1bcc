"""Recordings (docs/architecture.md, "Recordings"): the controller's Kinesis stream as JSON Lines.

One Kinesis record per line, in arrival order::

    {"arrival": 1767225601.5, "shard": "shardId-000000000000", "sequence": "4960...",
     "partition_key": "...", "data": "<base64 of the record's data>"}

This module holds the format (``RecordedLine``, ``write_recording``, ``read_recording``) and
the encoders that turn telemetry samples into what a worker's telemetry becomes on the way to
the controller: an EMF document (``emf_document``, ``emf_line``), a CloudWatch Logs subscription
payload, gzip (``subscription_payload``), the Kinesis record holding it, and the Lambda event
that carries records (``kinesis_event``). ``record_deliveries`` turns a simulated run's
telemetry into a recording.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from controller.model import Sample
from worker import schema

DEFAULT_SHARD = "shardId-000000000000"
# Kinesis sequence numbers are long decimal strings; this one only has to look like them and
# grow with each record.
SEQUENCE_BASE = 49_600_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000_000
ACCOUNT = "000000000000"
# Kinesis sequence numbers are decimal, at most 129 digits (its API's pattern 0|([1-9]\d{0,128})).
MAX_SEQUENCE_DIGITS = 129
_SEQUENCE = re.compile(rf"[0-9]{{1,{MAX_SEQUENCE_DIGITS}}}")
# Arrival stamps a real stream (or the simulator, which starts at 2026) can carry: from
# 2000-01-01 to 2100-01-01 UTC. Anything else is a unit mix-up (milliseconds, say) or garbage,
# and would only make the replay's virtual clock run for nothing.
EARLIEST_ARRIVAL = 946_684_800.0
LATEST_ARRIVAL = 4_102_444_800.0


class RecordingError(ValueError):
    """A recording that cannot be read; the message names the line and what is wrong."""


@dataclass(frozen=True, slots=True)
class RecordedLine:
    """One Kinesis record of a recording."""

    arrival: float
    shard: str
    sequence: str
    partition_key: str
    data: bytes

    def to_json(self) -> str:
        return json.dumps(
            {
                "arrival": self.arrival,
                "shard": self.shard,
                "sequence": self.sequence,
                "partition_key": self.partition_key,
                "data": base64.b64encode(self.data).decode("ascii"),
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_kinesis(cls, shard: str, record: Mapping[str, Any]) -> RecordedLine:
        """A record as Kinesis GetRecords returns it (boto3's shape)."""
        arrival = record["ApproximateArrivalTimestamp"]
        return cls(
            arrival=arrival.timestamp() if hasattr(arrival, "timestamp") else float(arrival),
            shard=shard,
            sequence=str(record["SequenceNumber"]),
            partition_key=str(record.get("PartitionKey", "")),
            data=bytes(record["Data"]),
        )

    @classmethod
    def from_json(cls, text: str, line: int = 0) -> RecordedLine:
        where = f"line {line}: " if line else ""
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as error:
            raise RecordingError(f"{where}not JSON ({error.msg})") from error
        if not isinstance(raw, dict):
            raise RecordingError(f"{where}must be a JSON object, got {type(raw).__name__}")
        arrival = raw.get("arrival")
        if (
            not isinstance(arrival, int | float)
            or isinstance(arrival, bool)
            or not math.isfinite(arrival)
        ):
            raise RecordingError(f"{where}arrival must be epoch seconds, got {arrival!r}")
        if not EARLIEST_ARRIVAL <= arrival < LATEST_ARRIVAL:
            raise RecordingError(
                f"{where}arrival {arrival!r} is not epoch seconds between 2000 and 2100 "
                "(milliseconds?)"
            )
        fields: dict[str, str] = {}
        for key in ("shard", "sequence", "partition_key", "data"):
            value = raw.get(key)
            if not isinstance(value, str):
                raise RecordingError(f"{where}{key} must be a string, got {value!r}")
            fields[key] = value
        if not _SEQUENCE.fullmatch(fields["sequence"]):
            raise RecordingError(
                f"{where}sequence must be 1..{MAX_SEQUENCE_DIGITS} decimal digits (0-9), got "
                f"{_shortened(fields['sequence'])}"
            )
        try:
            data = base64.b64decode(fields["data"], validate=True)
        except ValueError as error:
            # binascii.Error (not base64) is a ValueError, as is a character outside ASCII.
            raise RecordingError(f"{where}data is not base64 ({error})") from error
        return cls(
            arrival=float(arrival),
            shard=fields["shard"],
            sequence=fields["sequence"],
            partition_key=fields["partition_key"],
            data=data,
        )


def _shortened(text: str, limit: int = 40) -> str:
    """``text`` quoted, cut to ``limit`` characters: error messages stay one readable line."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text)} characters)"


def write_recording(lines: Iterable[RecordedLine], target: Path | IO[str]) -> int:
    """Write ``lines`` as JSON Lines to a path or an open text stream; returns the count."""
    if isinstance(target, Path):
        with target.open("w", encoding="utf-8") as stream:
            return write_recording(lines, stream)
    count = 0
    for line in lines:
        target.write(line.to_json() + "\n")
        count += 1
    return count


class UnreadableRecording(RecordingError):
    """The recording's file itself could not be read."""


@dataclass(slots=True)
class Recording:
    records: list[RecordedLine]
    bad_lines: list[str] = field(default_factory=list)
    duplicates: int = 0


def read_recording(source: Path | IO[str], *, skip_bad: bool = False) -> Recording:
    """The records of a recording, in arrival order (stable: file order breaks ties).

    Blank lines are skipped. A broken line raises ``RecordingError`` naming it, unless
    ``skip_bad``: then it is left out and listed. A record seen before (same shard and sequence
    number) is left out and counted: Kinesis delivers a record once, so a repeat is a defect.
    """
    if isinstance(source, Path):
        try:
            with source.open(encoding="utf-8") as stream:
                return read_recording(stream, skip_bad=skip_bad)
        except (OSError, UnicodeDecodeError) as error:
            raise UnreadableRecording(f"cannot read recording {source}: {error}") from error
    recording = Recording(records=[])
    seen: set[tuple[str, int]] = set()
    for number, text in enumerate(source, start=1):
        if not text.strip():
            continue
        try:
            record = RecordedLine.from_json(text, number)
        except RecordingError as error:
            if not skip_bad:
                raise
            recording.bad_lines.append(str(error))
            continue
        position = (record.shard, int(record.sequence))
        if position in seen:
            recording.duplicates += 1
            continue
        seen.add(position)
        recording.records.append(record)
    recording.records.sort(key=lambda record: record.arrival)
    return recording


# --- encoders ----------------------------------------------------------------------------
def emf_document(sample: Sample, namespace: str = schema.NAMESPACE) -> dict[str, Any]:
    """The EMF document a worker emits for one invocation (the telemetry contract), or for
    several that started in one second (``sample.invocations``, ``sample.started``: the
    aggregated form, its latency a sum and a count)."""
    members: list[tuple[schema.Metric, Any]] = [
        (schema.REQUESTS, sample.requests),
        (schema.OK, sample.ok),
        (schema.THROTTLED, sample.throttled),
        (schema.SERVER_ERRORS, sample.server_errors),
        (schema.CLIENT_ERRORS, sample.client_errors),
    ]
    if sample.overloaded is not None:
        members.append((schema.OVERLOADED, sample.overloaded))
    if sample.timed_out:
        members.append((schema.TIMED_OUT, sample.timed_out))
    aggregated = sample.invocations > 1 or sample.started is not None
    if aggregated and sample.latency_count:
        members.append((schema.LATENCY_SUM, sample.latency_ms_sum))
        members.append((schema.LATENCY_COUNT, sample.latency_count))
    elif sample.latency_count:
        # One value per call (EMF takes arrays): the mean, so the sum and count survive.
        mean = sample.latency_ms_sum / sample.latency_count
        members.append((schema.LATENCY, [mean] * sample.latency_count))
    if sample.retry_after_s:
        members.append((schema.RETRY_AFTER, sample.retry_after_s))
    if sample.invocation_ms is not None:
        members.append((schema.INVOCATION_DURATION, sample.invocation_ms))
    if aggregated:
        members.append((schema.INVOCATIONS, sample.invocations))
        if sample.started is not None:
            members.append((schema.INVOCATION_START, math.floor(sample.started)))
    members.extend(_announced_members(sample))
    return schema.emf_document(
        sample.queue,
        members,
        timestamp_ms=round(sample.event_time * 1000),
        namespace=namespace,
        dimensions=(
            None if sample.downstream is None else {schema.DOWNSTREAM_DIMENSION: sample.downstream}
        ),
        undeclared=(schema.RETRY_AFTER, schema.INVOCATIONS, schema.INVOCATION_START),
    )


def _announced_members(sample: Sample) -> list[tuple[schema.Metric, Any]]:
    """The announced-limit members a worker writes, only those the sample has (the quota,
    window and reset are read only beside a remaining quota)."""
    members: list[tuple[schema.Metric, Any]] = []
    if sample.quota_remaining is not None:
        for metric, value in (
            (schema.RATE_LIMIT_REMAINING, sample.quota_remaining),
            (schema.RATE_LIMIT_QUOTA, sample.quota_limit),
            (schema.RATE_LIMIT_WINDOW, sample.quota_window_s),
            (schema.RATE_LIMIT_RESET, sample.quota_reset_s),
        ):
            if value is not None:
                members.append((metric, value))
    if sample.throttled_concurrency:
        members.append((schema.THROTTLED_CONCURRENCY, sample.throttled_concurrency))
    if sample.throttled_rate:
        members.append((schema.THROTTLED_RATE, sample.throttled_rate))
    return members


def emf_line(sample: Sample, namespace: str = schema.NAMESPACE) -> str:
    """``emf_document`` as the one log line a worker prints."""
    return json.dumps(emf_document(sample, namespace), separators=(",", ":"))


def subscription_payload(
    events: Sequence[tuple[float, str]],
    log_group: str,
    log_stream: str,
    *,
    first_id: int = 0,
    owner: str = ACCOUNT,
    filter_name: str = "queuemesh-telemetry",
) -> bytes:
    """A CloudWatch Logs subscription DATA_MESSAGE (gzip), as Kinesis holds it.

    ``events`` are ``(timestamp in epoch seconds, message)`` pairs of one log stream.
    """
    document = {
        "messageType": "DATA_MESSAGE",
        "owner": owner,
        "logGroup": log_group,
        "logStream": log_stream,
        "subscriptionFilters": [filter_name],
        "logEvents": [
            {"id": str(first_id + index), "timestamp": round(at * 1000), "message": message}
            for index, (at, message) in enumerate(events)
        ],
    }
    return gzip.compress(json.dumps(document, separators=(",", ":")).encode("utf-8"), mtime=0)


def log_group_of(queue: str) -> str:
    """The worker's log group for a queue in recordings: one worker function per queue."""
    return f"/aws/lambda/{queue}-worker"


def record_deliveries(
    deliveries: Iterable[tuple[float, Sample]],
    *,
    shard: str = DEFAULT_SHARD,
    namespace: str = schema.NAMESPACE,
) -> list[RecordedLine]:
    """One Kinesis record per telemetry sample, arriving at its (epoch) arrival time.

    Each sample is one log event of its queue's worker log group; the records are ordered by
    arrival (ties in the given order) and numbered with growing sequence numbers.
    """
    ordered = sorted(enumerate(deliveries), key=lambda item: (item[1][0], item[0]))
    lines = []
    for number, (_, (arrival, sample)) in enumerate(ordered):
        log_stream = f"sim/{sample.queue}"
        data = subscription_payload(
            [(sample.event_time, emf_line(sample, namespace))],
            log_group_of(sample.queue),
            log_stream,
            first_id=number,
        )
        lines.append(
            RecordedLine(
                arrival=round(arrival, 6),
                shard=shard,
                sequence=str(SEQUENCE_BASE + number),
                partition_key=log_stream,
                data=data,
            )
        )
    return lines


def kinesis_event(
    lines: Sequence[RecordedLine],
    stream_arn: str = f"arn:aws:kinesis:us-east-1:{ACCOUNT}:stream/t",
    region: str = "us-east-1",
) -> dict[str, Any]:
    """The Lambda event a Kinesis event source mapping delivers for these records."""
    return {
        "Records": [
            {
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": line.partition_key,
                    "sequenceNumber": line.sequence,
                    "data": base64.b64encode(line.data).decode("ascii"),
                    "approximateArrivalTimestamp": line.arrival,
                },
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                "eventID": f"{line.shard}:{line.sequence}",
                "eventName": "aws:kinesis:record",
                "invokeIdentityArn": f"arn:aws:iam::{ACCOUNT}:role/queuemesh-controller",
                "awsRegion": region,
                "eventSourceARN": stream_arn,
            }
            for line in lines
        ]
    }
