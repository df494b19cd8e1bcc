"""Lambda entry point: wiring only. The application is built once per container."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

from aws_lambda_powertools import Logger

from controller.actuator import LambdaActuator, lane_pace, tick_pace
from controller.app import ControllerApp
from controller.backlog import SqsBacklog
from controller.constants import CONFIG_READ_TIMEOUT_S, WAKE_UP_CONCURRENCY
from controller.events import EventBridgePublisher, EventOutbox
from controller.executor import AwsExecutor
from controller.ledger import DynamoLedger
from controller.loop import ControlLoop
from controller.policy import ALGORITHM_VARIABLE, algorithm_name, algorithm_named, memory_type
from controller.reducer_app import ReducerApp
from controller.settings import PolicyParams
from controller.stream import REDUCED_STREAM_VARIABLE, KinesisHistory, KinesisSink
from controller.wake_up_queue import WAKE_UP_QUEUE_VARIABLE, SqsWakeUpScheduler
from controller.wakeups import is_wake_up_batch

# The controller's concurrent batch invocations (template.yaml sets both): the reduced
# stream's shards and its mapping's parallelization factor.
LANE_VARIABLES: Final = ("QUEUEMESH_REDUCED_SHARDS", "QUEUEMESH_CONTROLLER_PARALLELIZATION")

logger = Logger(service="queuemesh-controller")
reducer_logger = Logger(service="queuemesh-reducer")
_app: ControllerApp | None = None
_reducer: ReducerApp | None = None


def build_app(environ: dict[str, str] | None = None) -> ControllerApp:
    """The controller as deployed: reading the reduced stream back when ``QUEUEMESH_REDUCED_STREAM``
    names it (several containers share its shards), and asking for wake-ups on the queue
    ``QUEUEMESH_WAKE_UP_QUEUE`` names (its URL; without it the scheduled tick wakes every
    paused queue)."""
    env = dict(os.environ) if environ is None else environ
    table = env.get("QUEUEMESH_TABLE")
    if not table:
        raise RuntimeError("QUEUEMESH_TABLE is not set: name the ledger's DynamoDB table")
    try:
        algorithm = algorithm_named(algorithm_name(env))
    except ValueError as error:
        raise RuntimeError(f"{ALGORITHM_VARIABLE}: {error}") from error
    ledger, actuator = DynamoLedger(table, memory_types=memory_type), LambdaActuator()
    lanes(env)  # checked at the cold start; each invocation paces its share (handler)
    stream = env.get(REDUCED_STREAM_VARIABLE)
    wake_up_queue = env.get(WAKE_UP_QUEUE_VARIABLE)
    events = EventOutbox(EventBridgePublisher())
    loop = ControlLoop(
        ledger,
        actuator,
        PolicyParams.from_env(env),
        algorithm=algorithm,
        executor=AwsExecutor(ledger, actuator, on_commit=events.record),
        backlog=SqsBacklog(),
        wake_ups=SqsWakeUpScheduler(wake_up_queue) if wake_up_queue else None,
    )
    return ControllerApp(
        loop, logger=logger, events=events, history=KinesisHistory(stream) if stream else None
    )


def lanes(env: Mapping[str, str]) -> int:
    """How many batch invocations may run at once: the product of ``LANE_VARIABLES``."""
    count = 1
    for variable in LANE_VARIABLES:
        value = env.get(variable, "1")
        if not value.isdecimal() or int(value) < 1:
            raise RuntimeError(f"{variable}={value!r}: must be a whole number >= 1")
        count *= int(value)
    return count


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    global _app
    if _app is None:
        _app = build_app()
    actuator = _app.loop.actuator
    if isinstance(actuator, LambdaActuator):
        actuator.pace(*invocation_pace(event, os.environ))
    return _app.handle(event, context)


def invocation_pace(event: object, env: Mapping[str, str]) -> tuple[int, float]:
    """(calls, per seconds) of the control plane an invocation may spend: a tick's share
    (the scheduled tick's, split with the wake-up queue's invocations where there is one), or
    a batch lane's (docs/architecture.md, "Scaling out the controller")."""
    if isinstance(event, Mapping) and (
        event.get("detail-type") == "Scheduled Event" or is_wake_up_batch(event)
    ):
        return tick_pace(tick_runners(env))
    return lane_pace(lanes(env))


def tick_runners(env: Mapping[str, str]) -> int:
    """How many invocations may run the tick at once: the scheduled one, and those of the
    wake-up queue's mapping (``WAKE_UP_CONCURRENCY``) where ``QUEUEMESH_WAKE_UP_QUEUE`` names
    one."""
    return 1 + (WAKE_UP_CONCURRENCY if env.get(WAKE_UP_QUEUE_VARIABLE) else 0)


def build_reducer(environ: dict[str, str] | None = None) -> ReducerApp:
    """The reducer as deployed: it reads the queues' CONFIG groups from the ledger."""
    env = dict(os.environ) if environ is None else environ
    stream = env.get(REDUCED_STREAM_VARIABLE)
    if not stream:
        raise RuntimeError(f"{REDUCED_STREAM_VARIABLE} is not set: name the reduced Kinesis stream")
    table = env.get("QUEUEMESH_TABLE")
    if not table:
        raise RuntimeError("QUEUEMESH_TABLE is not set: name the ledger's DynamoDB table")
    ledger = DynamoLedger(table, memory_types=memory_type, call_timeout_s=CONFIG_READ_TIMEOUT_S)
    return ReducerApp(KinesisSink(stream), ledger, logger=reducer_logger)


@reducer_logger.inject_lambda_context
def reduce(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The reducer Lambda: telemetry batch in, per-(queue, second) totals out."""
    global _reducer
    if _reducer is None:
        _reducer = build_reducer()
    return _reducer.handle(event, context)
