"""Lambda's poller for a Kinesis event source mapping: it reads every shard from its start,
batches records by ``BatchSize`` and ``MaximumBatchingWindowInSeconds``, invokes the controller
one batch at a time per shard, and retries from the first reported failure."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from load.recording import RecordedLine, kinesis_event
from stack.local.emulator import EmbeddedAws
from stack.local.runtime.containers import STOP_JOIN_S, ContainerPool
from stack.local.runtime.logs import LogShipper

KINESIS_POLL_S = 0.25
KINESIS_RETRY_ATTEMPTS = 3


@dataclass(slots=True)
class StreamCounters:
    invocations: int = 0
    records: int = 0
    retries: int = 0
    dropped: int = 0
    errors: int = 0


@dataclass(slots=True)
class _Shard:
    shard_id: str
    iterator: str | None
    pending: list[dict[str, Any]] = field(default_factory=list)
    first_pending_at: float = 0.0


class StreamPoller:
    """Lambda's poller for one Kinesis event source mapping (one batch at a time per shard)."""

    def __init__(
        self,
        aws: EmbeddedAws,
        stream_name: str,
        stream_arn: str,
        mapping_uuid: str,
        pool: ContainerPool,
        shipper: LogShipper,
        *,
        on_error: Callable[[str], None] | None = None,
        on_record: Callable[[str, dict[str, Any]], None] | None = None,
        on_batch_age: Callable[[str, float], None] | None = None,
    ) -> None:
        """``on_batch_age(function, ms)``: each batch's last record's age as it is delivered
        (Lambda's ``IteratorAge``)."""
        self._kinesis = aws.client("kinesis")
        self._region = aws.region
        self._stream_name = stream_name
        self._stream_arn = stream_arn
        self._pool = pool
        self._shipper = shipper
        mapping = aws.client("lambda").get_event_source_mapping(UUID=mapping_uuid)
        self.batch_size = int(mapping.get("BatchSize", 100))
        self.window_s = float(mapping.get("MaximumBatchingWindowInSeconds", 0))
        self._on_error = on_error or (lambda message: None)
        self._on_record = on_record
        self._on_batch_age = on_batch_age or (lambda function, age_ms: None)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.counters = StreamCounters()

    def start(self) -> StreamPoller:
        shards = [
            _Shard(shard["ShardId"], self._iterator(shard["ShardId"]))
            for shard in self._kinesis.list_shards(StreamName=self._stream_name)["Shards"]
        ]
        self._thread = threading.Thread(
            target=self._run, args=(shards,), name=f"esm-{self._stream_name}", daemon=True
        )
        self._thread.start()
        return self

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=STOP_JOIN_S)

    def _iterator(self, shard_id: str) -> str:
        # The stream is as new as the stack: everything on it is this run's telemetry.
        return str(
            self._kinesis.get_shard_iterator(
                StreamName=self._stream_name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
        )

    def _run(self, shards: list[_Shard]) -> None:
        while not self._stop.is_set():
            busy = False
            for shard in shards:
                try:
                    busy |= self._step(shard)
                except Exception as error:
                    self.counters.errors += 1
                    self._on_error(f"stream {self._stream_name} {shard.shard_id}: {error}")
            if not busy:
                self._stop.wait(KINESIS_POLL_S)

    def _step(self, shard: _Shard) -> bool:
        read = False
        if shard.iterator is not None and len(shard.pending) < self.batch_size:
            answer = self._kinesis.get_records(
                ShardIterator=shard.iterator, Limit=min(10_000, self.batch_size)
            )
            shard.iterator = answer.get("NextShardIterator")
            records = answer.get("Records", [])
            if records:
                if not shard.pending:
                    shard.first_pending_at = time.monotonic()
                shard.pending.extend(records)
                read = True
                if self._on_record is not None:
                    for record in records:
                        self._on_record(shard.shard_id, record)
        due = len(shard.pending) >= self.batch_size or (
            shard.pending and time.monotonic() - shard.first_pending_at >= self.window_s
        )
        if due:
            batch, shard.pending = (
                shard.pending[: self.batch_size],
                shard.pending[self.batch_size :],
            )
            shard.first_pending_at = time.monotonic()
            self._deliver(shard.shard_id, batch)
        return read or bool(due)

    def _deliver(self, shard_id: str, records: list[dict[str, Any]]) -> None:
        attempts = 0
        while records and not self._stop.is_set():
            arrived = records[-1]["ApproximateArrivalTimestamp"].timestamp()
            self._on_batch_age(self._pool.spec.name, (time.time() - arrived) * 1000.0)
            with self._pool.container() as container:
                result = container.invoke(
                    kinesis_event(
                        [RecordedLine.from_kinesis(shard_id, record) for record in records],
                        self._stream_arn,
                        self._region,
                    )
                )
            self.counters.invocations += 1
            try:
                self._shipper.ship(result.log_stream, result.log_lines)
            except Exception as error:
                self._on_error(f"log shipping for the controller: {error}")
            if result.error is None:
                retry_from = first_failure(result.response, records)
            else:
                self.counters.errors += 1
                self._on_error(f"controller invocation failed: {result.error.splitlines()[-1]}")
                retry_from = 0
            if retry_from is None:
                self.counters.records += len(records)
                return
            self.counters.records += retry_from
            records = records[retry_from:]
            attempts += 1
            if attempts > KINESIS_RETRY_ATTEMPTS:
                self.counters.dropped += len(records)
                return
            self.counters.retries += 1


def first_failure(response: Any, records: list[dict[str, Any]]) -> int | None:
    """Index of the record to retry from (the lowest failed sequence number), or None.

    Sequence numbers are compared as numbers: moto's are small integers, AWS's 56 digits.
    """
    if not isinstance(response, Mapping):
        return None
    failures = response.get("batchItemFailures") or []
    failed = {
        int(item["itemIdentifier"])
        for item in failures
        if isinstance(item, Mapping) and str(item.get("itemIdentifier", "")).isdigit()
    }
    if not failed and failures:
        return 0  # a malformed failure list fails the batch, as Lambda does
    if not failed:
        return None
    lowest = min(failed)
    for index, record in enumerate(records):
        if int(record["SequenceNumber"]) >= lowest:
            return index
    return None
