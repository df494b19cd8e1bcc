"""The zero-code worker handler: wraps the handler named by QUEUEMESH_HANDLER.

Set the function's handler to ``worker.wrapper.handler`` and ``QUEUEMESH_HANDLER`` to the
application's own (``module.function``), the way observability layers wrap a handler. The
application's handler is called unchanged: its return value (partial batch responses
included) and its exceptions pass through untouched. Around each invocation the wrapper counts
downstream HTTP calls per queue, prints the EMF documents of the invocations whose second of
start is over (one per queue and second: ``worker.aggregate``), and (opt-in) keeps messages
that failed on a 429 with Retry-After invisible until the downstream is ready.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from worker import emf, instrument
from worker.aggregate import Report, Reports
from worker.invocation import Invocation, TrackedRecords, failures, record_ref
from worker.visibility import Postponement, VisibilityExtender, respect_retry_after_enabled

HANDLER_ENV = "QUEUEMESH_HANDLER"

Handler = Callable[[Any, Any], Any]


class HandlerNotFoundError(Exception):
    """QUEUEMESH_HANDLER does not name a callable handler (the message is one line)."""


def load_handler(spec: str | None) -> Handler:
    """Import the application's handler named ``module.function`` (``dir/module.function`` too)."""
    hint = f"set {HANDLER_ENV} to your handler as module.function, e.g. app.handler"
    if not spec or not spec.strip():
        raise HandlerNotFoundError(f"{HANDLER_ENV} is not set; {hint}")
    module_name, _, function_name = spec.strip().replace("/", ".").rpartition(".")
    if not module_name or not function_name:
        raise HandlerNotFoundError(f"{HANDLER_ENV}={spec!r} is not module.function; {hint}")
    if f"{module_name}.{function_name}" == f"{__name__}.handler":
        raise HandlerNotFoundError(
            f"{HANDLER_ENV}={spec!r} names the QueueMesh wrapper itself; "
            "set it to the application's own handler"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if missing != module_name and not module_name.startswith(missing + "."):
            raise  # the application's module exists and lacks a dependency: its own error
        raise HandlerNotFoundError(
            f"{HANDLER_ENV}={spec!r}: no module named {missing!r} on the path; {hint}"
        ) from error
    function = getattr(module, function_name, None)
    if not callable(function):
        raise HandlerNotFoundError(
            f"{HANDLER_ENV}={spec!r}: module {module_name!r} has no function "
            f"{function_name!r}; {hint}"
        )
    return function


@dataclass(frozen=True, slots=True)
class _Message:
    queue: str
    queue_arn: str
    receipt_handle: str | None


@dataclass(slots=True)
class _InvocationScope:
    invocation: Invocation
    messages: dict[str, _Message]
    started: float


_extender = VisibilityExtender()
# This execution environment's telemetry, held until each second of invocation starts passes.
_reports = Reports()


def _begin(event: Any) -> _InvocationScope | None:
    """Open the invocation's counters if the event carries SQS records; never raises."""
    started = perf_counter()
    try:
        records = event.get("Records") if isinstance(event, dict) else None
        if not isinstance(records, list):
            return None
        messages: dict[str, _Message] = {}
        per_queue: Counter[str] = Counter()
        for record in records:
            ref = record_ref(record)
            if ref is None:
                continue
            per_queue[ref.queue] += 1
            if ref.message_id is not None:
                receipt_handle = record.get("receiptHandle")
                messages[ref.message_id] = _Message(
                    ref.queue,
                    record["eventSourceARN"],
                    receipt_handle if isinstance(receipt_handle, str) else None,
                )
        if not per_queue:
            return None
        # Real SQS invocations hold one queue; a mixed event's unattributed calls go to the
        # queue with the most records (the first seen, on a tie).
        queues = [queue for queue, _ in per_queue.most_common()]
        invocation = Invocation(queues)
        if type(records) is list:
            event["Records"] = TrackedRecords(records)
        instrument.begin(invocation)
        return _InvocationScope(invocation, messages, started)
    except Exception as error:
        failures.swallow(error)
        return None


def _failed_message_ids(scope: _InvocationScope, response: Any, raised: bool) -> list[str]:
    if raised:
        return list(scope.messages)  # the whole batch returns to the queue
    if not isinstance(response, Mapping):
        return []
    failed_items = response.get("batchItemFailures")
    if not isinstance(failed_items, list):
        return []
    return [
        item["itemIdentifier"]
        for item in failed_items
        if isinstance(item, Mapping) and item.get("itemIdentifier") in scope.messages
    ]


def _postponements(scope: _InvocationScope, failed_ids: list[str]) -> list[Postponement]:
    invocation = scope.invocation
    postponements = []
    for message_id in failed_ids:
        message = scope.messages[message_id]
        delay = invocation.retry_after_by_message.get(message_id)
        if delay is None:
            delay = invocation.unattributed_retry_after.get(message.queue)
        if delay is not None and delay > 0 and message.receipt_handle:
            postponements.append(Postponement(message.queue_arn, message.receipt_handle, delay))
    return postponements


def _finish(scope: _InvocationScope, response: Any, *, raised: bool) -> None:
    """Emit the invocation's documents and postpone messages; never raises."""
    invocation_ms = (perf_counter() - scope.started) * 1000.0
    instrument.end()  # before the SQS calls below, and whatever happens next
    try:
        ended_at = time.time()
        tallies = scope.invocation.tallies  # first: classifying the calls may fail too
        _emit(_reports.ended(tallies, invocation_ms, ended_at))
        if respect_retry_after_enabled():
            failed_ids = _failed_message_ids(scope, response, raised)
            _extender.extend(_postponements(scope, failed_ids))
    except Exception as error:
        failures.swallow(error)


def _emit(reports: list[tuple[str, Report]]) -> None:
    """Print one document per report."""
    namespace = emf.namespace_from_env()
    notes = {"QueueMeshInstrumentationErrors": failures.count} if failures.count else None
    for queue, report in reports:
        emf.emit(emf.document(queue, report, namespace=namespace, notes=notes))


def flush() -> None:
    """Print every report held (at shutdown); never raises."""
    try:
        _emit(_reports.drain())
    except Exception as error:
        failures.swallow(error)


def _flush_on_sigterm() -> None:
    """Flush at shutdown where the runtime says so: at the interpreter's exit, and on SIGTERM,
    which Lambda sends before it shuts an execution environment down when the function has an
    extension (without one, the process is stopped unwarned, and the reports of its last
    second are lost). An application's own SIGTERM handler is left alone."""
    atexit.register(flush)
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def on_sigterm(signum: int, frame: object) -> None:
        flush()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_sigterm)


def invoke(app_handler: Handler, event: Any, context: Any) -> Any:
    """Call the application's handler unchanged, counting its downstream calls."""
    scope = _begin(event)
    if scope is None:
        return app_handler(event, context)
    try:
        response = app_handler(event, context)
    except BaseException:
        _finish(scope, None, raised=True)
        raise
    _finish(scope, response, raised=False)
    return response


def instrumented(app_handler: Handler) -> Handler:
    """Decorate a Lambda handler with QueueMesh telemetry (the code route to the wrapper)."""
    instrument.install()

    @functools.wraps(app_handler)
    def handler(event: Any, context: Any) -> Any:
        return invoke(app_handler, event, context)

    return handler


_app_handler: Handler | None = None


def _application_handler() -> Handler:
    global _app_handler
    if _app_handler is None:
        _app_handler = load_handler(os.environ.get(HANDLER_ENV))
    return _app_handler


def handler(event: Any, context: Any) -> Any:
    """The Lambda entry point: set the function's handler to ``worker.wrapper.handler``."""
    return invoke(_application_handler(), event, context)


instrument.install()
if os.environ.get("AWS_LAMBDA_RUNTIME_API"):
    _flush_on_sigterm()
    # In Lambda, load during init, like the runtime would: the application's import work gets
    # init's CPU, and a bad QUEUEMESH_HANDLER fails the init with its one-line message.
    _application_handler()
