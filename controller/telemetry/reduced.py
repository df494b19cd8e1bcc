"""The reduced record: one queue's per-second totals, as the reducer forwards them to the
controller on the reduced stream (partition key: the queue's group, its CONFIG ``Group`` else
the downstream it names, else the queue). The contract is docs/telemetry.md ("The reduced
record"); this module is its one encoder and its one decoder.

A record is a JSON object, uncompressed (a second's totals are a few hundred bytes):

    {"reduced": 1, "id": "<unique per record>", "queue": "orders",
     "seconds": [{"second": 1767225600, "samples": 3, "requests": 30, ..., "newest_event_time":
                  1767225601.2, "quota_remaining": 40, ...}, ...]}

The per-second members are the window's ``Totals`` by name, then the optional announced quota
(``Quota``, each field as ``quota_<field>``). Nothing in a record is trusted either: one the
decoder cannot use is skipped whole and counted under a ``SkipReason``, never raised.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any, Final, NamedTuple, TypeGuard

from controller.constants import is_queue_name
from controller.telemetry.emf import JSON_ERRORS, MAX_TIMESTAMP_MS, parse_json
from controller.telemetry.results import SkipReason
from controller.window import QueueSecond, Quota, Totals, WindowStats

FORMAT_KEY: Final = "reduced"
FORMAT_VERSION: Final = 1
# Seconds in one record: a batch spanning more is forwarded as several records (a record of
# this many seconds stays far below Kinesis' 1 MiB).
MAX_SECONDS_PER_RECORD: Final = 600
MAX_ID_LENGTH: Final = 512
# A second's totals sum many documents, each bounded by the decoder's MAX_VALUE: counts and
# sums beyond these are no fleet's.
MAX_COUNT: Final = 10**12
MAX_SUM: Final = 1e15

_COUNTS: Final = tuple(f.name for f in fields(Totals) if f.type == "int")
_SUMS: Final = tuple(f.name for f in fields(Totals) if f.type == "float")
_NEWEST: Final = "newest_event_time"
# The quota's members: ``quota_<field>``; its downstream a string, the rest numbers.
_QUOTA_PREFIX: Final = "quota_"
_QUOTA_DOWNSTREAM: Final = "downstream"
_QUOTA_NUMBERS: Final = tuple(f.name for f in fields(Quota) if f.name != _QUOTA_DOWNSTREAM)
_MAX_DOWNSTREAM_LENGTH: Final = 1024
# The downstream the second's newest document named (what groups queues sharing one).
_DOWNSTREAM: Final = "downstream"


# A partition key naming a group, not a queue: SQS queue names have no colon, so the two never
# meet. The name is hashed: a downstream may be longer than Kinesis' 256-character key. (The
# prefix predates CONFIG groups; kept, so that a group its telemetry names keeps its shard.)
_GROUP_PARTITION: Final = "downstream:"


class ReducedRecord(NamedTuple):
    """One record to put on the reduced stream: ``queue``'s seconds, under ``partition_key``."""

    partition_key: str
    data: bytes
    queue: str


def partition_key(queue: str, group: str | None) -> str:
    """The reduced record's partition key: the queue's group (its CONFIG ``Group``, else the
    downstream its seconds name: one namespace, as ``planner.groups_of`` reads them), else the
    queue. A group (``controller.groups``) is decided whole by one controller: one key puts
    all of its members on one shard and one lane."""
    if group is None:
        return queue
    return _GROUP_PARTITION + hashlib.sha256(group.encode()).hexdigest()


class DecodedRecord(NamedTuple):
    """A reduced record read back: its id (what redelivery is recognised by) and seconds."""

    record_id: str
    seconds: list[QueueSecond]


def encode(
    seconds: Sequence[QueueSecond], source: str, groups: Mapping[str, str] | None = None
) -> list[ReducedRecord]:
    """The records for ``seconds`` (one queue's per record, at most
    ``MAX_SECONDS_PER_RECORD`` each), all of a queue's under one partition key: its CONFIG
    ``Group`` where ``groups`` (queue -> group) has one, else the newest downstream its
    seconds name. ``source`` names what was reduced (the telemetry shard and its batch's
    sequence numbers): the same batch reduced again gives the same ids."""
    groups = groups or {}
    by_queue: dict[str, list[QueueSecond]] = {}
    for queue_second in seconds:
        by_queue.setdefault(queue_second.queue, []).append(queue_second)
    records = []
    for queue, queue_seconds in by_queue.items():
        named = [s for s in queue_seconds if s.downstream is not None]
        newest = max(named, key=lambda s: s.event_time).downstream if named else None
        key = partition_key(queue, groups.get(queue) or newest)
        for part, start in enumerate(range(0, len(queue_seconds), MAX_SECONDS_PER_RECORD)):
            chunk = queue_seconds[start : start + MAX_SECONDS_PER_RECORD]
            record = {
                FORMAT_KEY: FORMAT_VERSION,
                "id": f"{source}/{queue}/{part}",
                "queue": queue,
                "seconds": [_second_members(queue_second) for queue_second in chunk],
            }
            data = json.dumps(record, separators=(",", ":"), allow_nan=False).encode()
            records.append(ReducedRecord(key, data, queue))
    return records


def _second_members(queue_second: QueueSecond) -> dict[str, Any]:
    totals = queue_second.totals
    members: dict[str, Any] = {"second": queue_second.second}
    members.update((name, getattr(totals, name)) for name in (*_COUNTS, *_SUMS, _NEWEST))
    if queue_second.downstream is not None:
        members[_DOWNSTREAM] = queue_second.downstream
    quota = queue_second.quota
    if quota is not None:
        for field in fields(Quota):
            value = getattr(quota, field.name)
            if value is not None:
                members[_QUOTA_PREFIX + field.name] = value
    return members


def is_reduced(data: bytes) -> bool:
    """Whether record data is a reduced record rather than telemetry (gzip or KPL, which never
    start with ``{``)."""
    return data[:1] == b"{"


def decode(data: bytes, skipped: Counter[str]) -> DecodedRecord | None:
    """One reduced record's id and seconds; ``None`` (the reason counted) when any of it
    cannot be used: a record is taken whole or not at all."""
    try:
        record = parse_json(data.decode())
    except (*JSON_ERRORS, UnicodeDecodeError):
        skipped[SkipReason.BAD_PAYLOAD] += 1
        return None
    if (
        type(record) is not dict
        or record.get(FORMAT_KEY) != FORMAT_VERSION
        or type(record.get(FORMAT_KEY)) is not int
        or type(record.get("seconds")) is not list
    ):
        skipped[SkipReason.BAD_PAYLOAD] += 1
        return None
    record_id = record.get("id")
    if type(record_id) is not str or not 0 < len(record_id) <= MAX_ID_LENGTH:
        skipped[SkipReason.BAD_PAYLOAD] += 1
        return None
    queue = record.get("queue")
    if not is_queue_name(queue):
        skipped[SkipReason.BAD_QUEUE_NAME] += 1
        return None
    seconds = []
    for members in record["seconds"]:
        reason_or_second = _queue_second(queue, members)
        if isinstance(reason_or_second, SkipReason):
            skipped[reason_or_second] += 1
            return None
        seconds.append(reason_or_second)
    return DecodedRecord(record_id, seconds)


def _queue_second(queue: str, members: Any) -> QueueSecond | SkipReason:
    if type(members) is not dict:
        return SkipReason.BAD_PAYLOAD
    second = members.get("second")
    newest = members.get(_NEWEST)
    if (
        type(second) is not int
        or not 0 < second * 1000 < MAX_TIMESTAMP_MS
        or not _is_number(newest, MAX_TIMESTAMP_MS / 1000)
        or newest < second
    ):
        return SkipReason.BAD_TIMESTAMP
    totals: dict[str, Any] = {}
    for name in _COUNTS:
        value = members.get(name)
        if type(value) is not int or not 0 <= value <= MAX_COUNT:
            return SkipReason.BAD_VALUE
        totals[name] = value
    for name in _SUMS:
        value = members.get(name)
        if not _is_number(value, MAX_SUM):
            return SkipReason.BAD_VALUE
        totals[name] = float(value)
    if totals["samples"] < 1 or totals["timed_samples"] > totals["samples"]:
        return SkipReason.BAD_VALUE
    quota = _quota(members)
    if isinstance(quota, SkipReason):
        return quota
    downstream = members.get(_DOWNSTREAM)
    if not _is_downstream(downstream):
        return SkipReason.BAD_DIMENSION
    stats = WindowStats(
        **totals,
        newest_event_time=float(newest),
        since=second,
        until=second + 1,
        first_second=second,
    )
    return QueueSecond(queue, second, stats, quota, downstream)


def _quota(members: dict[str, Any]) -> Quota | SkipReason | None:
    values: dict[str, Any] = {}
    for name in _QUOTA_NUMBERS:
        value = members.get(_QUOTA_PREFIX + name)
        if value is not None:
            if not _is_number(value, MAX_SUM):
                return SkipReason.BAD_VALUE
            values[name] = float(value)
    if not values:
        return None
    if "event_time" not in values:
        return SkipReason.BAD_TIMESTAMP
    downstream = members.get(_QUOTA_PREFIX + _QUOTA_DOWNSTREAM)
    if not _is_downstream(downstream):
        return SkipReason.BAD_DIMENSION
    return Quota(
        downstream,
        values["event_time"],
        values.get("remaining"),
        values.get("limit"),
        values.get("window_s"),
        values.get("reset_at"),
    )


def _is_downstream(value: object) -> TypeGuard[str | None]:
    """Absent, or a downstream's name as the telemetry's dimension bounds it."""
    return value is None or (type(value) is str and len(value) <= _MAX_DOWNSTREAM_LENGTH)


def _is_number(value: object, largest: float) -> TypeGuard[float]:
    if type(value) is not int and type(value) is not float:
        return False
    number = float(value)
    return math.isfinite(number) and 0 <= number <= largest
