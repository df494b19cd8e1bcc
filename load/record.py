"""Recording a Kinesis stream: its records copied to a recording (JSON Lines).

Every shard is read with its own iterator; records are written in arrival order across shards
(see ``ArrivalMerger``). Polling stays within Kinesis' limits and leaves room for the
controller's own event source mapping on the same stream: each shard is read at most once per
second when caught up, five times per second while catching up (the per-shard limit), a large
read waits out the shard's 2 MB/s, and ``ProvisionedThroughputExceededException`` backs the
shard off exponentially.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

from load.progress import ProgressCallback
from load.recording import RecordedLine

IDLE_POLL_S = 1.0
CATCH_UP_POLL_S = 0.2
SHARD_REFRESH_S = 10.0
THROTTLE_BACKOFF_BASE_S = 0.5
THROTTLE_BACKOFF_CAP_S = 16.0
MAX_CONSECUTIVE_THROTTLES = 10
GET_RECORDS_LIMIT = 10_000
SHARD_READ_BYTES_PER_S = 2 * 1024 * 1024
# A record another shard delivers may carry an arrival time a little before "now" on this
# machine's clock (clock skew, Kinesis' own approximation): a caught-up shard promises only
# records that arrive after now minus this margin.
CLOCK_SKEW_MARGIN_S = 2.0


class RecordError(Exception):
    """The recording cannot go on (the stream was deleted, or stayed throttled); what was read
    before is kept."""


def arrival_order(record: RecordedLine) -> tuple[float, str, int]:
    # Sequence numbers are decimal strings of different lengths: compare them as integers.
    return (record.arrival, record.shard, int(record.sequence))


class ArrivalMerger:
    """Merges per-shard record sequences into one sequence in arrival order.

    Each shard delivers its records in order; a shard's *horizon* is a time before which it
    will deliver nothing more (its last record's arrival, or "now minus a margin" once it has
    caught up with the stream's tip). Records up to the smallest horizon of the open shards
    are safe to release: nothing earlier can still come.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[tuple[float, str, int], RecordedLine]] = []
        self._horizons: dict[str, float] = {}

    def open_shard(self, shard: str) -> None:
        self._horizons.setdefault(shard, -math.inf)

    def close_shard(self, shard: str) -> None:
        self._horizons.pop(shard, None)

    def add(self, shard: str, records: Iterable[RecordedLine]) -> None:
        for record in records:
            heapq.heappush(self._heap, (arrival_order(record), record))
            self.advance(shard, record.arrival)

    def advance(self, shard: str, horizon: float) -> None:
        if shard in self._horizons:
            self._horizons[shard] = max(self._horizons[shard], horizon)

    def release(self) -> list[RecordedLine]:
        """The buffered records no open shard can precede any more, oldest first."""
        limit = min(self._horizons.values(), default=math.inf)
        released: list[RecordedLine] = []
        # Strictly before: a shard at its horizon may still deliver another record of that
        # very arrival time, which could sort before one released now.
        while self._heap and self._heap[0][0][0] < limit:
            released.append(heapq.heappop(self._heap)[1])
        return released

    def drain(self) -> list[RecordedLine]:
        """Everything still buffered, oldest first (the recording is ending)."""
        drained = [entry[1] for entry in sorted(self._heap)]
        self._heap.clear()
        return drained

    @property
    def buffered(self) -> int:
        return len(self._heap)


@dataclass(slots=True)
class ShardCursor:
    shard: str
    iterator: str | None = None
    start_type: str = "LATEST"
    last_sequence: str | None = None
    next_poll: float = 0.0
    throttles: int = 0
    closed: bool = False
    records: int = 0
    bytes: int = 0


@dataclass(slots=True)
class RecordingTotals:
    records: int = 0
    bytes: int = 0
    per_shard: dict[str, list[int]] = field(default_factory=dict)
    elapsed_s: float = 0.0
    stopped_by: str = ""

    def line(self) -> str:
        return f"{self.records:,} records, {_size(self.bytes)} in {self.elapsed_s:.1f} s" + (
            self._shards()
        )

    def progress_detail(self) -> str:
        """What the progress line says after the record count."""
        return f"records, {_size(self.bytes)}" + self._shards()

    def _shards(self) -> str:
        shards = ", ".join(
            f"{shard}: {count:,} rec / {_size(size)}"
            for shard, (count, size) in sorted(self.per_shard.items())
        )
        return f" [{shards}]" if shards else ""


def _size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


class Recorder:
    """Reads every shard of one stream until stopped, writing the recording as it goes.

    ``run`` returns when ``duration_s`` has passed, ``max_records`` were written, every shard is
    closed, or a ``KeyboardInterrupt`` arrives; in each case what was read is written and
    flushed before it returns.
    """

    def __init__(
        self,
        kinesis: Any,
        stream: str,
        out: IO[str],
        *,
        from_start: bool = False,
        duration_s: float | None = None,
        max_records: int | None = None,
        progress: ProgressCallback | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._kinesis = kinesis
        self._stream = stream
        self._out = out
        self._from_start = from_start
        self._duration_s = duration_s
        self._max_records = max_records
        self._progress = progress
        self._clock = clock
        self._wall_clock = wall_clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._cursors: dict[str, ShardCursor] = {}
        self._merger = ArrivalMerger()
        self.totals = RecordingTotals()

    def run(self) -> RecordingTotals:
        started = self._clock()
        end = math.inf if self._duration_s is None else started + self._duration_s
        try:
            self._discover_shards(initial=True)
            self.totals.stopped_by = self._loop(end)
        except KeyboardInterrupt:
            self.totals.stopped_by = "interrupted"
        finally:
            self._write(self._merger.drain())
            self._out.flush()
            self.totals.elapsed_s = self._clock() - started
        return self.totals

    def _loop(self, end: float) -> str:
        next_refresh = self._clock() + SHARD_REFRESH_S
        while True:
            now = self._clock()
            if now >= end:
                return "duration reached"
            if self._max_records is not None and self._written_or_buffered() >= self._max_records:
                return "record limit reached"
            if now >= next_refresh:
                self._discover_shards(initial=False)
                next_refresh = now + SHARD_REFRESH_S
            open_cursors = [cursor for cursor in self._cursors.values() if not cursor.closed]
            if not open_cursors:
                return "every shard is closed"
            cursor = min(open_cursors, key=lambda candidate: candidate.next_poll)
            wait = min(cursor.next_poll, end, next_refresh) - now
            if wait > 0:
                self._sleep(wait)
                continue
            self._poll(cursor)
            self._write(self._merger.release())
            if self._progress is not None:
                limit = self._max_records or 0
                self._progress(self.totals.records, limit, self.totals.progress_detail())

    def _written_or_buffered(self) -> int:
        return self.totals.records + self._merger.buffered

    def _discover_shards(self, initial: bool) -> None:
        shards: list[str] = []
        params: dict[str, Any] = {"StreamName": self._stream}
        while True:
            try:
                page = self._kinesis.list_shards(**params)
            except Exception as error:
                if error_code(error) == "ResourceNotFoundException":
                    raise RecordError(f"stream {self._stream!r} not found (deleted?)") from error
                raise
            shards.extend(shard["ShardId"] for shard in page.get("Shards", []))
            token = page.get("NextToken")
            if not token:
                break
            params = {"NextToken": token}
        for shard in shards:
            if shard in self._cursors:
                continue
            # Shards born after the recording began (a reshard) are read from their start.
            start_type = "TRIM_HORIZON" if self._from_start or not initial else "LATEST"
            self._cursors[shard] = ShardCursor(shard=shard, start_type=start_type)
            self._merger.open_shard(shard)
            self.totals.per_shard.setdefault(shard, [0, 0])

    def _iterator(self, cursor: ShardCursor) -> str:
        if cursor.iterator is None:
            params: dict[str, Any] = {"StreamName": self._stream, "ShardId": cursor.shard}
            if cursor.last_sequence is not None:
                params |= {
                    "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                    "StartingSequenceNumber": cursor.last_sequence,
                }
            else:
                params["ShardIteratorType"] = cursor.start_type
            cursor.iterator = str(self._kinesis.get_shard_iterator(**params)["ShardIterator"])
        return cursor.iterator

    def _poll(self, cursor: ShardCursor) -> None:
        asked_at = self._wall_clock()
        try:
            response = self._kinesis.get_records(
                ShardIterator=self._iterator(cursor), Limit=GET_RECORDS_LIMIT
            )
        except Exception as error:
            self._poll_failed(cursor, error)
            return
        cursor.throttles = 0
        records = [self._record(cursor.shard, raw) for raw in response.get("Records", [])]
        if records:
            cursor.last_sequence = records[-1].sequence
        self._merger.add(cursor.shard, records)
        behind = int(response.get("MillisBehindLatest") or 0)
        if behind == 0:
            self._merger.advance(cursor.shard, asked_at - CLOCK_SKEW_MARGIN_S)
        cursor.iterator = response.get("NextShardIterator")
        if cursor.iterator is None:
            # A closed shard (after a reshard) that has been read to its end.
            cursor.closed = True
            self._merger.close_shard(cursor.shard)
        pause = CATCH_UP_POLL_S if records and behind > 0 else IDLE_POLL_S
        # A shard serves 2 MB/s to all its readers: a large read is paid for before the next.
        read_bytes = sum(len(record.data) for record in records)
        pause = max(pause, read_bytes / SHARD_READ_BYTES_PER_S)
        cursor.next_poll = self._clock() + pause

    def _poll_failed(self, cursor: ShardCursor, error: Exception) -> None:
        code = error_code(error)
        if code == "ExpiredIteratorException":
            cursor.iterator = None
            cursor.next_poll = self._clock()
            return
        if code not in {"ProvisionedThroughputExceededException", "LimitExceededException"}:
            raise error
        cursor.throttles += 1
        if cursor.throttles > MAX_CONSECUTIVE_THROTTLES:
            raise RecordError(
                f"shard {cursor.shard} stayed throttled for {MAX_CONSECUTIVE_THROTTLES} "
                "consecutive reads; another consumer is using the stream's read capacity"
            ) from error
        ceiling = min(THROTTLE_BACKOFF_CAP_S, THROTTLE_BACKOFF_BASE_S * 2 ** (cursor.throttles - 1))
        cursor.next_poll = self._clock() + ceiling / 2 + self._rng.uniform(0, ceiling / 2)

    def _record(self, shard: str, raw: dict[str, Any]) -> RecordedLine:
        return RecordedLine.from_kinesis(shard, raw)

    def _write(self, records: list[RecordedLine]) -> None:
        if self._max_records is not None:
            records = records[: max(0, self._max_records - self.totals.records)]
        if not records:
            return
        for record in records:
            self._out.write(record.to_json() + "\n")
            self.totals.records += 1
            self.totals.bytes += len(record.data)
            counts = self.totals.per_shard.setdefault(record.shard, [0, 0])
            counts[0] += 1
            counts[1] += len(record.data)
        # Flushed as written, so a killed recorder leaves every released record on disk.
        self._out.flush()


def error_code(error: BaseException) -> str:
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""
