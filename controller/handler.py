"""Lambda entry point: wiring only. The application is built once per container."""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger

from controller.actuator import LambdaActuator
from controller.app import ControllerApp
from controller.backlog import SqsBacklog
from controller.events import EventBridgePublisher, EventOutbox
from controller.executor import AwsExecutor
from controller.ledger import DynamoLedger
from controller.loop import ControlLoop
from controller.policy import DEFAULT_ALGORITHM, algorithm_named, memory_type
from controller.reducer_app import ReducerApp
from controller.settings import PolicyParams
from controller.stream import REDUCED_STREAM_VARIABLE, KinesisSink

logger = Logger(service="queuemesh-controller")
reducer_logger = Logger(service="queuemesh-reducer")
_app: ControllerApp | None = None
_reducer: ReducerApp | None = None


def build_app(environ: dict[str, str] | None = None) -> ControllerApp:
    env = dict(os.environ) if environ is None else environ
    table = env.get("QUEUEMESH_TABLE")
    if not table:
        raise RuntimeError("QUEUEMESH_TABLE is not set: name the ledger's DynamoDB table")
    try:
        algorithm = algorithm_named(env.get("QUEUEMESH_ALGORITHM", DEFAULT_ALGORITHM))
    except ValueError as error:
        raise RuntimeError(f"QUEUEMESH_ALGORITHM: {error}") from error
    ledger, actuator = DynamoLedger(table, memory_types=memory_type), LambdaActuator()
    events = EventOutbox(EventBridgePublisher())
    loop = ControlLoop(
        ledger,
        actuator,
        PolicyParams.from_env(env),
        algorithm=algorithm,
        executor=AwsExecutor(ledger, actuator, on_commit=events.record),
        backlog=SqsBacklog(),
    )
    return ControllerApp(loop, logger=logger, events=events)


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    global _app
    if _app is None:
        _app = build_app()
    return _app.handle(event, context)


def build_reducer(environ: dict[str, str] | None = None) -> ReducerApp:
    env = dict(os.environ) if environ is None else environ
    stream = env.get(REDUCED_STREAM_VARIABLE)
    if not stream:
        raise RuntimeError(f"{REDUCED_STREAM_VARIABLE} is not set: name the reduced Kinesis stream")
    return ReducerApp(KinesisSink(stream), logger=reducer_logger)


@reducer_logger.inject_lambda_context
def reduce(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The reducer Lambda: telemetry batch in, per-(queue, second) totals out."""
    global _reducer
    if _reducer is None:
        _reducer = build_reducer()
    return _reducer.handle(event, context)
