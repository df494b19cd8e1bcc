"""Lambda's execution environments, locally: one spawned process per container, one invocation
at a time, cold-started on demand and reused while warm.

(The worker wrapper keeps the invocation in progress in a process global, exactly because
Lambda runs one invocation per process; threads would mix invocations up.) Each invocation's
stdout and stderr are captured in its container and returned with its result.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import multiprocessing
import os
import signal
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from stack.local.cloudformation import ACCOUNT

STOP_JOIN_S = 5.0

# Told of every invocation a container ran or could not run: the function's name, and whether
# it failed (raised, timed out, or its container died), as Lambda's Errors counts it.
InvocationHook = Callable[[str, bool], None]


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

    def __init__(self, spec: FunctionSpec, on_invoked: InvocationHook | None = None) -> None:
        self.spec = spec
        self._on_invoked = on_invoked or (lambda function, failed: None)
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
        self._ready = False

    def _identity(self) -> dict[str, Any]:
        return {
            "function_name": self.spec.name,
            "memory_limit_in_mb": self.spec.memory_mb,
            "log_group_name": self.spec.log_group,
            "log_stream_name": self.log_stream,
            "timeout_s": self.spec.timeout_s,
        }

    def wait_ready(self) -> None:
        """Wait out the cold start: the process has imported the function's code."""
        if self._ready:
            return
        try:
            # Imports on a loaded machine are slow: as long as an invocation may take.
            if not self._connection.poll(self.spec.timeout_s + 10):
                raise InvocationFailed(f"{self.spec.name} did not start")
            self._connection.recv()
        except (EOFError, OSError) as failure:
            raise InvocationFailed(f"{self.spec.name} container died: {failure}") from failure
        self._ready = True

    def invoke(self, event: Mapping[str, Any]) -> InvocationResult:
        try:
            result = self._invoke(event)
        except InvocationFailed:
            self._on_invoked(self.spec.name, True)
            raise
        self._on_invoked(self.spec.name, result.error is not None)
        return result

    def _invoke(self, event: Mapping[str, Any]) -> InvocationResult:
        request_id = str(uuid.uuid4())
        self.wait_ready()
        try:
            self._connection.send((request_id, dict(event)))
            if not self._connection.poll(self.spec.timeout_s + 10):
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
    """Warm containers of one function, reused most-recent first (``rotate``: the one idle
    longest first); new ones on demand. ``on_invoked`` hears of each invocation of any of
    them."""

    def __init__(
        self, spec: FunctionSpec, on_invoked: InvocationHook | None = None, *, rotate: bool = False
    ) -> None:
        self.spec = spec
        self._on_invoked = on_invoked
        self._rotate = rotate
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
                container = self._idle.pop(0 if self._rotate else -1)
            else:
                container = Container(self.spec, self._on_invoked)
                self._all.append(container)
                self.cold_starts += 1
        healthy = False
        try:
            yield container
            healthy = container.alive
        finally:
            with self._lock:
                if self._closed:
                    pass  # close() has taken every container and stops them
                elif healthy:
                    self._idle.append(container)
                else:
                    self._all.remove(container)
                    container.stop()

    def prewarm(self, count: int) -> None:
        """Start ``count`` containers and wait for their cold starts, so that the first
        invocations find warm environments (as a function that has been busy does)."""
        started = [Container(self.spec, self._on_invoked) for _ in range(count)]
        with self._lock:
            self._all.extend(started)
            self.cold_starts += count
        for container in started:
            container.wait_ready()
        with self._lock:
            self._idle.extend(started)

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
    # Lambda imports a function's code from its task root; the project's packages stay first.
    if environment.get("LAMBDA_TASK_ROOT"):
        sys.path.append(environment["LAMBDA_TASK_ROOT"])
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
    # The cold start is over (an import error is reported with each invocation).
    connection.send("ready")
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
