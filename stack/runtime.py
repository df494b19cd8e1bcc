"""The local Lambda runtime: the pollers Lambda runs in AWS, over the embedded AWS's APIs.

Functions run in containers: one process each (``multiprocessing`` spawn), one invocation at
a time, cold-started on demand and reused while warm, as Lambda's execution environments are.
(The worker wrapper keeps the invocation in progress in a process global, exactly because
Lambda runs one invocation per process; threads would mix invocations up.) Each invocation's
stdout and stderr are captured in its container and shipped to the function's log group with
PutLogEvents, from where the emulator's subscription filter delivers them to Kinesis.

- ``QueuePoller`` is an SQS event source mapping: it re-reads the mapping every second
  (``MaximumConcurrency``, ``Enabled``, ``BatchSize``), runs at most that many concurrent
  invocations (ramping from 5 by 5 per second while messages are found, like Lambda's
  scaler), sends real-shaped SQS events, deletes what succeeded per the partial batch
  response, and leaves failures to return after the visibility timeout; the emulated SQS
  moves a message to the dead-letter queue once its receive count exceeds the redrive policy.
- ``StreamPoller`` is a Kinesis event source mapping: it reads every shard from its start,
  batches records by ``BatchSize`` and ``MaximumBatchingWindowInSeconds``, invokes the
  controller one batch at a time, and retries from the first reported failure.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import multiprocessing
import os
import re
import signal
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from load.recording import RecordedLine, kinesis_event
from stack.emulator import ACCOUNT, Deployment, EmbeddedAws, QueueBinding
from stack.metrics import EmfMetricsPublisher

INITIAL_POLLERS = 5
POLLERS_ADDED_PER_SECOND = 5
MAPPING_REFRESH_S = 1.0
EMPTY_RECEIVE_PAUSE_S = 0.25
STOP_JOIN_S = 5.0
KINESIS_POLL_S = 0.25
KINESIS_RETRY_ATTEMPTS = 3


# -- containers ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    """What Lambda knows of a function: read from the emulated Lambda API."""

    name: str
    handler: str
    environment: Mapping[str, str]
    timeout_s: float
    memory_mb: int
    log_group: str

    @classmethod
    def read(
        cls, lambda_client: Any, name: str, log_group: str, extra_env: Mapping[str, str]
    ) -> FunctionSpec:
        configuration = lambda_client.get_function_configuration(FunctionName=name)
        # Lambda's variables are strings; moto passes CloudFormation Number parameters through
        # as numbers.
        variables = configuration.get("Environment", {}).get("Variables", {})
        environment = {name: str(value) for name, value in variables.items()}
        environment.update(extra_env)
        return cls(
            name=name,
            handler=str(configuration["Handler"]),
            environment=environment,
            timeout_s=float(configuration.get("Timeout", 3)),
            memory_mb=int(configuration.get("MemorySize", 128)),
            log_group=log_group,
        )


@dataclass(frozen=True, slots=True)
class InvocationResult:
    response: Any
    error: str | None
    log_lines: list[str]
    duration_ms: float
    log_stream: str


class InvocationFailed(Exception):
    """The container could not run the invocation (timed out or died)."""


class Container:
    """One execution environment: a process running one invocation at a time."""

    _ids = itertools.count(1)

    def __init__(self, spec: FunctionSpec) -> None:
        self.spec = spec
        self.id = f"{next(self._ids):04d}{uuid.uuid4().hex[:12]}"
        day = datetime.now(UTC).strftime("%Y/%m/%d")
        self.log_stream = f"{day}/[$LATEST]{self.id}"
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(
            target=_container_main,
            args=(child, spec.handler, dict(spec.environment), self._identity()),
            name=f"lambda-{spec.name}-{self.id}",
            daemon=True,
        )
        self._process.start()
        child.close()

    def _identity(self) -> dict[str, Any]:
        return {
            "function_name": self.spec.name,
            "memory_limit_in_mb": self.spec.memory_mb,
            "log_group_name": self.spec.log_group,
            "log_stream_name": self.log_stream,
            "timeout_s": self.spec.timeout_s,
        }

    def invoke(self, event: Mapping[str, Any]) -> InvocationResult:
        request_id = str(uuid.uuid4())
        try:
            self._connection.send((request_id, dict(event)))
            # Cold start (imports) counts against the timeout here, generously: double it.
            if not self._connection.poll(self.spec.timeout_s * 2 + 10):
                raise InvocationFailed(
                    f"{self.spec.name} timed out after {self.spec.timeout_s:.0f} s"
                )
            response, error, lines, duration_ms = self._connection.recv()
        except (EOFError, OSError, BrokenPipeError) as failure:
            raise InvocationFailed(f"{self.spec.name} container died: {failure}") from failure
        return InvocationResult(response, error, lines, duration_ms, self.log_stream)

    @property
    def alive(self) -> bool:
        return self._process.is_alive()

    def stop(self) -> None:
        with contextlib.suppress(OSError, BrokenPipeError):
            self._connection.send(None)
        self._process.join(timeout=STOP_JOIN_S)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=STOP_JOIN_S)
        self._connection.close()


class ContainerPool:
    """Warm containers of one function, reused most-recent first; new ones on demand."""

    def __init__(self, spec: FunctionSpec) -> None:
        self.spec = spec
        self._idle: list[Container] = []
        self._all: list[Container] = []
        self._lock = threading.Lock()
        self._closed = False
        self.cold_starts = 0

    @contextlib.contextmanager
    def container(self) -> Iterator[Container]:
        with self._lock:
            if self._closed:
                raise InvocationFailed("the runtime is stopping")
            if self._idle:
                container = self._idle.pop()
            else:
                container = Container(self.spec)
                self._all.append(container)
                self.cold_starts += 1
        healthy = False
        try:
            yield container
            healthy = container.alive
        finally:
            with self._lock:
                if healthy and not self._closed:
                    self._idle.append(container)
                else:
                    self._all.remove(container)
                    container.stop()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            containers, self._all, self._idle = list(self._all), [], []
        for container in containers:
            container.stop()


class _LambdaContext:
    """The context object a Python Lambda handler receives."""

    def __init__(self, identity: Mapping[str, Any], request_id: str) -> None:
        self.function_name = str(identity["function_name"])
        self.function_version = "$LATEST"
        self.invoked_function_arn = (
            f"arn:aws:lambda:{os.environ.get('AWS_REGION', 'us-east-1')}:{ACCOUNT}:function:"
            f"{self.function_name}"
        )
        self.memory_limit_in_mb = int(identity["memory_limit_in_mb"])
        self.aws_request_id = request_id
        self.log_group_name = str(identity["log_group_name"])
        self.log_stream_name = str(identity["log_stream_name"])
        self._deadline = time.monotonic() + float(identity["timeout_s"])

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class _CapturedOutput(io.TextIOBase):
    """The container's stdout and stderr: what is written between invocations goes with the
    next invocation's log lines, as Lambda's init output does."""

    def __init__(self) -> None:
        self._buffer = io.StringIO()

    def write(self, text: str) -> int:
        return self._buffer.write(text)

    def writable(self) -> bool:
        return True

    def take_lines(self) -> list[str]:
        lines = self._buffer.getvalue().splitlines()
        self._buffer = io.StringIO()
        return [line for line in lines if line.strip()]


def _container_main(
    connection: Any, handler_spec: str, environment: dict[str, str], identity: dict[str, Any]
) -> None:
    """A container process: import the handler once, then serve invocations until told to
    stop. Ctrl-C is the parent's to handle; it stops the containers itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.update(environment)
    output = _CapturedOutput()
    sys.stdout = sys.stderr = output
    handler: Callable[[Any, Any], Any] | None = None
    init_error: str | None = None
    try:
        module_name, _, function_name = handler_spec.rpartition(".")
        module = __import__(module_name, fromlist=[function_name])
        handler = getattr(module, function_name)
    except Exception:
        init_error = traceback.format_exc()
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        request_id, event = message
        started = time.monotonic()
        response: Any = None
        error = init_error
        if handler is not None:
            try:
                response = handler(event, _LambdaContext(identity, request_id))
            except Exception:
                error = traceback.format_exc()
                print(error)
        duration_ms = (time.monotonic() - started) * 1000.0
        connection.send((response, error, output.take_lines(), duration_ms))


# -- log shipping --------------------------------------------------------------------------


class LogShipper:
    """PutLogEvents of each invocation's lines into the function's log group (one call per
    invocation: the subscription delivers one Kinesis record per call); the EMF documents among
    them become metrics, as CloudWatch Logs makes them in AWS."""

    def __init__(
        self, logs_client: Any, log_group: str, metrics: EmfMetricsPublisher | None = None
    ) -> None:
        self._logs = logs_client
        self._log_group = log_group
        self._metrics = metrics
        self._streams: set[str] = set()
        self._lock = threading.Lock()
        self.calls = 0

    def ship(self, log_stream: str, lines: list[str]) -> None:
        if not lines:
            return
        with self._lock:
            create = log_stream not in self._streams
            self._streams.add(log_stream)
        if create:
            with contextlib.suppress(self._logs.exceptions.ResourceAlreadyExistsException):
                self._logs.create_log_stream(logGroupName=self._log_group, logStreamName=log_stream)
        now_ms = int(time.time() * 1000)
        self._logs.put_log_events(
            logGroupName=self._log_group,
            logStreamName=log_stream,
            logEvents=[{"timestamp": now_ms, "message": line} for line in lines],
        )
        with self._lock:
            self.calls += 1
        if self._metrics is not None:
            self._metrics.publish(lines)


# -- SQS event source mapping --------------------------------------------------------------


@dataclass(slots=True)
class QueueCounters:
    invocations: int = 0
    in_flight: int = 0
    peak_in_flight: int = 0
    received: int = 0
    deleted: int = 0
    returned: int = 0
    errors: int = 0


@dataclass(frozen=True, slots=True)
class MappingSnapshot:
    max_concurrency: int
    enabled: bool
    batch_size: int
    allowed: int


@dataclass(slots=True)
class QueueDepth:
    visible: int = 0
    in_flight: int = 0
    dead_lettered: int = 0


class QueuePoller:
    """Lambda's poller for one SQS event source mapping."""

    def __init__(
        self,
        aws: EmbeddedAws,
        binding: QueueBinding,
        pool: ContainerPool,
        shipper: LogShipper,
        *,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self.binding = binding
        self._pool = pool
        self._shipper = shipper
        self._sqs = aws.client("sqs", max_pool_connections=50)
        self._lambda = aws.client("lambda")
        self._region = aws.region
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # moto's ReceiveMessage is not safe against itself on one queue (two receivers can
        # move the same message to the dead-letter queue and fail); one receive at a time.
        self._receive_lock = threading.Lock()
        self._slots: list[threading.Thread] = []
        self._watcher: threading.Thread | None = None
        self._level = INITIAL_POLLERS
        self._found_messages = False
        self._on_error = on_error or (lambda message: None)
        self.counters = QueueCounters()
        self.done_ids: set[str] = set()
        self.mapping = self._read_mapping()
        self.depth = self._read_depth()

    def start(self) -> QueuePoller:
        self._watcher = threading.Thread(
            target=self._watch, name=f"esm-{self.binding.name}", daemon=True
        )
        self._watcher.start()
        self._ensure_slots()
        return self

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        for thread in [self._watcher, *self._slots]:
            if thread is not None:
                thread.join(timeout=STOP_JOIN_S)

    def snapshot(self) -> tuple[MappingSnapshot, QueueCounters, QueueDepth]:
        with self._lock:
            counters = QueueCounters(**{name: getattr(self.counters, name) for name in _FIELDS})
            depth = QueueDepth(self.depth.visible, self.depth.in_flight, self.depth.dead_lettered)
            return self.mapping, counters, depth

    # -- the mapping, re-read every second, paced -----------------------------------------

    def _read_mapping(self) -> MappingSnapshot:
        raw = self._lambda.get_event_source_mapping(UUID=self.binding.esm_uuid)
        max_concurrency = int(raw.get("ScalingConfig", {}).get("MaximumConcurrency", 1000))
        # moto reports Enabled through State only.
        enabled = raw.get("State", "Enabled") in ("Enabled", "Enabling", "Updating")
        batch_size = min(int(raw.get("BatchSize", 10)), 10)
        with self._lock:
            self._level = min(self._level, max_concurrency)
            allowed = min(self._level, max_concurrency) if enabled else 0
        return MappingSnapshot(max_concurrency, enabled, batch_size, allowed)

    def _watch(self) -> None:
        while not self._stop.wait(MAPPING_REFRESH_S):
            try:
                with self._lock:
                    if self._found_messages:
                        self._level += POLLERS_ADDED_PER_SECOND
                    self._found_messages = False
                mapping = self._read_mapping()
                depth = self._read_depth()
                with self._lock:
                    self.mapping = mapping
                    self.depth = depth
                self._ensure_slots()
            except Exception as error:
                self._on_error(f"mapping {self.binding.esm_uuid}: {error}")

    def _read_depth(self) -> QueueDepth:
        attributes = self._sqs.get_queue_attributes(
            QueueUrl=self.binding.url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        dead = 0
        if self.binding.dlq_url is not None:
            dead = int(
                self._sqs.get_queue_attributes(
                    QueueUrl=self.binding.dlq_url, AttributeNames=["ApproximateNumberOfMessages"]
                )["Attributes"]["ApproximateNumberOfMessages"]
            )
        return QueueDepth(
            visible=int(attributes["ApproximateNumberOfMessages"]),
            in_flight=int(attributes["ApproximateNumberOfMessagesNotVisible"]),
            dead_lettered=dead,
        )

    def _ensure_slots(self) -> None:
        while len(self._slots) < self.mapping.allowed and not self._stop.is_set():
            index = len(self._slots)
            thread = threading.Thread(
                target=self._slot, args=(index,), name=f"poller-{self.binding.name}-{index}"
            )
            self._slots.append(thread)
            thread.start()

    # -- one concurrent invocation slot ---------------------------------------------------

    def _slot(self, index: int) -> None:
        while not self._stop.is_set():
            if index >= self.mapping.allowed:
                self._stop.wait(0.1)
                continue
            try:
                if not self._poll_once():
                    self._stop.wait(EMPTY_RECEIVE_PAUSE_S)
            except InvocationFailed as error:
                if not self._stop.is_set():
                    self._on_error(str(error))
            except Exception as error:
                self._on_error(f"{self.binding.name} poller: {error}")
                self._stop.wait(EMPTY_RECEIVE_PAUSE_S)

    def _poll_once(self) -> bool:
        with self._receive_lock:
            messages = self._sqs.receive_message(
                QueueUrl=self.binding.url,
                MaxNumberOfMessages=self.mapping.batch_size,
                MessageSystemAttributeNames=["All"],
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
        if not messages:
            return False
        with self._lock:
            self._found_messages = True
            self.counters.received += len(messages)
            self.counters.in_flight += 1
            self.counters.peak_in_flight = max(
                self.counters.peak_in_flight, self.counters.in_flight
            )
            self.counters.invocations += 1
        try:
            failed = self._invoke(messages)
        finally:
            with self._lock:
                self.counters.in_flight -= 1
        done = [message for message in messages if message["MessageId"] not in failed]
        self._delete(done)
        with self._lock:
            # SQS delivers at least once: a message seen again after its visibility timeout
            # (a slow cold start) may be done twice; done_ids counts each message once.
            self.done_ids.update(message["MessageId"] for message in done)
            self.counters.deleted += len(done)
            self.counters.returned += len(messages) - len(done)
        return True

    def _invoke(self, messages: list[dict[str, Any]]) -> set[str]:
        """Run the batch; the ids to leave in the queue (all of them if the invocation failed
        or its response is not a valid partial batch response, as Lambda treats it)."""
        every_id = {message["MessageId"] for message in messages}
        with self._pool.container() as container:
            result = container.invoke(sqs_event(messages, self.binding.arn, self._region))
        try:
            self._shipper.ship(result.log_stream, result.log_lines)
        except Exception as error:
            self._on_error(f"log shipping for {self.binding.name}: {error}")
        if result.error is not None:
            with self._lock:
                self.counters.errors += 1
            return every_id
        return failed_item_ids(result.response, every_id)

    def _delete(self, messages: list[dict[str, Any]]) -> None:
        for start in range(0, len(messages), 10):
            chunk = messages[start : start + 10]
            self._sqs.delete_message_batch(
                QueueUrl=self.binding.url,
                Entries=[
                    {"Id": str(number), "ReceiptHandle": message["ReceiptHandle"]}
                    for number, message in enumerate(chunk)
                ],
            )


_FIELDS = tuple(QueueCounters.__dataclass_fields__)


def sqs_event(messages: list[dict[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    """The event Lambda passes for an SQS batch, from ReceiveMessage's answer."""
    return {
        "Records": [
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "attributes": dict(message.get("Attributes", {})),
                "messageAttributes": {
                    name: {
                        "stringValue": value.get("StringValue"),
                        "binaryValue": value.get("BinaryValue"),
                        "stringListValues": [],
                        "binaryListValues": [],
                        "dataType": value["DataType"],
                    }
                    for name, value in message.get("MessageAttributes", {}).items()
                },
                "md5OfBody": message.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
            for message in messages
        ]
    }


def failed_item_ids(response: Any, every_id: set[str]) -> set[str]:
    """The partial batch response's failures. Lambda fails the whole batch on a malformed one
    (an identifier that is empty or not in the batch)."""
    if response is None:
        return set()
    if not isinstance(response, Mapping):
        return set()
    failures = response.get("batchItemFailures")
    if failures is None:
        return set()
    if not isinstance(failures, list):
        return set(every_id)
    failed: set[str] = set()
    for item in failures:
        identifier = item.get("itemIdentifier") if isinstance(item, Mapping) else None
        if not identifier or identifier not in every_id:
            return set(every_id)
        failed.add(identifier)
    return failed


# -- Kinesis event source mapping ----------------------------------------------------------


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
    ) -> None:
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


# -- scheduled rules -----------------------------------------------------------------------

RATE_UNITS_S = {"minute": 60.0, "minutes": 60.0, "hour": 3600.0, "hours": 3600.0, "day": 86400.0}


def rate_seconds(expression: str) -> float | None:
    """The period of an EventBridge ``rate(N unit)`` expression (``cron(...)`` is not run)."""
    match = re.fullmatch(r"rate\((\d+) (\w+)\)", expression.strip())
    if match is None or match.group(2) not in RATE_UNITS_S:
        return None
    return int(match.group(1)) * RATE_UNITS_S[match.group(2)]


class ScheduleRunner:
    """EventBridge's scheduler for rules whose target is a function of this runtime: each
    ``rate(...)`` rule invokes its target with the target's Input every period."""

    def __init__(
        self,
        aws: EmbeddedAws,
        pools: Mapping[str, ContainerPool],
        shippers: Mapping[str, LogShipper],
        *,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self._pools = pools
        self._shippers = shippers
        self._on_error = on_error or (lambda message: None)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.invocations = 0
        events = aws.client("events")
        self.schedules: list[tuple[str, float, str, dict[str, Any]]] = []
        for rule in events.list_rules()["Rules"]:
            period = rate_seconds(rule.get("ScheduleExpression", ""))
            if period is None or rule.get("State") != "ENABLED":
                continue
            for target in events.list_targets_by_rule(Rule=rule["Name"])["Targets"]:
                function = target["Arn"].split(":function:", 1)[-1]
                if function in pools:
                    payload = json.loads(target.get("Input") or "{}")
                    self.schedules.append((rule["Name"], period, function, payload))

    def start(self) -> ScheduleRunner:
        for name, period, function, payload in self.schedules:
            thread = threading.Thread(
                target=self._run, args=(period, function, payload), name=f"rule-{name}"
            )
            self._threads.append(thread)
            thread.start()
        return self

    def _run(self, period: float, function: str, payload: dict[str, Any]) -> None:
        while not self._stop.wait(period):
            try:
                with self._pools[function].container() as container:
                    result = container.invoke(payload)
                self.invocations += 1
                self._shippers[function].ship(result.log_stream, result.log_lines)
            except Exception as error:
                if not self._stop.is_set():
                    self._on_error(f"scheduled invocation of {function}: {error}")

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=STOP_JOIN_S)


# -- the whole runtime ---------------------------------------------------------------------


class LocalRuntime:
    """Every poller of a deployment, and the containers they run. Stop it in a ``finally``."""

    def __init__(
        self,
        aws: EmbeddedAws,
        deployment: Deployment,
        *,
        on_error: Callable[[str], None] | None = None,
        on_record: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self._aws = aws
        self._deployment = deployment
        self._on_error = on_error
        self._on_record = on_record
        self._controller_log_group = deployment.controller_log_group
        self._pools: list[ContainerPool] = []
        self.queues: dict[str, QueuePoller] = {}
        self.stream: StreamPoller | None = None
        self.schedules: ScheduleRunner | None = None

    def start(self) -> LocalRuntime:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        aws, deployment = self._aws, self._deployment
        lambda_client = aws.client("lambda")
        logs = aws.client("logs")
        environment = {**aws.environment(), "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST"}
        _ensure_log_group(logs, self._controller_log_group)
        controller = ContainerPool(
            FunctionSpec.read(
                lambda_client,
                deployment.controller_function,
                self._controller_log_group,
                {**environment, "AWS_LAMBDA_FUNCTION_NAME": deployment.controller_function},
            )
        )
        self._pools.append(controller)
        metrics = EmfMetricsPublisher(aws.client("cloudwatch"))
        controller_logs = LogShipper(logs, self._controller_log_group, metrics)
        self.stream = StreamPoller(
            aws,
            deployment.stream_name,
            deployment.stream_arn,
            deployment.controller_esm_uuid,
            controller,
            controller_logs,
            on_error=self._on_error,
            on_record=self._on_record,
        ).start()
        workers: dict[str, ContainerPool] = {}
        for binding in deployment.queues:
            if binding.function_name not in workers:
                workers[binding.function_name] = ContainerPool(
                    FunctionSpec.read(
                        lambda_client,
                        binding.function_name,
                        deployment.worker_log_group,
                        {**environment, "AWS_LAMBDA_FUNCTION_NAME": binding.function_name},
                    )
                )
                self._pools.append(workers[binding.function_name])
            self.queues[binding.name] = QueuePoller(
                aws,
                binding,
                workers[binding.function_name],
                LogShipper(logs, deployment.worker_log_group, metrics),
                on_error=self._on_error,
            ).start()
        self.schedules = ScheduleRunner(
            aws,
            {deployment.controller_function: controller},
            {deployment.controller_function: controller_logs},
            on_error=self._on_error,
        ).start()

    def stop(self) -> None:
        """Stop polling, give invocations in progress a few seconds to finish, then stop every
        container (which ends any invocation still running) and join what is left."""
        pollers: list[QueuePoller | StreamPoller | ScheduleRunner] = list(self.queues.values())
        if self.stream is not None:
            pollers.append(self.stream)
        if self.schedules is not None:
            pollers.append(self.schedules)
        for poller in pollers:
            poller.request_stop()
        for poller in pollers:
            poller.stop()
        for pool in self._pools:
            pool.close()
        for poller in pollers:
            poller.stop()

    def __enter__(self) -> LocalRuntime:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def cold_starts(self) -> int:
        return sum(pool.cold_starts for pool in self._pools)


def _ensure_log_group(logs: Any, name: str) -> None:
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=name)
