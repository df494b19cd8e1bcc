"""Lambda's poller for a Kinesis event source mapping: it reads every shard from its start,
batches records by ``BatchSize`` and ``MaximumBatchingWindowInSeconds``, invokes the function
(the reducer on the telemetry stream, the controller on the reduced one) one batch at a time
per shard, and retries from the first reported failure.

A ``ParallelizationFactor`` above 1 is honoured as Lambda splits a shard: each batch holds the
records of one lane (partition keys hashed to lanes, order kept per key), so a function sees a
lane's share of the shard. Shards are polled, and a shard's lanes invoked, at once (a thread
each), as Lambda runs them concurrently; a shard's next batches wait for all of its lanes."""

from __future__ import annotations

import threading
import time
import zlib
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
        self.pool = pool
        self.shipper = shipper
        mapping = aws.client("lambda").get_event_source_mapping(UUID=mapping_uuid)
        self.function = str(mapping["FunctionArn"]).rsplit(":", 1)[-1]
        self.batch_size = int(mapping.get("BatchSize", 100))
        self.window_s = float(mapping.get("MaximumBatchingWindowInSeconds", 0))
        self.parallelization = int(mapping.get("ParallelizationFactor") or 1)
        listed = self._kinesis.list_shards(StreamName=stream_name)["Shards"]
        self._shard_ids = [str(shard["ShardId"]) for shard in listed]
        self._on_error = on_error or (lambda message: None)
        self._on_record = on_record
        self._on_batch_age = on_batch_age or (lambda function, age_ms: None)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._counting = threading.Lock()
        self._recording = threading.Lock()
        self.counters = StreamCounters()

    def start(self) -> StreamPoller:
        shards = [_Shard(shard_id, self._iterator(shard_id)) for shard_id in self._shard_ids]
        self._threads = [
            threading.Thread(
                target=self._run,
                args=(shard,),
                name=f"esm-{self._stream_name}-{shard.shard_id}",
                daemon=True,
            )
            for shard in shards
        ]
        for thread in self._threads:
            thread.start()
        return self

    @property
    def concurrency(self) -> int:
        """Invocations that may run at once: a lane per shard and parallelization step."""
        return len(self._shard_ids) * self.parallelization

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=STOP_JOIN_S)

    def _iterator(self, shard_id: str) -> str:
        # The stream is as new as the stack: everything on it is this run's telemetry.
        return str(
            self._kinesis.get_shard_iterator(
                StreamName=self._stream_name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
        )

    def _run(self, shard: _Shard) -> None:
        while not self._stop.is_set():
            busy = False
            try:
                busy = self._step(shard)
            except Exception as error:
                self._count("errors")
                self._on_error(f"stream {self._stream_name} {shard.shard_id}: {error}")
            if not busy:
                self._stop.wait(KINESIS_POLL_S)

    def _count(self, name: str, times: int = 1) -> None:
        with self._counting:
            setattr(self.counters, name, getattr(self.counters, name) + times)

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
                    with self._recording:  # the shards' threads take turns
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
            runs = [
                threading.Thread(target=self._deliver, args=(shard.shard_id, lane), daemon=True)
                for lane in lanes(batch, self.parallelization)
            ]
            for run in runs:
                run.start()
            for run in runs:
                run.join()
        return read or bool(due)

    def _deliver(self, shard_id: str, records: list[dict[str, Any]]) -> None:
        attempts = 0
        while records and not self._stop.is_set():
            arrived = records[-1]["ApproximateArrivalTimestamp"].timestamp()
            self._on_batch_age(self.pool.spec.name, (time.time() - arrived) * 1000.0)
            with self.pool.container() as container:
                result = container.invoke(
                    kinesis_event(
                        [RecordedLine.from_kinesis(shard_id, record) for record in records],
                        self._stream_arn,
                        self._region,
                    )
                )
            self._count("invocations")
            try:
                self.shipper.ship(result.log_stream, result.log_lines)
            except Exception as error:
                self._on_error(f"log shipping for {self.function}: {error}")
            if result.error is None:
                retry_from = first_failure(result.response, records)
            else:
                self._count("errors")
                last_line = result.error.splitlines()[-1]
                self._on_error(f"{self.function} invocation failed: {last_line}")
                retry_from = 0
            if retry_from is None:
                self._count("records", len(records))
                return
            self._count("records", retry_from)
            records = records[retry_from:]
            attempts += 1
            if attempts > KINESIS_RETRY_ATTEMPTS:
                self._count("dropped", len(records))
                return
            self._count("retries")


def lanes(records: list[dict[str, Any]], factor: int) -> list[list[dict[str, Any]]]:
    """A shard's batch split into the parallelization factor's lanes by partition key, each
    in the shard's order; empty lanes left out."""
    if factor <= 1:
        return [records]
    split: list[list[dict[str, Any]]] = [[] for _ in range(factor)]
    for record in records:
        split[zlib.crc32(str(record.get("PartitionKey", "")).encode()) % factor].append(record)
    return [lane for lane in split if lane]


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
