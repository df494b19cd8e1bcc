"""The adapter behind `queuemesh doctor`: reads a deployed stack into ``StackReport`` facts,
and carries out the one repair it offers (a paused STATE item's missing ``WakeUp``: the
ledger's own sweep, ``DynamoLedger.sweep_wake_ups``, which the controller's tick runs too).

Only this module calls AWS; the checks (``stack.doctor``) see plain facts. ``client`` makes a
boto3 client for a service name (``AwsTarget.client``, or ``EmbeddedAws.client``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from controller.aws import CallWindow
from controller.constants import CONTROL_PLANE_CALLS_PER_S, CONTROL_PLANE_QUOTA_PER_S
from controller.ledger import (
    CONFIG_SK,
    STATE_SK,
    DynamoLedger,
    MemoryCodec,
    decode_state,
    read_config_items,
    wake_up_repair,
)
from controller.model import QueueConfig
from controller.policy import memory_type
from controller.ports import LedgerError
from controller.settings import PolicyParams, SettingsError
from controller.wake_up_queue import WAKE_UP_QUEUE_VARIABLE
from stack.doctor import (
    THROTTLE_WINDOW_S,
    FunctionFacts,
    LogGroupFacts,
    MappingFacts,
    QueueFacts,
    RegisteredQueue,
    StackReport,
    StateItemFacts,
    Subscription,
    WakeUpQueueFacts,
)
from stack.errors import CliError
from stack.local.widgets import StackFacts

SUBSCRIPTION_FILTER = "AWS::Logs::SubscriptionFilter"
NOT_FOUND = "ResourceNotFoundException"
QUEUE_NOT_FOUND = frozenset({"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
# The stack outputs the doctor reads (template.yaml's Outputs).
TABLE_OUTPUT = "LedgerTableName"
STREAM_OUTPUT = "TelemetryStreamArn"
CONTROLLER_OUTPUT = "ControllerFunctionName"
WORKER_LOG_GROUPS_OUTPUT = "SubscribedWorkerLogGroups"


def template_filter_pattern(template: Mapping[str, Any]) -> str:
    """The one FilterPattern every subscription filter of the template uses (those inside
    ``Fn::ForEach`` included)."""
    patterns = {str(spec.get("FilterPattern", "")) for spec in _filters(template)}
    if len(patterns) != 1:
        raise CliError(
            f"the template's subscription filters must share one FilterPattern; found "
            f"{len(patterns)}: pass the template the stack was deployed from (--template)"
        )
    return patterns.pop()


def _filters(node: Any) -> Iterator[Mapping[str, Any]]:
    if isinstance(node, Mapping):
        if node.get("Type") == SUBSCRIPTION_FILTER:
            yield node.get("Properties") or {}
        for value in node.values():
            yield from _filters(value)
    elif isinstance(node, list):
        for value in node:
            yield from _filters(value)


def template_log_group(template: Mapping[str, Any], stack: StackFacts, function: str) -> str | None:
    """The log group the template gives ``function`` (``LoggingConfig.LogGroup: !Ref X``) when
    it is one of the stack's functions: the local stack's Lambda does not report it."""
    for logical, spec in (template.get("Resources") or {}).items():
        if not isinstance(spec, Mapping) or stack.physical.get(logical) != function:
            continue
        group = ((spec.get("Properties") or {}).get("LoggingConfig") or {}).get("LogGroup")
        if isinstance(group, Mapping) and isinstance(group.get("Ref"), str):
            return stack.physical.get(group["Ref"])
    return None


class StackReader:
    """Reads one deployed stack, its ledger and the resources its registered queues use."""

    def __init__(
        self, client: Callable[[str], Any], *, clock: Callable[[], float] = time.time
    ) -> None:
        self._client = client
        self._clock = clock
        self._lambda = client("lambda")
        self._dynamodb = client("dynamodb")
        self._sqs = client("sqs")
        self._logs = client("logs")
        # Lambda's control plane is shared with the controller, which keeps to 12 of the
        # account's 15 requests a second: the doctor takes no more than the 3 left over.
        self._control_plane = CallWindow(CONTROL_PLANE_QUOTA_PER_S - CONTROL_PLANE_CALLS_PER_S)

    def read(
        self, stack_name: str, template: Mapping[str, Any], table: str | None = None
    ) -> StackReport:
        stack = self._stack(stack_name)
        table = table or _output(stack, TABLE_OUTPUT)
        stream_arn = _output(stack, STREAM_OUTPUT)
        controller = _output(stack, CONTROLLER_OUTPUT)
        environment = self._controller_environment(controller)
        params = controller_policy(environment)
        configs, invalid, states = self._ledger(table, self._clock())
        paused = {state.queue for state in states if state.paused}
        mappings = self._mappings() if configs else {}
        functions: dict[str, FunctionFacts | None] = {}
        queues = []
        for config in configs:
            mapping = mappings.get(config.esm_uuid)
            function = None
            if mapping is not None:
                if mapping.function_name not in functions:
                    functions[mapping.function_name] = self._function(
                        mapping.function_name, template, stack
                    )
                function = functions[mapping.function_name]
            queues.append(
                RegisteredQueue(
                    config=config,
                    cmax=_cmax(params, config.overrides),
                    paused=config.queue in paused,
                    mapping=mapping,
                    function=function,
                    queue=self._queue(mapping),
                    policy_problem=policy_problem(params, config),
                )
            )
        groups = {f.log_group for f in functions.values() if f is not None}
        groups.update(g for g in stack.outputs.get(WORKER_LOG_GROUPS_OUTPUT, "").split(",") if g)
        return StackReport(
            stack=stack.name,
            table=table,
            stream_name=stream_arn.rsplit("/", 1)[-1],
            stream_arn=stream_arn,
            filter_pattern=template_filter_pattern(template),
            queues=tuple(queues),
            invalid_configs=invalid,
            log_groups=tuple(self._log_group(name) for name in sorted(groups)),
            states=tuple(states),
            controller=controller,
            wake_up_queue=self._wake_up_queue(controller, environment),
            throttled_writes=self._throttled_writes(stream_arn.rsplit("/", 1)[-1]),
        )

    def backfill(self, table: str, now: float) -> list[str]:
        """Give every paused STATE item of ``table`` that lacks it its ``WakeUp``: the ledger's
        sweep (the same rule and conditional write as the controller's tick), run through the
        whole table. The queues it woke, sorted."""
        ledger = DynamoLedger(table, self._dynamodb, memory_types=memory_type)
        woken: list[str] = []
        resume: object | None = None
        while True:
            try:
                sweep = ledger.sweep_wake_ups(now, resume)
            except LedgerError as error:
                raise CliError(f"backfilling WakeUp in {table} failed: {error}") from error
            woken.extend(state.queue for state in sweep.woken)
            resume = sweep.resume
            if resume is None:
                return sorted(woken)

    # -- reading ----------------------------------------------------------------------------
    def _stack(self, stack_name: str) -> StackFacts:
        from botocore.exceptions import ClientError

        try:
            return StackFacts.read(self._client("cloudformation"), stack_name)
        except ClientError as error:
            if _code(error) != "ValidationError":
                raise
            raise CliError(
                f"stack {stack_name!r} not found; pass --stack-name (and --region or "
                "--endpoint-url)"
            ) from error

    def _controller_environment(self, controller: str) -> Mapping[str, str]:
        """The controller's environment variables (its QUEUEMESH_* settings)."""
        configuration = self._lambda_call("get_function_configuration", FunctionName=controller)
        return (configuration.get("Environment") or {}).get("Variables") or {}

    def _wake_up_queue(
        self, controller: str, environment: Mapping[str, str]
    ) -> WakeUpQueueFacts | None:
        """The queue the controller's environment names for its wake-ups, and the states of
        the controller's mappings that read it (``None``: it names none)."""
        from botocore.exceptions import ClientError

        url = environment.get(WAKE_UP_QUEUE_VARIABLE)
        if not url:
            return None
        name = url.rstrip("/").rsplit("/", 1)[-1]
        try:
            attributes = self._sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        except ClientError as error:
            if _code(error) not in QUEUE_NOT_FOUND:
                raise
            return WakeUpQueueFacts(name, exists=False)
        arn = attributes["Attributes"]["QueueArn"]
        # A controller has two mappings (its stream and this queue): one page lists them.
        page = self._lambda_call("list_event_source_mappings", FunctionName=controller)
        return WakeUpQueueFacts(
            name,
            exists=True,
            mapping_states=tuple(
                str(mapping.get("State", ""))
                for mapping in page.get("EventSourceMappings", [])
                if mapping.get("EventSourceArn") == arn
            ),
        )

    def _ledger(
        self, table: str, now: float
    ) -> tuple[list[Any], tuple[tuple[str, str], ...], list[StateItemFacts]]:
        from boto3.dynamodb.types import TypeDeserializer
        from botocore.exceptions import ClientError

        deserializer = TypeDeserializer()
        items: list[dict[str, Any]] = []
        try:
            pages = self._dynamodb.get_paginator("scan").paginate(
                TableName=table,
                ConsistentRead=True,
                FilterExpression="SK IN (:config, :state)",
                ExpressionAttributeValues={":config": {"S": CONFIG_SK}, ":state": {"S": STATE_SK}},
            )
            for page in pages:
                items.extend(
                    {key: deserializer.deserialize(value) for key, value in raw.items()}
                    for raw in page.get("Items", [])
                )
        except ClientError as error:
            if _code(error) != NOT_FOUND:
                raise
            raise CliError(f"ledger table {table!r} not found; pass --table") from error
        read = read_config_items(item for item in items if item["SK"] == CONFIG_SK)
        configs = sorted(read.valid.values(), key=lambda config: config.queue)
        invalid = tuple(sorted((queue, bad.problem) for queue, bad in read.invalid.items()))
        states = [state_facts(item, now) for item in items if item["SK"] == STATE_SK]
        return configs, invalid, sorted(states, key=lambda state: state.queue)

    def _lambda_call(self, operation: str, **params: Any) -> Any:
        self._control_plane.acquire(math.inf)
        return getattr(self._lambda, operation)(**params)

    def _mappings(self) -> dict[str, MappingFacts]:
        """The account's mappings by UUID: one ListEventSourceMappings page per 100 mappings,
        where a GetEventSourceMapping each would cost a call per registered queue."""
        found: dict[str, MappingFacts] = {}
        marker: str | None = None
        while True:
            page = self._lambda_call(
                "list_event_source_mappings", MaxItems=100, **({"Marker": marker} if marker else {})
            )
            for mapping in page.get("EventSourceMappings", []):
                found[str(mapping["UUID"])] = mapping_facts(mapping)
            marker = page.get("NextMarker")
            if not marker:
                return found

    def _function(
        self, function: str, template: Mapping[str, Any], stack: StackFacts
    ) -> FunctionFacts | None:
        from botocore.exceptions import ClientError

        try:
            configuration = self._lambda_call("get_function_configuration", FunctionName=function)
            reserved = self._lambda_call("get_function_concurrency", FunctionName=function)
        except ClientError as error:
            if _code(error) != NOT_FOUND:
                raise
            return None
        name = str(configuration["FunctionName"])
        log_group = (
            (configuration.get("LoggingConfig") or {}).get("LogGroup")
            or template_log_group(template, stack, name)
            or f"/aws/lambda/{name}"
        )
        return FunctionFacts(
            name=name,
            timeout_s=int(configuration.get("Timeout") or 3),
            reserved_concurrency=reserved.get("ReservedConcurrentExecutions"),
            log_group=str(log_group),
        )

    def _queue(self, mapping: MappingFacts | None) -> QueueFacts | None:
        from botocore.exceptions import ClientError

        if mapping is None:
            return None
        parts = mapping.event_source_arn.split(":")
        if len(parts) != 6 or parts[2] != "sqs":
            return None
        try:
            url = self._sqs.get_queue_url(QueueName=parts[5], QueueOwnerAWSAccountId=parts[4])
            attributes = self._sqs.get_queue_attributes(
                QueueUrl=url["QueueUrl"], AttributeNames=["VisibilityTimeout", "RedrivePolicy"]
            )["Attributes"]
        except ClientError as error:
            if _code(error) not in QUEUE_NOT_FOUND:
                raise
            return QueueFacts(
                parts[5], visibility_timeout_s=0, has_dead_letter_queue=False, exists=False
            )
        return QueueFacts(
            name=parts[5],
            visibility_timeout_s=int(attributes.get("VisibilityTimeout", 30)),
            has_dead_letter_queue=bool(
                json.loads(attributes.get("RedrivePolicy") or "{}").get("deadLetterTargetArn")
            ),
        )

    def _log_group(self, name: str) -> LogGroupFacts:
        from botocore.exceptions import ClientError

        try:
            pages = self._logs.get_paginator("describe_subscription_filters").paginate(
                logGroupName=name
            )
            subscriptions = tuple(
                Subscription(
                    str(item.get("destinationArn", "")), str(item.get("filterPattern", ""))
                )
                for page in pages
                for item in page.get("subscriptionFilters", [])
            )
        except ClientError as error:
            if _code(error) != NOT_FOUND:
                raise
            return LogGroupFacts(name, exists=False)
        return LogGroupFacts(name, exists=True, subscriptions=subscriptions)

    def _throttled_writes(self, stream_name: str) -> float:
        """Sum of the stream's WriteProvisionedThroughputExceeded over the last hour."""
        now = self._clock()
        answer = self._client("cloudwatch").get_metric_statistics(
            Namespace="AWS/Kinesis",
            MetricName="WriteProvisionedThroughputExceeded",
            Dimensions=[{"Name": "StreamName", "Value": stream_name}],
            StartTime=datetime.fromtimestamp(now - THROTTLE_WINDOW_S, UTC),
            EndTime=datetime.fromtimestamp(now, UTC),
            Period=THROTTLE_WINDOW_S,
            Statistics=["Sum"],
        )
        return float(sum(point.get("Sum", 0.0) for point in answer.get("Datapoints", [])))


def mapping_facts(mapping: Mapping[str, Any]) -> MappingFacts:
    """A mapping as Get/ListEventSourceMappings describe it."""
    return MappingFacts(
        uuid=str(mapping["UUID"]),
        state=str(mapping.get("State", "")),
        max_concurrency=(mapping.get("ScalingConfig") or {}).get("MaximumConcurrency"),
        function_name=str(mapping.get("FunctionArn", "")).split(":function:")[-1],
        event_source_arn=str(mapping.get("EventSourceArn", "")),
        batching_window_s=int(mapping.get("MaximumBatchingWindowInSeconds") or 0),
        report_batch_item_failures="ReportBatchItemFailures"
        in (mapping.get("FunctionResponseTypes") or []),
        provisioned_pollers=bool(mapping.get("ProvisionedPollerConfig")),
    )


def state_facts(item: Mapping[str, Any], now: float) -> StateItemFacts:
    """The facts of a STATE item; whether it needs a ``WakeUp`` is the ledger's rule."""
    memory = MemoryCodec(memory_type)
    state = decode_state(item, memory)
    return StateItemFacts(
        queue=state.queue,
        paused=not state.enabled,
        needs_wake_up=wake_up_repair(item, memory, now) is not None,
    )


def controller_policy(environment: Mapping[str, str]) -> PolicyParams | None:
    """The policy defaults the controller runs with (``None``: its environment does not
    validate)."""
    try:
        return PolicyParams.from_env(environment)
    except SettingsError:
        return None


def policy_problem(params: PolicyParams | None, config: QueueConfig) -> str:
    """Why ``config``'s overrides do not validate against the controller's policy (its
    defaults, when its environment cannot be read), as the controller's own check says it
    (``PolicyParams.with_overrides``, the ranges of ``controller.settings.BOUNDS``); empty
    when they do."""
    try:
        (params or PolicyParams()).with_overrides(config.overrides)
    except SettingsError as error:
        return str(error)
    return ""


def _output(stack: StackFacts, name: str) -> str:
    value = stack.outputs.get(name)
    if not value:
        raise CliError(
            f"stack {stack.name} has no {name} output: is it a QueueMesh stack (--stack-name)?"
        )
    return value


def _cmax(params: PolicyParams | None, overrides: Mapping[str, float]) -> int | None:
    if params is None:
        return None
    try:
        return params.with_overrides(overrides).cmax
    except SettingsError:
        return None


def _code(error: Any) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))
