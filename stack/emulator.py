"""The embedded AWS: moto's server on loopback, with QueueMesh's template deployed onto it.

``EmbeddedAws`` runs ``moto.server.ThreadedMotoServer`` in this process (127.0.0.1, a free
port) and hands out real boto3 clients pointed at it. ``deploy`` puts the SAM template on it
the way ``sam deploy`` would: the SAM transform runs offline (aws-sam-translator), function
code is a small zip in the emulator's S3, and CloudFormation CreateStack builds the stack.
What moto's CloudFormation drops is then created through the service APIs (the subscription
filter, DynamoDB TTL; a queue registration by running the registrar's code), and moto's own
pollers are detached so the local runtime is the only consumer of the queues and the stream,
as Lambda's pollers are in AWS (see docs/demo.md).
"""

from __future__ import annotations

import copy
import io
import json
import logging
import re
import urllib.request
import uuid
import warnings
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stack.errors import CliError
from stack.template import (
    TemplateError,
    load_template,
    local_code_resources,
    parameter_values,
    transform_document,
)

REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
CODE_BUCKET = "queuemesh-local-code"
SERVERLESS_FUNCTION = "AWS::Serverless::Function"
DEFAULT_TEMPLATE = Path(__file__).resolve().parent.parent / "template.yaml"

# Types moto's CloudFormation does not create; deploy() makes them through the API instead.
SUBSCRIPTION_FILTER = "AWS::Logs::SubscriptionFilter"


@dataclass(frozen=True, slots=True)
class QueueBinding:
    """One SQS queue consumed by a worker function through an event source mapping."""

    name: str
    url: str
    arn: str
    esm_uuid: str
    function_name: str
    dlq_url: str | None
    dlq_arn: str | None


@dataclass(frozen=True, slots=True)
class Deployment:
    """What the stack holds, by physical name, as the local runtime needs it."""

    stack_name: str
    queues: tuple[QueueBinding, ...]
    controller_function: str
    controller_esm_uuid: str
    stream_name: str
    stream_arn: str
    table_name: str
    worker_log_group: str
    controller_log_group: str
    created_through_api: tuple[str, ...] = ()
    not_created: tuple[str, ...] = ()
    resources: Mapping[str, str] = field(default_factory=dict)
    # Function name -> its CodeUri folder in this checkout (Lambda's task root, locally).
    code_dirs: Mapping[str, str] = field(default_factory=dict)

    def queue(self, name: str) -> QueueBinding:
        for binding in self.queues:
            if binding.name == name:
                return binding
        raise KeyError(name)


class EmbeddedAws:
    """moto's server in this process, on 127.0.0.1. A context manager: stop() resets moto's
    state and closes the port, so nothing of one run leaks into the next."""

    def __init__(self, region: str = REGION) -> None:
        self.region = region
        self._server: Any = None
        self._endpoint: str | None = None
        self._restore_moto: Callable[[], None] = lambda: None

    def start(self) -> EmbeddedAws:
        from moto.server import ThreadedMotoServer

        # The server logs every request; the terminal belongs to the demo.
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        # It also warns for each resource type its CloudFormation skips; deploy() reports them.
        logging.getLogger("moto").setLevel(logging.ERROR)
        self._restore_moto = _patch_moto_sqs()
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        self._server = server
        self._endpoint = f"http://{host}:{port}"
        # Lambda invocation would need Docker; the local runtime runs the code instead.
        self._moto_api("config", {"lambda": {"use_docker": False}})
        return self

    def reset(self) -> None:
        """Empty every emulated service (moto's backends are shared by the whole process)."""
        self._moto_api("reset", None)

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        try:
            self.reset()
        finally:
            self._endpoint = None
            server.stop()
            self._restore_moto()

    def __enter__(self) -> EmbeddedAws:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        if self._endpoint is None:
            raise RuntimeError("the embedded AWS is not running")
        return self._endpoint

    @property
    def port(self) -> int:
        return int(self.endpoint.rsplit(":", 1)[1])

    def environment(self) -> dict[str, str]:
        """What a process needs to talk to the emulator through boto3's own settings."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            **LOCAL_CREDENTIALS,
        }

    def client(self, service: str, **config: Any) -> Any:
        import boto3
        from botocore.config import Config

        settings: dict[str, Any] = {"connect_timeout": 3, "read_timeout": 15}
        settings.update(config)
        return boto3.session.Session().client(
            service,
            region_name=self.region,
            endpoint_url=self.endpoint,
            aws_access_key_id=LOCAL_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=LOCAL_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            config=Config(**settings),
        )

    def _moto_api(self, path: str, body: object) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/{path}", data=data, method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()

    # -- deployment -------------------------------------------------------------------------

    def deploy(
        self,
        template_path: Path = DEFAULT_TEMPLATE,
        *,
        stack_name: str | None = None,
        parameters: Mapping[str, str] | None = None,
    ) -> Deployment:
        """Transform, package and create the stack, then finish what moto leaves out."""
        name = stack_name or f"queuemesh-local-{uuid.uuid4().hex[:8]}"
        try:
            template = load_template(template_path)
            values = _flat(parameter_values(template, parameters))
            package = f"s3://{CODE_BUCKET}/{CODE_KEY}"
            transformed = transform_document(
                template,
                parameters,
                code_uris=dict.fromkeys(local_code_resources(template), package),
                region=self.region,
                account_id=ACCOUNT,
            )
        except (OSError, TemplateError) as error:
            raise CliError(
                f"cannot deploy {template_path}: {error}; fix the template (or pass --template "
                "FILE), or the setting that gives the parameter its value (the demo's come from "
                "the scenario)"
            ) from error
        custom = _custom_resources(transformed)
        for logical in custom:
            del transformed["Resources"][logical]
        self._upload_code()
        cloudformation = self.client("cloudformation")
        with warnings.catch_warnings():
            # moto warns for each type it skips; deploy() reports them in the Deployment.
            warnings.simplefilter("ignore")
            cloudformation.create_stack(
                StackName=name,
                TemplateBody=json.dumps(_with_code_location(transformed)),
                Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in values.items()],
                Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
            )
            stack = cloudformation.describe_stacks(StackName=name)["Stacks"][0]
            if stack["StackStatus"] != "CREATE_COMPLETE":
                raise CliError(
                    f"the embedded AWS could not create the stack ({stack['StackStatus']}: "
                    f"{stack.get('StackStatusReason', 'no reason given')}); check template.yaml"
                )
            listed = cloudformation.describe_stack_resources(StackName=name)["StackResources"]
        physical = {
            item["LogicalResourceId"]: item["PhysicalResourceId"]
            for item in listed
            if "LogicalResourceId" in item and "PhysicalResourceId" in item
        }
        resources = transformed.get("Resources", {})
        resolver = _Resolver(self, resources, physical, values, name)
        through_api = self._create_what_moto_drops(resources, physical, resolver)
        registered = self._run_registrations(custom, resolver)
        through_api.extend(registered.values())
        not_created = tuple(
            f"{logical} ({spec['Type']})"
            for logical, spec in sorted({**resources, **custom}.items())
            if logical not in physical
            and logical not in registered
            and spec["Type"] != SUBSCRIPTION_FILTER
        )
        code_dirs = _code_dirs(template, Path(template_path), physical)
        deployment = self._discover(
            name, physical, resources, resolver, through_api, not_created, code_dirs
        )
        self.detach_moto_pollers()
        return deployment

    def _upload_code(self) -> None:
        s3 = self.client("s3")
        s3.create_bucket(Bucket=CODE_BUCKET)
        s3.put_object(Bucket=CODE_BUCKET, Key=CODE_KEY, Body=placeholder_code_zip())

    def _create_what_moto_drops(
        self, resources: Mapping[str, Any], physical: Mapping[str, str], resolver: _Resolver
    ) -> list[str]:
        done: list[str] = []
        logs = self.client("logs")
        dynamodb = self.client("dynamodb")
        for logical, spec in sorted(resources.items()):
            properties = spec.get("Properties", {})
            if spec["Type"] == SUBSCRIPTION_FILTER and logical not in physical:
                group = resolver.resolve(properties["LogGroupName"])
                logs.put_subscription_filter(
                    logGroupName=group,
                    filterName=str(properties.get("FilterName", logical)),
                    filterPattern=str(resolver.resolve(properties.get("FilterPattern", ""))),
                    destinationArn=resolver.resolve(properties["DestinationArn"]),
                    **(
                        {"roleArn": resolver.resolve(properties["RoleArn"])}
                        if "RoleArn" in properties
                        else {}
                    ),
                )
                done.append(f"{logical} ({SUBSCRIPTION_FILTER} on {group})")
            ttl = properties.get("TimeToLiveSpecification")
            if spec["Type"] == "AWS::DynamoDB::Table" and ttl and ttl.get("Enabled"):
                dynamodb.update_time_to_live(
                    TableName=physical[logical],
                    TimeToLiveSpecification={
                        "Enabled": True,
                        "AttributeName": str(ttl["AttributeName"]),
                    },
                )
                done.append(f"{logical} TimeToLiveSpecification ({ttl['AttributeName']})")
        return done

    def _run_registrations(self, custom: Mapping[str, Any], resolver: _Resolver) -> dict[str, str]:
        """Each registration custom resource, created by the registrar's own code
        (``controller.registrar``) run here: moto would need Docker to run its function."""
        from controller.ledger import DynamoLedger
        from controller.policy import memory_type
        from controller.ports import LedgerError
        from controller.registrar import REGISTRATION_TYPE, carry_out
        from controller.registration import OperatorError

        def ledger_of(table: str) -> DynamoLedger:
            return DynamoLedger(table, self.client("dynamodb"), memory_types=memory_type)

        done = {}
        for logical, spec in sorted(custom.items()):
            if spec["Type"] != REGISTRATION_TYPE:
                continue
            properties = {
                name: resolver.resolve(value)
                for name, value in spec.get("Properties", {}).items()
                if name != "ServiceToken"
            }
            try:
                carry_out("Create", properties, "", ledger_of)
            except (OperatorError, LedgerError) as error:
                raise CliError(f"{logical} ({REGISTRATION_TYPE}) failed: {error}") from error
            done[logical] = f"{logical} ({REGISTRATION_TYPE}, by the registrar's code)"
        return done

    def _discover(
        self,
        stack_name: str,
        physical: Mapping[str, str],
        resources: Mapping[str, Any],
        resolver: _Resolver,
        through_api: list[str],
        not_created: tuple[str, ...],
        code_dirs: Mapping[str, str],
    ) -> Deployment:
        lambda_client = self.client("lambda")
        sqs = self.client("sqs")
        mappings = lambda_client.list_event_source_mappings()["EventSourceMappings"]
        queue_mappings = [m for m in mappings if m["EventSourceArn"].startswith("arn:aws:sqs:")]
        stream_mappings = [m for m in mappings if ":kinesis:" in m["EventSourceArn"]]
        if not queue_mappings or len(stream_mappings) != 1:
            raise CliError(
                "the template must map at least one SQS queue to a worker function and one "
                f"Kinesis stream to the controller; found {len(queue_mappings)} queue and "
                f"{len(stream_mappings)} stream mappings"
            )
        queues = tuple(_queue_binding(sqs, mapping) for mapping in queue_mappings)
        controller_esm = stream_mappings[0]
        controller = _function_name(controller_esm["FunctionArn"])
        stream_arn = controller_esm["EventSourceArn"]
        environment = lambda_client.get_function_configuration(FunctionName=controller).get(
            "Environment", {}
        )
        tables = [physical[k] for k, v in resources.items() if v["Type"] == "AWS::DynamoDB::Table"]
        table = environment.get("Variables", {}).get("QUEUEMESH_TABLE") or (
            tables[0] if len(tables) == 1 else None
        )
        if table is None:
            raise CliError(
                "cannot tell which DynamoDB table is the ledger: set QUEUEMESH_TABLE in the "
                "controller function's environment in template.yaml"
            )
        worker_log_group = _log_group_of(queues[0].function_name, physical, resources, resolver)
        through_api.extend(self._ensure_subscription(worker_log_group, stream_arn))
        return Deployment(
            stack_name=stack_name,
            queues=queues,
            controller_function=controller,
            controller_esm_uuid=controller_esm["UUID"],
            stream_name=stream_arn.rsplit("/", 1)[1],
            stream_arn=stream_arn,
            table_name=table,
            worker_log_group=worker_log_group,
            controller_log_group=_log_group_of(controller, physical, resources, resolver),
            created_through_api=tuple(through_api),
            not_created=not_created,
            resources=dict(physical),
            code_dirs=dict(code_dirs),
        )

    def _ensure_subscription(self, log_group: str, stream_arn: str) -> list[str]:
        """The worker's telemetry must reach the stream; a template without its own filter
        gets one (AWS creates /aws/lambda/<function> on first write; here it must exist)."""
        logs = self.client("logs")
        groups = logs.describe_log_groups(logGroupNamePrefix=log_group)["logGroups"]
        created: list[str] = []
        if not any(group["logGroupName"] == log_group for group in groups):
            logs.create_log_group(logGroupName=log_group)
            created.append(f"log group {log_group}")
        if not logs.describe_subscription_filters(logGroupName=log_group)["subscriptionFilters"]:
            logs.put_subscription_filter(
                logGroupName=log_group,
                filterName="queuemesh-telemetry",
                filterPattern="",
                destinationArn=stream_arn,
            )
            created.append(f"subscription filter {log_group} -> {stream_arn}")
        return created

    def detach_moto_pollers(self) -> None:
        """Stop moto from consuming queues and streams itself.

        moto runs an enabled SQS mapping's function the moment a message is sent (and a
        Kinesis mapping's once per record). The mappings stay in the Lambda API, Enabled and
        updatable; only moto's in-process shortcut is removed, leaving the local runtime as
        the sole poller.
        """
        from moto.backends import get_backend

        for account in get_backend("sqs").values():
            for backend in account.values():
                for queue in backend.queues.values():
                    queue.lambda_event_source_mappings.clear()
        for kinesis_account in get_backend("kinesis").values():
            for kinesis in kinesis_account.values():
                for stream in kinesis.streams.values():
                    stream.lambda_event_source_mappings.clear()

    def register_queue(self, deployment: Deployment, queue: str) -> None:
        """Write the queue's CONFIG item: only registered mappings are ever actuated."""
        from controller.ledger import DynamoLedger
        from controller.model import QueueConfig
        from controller.policy import memory_type

        binding = deployment.queue(queue)
        ledger = DynamoLedger(
            deployment.table_name, client=self.client("dynamodb"), memory_types=memory_type
        )
        ledger.put_config(QueueConfig(queue=binding.name, esm_uuid=binding.esm_uuid))


CODE_KEY = "queuemesh-functions.zip"


def _patch_moto_sqs() -> Callable[[], None]:
    """Make moto's SQS usable at demo depth and under concurrent requests; returns the undo.

    moto's SQS reads the clock through datetime arithmetic for every message of a queue on
    every send and receive, and checks retention by recomputing all queue attributes per
    message: a receive on a 1,500-message queue took seconds. The same values, from
    ``time.time()`` and the queue's own retention attribute, keep it linear and cheap.
    """
    import time

    from moto.sqs import models

    original_unix_time = models.unix_time
    original_unix_time_millis = models.unix_time_millis
    original_retention_check = models.SQSBackend.is_message_valid_based_on_retention_period

    def unix_time(dt: Any = None) -> float:
        return time.time() if dt is None else original_unix_time(dt)

    def unix_time_millis(dt: Any = None) -> float:
        return time.time() * 1000.0 if dt is None else original_unix_time_millis(dt)

    def is_message_valid_based_on_retention_period(
        backend: Any, queue_name: str, message: Any
    ) -> bool:
        retention_s = int(backend.get_queue(queue_name).message_retention_period)
        return bool(retention_s + message.sent_timestamp / 1000 > time.time())

    # The queue's counts scan every message, asking the clock once per message and property;
    # SendMessage computes all of them for each message sent (it reads one attribute). One
    # clock reading per scan, same comparisons as ``Message.visible`` and ``Message.delayed``.
    def messages(queue: Any) -> list[Any]:
        now = time.time() * 1000.0
        return [m for m in queue._messages if now > m.visible_at and now >= m.delayed_until]

    def delayed(queue: Any) -> int:
        now = time.time() * 1000.0
        return sum(1 for m in queue._messages if now < m.delayed_until)

    def not_visible(queue: Any) -> int:
        now = time.time() * 1000.0
        return sum(1 for m in queue._messages if now <= m.visible_at)

    # ReceiveMessage iterates the queue's set of pending messages while a delete on another
    # server thread removes from it ("Set changed size during iteration", a 500 and a
    # traceback); a tuple of the set is taken in one step under the GIL.
    def pending_message_groups(queue: Any) -> set[str]:
        pending = tuple(queue._pending_messages)
        return {message.group_id for message in pending if message.group_id is not None}

    queue_properties = {
        "messages": property(messages),
        "approximate_number_of_messages": property(lambda queue: len(messages(queue))),
        "approximate_number_of_messages_delayed": property(delayed),
        "approximate_number_of_messages_not_visible": property(not_visible),
        "pending_message_groups": property(pending_message_groups),
    }
    original_properties = {name: models.Queue.__dict__[name] for name in queue_properties}

    models.unix_time = unix_time
    models.unix_time_millis = unix_time_millis
    retention_check = "is_message_valid_based_on_retention_period"
    setattr(models.SQSBackend, retention_check, is_message_valid_based_on_retention_period)
    for name, replacement in queue_properties.items():
        setattr(models.Queue, name, replacement)

    def restore() -> None:
        models.unix_time = original_unix_time
        models.unix_time_millis = original_unix_time_millis
        setattr(models.SQSBackend, retention_check, original_retention_check)
        for name, original in original_properties.items():
            setattr(models.Queue, name, original)

    return restore


def _code_dirs(
    template: Mapping[str, Any], template_path: Path, physical: Mapping[str, str]
) -> dict[str, str]:
    return {
        physical[logical]: str((template_path.parent / folder).resolve())
        for logical, folder in local_code_resources(template).items()
        if logical in physical and template["Resources"][logical]["Type"] == SERVERLESS_FUNCTION
    }


def placeholder_code_zip() -> bytes:
    """Lambda in moto needs a code package; the local runtime imports the real code from this
    checkout, so the package only has to be a valid zip."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(
            "README.txt", "Placeholder: the QueueMesh local runtime runs the code in-process.\n"
        )
    return buffer.getvalue()


def _custom_resources(template: Mapping[str, Any]) -> dict[str, Any]:
    """Custom resources backed by a Lambda function: moto would have to run the function's code
    (in Docker) to create them, so they are left out and done through the API instead."""
    return {
        logical: spec
        for logical, spec in template["Resources"].items()
        if str(spec.get("Type", "")).startswith("Custom::")
        or spec.get("Type") == "AWS::CloudFormation::CustomResource"
    }


def _with_code_location(template: Mapping[str, Any]) -> dict[str, Any]:
    """Plain AWS::Lambda::Function resources in the template get the same package."""
    located = copy.deepcopy(dict(template))
    for spec in located["Resources"].values():
        if spec.get("Type") == "AWS::Lambda::Function":
            spec.setdefault("Properties", {})["Code"] = {"S3Bucket": CODE_BUCKET, "S3Key": CODE_KEY}
    return located


def _flat(values: Mapping[str, Any]) -> dict[str, str]:
    """Parameter values as CloudFormation receives them (lists as comma strings)."""
    return {name: ",".join(v) if isinstance(v, list) else v for name, v in values.items()}


def _queue_binding(sqs: Any, mapping: Mapping[str, Any]) -> QueueBinding:
    arn = str(mapping["EventSourceArn"])
    name = arn.rsplit(":", 1)[1]
    url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    dlq_arn: str | None = None
    dlq_url: str | None = None
    if "RedrivePolicy" in attributes:
        dlq_arn = str(json.loads(attributes["RedrivePolicy"])["deadLetterTargetArn"])
        dlq_url = sqs.get_queue_url(QueueName=dlq_arn.rsplit(":", 1)[1])["QueueUrl"]
    return QueueBinding(
        name=name,
        url=url,
        arn=arn,
        esm_uuid=str(mapping["UUID"]),
        function_name=_function_name(str(mapping["FunctionArn"])),
        dlq_url=dlq_url,
        dlq_arn=dlq_arn,
    )


def _log_group_of(
    function: str, physical: Mapping[str, str], resources: Mapping[str, Any], resolver: _Resolver
) -> str:
    """The function's LoggingConfig.LogGroup as the template sets it (moto's Lambda does not
    keep LoggingConfig), else Lambda's default /aws/lambda/<function>."""
    for logical, spec in resources.items():
        if physical.get(logical) == function and spec["Type"] == "AWS::Lambda::Function":
            configured = spec.get("Properties", {}).get("LoggingConfig", {}).get("LogGroup")
            if configured is not None:
                return str(resolver.resolve(configured))
    return f"/aws/lambda/{function}"


def _function_name(function_arn: str) -> str:
    return function_arn.split(":function:", 1)[1].split(":", 1)[0]


class _Resolver:
    """Enough of CloudFormation's intrinsic functions to finish resources moto dropped:
    Ref, Fn::GetAtt (Arn and names), Fn::Sub and Fn::Join over the created stack."""

    def __init__(
        self,
        aws: EmbeddedAws,
        resources: Mapping[str, Any],
        physical: Mapping[str, str],
        parameters: Mapping[str, str],
        stack_name: str,
    ) -> None:
        region = aws.region
        self._types = {logical: spec["Type"] for logical, spec in resources.items()}
        self._physical = physical
        self._values: dict[str, str] = {
            **parameters,
            "AWS::Region": region,
            "AWS::AccountId": ACCOUNT,
            "AWS::Partition": "aws",
            "AWS::StackName": stack_name,
            "AWS::URLSuffix": "amazonaws.com",
        }
        self._arn_formats: dict[str, Callable[[str], str]] = {
            "AWS::Kinesis::Stream": lambda p: f"arn:aws:kinesis:{region}:{ACCOUNT}:stream/{p}",
            "AWS::IAM::Role": lambda p: f"arn:aws:iam::{ACCOUNT}:role/{p}",
            "AWS::Lambda::Function": lambda p: f"arn:aws:lambda:{region}:{ACCOUNT}:function:{p}",
            "AWS::SQS::Queue": lambda p: f"arn:aws:sqs:{region}:{ACCOUNT}:{p.rsplit('/', 1)[1]}",
            "AWS::Logs::LogGroup": lambda p: f"arn:aws:logs:{region}:{ACCOUNT}:log-group:{p}:*",
            "AWS::DynamoDB::Table": lambda p: f"arn:aws:dynamodb:{region}:{ACCOUNT}:table/{p}",
        }

    def resolve(self, value: Any) -> Any:
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        if not isinstance(value, dict) or len(value) != 1:
            raise CliError(f"cannot resolve {value!r} on the embedded AWS")
        ((function, argument),) = value.items()
        if function == "Ref":
            return self._ref(str(argument))
        if function == "Fn::GetAtt":
            logical, attribute = argument.split(".", 1) if isinstance(argument, str) else argument
            return self._get_att(str(logical), str(attribute))
        if function == "Fn::Sub":
            text, extra = (argument, {}) if isinstance(argument, str) else argument
            variables = {key: str(self.resolve(item)) for key, item in extra.items()}
            return re.sub(
                r"\$\{([^}!]+)\}", lambda match: self._sub(match.group(1), variables), text
            )
        if function == "Fn::Join":
            separator, items = argument
            return str(separator).join(str(self.resolve(item)) for item in items)
        raise CliError(f"cannot resolve {function} on the embedded AWS")

    def _ref(self, name: str) -> str:
        if name in self._values:
            return self._values[name]
        if name in self._physical:
            return self._physical[name]
        raise CliError(f"cannot resolve Ref {name}: no such parameter or created resource")

    def _get_att(self, logical: str, attribute: str) -> str:
        physical = self._ref(logical)
        if attribute == "Arn" and self._types.get(logical) in self._arn_formats:
            return self._arn_formats[self._types[logical]](physical)
        if attribute in ("Name", "QueueName", "StreamName"):
            return physical.rsplit("/", 1)[-1]
        raise CliError(f"cannot resolve Fn::GetAtt {logical}.{attribute} on the embedded AWS")

    def _sub(self, name: str, variables: Mapping[str, str]) -> str:
        if name in variables:
            return variables[name]
        if "." in name:
            logical, attribute = name.split(".", 1)
            return self._get_att(logical, attribute)
        return self._ref(name)
