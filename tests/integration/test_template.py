"""The SAM template, offline: it transforms, lints clean, and keeps its promises.

The template goes through aws-sam-translator (no AWS calls) and cfn-lint; the tests then read
the CloudFormation that ``sam deploy`` would submit. Broken variants under tests/templates/ are
single edits of the real template that each stage must reject.
"""

from __future__ import annotations

import copy
import functools
import importlib
import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from cfnlint.api import ManualArgs, lint
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws

from controller import registrar as registrar_module
from controller.events import SOURCE, DetailType
from controller.ledger import GROUP_INDEX, WAKE_UP_INDEX, create_ledger_table
from controller.policy import memory_type
from controller.schema import (
    CONTROLLER_GROUP_DIMENSION,
    CONTROLLER_NAMESPACE,
    CONTROLLER_REASON_DIMENSION,
    CONTROLLER_SKIPPED,
    DecisionMetric,
    GroupMetric,
    HealthMetric,
)
from stack.local.template import (
    TemplateError,
    expand_language_extensions,
    load_template,
    parameter_values,
    transform_document,
    transform_template,
)
from stack.local.template_rules import delivery_findings, iam_findings
from tests.paths import ROOT, TEMPLATES
from worker import schema as worker_schema

TEMPLATE = ROOT / "template.yaml"
VARIANTS = sorted(TEMPLATES.glob("*.yaml"))
REGION = "us-east-1"
REQUIRED = {"ExampleDownstreamUrl": "https://api.example.com/orders"}
ESM_ARN_PATTERN = (
    "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:event-source-mapping:*"
)


def lint_problems(cloudformation: dict[str, Any]) -> list[str]:
    """cfn-lint errors and warnings (informational findings are not counted)."""
    matches = lint(json.dumps(cloudformation), config=ManualArgs(regions=[REGION]))
    return [f"{m.rule.id} {m.message}" for m in matches if m.rule.id[:1] in ("E", "W")]


@pytest.fixture(scope="module")
def cfn() -> dict[str, Any]:
    return transform_template(TEMPLATE, REQUIRED, region=REGION)


@pytest.fixture(scope="module")
def resources(cfn: dict[str, Any]) -> dict[str, Any]:
    return dict(cfn["Resources"])


def of_type(resources: dict[str, Any], kind: str) -> dict[str, Any]:
    return {name: r for name, r in resources.items() if r["Type"] == kind}


def statements(resources: dict[str, Any], role: str) -> Iterator[dict[str, Any]]:
    for policy in resources[role]["Properties"]["Policies"]:
        yield from policy["PolicyDocument"]["Statement"]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# ------------------------------------------------------------------ transform and lint


def test_transformed_template_lints_clean(cfn: dict[str, Any]) -> None:
    assert "Transform" not in cfn
    assert lint_problems(cfn) == []


def test_source_template_lints_clean_through_cfn_lints_own_transforms() -> None:
    # cfn-lint expands Fn::ForEach and runs SAM itself: a second, independent reading.
    matches = lint(TEMPLATE.read_text(encoding="utf-8"), config=ManualArgs(regions=[REGION]))
    assert [f"{m.rule.id} {m.message}" for m in matches if m.rule.id[:1] in ("E", "W")] == []


def test_own_least_privilege_and_delivery_rules_pass(cfn: dict[str, Any]) -> None:
    assert iam_findings(cfn) == []
    assert delivery_findings(cfn) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({**REQUIRED, "NoSuchParameter": "1"}, "unknown parameters"),
        ({}, "must have values"),
        ({**REQUIRED, "PolicyCmax": "1001"}, "outside"),
        ({**REQUIRED, "PolicyBeta": "half"}, "not a number"),
        ({**REQUIRED, "LogRetentionDays": "2"}, "is not one of"),
        ({"ExampleDownstreamUrl": "ftp://api.example.com/"}, "does not match"),
        ({**REQUIRED, "AlertEmail": "on-call at example.com"}, "does not match"),
        ({**REQUIRED, "BacklogReadFailuresAlarmThreshold": "0"}, "outside"),
        ({**REQUIRED, "GroupReportsUnwrittenAlarmThreshold": "-3"}, "outside"),
        ({**REQUIRED, "GroupMemoryFailuresAlarmThreshold": "0"}, "outside"),
    ],
)
def test_parameters_are_checked_as_cloudformation_would(
    overrides: dict[str, str], message: str
) -> None:
    with pytest.raises(TemplateError, match=message):
        transform_template(TEMPLATE, overrides)


def test_code_uris_point_functions_at_built_artifacts() -> None:
    cfn = transform_template(
        TEMPLATE,
        REQUIRED,
        code_uris={"ControllerFunction": {"Bucket": "artifacts", "Key": "controller.zip"}},
    )
    code = cfn["Resources"]["ControllerFunction"]["Properties"]["Code"]
    assert code == {"S3Bucket": "artifacts", "S3Key": "controller.zip"}
    worker_code = cfn["Resources"]["ExampleWorkerFunction"]["Properties"]["Code"]
    assert worker_code["S3Key"] == "ExampleWorkerFunction.zip"
    [layer] = of_type(cfn["Resources"], "AWS::Lambda::LayerVersion").values()
    assert layer["Properties"]["Content"]["S3Key"] == "WorkerLayer.zip"


def apply_edits(template: dict[str, Any], edits: list[dict[str, Any]]) -> dict[str, Any]:
    edited = copy.deepcopy(template)
    for edit in edits:
        *parents, last = edit["path"]
        node: Any = edited
        for step in parents:
            node = node[step]  # a wrong path fails here instead of adding a stray key
        if edit.get("delete"):
            del node[last]
        else:
            node[last] = edit["value"]
    return edited


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.stem for v in VARIANTS])
def test_broken_variant_is_rejected_by_the_expected_stage(variant: Path) -> None:
    spec = yaml.safe_load(variant.read_text(encoding="utf-8"))
    broken = apply_edits(load_template(TEMPLATE), spec["edits"])
    parameters = {**REQUIRED, **spec.get("parameters", {})}
    stage = spec["rejected_by"]

    if stage == "transform":
        with pytest.raises(TemplateError) as raised:
            transform_document(broken, parameters, region=REGION)
        assert spec["expect"] in str(raised.value)
        return
    cfn = transform_document(broken, parameters, region=REGION)
    problems = lint_problems(cfn)
    policy = iam_findings(cfn) + delivery_findings(cfn)
    if stage == "lint":
        assert any(spec["expect"] in problem for problem in problems), problems
    else:
        assert stage == "policy", f"unknown stage {stage!r} in {variant.name}"
        # Lint alone would let it through: the project's own rules are what catch it.
        assert problems == []
        assert any(spec["expect"] in finding for finding in policy), policy


# ------------------------------------------------------------------ telemetry path


def test_the_example_workers_client_timeout_always_ends_inside_its_function_timeout(
    resources: dict[str, Any],
) -> None:
    longest_ms = load_template(TEMPLATE)["Parameters"]["ExampleDownstreamTimeoutMs"]["MaxValue"]
    function_timeout_s = resources["ExampleWorkerFunction"]["Properties"]["Timeout"]
    # A call that times out is reported (DownstreamTimeout) only if the function outlives it.
    assert longest_ms < function_timeout_s * 1000


def test_stream_is_encrypted_and_sized_by_parameter(resources: dict[str, Any]) -> None:
    stream = resources["TelemetryStream"]["Properties"]
    assert stream["StreamEncryption"]["EncryptionType"] == "KMS"
    assert stream["StreamEncryption"]["KeyId"]
    assert stream["ShardCount"] == {"Ref": "TelemetryShardCount"}


def test_example_log_group_sends_only_queuemesh_emf_to_the_stream(
    resources: dict[str, Any],
) -> None:
    subscription = resources["ExampleWorkerTelemetrySubscription"]["Properties"]
    assert subscription["LogGroupName"] == {"Ref": "ExampleWorkerLogGroup"}
    assert subscription["FilterPattern"] == (
        '{ $._aws.CloudWatchMetrics[0].Namespace = "QueueMesh" }'
    )
    assert subscription["DestinationArn"] == {"Fn::GetAtt": ["TelemetryStream", "Arn"]}
    assert subscription["RoleArn"] == {"Fn::GetAtt": ["TelemetrySubscriptionRole", "Arn"]}
    worker = resources["ExampleWorkerFunction"]["Properties"]
    assert worker["LoggingConfig"]["LogGroup"] == {"Ref": "ExampleWorkerLogGroup"}


def test_subscription_role_is_for_logs_and_puts_to_the_stream_only(
    resources: dict[str, Any],
) -> None:
    role = resources["TelemetrySubscriptionRole"]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "logs.amazonaws.com"}
    source_arn = trust["Condition"]["StringLike"]["aws:SourceArn"]["Fn::Sub"]
    assert source_arn.startswith("arn:${AWS::Partition}:logs:${AWS::Region}:${AWS::AccountId}:")
    (grant,) = statements(resources, "TelemetrySubscriptionRole")
    assert set(grant["Action"]) == {"kinesis:PutRecord", "kinesis:PutRecords"}
    assert grant["Resource"] == {"Fn::GetAtt": ["TelemetryStream", "Arn"]}


def test_worker_log_groups_parameter_adds_one_filter_each() -> None:
    groups = ["/aws/lambda/orders-worker", "/aws/lambda/billing_worker"]
    cfn = transform_template(TEMPLATE, {**REQUIRED, "WorkerLogGroups": ",".join(groups)})
    filters = of_type(cfn["Resources"], "AWS::Logs::SubscriptionFilter")
    extra = {
        name: f["Properties"]["LogGroupName"]
        for name, f in filters.items()
        if name != "ExampleWorkerTelemetrySubscription"
    }
    assert extra == {
        "WorkerTelemetrySubscriptionawslambdaordersworker": groups[0],
        "WorkerTelemetrySubscriptionawslambdabillingworker": groups[1],
    }
    for name in extra:
        assert filters[name]["Condition"] == "HasWorkerLogGroups"
        assert filters[name]["Properties"]["DestinationArn"] == {
            "Fn::GetAtt": ["TelemetryStream", "Arn"]
        }
    assert lint_problems(cfn) == []


@functools.cache
def source_template() -> dict[str, Any]:
    return load_template(TEMPLATE)


LOG_GROUP_NAMES = st.from_regex(r"/aws/lambda/[A-Za-z0-9_.-]{1,24}", fullmatch=True)


@settings(max_examples=40)
@given(groups=st.lists(LOG_GROUP_NAMES, max_size=6))
def test_for_each_expansion_makes_one_filter_per_group_or_refuses_collisions(
    groups: list[str],
) -> None:
    template = source_template()  # expansion copies; the cached original stays intact
    values = parameter_values(template, {**REQUIRED, "WorkerLogGroups": ",".join(groups)})
    logical_ids = ["WorkerTelemetrySubscription" + re.sub(r"[^A-Za-z0-9]", "", g) for g in groups]
    if len(set(logical_ids)) < len(logical_ids):
        with pytest.raises(TemplateError, match="already exists"):
            expand_language_extensions(template, values)
        return
    expanded = expand_language_extensions(template, values)
    assert expanded["Transform"] == "AWS::Serverless-2016-10-31"
    generated = {
        name: resource["Properties"]["LogGroupName"]
        for name, resource in expanded["Resources"].items()
        if name.startswith("WorkerTelemetrySubscription")
    }
    assert generated == dict(zip(logical_ids, groups, strict=True))
    assert not any(key.startswith("Fn::ForEach") for key in expanded["Resources"])


def test_no_worker_log_groups_means_only_the_example_filter(resources: dict[str, Any]) -> None:
    assert list(of_type(resources, "AWS::Logs::SubscriptionFilter")) == [
        "ExampleWorkerTelemetrySubscription"
    ]


# ------------------------------------------------------------------ controller


def test_controller_function_runtime_handler_and_environment(resources: dict[str, Any]) -> None:
    function = resources["ControllerFunction"]["Properties"]
    assert function["Runtime"] in ("python3.12", "python3.13")
    assert function["Architectures"] == ["arm64"]
    assert function["Handler"] == "controller.handler.handler"
    assert 30 <= function["Timeout"] <= 900
    assert 256 <= function["MemorySize"] <= 3008
    env = function["Environment"]["Variables"]
    assert env["QUEUEMESH_TABLE"] == {"Ref": "LedgerTable"}
    for variable, parameter in {
        "QUEUEMESH_T1": "PolicyT1",
        "QUEUEMESH_T2": "PolicyT2",
        "QUEUEMESH_BETA": "PolicyBeta",
        "QUEUEMESH_ALPHA": "PolicyAlpha",
        "QUEUEMESH_CMIN": "PolicyCmin",
        "QUEUEMESH_CMAX": "PolicyCmax",
    }.items():
        assert env[variable] == {"Ref": parameter}
    assert env["POWERTOOLS_METRICS_NAMESPACE"] == CONTROLLER_NAMESPACE


def test_the_controller_reads_the_reduced_stream_back_and_paces_a_lanes_share(
    cfn: dict[str, Any], resources: dict[str, Any]
) -> None:
    """Several reduced shards by default, each a lane of the controller: it reads the stream
    back (``QUEUEMESH_REDUCED_STREAM``) and paces its share of the control plane among the
    lanes its environment names (docs/architecture.md, "Scaling out the controller")."""
    from controller.handler import LANE_VARIABLES

    env = resources["ControllerFunction"]["Properties"]["Environment"]["Variables"]
    assert env["QUEUEMESH_REDUCED_STREAM"] == {"Ref": "ReducedStream"}
    lanes = ("ReducedShardCount", "ControllerParallelizationFactor")
    assert [env[variable] for variable in LANE_VARIABLES] == [{"Ref": name} for name in lanes]
    assert int(cfn["Parameters"]["ReducedShardCount"]["Default"]) >= 2


def test_policy_parameter_defaults_are_the_contract_defaults(cfn: dict[str, Any]) -> None:
    from controller.settings import PolicyParams

    defaults = {name: spec.get("Default") for name, spec in cfn["Parameters"].items()}
    expected = PolicyParams()
    assert float(defaults["PolicyT1"]) == expected.t1
    assert float(defaults["PolicyT2"]) == expected.t2
    assert float(defaults["PolicyBeta"]) == expected.beta
    assert int(defaults["PolicyAlpha"]) == expected.alpha
    assert int(defaults["PolicyCmin"]) == expected.cmin
    assert int(defaults["PolicyCmax"]) == expected.cmax
    env = {
        "QUEUEMESH_T1": str(defaults["PolicyT1"]),
        "QUEUEMESH_CMAX": str(defaults["PolicyCmax"]),
        "QUEUEMESH_ALPHA": str(defaults["PolicyAlpha"]),
    }
    assert PolicyParams.from_env(env) == expected


@pytest.mark.parametrize(
    ("function", "stream", "parallelization"),
    [
        # Each stream is read at its own parallelization factor: the controller's containers
        # read the reduced stream back where they missed a batch (docs/architecture.md,
        # "Scaling out the controller").
        ("ReducerFunction", "TelemetryStream", {"Ref": "TelemetryParallelizationFactor"}),
        ("ControllerFunction", "ReducedStream", {"Ref": "ControllerParallelizationFactor"}),
    ],
)
def test_kinesis_event_settings(
    resources: dict[str, Any], function: str, stream: str, parallelization: object
) -> None:
    mapping = resources[f"{function}Telemetry"]
    assert mapping["Type"] == "AWS::Lambda::EventSourceMapping"
    props = mapping["Properties"]
    assert props["EventSourceArn"] == {"Fn::GetAtt": [stream, "Arn"]}
    assert props["FunctionName"] == {"Ref": function}
    assert props["ParallelizationFactor"] == parallelization
    assert props["StartingPosition"] == "LATEST"
    assert 100 <= props["BatchSize"] <= 10000
    assert 0 <= props["MaximumBatchingWindowInSeconds"] <= 5  # detection delay costs calls
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert props["BisectBatchOnFunctionError"] is True
    assert 0 <= props["MaximumRetryAttempts"] <= 10
    assert 60 <= props["MaximumRecordAgeInSeconds"] <= 3600
    destination = props["DestinationConfig"]["OnFailure"]["Destination"]
    assert destination == {"Fn::GetAtt": ["ControllerFailureQueue", "Arn"]}


def test_a_scheduled_tick_reaches_the_controller_as_a_wake_up(resources: dict[str, Any]) -> None:
    """Paused mappings send no telemetry; the schedule's input must be what the app handles."""
    from controller.actuator import InMemoryActuator
    from controller.app import ControllerApp
    from controller.ledger import InMemoryLedger
    from controller.loop import ControlLoop
    from controller.settings import PolicyParams

    [rule] = [
        r
        for r in of_type(resources, "AWS::Events::Rule").values()
        if r["Properties"]["Targets"][0]["Arn"] == {"Fn::GetAtt": ["ControllerFunction", "Arn"]}
    ]
    assert rule["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    tick = json.loads(rule["Properties"]["Targets"][0]["Input"])
    app = ControllerApp(
        ControlLoop(InMemoryLedger(memory_types=memory_type), InMemoryActuator(), PolicyParams())
    )
    assert app.handle(tick, None) == {"due": 0, "decided": 0}


def test_controller_metric_dimensions_match_the_dashboard_schema(
    resources: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # powertools adds a `service` dimension when POWERTOOLS_SERVICE_NAME is set, which would
    # take every per-queue metric out of the SEARCH schema {QueueMeshController,QueueName}.
    from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

    monkeypatch.delenv("POWERTOOLS_SERVICE_NAME", raising=False)
    env = resources["ControllerFunction"]["Properties"]["Environment"]["Variables"]
    for name, value in env.items():
        if name.startswith("POWERTOOLS_"):
            monkeypatch.setenv(name, str(value))
    metrics = EphemeralMetrics(namespace=CONTROLLER_NAMESPACE)
    metrics.add_dimension(name=worker_schema.QUEUE_DIMENSION, value="orders")
    metrics.add_metric(name=DecisionMetric.MAXIMUM_CONCURRENCY, unit=MetricUnit.Count, value=50)
    directive = metrics.serialize_metric_set()["_aws"]["CloudWatchMetrics"][0]
    assert directive["Dimensions"] == [[worker_schema.QUEUE_DIMENSION]]


# ------------------------------------------------------------------ ledger


def test_ledger_table_keys_capacity_ttl_recovery_encryption(resources: dict[str, Any]) -> None:
    table = resources["LedgerTable"]
    props = table["Properties"]
    assert {(a["AttributeName"], a["AttributeType"]) for a in props["AttributeDefinitions"]} == {
        ("PK", "S"),
        ("SK", "S"),
        ("WakeUp", "S"),
        ("WakeAt", "N"),
        ("Group", "S"),
    }
    assert props["KeySchema"] == [
        {"AttributeName": "PK", "KeyType": "HASH"},
        {"AttributeName": "SK", "KeyType": "RANGE"},
    ]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["TimeToLiveSpecification"] == {"AttributeName": "ExpiresAt", "Enabled": True}
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert props["SSESpecification"]["SSEEnabled"] is True
    assert table["DeletionPolicy"] == "Retain"


def test_ledger_table_indexes_match_the_local_table_and_are_granted(
    resources: dict[str, Any],
) -> None:
    """The tick queries the sparse indexes (wake-ups, a CONFIG group's members): template,
    local table and IAM must agree."""
    props = resources["LedgerTable"]["Properties"]
    with mock_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        local = client.describe_table(TableName=create_ledger_table(client, "ledger"))["Table"]
    assert [
        (index["IndexName"], index["KeySchema"], index["Projection"])
        for index in props["GlobalSecondaryIndexes"]
    ] == [
        (index["IndexName"], index["KeySchema"], index["Projection"])
        for index in local["GlobalSecondaryIndexes"]
    ]
    assert {(a["AttributeName"], a["AttributeType"]) for a in props["AttributeDefinitions"]} == {
        (a["AttributeName"], a["AttributeType"]) for a in local["AttributeDefinitions"]
    }
    grants = [
        statement
        for statement in statements(resources, "ControllerRole")
        if "dynamodb:Query" in as_list(statement["Action"])
        and all(
            any(f"/index/{index}" in json.dumps(r) for r in as_list(statement["Resource"]))
            for index in (WAKE_UP_INDEX, GROUP_INDEX)
        )
    ]
    assert len(grants) == 1


def test_the_controller_may_make_each_kind_of_write_its_ledger_makes(
    resources: dict[str, Any],
) -> None:
    """A commit (a TransactWriteItems of two conditional Puts, which IAM authorizes as
    PutItem) and the group items are PutItems; the wake-up sweep's repair and a downstream's
    record are conditional UpdateItems. Nothing deletes."""
    [ledger] = [s for s in statements(resources, "ControllerRole") if s["Sid"] == "UseLedger"]
    actions = set(as_list(ledger["Action"]))
    assert {"dynamodb:PutItem", "dynamodb:UpdateItem"} <= actions
    assert "dynamodb:DeleteItem" not in actions


# ------------------------------------------------------------------ example pipeline


def test_example_queue_has_dead_letter_queue(resources: dict[str, Any]) -> None:
    queue = resources["ExampleQueue"]["Properties"]
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {
        "Fn::GetAtt": ["ExampleDeadLetterQueue", "Arn"]
    }
    assert 1 <= queue["RedrivePolicy"]["maxReceiveCount"] <= 10
    worker_timeout = resources["ExampleWorkerFunction"]["Properties"]["Timeout"]
    assert queue["VisibilityTimeout"] >= 6 * worker_timeout


def test_example_worker_runs_behind_the_wrapper_from_the_layer(resources: dict[str, Any]) -> None:
    worker = resources["ExampleWorkerFunction"]["Properties"]
    assert worker["Handler"] == "worker.wrapper.handler"
    [layer] = of_type(resources, "AWS::Lambda::LayerVersion")
    assert worker["Layers"] == [{"Ref": layer}]
    env = worker["Environment"]["Variables"]
    assert env["QUEUEMESH_HANDLER"] == "app.handler"
    assert env["DOWNSTREAM_URL"] == {"Ref": "ExampleDownstreamUrl"}
    assert env["DOWNSTREAM_TIMEOUT_MS"] == {"Ref": "ExampleDownstreamTimeoutMs"}
    # The namespace the wrapper emits is the one the subscription filter lets through.
    filter_pattern = resources["ExampleWorkerTelemetrySubscription"]["Properties"]["FilterPattern"]
    assert f'Namespace = "{env["QUEUEMESH_NAMESPACE"]}"' in filter_pattern


def test_worker_layer_is_built_from_worker_and_published_for_other_stacks(
    cfn: dict[str, Any], resources: dict[str, Any]
) -> None:
    source = load_template(TEMPLATE)["Resources"]
    assert source["WorkerLayer"]["Properties"]["ContentUri"] == "worker/"
    assert source["WorkerLayer"]["Metadata"]["BuildMethod"] == "makefile"
    assert source["ExampleWorkerFunction"]["Properties"]["CodeUri"] == "worker/example/"
    [(layer, resource)] = of_type(resources, "AWS::Lambda::LayerVersion").items()
    assert resource["Properties"]["LayerName"] == {"Fn::Sub": "${AWS::StackName}-queuemesh-worker"}
    output = cfn["Outputs"]["WorkerLayerArn"]
    assert output["Value"] == {"Ref": layer}
    assert output["Export"]["Name"] == {"Fn::Sub": "${AWS::StackName}-WorkerLayerArn"}
    parameter = resources["WorkerLayerParameter"]["Properties"]
    assert parameter["Value"] == {"Ref": layer}
    assert parameter["Type"] == "String"
    assert cfn["Outputs"]["WorkerLayerParameterName"]["Value"] == {"Ref": "WorkerLayerParameter"}


def test_example_mapping_has_maximum_concurrency_and_partial_failures(
    resources: dict[str, Any],
) -> None:
    mapping = resources["ExampleWorkerFunctionQueue"]
    assert mapping["Type"] == "AWS::Lambda::EventSourceMapping"
    props = mapping["Properties"]
    assert props["EventSourceArn"] == {"Fn::GetAtt": ["ExampleQueue", "Arn"]}
    assert props["ScalingConfig"] == {"MaximumConcurrency": {"Ref": "ExampleMaxConcurrency"}}
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_example_mapping_is_registered_in_the_ledger(resources: dict[str, Any]) -> None:
    registration = resources["ExampleQueueRegistration"]
    props = registration["Properties"]
    assert props["ServiceToken"] == {"Fn::GetAtt": ["RegistrarFunction", "Arn"]}
    assert props["TableName"] == {"Ref": "LedgerTable"}
    assert props["QueueName"] == {"Fn::GetAtt": ["ExampleQueue", "QueueName"]}
    assert props["EsmUuid"] == {"Ref": "ExampleWorkerFunctionQueue"}
    assert props["Mode"] == "ACTIVE"


# ------------------------------------------------------------------ registrar custom resource


UUID_1 = "14e0db71-2b8c-4d2a-9e7f-0123456789ab"
UUID_2 = "25f1ec82-3c9d-4e3b-8f80-123456789abc"


class FakeContext:
    log_stream_name = "2026/01/01/[$LATEST]abc"


@pytest.fixture
def registrar(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[Any, list[dict[str, Any]], Any]]:
    """The registrar's handler, on moto, with its CloudFormation replies kept."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    replies: list[dict[str, Any]] = []

    class Reply:
        def __enter__(self) -> Reply:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    def urlopen(request: Any, timeout: float) -> Reply:
        assert request.get_method() == "PUT"
        replies.append(json.loads(request.data))
        return Reply()

    with mock_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        create_ledger_table(client, "ledger")
        monkeypatch.setattr(registrar_module.urllib.request, "urlopen", urlopen)
        yield registrar_module.handler, replies, client


def test_the_registrar_runs_the_controller_package(resources: dict[str, Any]) -> None:
    """One spelling of the CONFIG item: the registrar runs the controller's registration and
    ledger codec, from the controller's CodeUri, not code of its own inline."""
    source = load_template(TEMPLATE)["Resources"]
    registrar, controller = source["RegistrarFunction"], source["ControllerFunction"]
    assert "InlineCode" not in registrar["Properties"]
    assert registrar["Properties"]["CodeUri"] == controller["Properties"]["CodeUri"]
    assert registrar["Metadata"] == controller["Metadata"]
    module, _, function = registrar["Properties"]["Handler"].rpartition(".")
    assert getattr(importlib.import_module(module), function) is registrar_module.handler
    # What the registrar writes, UpdateItem and DeleteItem on the ledger, and nothing else.
    [write] = [s for s in statements(resources, "RegistrarRole") if s["Sid"] == "WriteQueueConfig"]
    assert sorted(as_list(write["Action"])) == ["dynamodb:DeleteItem", "dynamodb:UpdateItem"]


def custom_resource_event(request_type: str, **properties: str) -> dict[str, Any]:
    event: dict[str, Any] = {
        "RequestType": request_type,
        "ResponseURL": "https://cloudformation-custom-resource-response.example/reply",
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/qm/1",
        "RequestId": "req-1",
        "LogicalResourceId": "ExampleQueueRegistration",
        "ResourceProperties": {"ServiceToken": "arn", "TableName": "ledger", **properties},
    }
    return event


def config_item(client: Any, queue: str) -> dict[str, Any] | None:
    key = {"PK": {"S": f"QUEUE#{queue}"}, "SK": {"S": "CONFIG"}}
    item: dict[str, Any] | None = client.get_item(TableName="ledger", Key=key).get("Item")
    return item


def test_registrar_writes_config_keeps_operator_mode_and_deletes(
    registrar: tuple[Any, list[dict[str, Any]], Any],
) -> None:
    handler, replies, client = registrar
    handler(
        custom_resource_event("Create", QueueName="orders", EsmUuid=UUID_1, Mode="ACTIVE"),
        FakeContext(),
    )
    assert replies[-1]["Status"] == "SUCCESS"
    assert replies[-1]["PhysicalResourceId"] == "QUEUE#orders"
    item = config_item(client, "orders")
    assert item is not None
    assert item["EsmUuid"] == {"S": UUID_1}
    assert item["Mode"] == {"S": "ACTIVE"}

    # An operator switched the queue to dry-run; a redeploy with a new mapping keeps that.
    client.update_item(
        TableName="ledger",
        Key={"PK": {"S": "QUEUE#orders"}, "SK": {"S": "CONFIG"}},
        UpdateExpression="SET #m = :m",
        ExpressionAttributeNames={"#m": "Mode"},
        ExpressionAttributeValues={":m": {"S": "DRY_RUN"}},
    )
    update = custom_resource_event("Update", QueueName="orders", EsmUuid=UUID_2, Mode="ACTIVE")
    update["PhysicalResourceId"] = "QUEUE#orders"
    handler(update, FakeContext())
    item = config_item(client, "orders")
    assert item is not None
    assert item["EsmUuid"] == {"S": UUID_2}
    assert item["Mode"] == {"S": "DRY_RUN"}

    delete = custom_resource_event("Delete", QueueName="orders", EsmUuid=UUID_2)
    delete["PhysicalResourceId"] = "QUEUE#orders"
    handler(delete, FakeContext())
    assert replies[-1]["Status"] == "SUCCESS"
    assert config_item(client, "orders") is None


def test_registrar_reports_failure_instead_of_hanging_the_stack(
    registrar: tuple[Any, list[dict[str, Any]], Any],
) -> None:
    handler, replies, _ = registrar
    event = custom_resource_event("Create", QueueName="orders", EsmUuid=UUID_1)
    event["ResourceProperties"]["TableName"] = "missing-table"
    handler(event, FakeContext())
    assert replies[-1]["Status"] == "FAILED"
    assert "ResourceNotFoundException" in replies[-1]["Reason"]


@pytest.mark.parametrize(
    ("properties", "named"),
    [
        ({"QueueName": "orders", "EsmUuid": "arn:aws:lambda:x", "Mode": "ACTIVE"}, "UUID"),
        ({"QueueName": "orders", "EsmUuid": UUID_1, "Mode": "PAUSED"}, "'PAUSED'"),
        ({"QueueName": "no spaces", "EsmUuid": UUID_1}, "'no spaces'"),
        ({"EsmUuid": UUID_1}, "QueueName None"),
    ],
)
def test_registrar_refuses_a_property_the_controller_could_not_read(
    registrar: tuple[Any, list[dict[str, Any]], Any], properties: dict[str, str], named: str
) -> None:
    handler, replies, client = registrar
    handler(custom_resource_event("Create", **properties), FakeContext())
    assert replies[-1]["Status"] == "FAILED"
    assert replies[-1]["Reason"].startswith("OperatorError: ")
    assert named in replies[-1]["Reason"]
    assert client.scan(TableName="ledger")["Items"] == []


# ------------------------------------------------------------------ dashboard and alarms


def dashboard_body(resources: dict[str, Any]) -> dict[str, Any]:
    text, variables = resources["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    values = {name: f"<{name}>" for name in variables}
    values["AWS::Region"] = "us-east-1"

    def substitute(match: re.Match[str]) -> str:
        return values[match.group(1)]

    body: dict[str, Any] = json.loads(re.sub(r"\$\{([^}]+)\}", substitute, text))
    return body


def search_expressions(body: dict[str, Any]) -> list[str]:
    found = []
    for widget in body["widgets"]:
        for line in widget["properties"].get("metrics", []):
            for entry in line:
                if isinstance(entry, dict) and "SEARCH(" in entry.get("expression", ""):
                    found.append(entry["expression"])
    return found


# What an operator looks at first of a queue: its backlog and its oldest message's age.
SQS_BACKLOG = ("ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage")
SEARCH = re.compile(
    r"^SEARCH\('\{(?P<namespace>[\w/]+),(?P<dimensions>[\w,]+)\} MetricName=\"(?P<metric>\w+)\"', "
    r"'(?P<stat>\w+)', \d+\)$"
)


def test_the_dashboard_searches_every_queue_for_schema_metrics(resources: dict[str, Any]) -> None:
    """Each SEARCH names a metric of the worker's schema under its dimensions, one of the
    controller's decision metrics or SQS's backlog and oldest message's age under exactly
    ``QueueName``: one line per queue (but the controller's skips, one line per reason)."""
    queue, downstream = worker_schema.QUEUE_DIMENSION, worker_schema.DOWNSTREAM_DIMENSION
    worker_metrics = {metric.name for metric in worker_schema.METRICS}
    searched = {}
    for expression in search_expressions(dashboard_body(resources)):
        match = SEARCH.match(expression)
        assert match, expression
        namespace, metric = match["namespace"], match["metric"]
        dimensions = tuple(match["dimensions"].split(","))
        if namespace == worker_schema.NAMESPACE:
            assert metric in worker_metrics, expression
            assert dimensions in ((queue,), (queue, downstream)), expression
        elif namespace == "AWS/SQS":
            assert (dimensions, match["stat"]) == (("QueueName",), "Maximum"), expression
            searched[metric] = match["stat"]
        elif metric == CONTROLLER_SKIPPED:
            assert namespace == CONTROLLER_NAMESPACE, expression
            assert dimensions == (CONTROLLER_REASON_DIMENSION,), expression
            searched[metric] = match["stat"]
        elif metric in set(GroupMetric):
            # One line per group (its capacity), or per group and member.
            group = CONTROLLER_GROUP_DIMENSION
            per_group = metric == GroupMetric.CAPACITY
            assert namespace == CONTROLLER_NAMESPACE, expression
            assert dimensions == ((group,) if per_group else (group, queue)), expression
            searched[metric] = match["stat"]
        else:
            assert (namespace, dimensions) == (CONTROLLER_NAMESPACE, (queue,)), expression
            assert metric in set(DecisionMetric), expression
            searched[metric] = match["stat"]
    assert set(searched) == {*DecisionMetric, *GroupMetric, *SQS_BACKLOG, CONTROLLER_SKIPPED}
    assert searched[CONTROLLER_SKIPPED] == "Sum"
    assert searched[DecisionMetric.MAXIMUM_CONCURRENCY] in ("Maximum", "Average")
    assert searched[DecisionMetric.PRESSURE_RATE] == "Average"


def test_each_queues_backlog_and_oldest_message_are_beside_its_concurrency(
    resources: dict[str, Any],
) -> None:
    widgets = dashboard_body(resources)["widgets"]
    row = {
        expression: (widget["y"], widget["x"])
        for widget in widgets
        for expression in search_expressions({"widgets": [widget]})
    }
    schema = "{QueueMeshController,QueueName}"
    concurrency = row[f"""SEARCH('{schema} MetricName="MaximumConcurrency"', 'Maximum', 60)"""]
    beside = [
        row[f"""SEARCH('{{AWS/SQS,QueueName}} MetricName="{metric}"', 'Maximum', 60)"""]
        for metric in SQS_BACKLOG
    ]
    assert [y for y, _ in beside] == [concurrency[0]] * 2
    assert sorted([concurrency[1], *(x for _, x in beside)]) == [0, 8, 16]


def test_the_dashboard_and_alarms_name_only_metrics_that_are_emitted(
    resources: dict[str, Any],
) -> None:
    """Besides AWS's own metrics, a graph line or alarm names the controller's health or a
    worker schema metric: a renamed metric fails here, not as an empty graph."""
    lines = [
        line
        for widget in dashboard_body(resources)["widgets"]
        for line in widget["properties"].get("metrics", [])
        if isinstance(line[0], str)
    ]
    health = [line for line in lines if line[0] == CONTROLLER_NAMESPACE]
    assert health
    assert all(len(line) == 2 and line[1] in set(HealthMetric) for line in health), health
    # Every health metric is graphed but the two that count the work done (the per-queue
    # Decisions widget shows that).
    throughput = {HealthMetric.SAMPLES_WINDOWED, HealthMetric.MAPPING_UPDATES}
    assert {line[1] for line in health} == set(HealthMetric) - throughput
    assert all(line[0].startswith("AWS/") for line in lines if line not in health)
    emitted = {
        worker_schema.NAMESPACE: {metric.name for metric in worker_schema.METRICS},
        CONTROLLER_NAMESPACE: {*DecisionMetric, *HealthMetric, *GroupMetric},
    }
    for alarm in of_type(resources, "AWS::CloudWatch::Alarm").values():
        namespace, metric = alarm["Properties"]["Namespace"], alarm["Properties"]["MetricName"]
        assert namespace.startswith("AWS/") or metric in emitted[namespace], (namespace, metric)


def test_every_subscription_filter_lets_the_schema_namespace_through(
    resources: dict[str, Any],
) -> None:
    expected = f'{{ $._aws.CloudWatchMetrics[0].Namespace = "{worker_schema.NAMESPACE}" }}'
    filters = of_type(resources, "AWS::Logs::SubscriptionFilter")
    per_log_group = load_template(TEMPLATE)["Resources"]["Fn::ForEach::WorkerLogGroupSubscriptions"]
    [(_, extra)] = per_log_group[2].items()
    assert filters
    assert {f["Properties"]["FilterPattern"] for f in filters.values()} == {expected}
    assert extra["Properties"]["FilterPattern"] == expected


def test_dashboard_shows_errors_iterator_age_and_dead_letter_depth(
    resources: dict[str, Any],
) -> None:
    lines = [
        line
        for widget in dashboard_body(resources)["widgets"]
        for line in widget["properties"].get("metrics", [])
        if isinstance(line[0], str)
    ]
    assert ["AWS/Lambda", "Errors", "FunctionName", "<ControllerName>"] in lines
    assert ["AWS/Lambda", "IteratorAge", "FunctionName", "<ControllerName>"] in lines
    depth = ["AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName"]
    assert [*depth, "<ExampleDlqName>"] in lines
    assert [*depth, "<ControllerDlqName>"] in lines
    variables = resources["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"][1]
    assert variables["ControllerName"] == {"Ref": "ControllerFunction"}
    assert variables["ExampleDlqName"] == {"Fn::GetAtt": ["ExampleDeadLetterQueue", "QueueName"]}


def test_alarms_on_errors_iterator_age_and_dead_letters(resources: dict[str, Any]) -> None:
    alarms = [a["Properties"] for a in of_type(resources, "AWS::CloudWatch::Alarm").values()]
    watched = {(a["Namespace"], a["MetricName"], json.dumps(a["Dimensions"])) for a in alarms}
    controller = json.dumps([{"Name": "FunctionName", "Value": {"Ref": "ControllerFunction"}}])
    assert ("AWS/Lambda", "Errors", controller) in watched
    assert ("AWS/Lambda", "IteratorAge", controller) in watched
    for queue in ("ExampleDeadLetterQueue", "ControllerFailureQueue"):
        dimensions = json.dumps(
            [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}]
        )
        assert ("AWS/SQS", "ApproximateNumberOfMessagesVisible", dimensions) in watched


# ------------------------------------------------------------------ least privilege


def test_every_function_has_an_explicit_role_without_managed_policies(
    resources: dict[str, Any],
) -> None:
    for name, function in of_type(resources, "AWS::Lambda::Function").items():
        role = function["Properties"]["Role"]["Fn::GetAtt"][0]
        assert "ManagedPolicyArns" not in resources[role]["Properties"], name


def test_no_wildcard_actions_anywhere(resources: dict[str, Any]) -> None:
    unscoped: list[tuple[str, list[str]]] = []
    for role in of_type(resources, "AWS::IAM::Role"):
        for statement in statements(resources, role):
            for action in as_list(statement["Action"]):
                assert "*" not in action, (role, action)
            if "*" in as_list(statement["Resource"]):
                unscoped.append((role, as_list(statement["Action"])))
    # The one exception: listing mappings, read-only, which IAM cannot scope to a resource.
    assert unscoped == [("ControllerRole", ["lambda:ListEventSourceMappings"])]


def test_controller_updates_only_event_source_mappings(resources: dict[str, Any]) -> None:
    granted: dict[str, list[Any]] = {}
    for statement in statements(resources, "ControllerRole"):
        for action in as_list(statement["Action"]):
            granted.setdefault(action, []).extend(as_list(statement["Resource"]))
    lambda_actions = {action for action in granted if action.startswith("lambda:")}
    assert lambda_actions == {
        "lambda:GetEventSourceMapping",
        "lambda:UpdateEventSourceMapping",
        "lambda:ListEventSourceMappings",
    }
    for action in lambda_actions - {"lambda:ListEventSourceMappings"}:
        assert granted[action] == [{"Fn::Sub": ESM_ARN_PATTERN}]
    assert granted["lambda:ListEventSourceMappings"] == ["*"]
    stream = {"Fn::GetAtt": ["ReducedStream", "Arn"]}
    table = {"Fn::GetAtt": ["LedgerTable", "Arn"]}
    # The tick's Query also reads the table's sparse indexes, and nothing else does.
    indexes = [
        {"Fn::Sub": f"${{LedgerTable.Arn}}/index/{index}"} for index in (WAKE_UP_INDEX, GROUP_INDEX)
    ]
    for action, targets in granted.items():
        if action.startswith("kinesis:"):
            assert targets == [stream], action
        if action == "dynamodb:Query":
            assert targets == [table, *indexes], action
        elif action.startswith("dynamodb:"):
            assert targets == [table], action
    for role in of_type(resources, "AWS::IAM::Role"):
        if role == "ControllerRole":
            continue
        for statement in statements(resources, role):
            assert not any(a.startswith("lambda:") for a in as_list(statement["Action"])), role


def test_controller_reads_queue_metadata_only(resources: dict[str, Any]) -> None:
    """The backlog read before a raise: the queue's URL and attributes of the account's
    queues, no message read, sent or deleted beyond its own failure and wake-up queues."""
    granted: dict[str, list[Any]] = {}
    for statement in statements(resources, "ControllerRole"):
        for action in as_list(statement["Action"]):
            granted.setdefault(action, []).extend(as_list(statement["Resource"]))
    queues = {"Fn::Sub": "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:*"}
    wake_ups = {"Fn::GetAtt": ["WakeUpQueue", "Arn"]}
    assert {action for action in granted if action.startswith("sqs:")} == {
        "sqs:GetQueueUrl",
        "sqs:GetQueueAttributes",
        "sqs:SendMessage",
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
    }
    assert granted["sqs:GetQueueUrl"] == [queues]
    # The wake-up queue's mapping needs its attributes whatever the backlog reads are granted.
    assert granted["sqs:GetQueueAttributes"] == [queues, wake_ups]
    assert granted["sqs:SendMessage"] == [
        {"Fn::GetAtt": ["ControllerFailureQueue", "Arn"]},
        wake_ups,
    ]
    assert granted["sqs:ReceiveMessage"] == granted["sqs:DeleteMessage"] == [wake_ups]


def test_wake_ups_reach_the_controller_through_their_own_queue(
    cfn: dict[str, Any], resources: dict[str, Any]
) -> None:
    """A paused queue's wake-up is a delayed message on an encrypted standard queue the
    controller is told of, whose mapping runs the controller at the least concurrency an SQS
    mapping takes (the share of the tick's pace each invocation keeps assumes it), batches
    not waited for; a wake-up that keeps failing ends in the failure queue, never retried
    for longer than an invocation can take."""
    from controller.constants import WAKE_UP_CONCURRENCY, WAKE_UP_MAX_DELAY_S
    from controller.wake_up_queue import WAKE_UP_QUEUE_VARIABLE

    function = resources["ControllerFunction"]["Properties"]
    assert function["Environment"]["Variables"][WAKE_UP_QUEUE_VARIABLE] == {"Ref": "WakeUpQueue"}
    assert cfn["Outputs"]["WakeUpQueueUrl"]["Value"] == {"Ref": "WakeUpQueue"}
    queue = resources["WakeUpQueue"]["Properties"]
    assert queue["SqsManagedSseEnabled"] is True
    assert "FifoQueue" not in queue  # DelaySeconds per message: standard queues only
    assert function["Timeout"] <= queue["VisibilityTimeout"] <= 2 * function["Timeout"]
    assert queue["MessageRetentionPeriod"] >= WAKE_UP_MAX_DELAY_S
    redrive = queue["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": ["ControllerFailureQueue", "Arn"]}
    assert 1 <= redrive["maxReceiveCount"] <= 5
    [mapping] = [
        m["Properties"]
        for m in of_type(resources, "AWS::Lambda::EventSourceMapping").values()
        if m["Properties"]["EventSourceArn"] == {"Fn::GetAtt": ["WakeUpQueue", "Arn"]}
    ]
    assert mapping["FunctionName"] == {"Ref": "ControllerFunction"}
    assert (
        mapping["ScalingConfig"]
        == {"MaximumConcurrency": WAKE_UP_CONCURRENCY}
        == {"MaximumConcurrency": 2}
    )
    assert mapping["BatchSize"] <= 10
    assert mapping["MaximumBatchingWindowInSeconds"] == 0


def test_the_reducer_reads_telemetry_and_puts_only_to_the_reduced_stream(
    resources: dict[str, Any],
) -> None:
    granted: dict[str, list[Any]] = {}
    for statement in statements(resources, "ReducerRole"):
        for action in as_list(statement["Action"]):
            granted.setdefault(action, []).extend(as_list(statement["Resource"]))
    for action, targets in granted.items():
        if action in ("kinesis:PutRecord", "kinesis:PutRecords"):
            assert targets == [{"Fn::GetAtt": ["ReducedStream", "Arn"]}], action
        elif action.startswith("kinesis:"):
            assert targets == [{"Fn::GetAtt": ["TelemetryStream", "Arn"]}], action
    # Of the ledger, it reads the CONFIG items (their groups key its records) and nothing else.
    assert granted["dynamodb:BatchGetItem"] == [{"Fn::GetAtt": ["LedgerTable", "Arn"]}]
    assert not any(
        action.startswith(("dynamodb:", "lambda:")) and action != "dynamodb:BatchGetItem"
        for action in granted
    )
    function = resources["ReducerFunction"]["Properties"]
    assert function["Handler"] == "controller.handler.reduce"
    variables = function["Environment"]["Variables"]
    assert variables["QUEUEMESH_REDUCED_STREAM"] == {"Ref": "ReducedStream"}
    assert variables["QUEUEMESH_TABLE"] == {"Ref": "LedgerTable"}


# ------------------------------------------------------------------ samconfig


def test_samconfig_names_the_template_parameters_and_capabilities(cfn: dict[str, Any]) -> None:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text(encoding="utf-8"))
    deploy = config["default"]["deploy"]["parameters"]
    assert "CAPABILITY_IAM" in deploy["capabilities"]
    assert "CAPABILITY_AUTO_EXPAND" in deploy["capabilities"]
    overrides = dict(entry.split("=", 1) for entry in deploy["parameter_overrides"].split())
    assert set(overrides) <= set(cfn["Parameters"])
    # What samconfig pins must be values the template accepts (ranges, patterns).
    transform_template(TEMPLATE, {**REQUIRED, **overrides}, region=REGION)
    assert config["default"]["build"]["parameters"]["template_file"] == "template.yaml"


def test_the_alarm_topic_hears_pauses_failures_and_drift_from_the_controllers_events(
    resources: dict[str, Any],
) -> None:
    rule = resources["ControllerEventsRule"]
    assert rule["Condition"] == "HasAlarmTopic"
    properties = rule["Properties"]
    assert properties["EventBusName"] == "default"
    assert properties["EventPattern"] == {
        "source": [SOURCE],
        "detail-type": [
            DetailType.QUEUE_PAUSED,
            DetailType.ACTUATION_FAILED,
            DetailType.DRIFT_ADOPTED,
        ],
    }
    assert [target["Arn"] for target in properties["Targets"]] == [ALERT_TOPIC]


# The operator's topic when given, else the one made for an email alone.
ALERT_TOPIC = {"Fn::If": ["HasAlarmTopicArn", {"Ref": "AlarmTopicArn"}, {"Ref": "AlertTopic"}]}


def test_an_email_alone_gets_a_topic_of_its_own_and_with_a_topic_is_subscribed_to_it(
    cfn: dict[str, Any], resources: dict[str, Any]
) -> None:
    conditions = cfn["Conditions"]
    assert conditions["HasAlarmTopic"] == {
        "Fn::Or": [{"Condition": "HasAlarmTopicArn"}, {"Condition": "HasAlertEmail"}]
    }
    assert conditions["MakesAlertTopic"] == {
        "Fn::And": [
            {"Condition": "HasAlertEmail"},
            {"Fn::Not": [{"Condition": "HasAlarmTopicArn"}]},
        ]
    }
    assert resources["AlertTopic"]["Condition"] == "MakesAlertTopic"
    [statement] = resources["AlertTopicPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert set(statement["Principal"]["Service"]) == {
        "events.amazonaws.com",
        "cloudwatch.amazonaws.com",
    }
    assert statement["Action"] == "sns:Publish"
    subscription = resources["AlertEmailSubscription"]
    assert subscription["Condition"] == "HasAlertEmail"
    assert subscription["Properties"] == {
        "Protocol": "email",
        "Endpoint": {"Ref": "AlertEmail"},
        "TopicArn": ALERT_TOPIC,
    }
    # An address CloudFormation takes; the pattern is checked as CloudFormation would.
    transform_template(TEMPLATE, {**REQUIRED, "AlertEmail": "on-call@example.com"})


def test_the_controller_may_put_events_on_the_default_bus_under_its_source_only(
    resources: dict[str, Any],
) -> None:
    policies = resources["ControllerRole"]["Properties"]["Policies"]
    statements = [s for p in policies for s in p["PolicyDocument"]["Statement"]]
    [publish] = [s for s in statements if "events:PutEvents" in str(s["Action"])]
    assert publish["Resource"]["Fn::Sub"].endswith(":event-bus/default")
    assert publish["Condition"] == {"StringEquals": {"events:source": SOURCE}}
