"""The reduced stream's adapters: Kinesis ``PutRecords`` (boto3) and its in-memory twin."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from controller.aws import Backoff, CallAbandoned, PacedCaller
from controller.aws import client as aws_client
from controller.telemetry.reduced import ReducedRecord

# The reducer's environment variable naming the reduced stream (template.yaml sets it).
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
        self._caller = PacedCaller(
            client if client is not None else aws_client("kinesis"),
            retryable=_RETRYABLE_CODES,
            backoff=Backoff(base_s=0.05, cap_s=1.0),
            max_attempts=3,
            clock=clock,
            sleep=sleep,
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
        return {record.partition_key for record in pending}


class InMemorySink:
    """The twin: keeps every record put, in order; ``refuse`` names queues whose puts fail."""

    def __init__(self) -> None:
        self.records: list[ReducedRecord] = []
        self.refuse: set[str] = set()

    def put(self, records: Sequence[ReducedRecord], deadline: float) -> set[str]:
        unsent = {r.partition_key for r in records if r.partition_key in self.refuse}
        self.records.extend(r for r in records if r.partition_key not in self.refuse)
        return unsent
