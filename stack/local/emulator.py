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

import json
import logging
import urllib.request
import uuid
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stack.errors import CliError
from stack.local.cloudformation import (
    ACCOUNT,
    CODE_BUCKET,
    CODE_KEY,
    SUBSCRIPTION_FILTER,
    Resolver,
    arn_function_name,
    code_dirs,
    create_what_moto_drops,
    custom_resources,
    flat_parameters,
    log_group_of,
    placeholder_code_zip,
    stream_mappings,
    with_code_location,
)
from stack.local.deployment import Deployment, queue_binding
from stack.local.moto_events import patch_moto_events
from stack.local.moto_sqs import patch_moto_sqs
from stack.local.template import (
    TemplateError,
    load_template,
    local_code_resources,
    parameter_values,
    transform_document,
)

REGION = "us-east-1"
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
# The project's template.yaml, shipped with the package (a link to it in a checkout).
DEFAULT_TEMPLATE = Path(__file__).with_name("template.yaml")
# Where controller/, worker/ and stack/ are: the checkout, or site-packages once installed.
PACKAGES_ROOT = Path(__file__).resolve().parents[2]
# moto warns, each time its CloudFormation reads the stack's resources, of every type it skips;
# deploy() creates what it can of them through the APIs and lists the rest in the Deployment.
SKIPPED_TYPE_WARNING = r"Tried to parse \S+ but it's not supported by moto's CloudFormation"


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
        logging.getLogger("moto").setLevel(logging.ERROR)
        # The server's threads warn through the process-wide filters (the same entry is added
        # once, however many times an emulator starts).
        warnings.filterwarnings("ignore", message=SKIPPED_TYPE_WARNING, category=UserWarning)
        restore_sqs, restore_events = patch_moto_sqs(), patch_moto_events()

        def restore_moto() -> None:
            restore_sqs()
            restore_events()

        self._restore_moto = restore_moto
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
            values = flat_parameters(parameter_values(template, parameters))
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
        custom = custom_resources(transformed)
        for logical in custom:
            del transformed["Resources"][logical]
        self._upload_code()
        # moto creates every resource within CreateStack: on a loaded host that outlasts the
        # usual read timeout, and a retry would only find its own stack already there.
        cloudformation = self.client(
            "cloudformation", read_timeout=300, retries={"total_max_attempts": 1}
        )
        cloudformation.create_stack(
            StackName=name,
            TemplateBody=json.dumps(with_code_location(transformed)),
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
        resolver = Resolver(self.region, resources, physical, values, name)
        through_api = create_what_moto_drops(
            self.client("logs"), self.client("dynamodb"), resources, physical, resolver
        )
        registered = self._run_registrations(custom, resolver)
        through_api.extend(registered.values())
        not_created = tuple(
            f"{logical} ({spec['Type']})"
            for logical, spec in sorted({**resources, **custom}.items())
            if logical not in physical
            and logical not in registered
            and spec["Type"] != SUBSCRIPTION_FILTER
        )
        # The shipped template's CodeUris name the project's packages, wherever they are installed.
        code_root = (
            PACKAGES_ROOT if template_path == DEFAULT_TEMPLATE else Path(template_path).parent
        )
        deployment = self._discover(
            name,
            physical,
            resources,
            resolver,
            through_api,
            not_created,
            code_dirs(template, code_root, physical),
        )
        self.detach_moto_pollers()
        return deployment

    def _run_registrations(self, custom: Mapping[str, Any], resolver: Resolver) -> dict[str, str]:
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

    def _upload_code(self) -> None:
        s3 = self.client("s3")
        s3.create_bucket(Bucket=CODE_BUCKET)
        s3.put_object(Bucket=CODE_BUCKET, Key=CODE_KEY, Body=placeholder_code_zip())

    def _discover(
        self,
        stack_name: str,
        physical: Mapping[str, str],
        resources: Mapping[str, Any],
        resolver: Resolver,
        through_api: list[str],
        not_created: tuple[str, ...],
        code_dirs: Mapping[str, str],
    ) -> Deployment:
        lambda_client = self.client("lambda")
        sqs = self.client("sqs")
        mappings = lambda_client.list_event_source_mappings()["EventSourceMappings"]
        reducers, controllers, variables = stream_mappings(lambda_client, mappings)
        controller_functions = {arn_function_name(m["FunctionArn"]) for m in controllers}
        # The controller's own SQS mapping is its wake-up queue's; the others feed workers.
        sqs_mappings = [m for m in mappings if m["EventSourceArn"].startswith("arn:aws:sqs:")]
        wake_up_mappings = [
            m for m in sqs_mappings if arn_function_name(m["FunctionArn"]) in controller_functions
        ]
        queue_mappings = [m for m in sqs_mappings if m not in wake_up_mappings]
        if (
            not queue_mappings
            or len(reducers) != 1
            or len(controllers) != 1
            or len(wake_up_mappings) > 1
        ):
            raise CliError(
                "the template must map at least one SQS queue to a worker function, the "
                "telemetry stream to the reducer and the reduced stream to the controller, and "
                "at most one queue (its wake-ups) to the controller; "
                f"found {len(queue_mappings)} worker queue, {len(reducers)} reducer, "
                f"{len(controllers)} controller stream and {len(wake_up_mappings)} controller "
                "queue mappings"
            )
        queues = tuple(queue_binding(sqs, mapping) for mapping in queue_mappings)
        wake_up_queue = queue_binding(sqs, wake_up_mappings[0]) if wake_up_mappings else None
        controller_esm, reducer_esm = controllers[0], reducers[0]
        controller = arn_function_name(controller_esm["FunctionArn"])
        reducer = arn_function_name(reducer_esm["FunctionArn"])
        stream_arn = reducer_esm["EventSourceArn"]
        reduced_stream_arn = controller_esm["EventSourceArn"]
        tables = [physical[k] for k, v in resources.items() if v["Type"] == "AWS::DynamoDB::Table"]
        table = variables[controller_esm["UUID"]].get("QUEUEMESH_TABLE") or (
            tables[0] if len(tables) == 1 else None
        )
        if table is None:
            raise CliError(
                "cannot tell which DynamoDB table is the ledger: set QUEUEMESH_TABLE in the "
                "controller function's environment in template.yaml"
            )
        worker_log_group = log_group_of(queues[0].function_name, physical, resources, resolver)
        through_api.extend(self._ensure_subscription(worker_log_group, stream_arn))
        return Deployment(
            stack_name=stack_name,
            queues=queues,
            controller_function=controller,
            controller_esm_uuid=controller_esm["UUID"],
            wake_up_queue=wake_up_queue,
            stream_name=stream_arn.rsplit("/", 1)[1],
            stream_arn=stream_arn,
            table_name=table,
            worker_log_group=worker_log_group,
            controller_log_group=log_group_of(controller, physical, resources, resolver),
            reducer_function=reducer,
            reducer_esm_uuid=reducer_esm["UUID"],
            reducer_log_group=log_group_of(reducer, physical, resources, resolver),
            reduced_stream_name=reduced_stream_arn.rsplit("/", 1)[1],
            reduced_stream_arn=reduced_stream_arn,
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

    def register_queue(
        self, deployment: Deployment, queue: str, overrides: Mapping[str, float] | None = None
    ) -> None:
        """Write the queue's CONFIG item: only registered mappings are ever actuated.
        ``overrides``: the queue's own policy parameters (``queuemesh register --cmax ...``)."""
        from controller.ledger import DynamoLedger
        from controller.model import QueueConfig
        from controller.policy import memory_type

        binding = deployment.queue(queue)
        ledger = DynamoLedger(
            deployment.table_name, client=self.client("dynamodb"), memory_types=memory_type
        )
        ledger.put_config(
            QueueConfig(
                queue=binding.name, esm_uuid=binding.esm_uuid, overrides=dict(overrides or {})
            )
        )
