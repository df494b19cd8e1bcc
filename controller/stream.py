"""The reduced stream's adapters, each with its in-memory twin: Kinesis ``PutRecords`` (the
reducer's sink, boto3) and ``GetRecords`` (a controller container reading a shard back, to
window the records other containers were handed)."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from controller.aws import CallAbandoned, brief_caller
from controller.constants import (
    CATCH_UP_BUDGET_S,
    CATCH_UP_MAX_CALLS,
    CATCH_UP_RECORDS_PER_CALL,
)
from controller.ports import HistoryRead, StreamStart
from controller.telemetry.reduced import ReducedRecord

# The environment variable naming the reduced stream: the reducer puts to it, the controller
# reads it back (template.yaml sets it for both).
REDUCED_STREAM_VARIABLE: Final = "QUEUEMESH_REDUCED_STREAM"
# PutRecords takes at most 500 records (and 5 MiB) a call.
MAX_RECORDS_PER_CALL: Final = 500
_RETRYABLE_CODES: Final = frozenset(
    {"ProvisionedThroughputExceededException", "KMSThrottlingException", "InternalFailure"}
)


class KinesisSink:
    """Puts reduced records on a Kinesis stream, failed entries retried while the deadline
    allows (a shard's write limit refuses single entries, not calls)."""

    def __init__(
        self,
        stream_name: str,
        client: Any = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        max_rounds: int = 5,
    ) -> None:
        self.stream_name = stream_name
        self._caller = brief_caller(
            "kinesis", client, _RETRYABLE_CODES, cap_s=1.0, max_attempts=3, clock=clock, sleep=sleep
        )
        self._max_rounds = max_rounds

    def put(self, records: Sequence[ReducedRecord], deadline: float) -> set[str]:
        unsent: set[str] = set()
        for start in range(0, len(records), MAX_RECORDS_PER_CALL):
            unsent |= self._put_chunk(records[start : start + MAX_RECORDS_PER_CALL], deadline)
        return unsent

    def _put_chunk(self, chunk: Sequence[ReducedRecord], deadline: float) -> set[str]:
        pending = list(chunk)
        for attempt in range(self._max_rounds):
            if attempt and not self._caller.pause(attempt - 1, deadline):
                break
            entries = [{"Data": r.data, "PartitionKey": r.partition_key} for r in pending]
            try:
                answer = self._caller.call(
                    "put_records", deadline, StreamName=self.stream_name, Records=entries
                )
            except CallAbandoned:
                break
            results = answer.get("Records", [])
            pending = [
                record
                for record, result in zip(pending, results, strict=False)
                if result.get("ErrorCode")
            ] + pending[len(results) :]
            if not pending:
                return set()
        return {record.queue for record in pending}


class InMemorySink:
    """The twin: keeps every record put, in order; ``refuse`` names queues whose puts fail."""

    def __init__(self) -> None:
        self.records: list[ReducedRecord] = []
        self.refuse: set[str] = set()

    def put(self, records: Sequence[ReducedRecord], deadline: float) -> set[str]:
        unsent = {r.queue for r in records if r.queue in self.refuse}
        self.records.extend(r for r in records if r.queue not in self.refuse)
        return unsent


class KinesisHistory:
    """Reads a shard of the reduced stream back (``GetShardIterator``, then ``GetRecords``),
    bounded: at most ``max_calls`` reads of ``records_per_call`` records, within ``budget_s``
    and the caller's deadline. A throttled or failed read ends it incomplete."""

    def __init__(
        self,
        stream_name: str,
        client: Any = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        max_calls: int = CATCH_UP_MAX_CALLS,
        records_per_call: int = CATCH_UP_RECORDS_PER_CALL,
        budget_s: float = CATCH_UP_BUDGET_S,
    ) -> None:
        self.stream_name = stream_name
        self._caller = brief_caller(
            "kinesis", client, _RETRYABLE_CODES, cap_s=0.5, max_attempts=2, clock=clock, sleep=sleep
        )
        self._clock = clock
        self._max_calls = max_calls
        self._records_per_call = records_per_call
        self._budget_s = budget_s

    def read(self, shard: str, start: StreamStart, below: int, deadline: float) -> HistoryRead:
        deadline = min(deadline, self._clock() + self._budget_s)
        at = datetime.fromtimestamp(start.time, UTC)
        where: dict[str, Any] = (
            {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": at}
            if start.sequence is None
            else {
                "ShardIteratorType": "AT_SEQUENCE_NUMBER",
                "StartingSequenceNumber": str(start.sequence),
            }
        )
        records: list[dict[str, Any]] = []
        try:
            iterator = self._caller.call(
                "get_shard_iterator", deadline, StreamName=self.stream_name, ShardId=shard, **where
            ).get("ShardIterator")
            for _ in range(self._max_calls):
                if iterator is None:  # a closed shard, read to its end
                    return HistoryRead(records, True)
                answer = self._caller.call(
                    "get_records", deadline, ShardIterator=iterator, Limit=self._records_per_call
                )
                for record in answer.get("Records", []):
                    if int(record["SequenceNumber"]) >= below:
                        return HistoryRead(records, True)
                    records.append(lambda_record(shard, record))
                iterator = answer.get("NextShardIterator")
        except CallAbandoned:
            pass
        return HistoryRead(records, False)


def lambda_record(shard: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """A ``GetRecords`` record as a Lambda event carries it (what the controller reads)."""
    return {
        "eventID": f"{shard}:{record['SequenceNumber']}",
        "kinesis": {
            "partitionKey": record.get("PartitionKey", ""),
            "sequenceNumber": str(record["SequenceNumber"]),
            "data": base64.b64encode(record["Data"]).decode("ascii"),
        },
    }


class InMemoryHistory:
    """The twin: the records of the batches ``deliver`` was given, by shard; ``unreadable``
    ends every read incomplete (a throttled stream). ``reads`` counts the reads asked for."""

    def __init__(self) -> None:
        self.records: dict[str, list[tuple[int, float, dict[str, Any]]]] = {}
        self.unreadable = False
        self.reads = 0

    def deliver(self, event: Mapping[str, Any]) -> Mapping[str, Any]:
        """Keep a Lambda event's records as the stream holds them; the event, unchanged."""
        for record in event["Records"]:
            shard, sequence = str(record["eventID"]).split(":", 1)
            arrival = float(record["kinesis"].get("approximateArrivalTimestamp", 0.0))
            self.records.setdefault(shard, []).append((int(sequence), arrival, record))
        return event

    def read(self, shard: str, start: StreamStart, below: int, deadline: float) -> HistoryRead:
        self.reads += 1
        if self.unreadable:
            return HistoryRead([], False)
        held = sorted(self.records.get(shard, []), key=lambda entry: entry[0])

        def started(sequence: int, arrival: float) -> bool:
            return (
                sequence >= start.sequence if start.sequence is not None else arrival >= start.time
            )

        return HistoryRead(
            [
                record
                for sequence, arrival, record in held
                if started(sequence, arrival) and sequence < below
            ],
            True,
        )
