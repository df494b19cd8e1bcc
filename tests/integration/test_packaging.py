"""`sam build` on template.yaml, by the real SAM CLI, and what it builds runs.

The SAM CLI lives in a virtualenv of its own (`make sam`: .sam-venv/, version pinned in the
Makefile), so its dependencies never meet the project's. It builds the template as is
(python3.13, arm64) into a temporary folder, running the same Makefiles a deploy runs, with
wheels fetched for Lambda's platform from the package index. Each function's handler named in
the template then imports and handles sample events in a separate interpreter (-I -S) whose
only code is the function's build folder, then its layers' python/ folders (Lambda's order),
the standard library and what the Lambda runtime provides (boto3 and its dependencies): no
site-packages of this virtualenv.

What differs from a build and a run in Lambda: this interpreter is CPython 3.11 on this
machine's architecture, so the one native module built for arm64 (protobuf's upb backend)
does not load here and protobuf runs its pure-Python backend; everything else is pure Python.
"""

from __future__ import annotations

import base64
import gzip
import importlib.util
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest

from controller.ledger import create_ledger_table
from stack.local.template import load_template, transform_template
from tests.paths import ROOT

TEMPLATE = ROOT / "template.yaml"
SAM_VENV = ".sam-venv"
REGION = "us-east-1"
MARKER = "QUEUEMESH-PACKAGING "
# What the Lambda Python runtime ships besides the standard library.
LAMBDA_RUNTIME_MODULES = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3")

RUNNER = """
import importlib, json, os, sys
code_dirs, runtime_dir, handler_name, report_modules, *event_paths = sys.argv[1:]
sys.path[0:0] = code_dirs.split(os.pathsep)
sys.path.append(runtime_dir)


class Context:
    function_name = "queuemesh-packaging"
    function_version = "$LATEST"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:queuemesh-packaging"
    aws_request_id = "00000000-0000-4000-8000-000000000000"
    log_group_name = "/aws/lambda/queuemesh-packaging"
    log_stream_name = "packaging"

    def get_remaining_time_in_millis(self):
        return 60000


module_name, _, function_name = handler_name.rpartition(".")
handler = getattr(importlib.import_module(module_name), function_name)
results = []
for path in event_paths:
    with open(path) as source:
        results.append(handler(json.load(source), Context()))
# Dependencies used only on some paths (KPL de-aggregation) must import from here as well.
origins = {name: importlib.import_module(name).__file__ for name in report_modules.split(",")}
report = {"results": results, "path": sys.path, "origins": origins}
print("QUEUEMESH-PACKAGING " + json.dumps(report))
"""


def sam_environment(home: Path) -> dict[str, str]:
    """The SAM CLI's own interpreter first on PATH (the Makefiles' `python3 -m pip`), no
    telemetry, no credentials: nothing here may reach AWS."""
    sam_bin = ROOT / SAM_VENV / "bin"
    return {
        "PATH": f"{sam_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "HOME": str(home),
        "SAM_CLI_TELEMETRY": "0",
        "AWS_DEFAULT_REGION": REGION,
        "LANG": "C.UTF-8",
    }


def sam(arguments: list[str], home: Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / SAM_VENV / "bin" / "sam"), *arguments],
        cwd=cwd,
        env=sam_environment(home),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def sam_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SAM CLI installed (`make sam`, quick when it is), and a HOME for its settings."""
    subprocess.run(
        ["make", "--no-print-directory", "sam"], cwd=ROOT, check=True, capture_output=True
    )
    return tmp_path_factory.mktemp("sam-home")


@pytest.fixture(scope="module")
def built(sam_home: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`sam build` (settings from samconfig.toml) into a fresh folder: logical id -> code."""
    out = tmp_path_factory.mktemp("sam-build")
    completed = sam(
        [
            "build",
            "--template-file",
            str(TEMPLATE),
            "--build-dir",
            str(out / "build"),
            "--cache-dir",
            str(out / "cache"),
        ],
        sam_home,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    template = load_template(out / "build" / "template.yaml")
    code = {}
    for logical_id, resource in template["Resources"].items():
        if logical_id.startswith("Fn::ForEach::"):
            continue  # kept for CloudFormation to expand; it builds no code
        properties = resource.get("Properties") or {}
        for key in ("CodeUri", "ContentUri"):
            if key in properties:
                code[logical_id] = out / "build" / properties[key]
    return code


@pytest.fixture(scope="module")
def lambda_runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding only what the Lambda runtime provides (links into this environment)."""
    runtime = tmp_path_factory.mktemp("lambda-runtime")
    for name in LAMBDA_RUNTIME_MODULES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        origin = Path(spec.origin)
        source = origin.parent if origin.name == "__init__.py" else origin
        (runtime / source.name).symlink_to(source)
    return runtime


@pytest.fixture(scope="module")
def template_environment() -> dict[str, dict[str, str]]:
    """Each function's environment as the template sets it (parameters at their defaults)."""
    cfn = transform_template(TEMPLATE, {"ExampleDownstreamUrl": "http://unset/"})
    defaults = {name: str(spec.get("Default")) for name, spec in cfn["Parameters"].items()}
    environments = {}
    for logical_id in ("ControllerFunction", "ExampleWorkerFunction"):
        variables = cfn["Resources"][logical_id]["Properties"]["Environment"]["Variables"]
        environments[logical_id] = {
            name: defaults[value["Ref"]] if isinstance(value, dict) else str(value)
            for name, value in variables.items()
            if not isinstance(value, dict) or value.get("Ref") in defaults
        }
    return environments


def run_handler(
    tmp_path: Path,
    code_dirs: list[Path],
    runtime: Path,
    handler: str,
    events: list[dict[str, Any]],
    env: dict[str, str],
    report: tuple[str, ...],
) -> tuple[dict[str, Any], str]:
    runner = tmp_path / "runner" / "run_handler.py"
    runner.parent.mkdir(exist_ok=True)
    runner.write_text(RUNNER, encoding="utf-8")
    paths = []
    for index, event in enumerate(events):
        path = tmp_path / f"event-{index}.json"
        path.write_text(json.dumps(event), encoding="utf-8")
        paths.append(str(path))
    clean_env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), **env}
    # -I: no PYTHON* variables, no user site, no script directory; -S: no site-packages.
    completed = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            runner,
            os.pathsep.join(map(str, code_dirs)),
            runtime,
            handler,
            ",".join(report),
            *paths,
        ],
        cwd=tmp_path,
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = [line for line in completed.stdout.splitlines() if line.startswith(MARKER)]
    assert len(lines) == 1, completed.stdout[-3000:]
    return json.loads(lines[0][len(MARKER) :]), completed.stdout


def assert_isolated(report: dict[str, Any], folder: Path, bundled: tuple[str, ...]) -> None:
    """No site-packages on the path, and each ``bundled`` module imported from ``folder``."""
    assert not [entry for entry in report["path"] if "site-packages" in entry]
    for name in bundled:
        origin = report["origins"][name]
        assert Path(origin).resolve().is_relative_to(folder.resolve()), (name, origin)


# ------------------------------------------------------------------ controller


def aws(endpoint: str, service: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def worker_mapping(endpoint: str, table: str, queue: str) -> str:
    """A worker mapping at MaximumConcurrency 100, beside an empty ledger table."""
    dynamodb = aws(endpoint, "dynamodb")
    create_ledger_table(dynamodb, table)
    sqs = aws(endpoint, "sqs")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    role = aws(endpoint, "iam").create_role(
        RoleName="worker", AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17"})
    )["Role"]["Arn"]
    lambda_api = aws(endpoint, "lambda")
    lambda_api.create_function(
        FunctionName="worker",
        Runtime="python3.13",
        Role=role,
        Handler="worker.wrapper.handler",
        Code={"ZipFile": b"placeholder"},
    )
    uuid: str = lambda_api.create_event_source_mapping(
        EventSourceArn=queue_arn,
        FunctionName="worker",
        BatchSize=10,
        ScalingConfig={"MaximumConcurrency": 100},
    )["UUID"]
    return uuid


class CloudFormationReplies(BaseHTTPRequestHandler):
    """Keeps each custom resource reply PUT to it (the ResponseURL CloudFormation gives)."""

    replies: list[dict[str, Any]] = []

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.replies.append(json.loads(body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def register_with_the_built_registrar(
    tmp_path: Path,
    built: dict[str, Path],
    lambda_runtime: Path,
    env: dict[str, str],
    queue: str,
    uuid: str,
) -> dict[str, Any]:
    """The template's registration of ``queue``, run by the registrar as built: its reply."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), CloudFormationReplies)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        event = {
            "RequestType": "Create",
            "ResponseURL": f"http://127.0.0.1:{server.server_address[1]}/reply",
            "StackId": f"arn:aws:cloudformation:{REGION}:123456789012:stack/qm/1",
            "RequestId": "req-1",
            "LogicalResourceId": "ExampleQueueRegistration",
            "ResourceType": "Custom::QueueMeshRegistration",
            "ResourceProperties": {
                "ServiceToken": "arn",
                "TableName": "ledger",
                "QueueName": queue,
                "EsmUuid": uuid,
                "Mode": "ACTIVE",
            },
        }
        CloudFormationReplies.replies = []
        report, _ = run_handler(
            tmp_path,
            [built["RegistrarFunction"]],
            lambda_runtime,
            "controller.registrar.handler",
            [event],
            env,
            report=("aws_lambda_powertools",),
        )
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert_isolated(report, built["RegistrarFunction"], ("aws_lambda_powertools",))
    [reply] = CloudFormationReplies.replies
    return reply


def kinesis_event_without_queuemesh_samples() -> dict[str, Any]:
    """One subscription delivery holding a plain log line: decoded, skipped, not fatal."""
    payload = {
        "messageType": "DATA_MESSAGE",
        "owner": "123456789012",
        "logGroup": "/aws/lambda/orders-worker",
        "logStream": "2026/01/01/[$LATEST]abc",
        "subscriptionFilters": ["queuemesh"],
        "logEvents": [{"id": "1", "timestamp": 1767225600000, "message": "plain text line"}],
    }
    data = base64.b64encode(gzip.compress(json.dumps(payload).encode())).decode()
    return {
        "Records": [
            {
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": "p",
                    "sequenceNumber": "49590338271490256608559692538361571095921575989136588898",
                    "data": data,
                    "approximateArrivalTimestamp": 1767225601.0,
                },
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                "eventID": "shardId-000000000000:4959",
                "eventName": "aws:kinesis:record",
                "invokeIdentityArn": "arn:aws:iam::123456789012:role/controller",
                "awsRegion": REGION,
                "eventSourceARN": f"arn:aws:kinesis:{REGION}:123456789012:stream/telemetry",
            }
        ]
    }


def test_built_registrar_registers_and_built_controller_handles_events_in_isolation(
    tmp_path: Path,
    built: dict[str, Path],
    lambda_runtime: Path,
    template_environment: dict[str, dict[str, str]],
    moto_endpoint: str,
) -> None:
    artifacts = built["ControllerFunction"]
    assert (artifacts / "controller" / "handler.py").is_file()
    assert not (artifacts / "controller" / "Makefile").exists()
    uuid = worker_mapping(moto_endpoint, "ledger", "orders")
    local_aws = {
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    # The queue is registered as a deploy registers it: by the registrar, built alike.
    reply = register_with_the_built_registrar(
        tmp_path, built, lambda_runtime, local_aws, "orders", uuid
    )
    assert (reply["Status"], reply["PhysicalResourceId"]) == ("SUCCESS", "QUEUE#orders")
    env = {**template_environment["ControllerFunction"], "QUEUEMESH_TABLE": "ledger", **local_aws}
    manual = {"queue": "orders", "error_rate": 0.20, "success_rate": 0.80}

    report, _ = run_handler(
        tmp_path,
        [artifacts],
        lambda_runtime,
        "controller.handler.handler",
        [kinesis_event_without_queuemesh_samples(), manual],
        env,
        report=("aws_lambda_powertools", "aws_kinesis_agg", "six", "google.protobuf"),
    )

    assert_isolated(
        report, artifacts, ("aws_lambda_powertools", "aws_kinesis_agg", "six", "google.protobuf")
    )
    kinesis_result, manual_result = report["results"]
    assert kinesis_result == {"batchItemFailures": []}
    assert manual_result["statusCode"] == 200
    assert manual_result["esm_uuid"] == uuid
    assert (manual_result["previous_concurrency"], manual_result["target_concurrency"]) == (100, 50)
    assert manual_result["action"] == "MULTIPLICATIVE_DECREASE"
    assert manual_result["esm_updated"] is True
    mapping = aws(moto_endpoint, "lambda").get_event_source_mapping(UUID=uuid)
    assert mapping["ScalingConfig"]["MaximumConcurrency"] == 50


# ------------------------------------------------------------------ worker


class Downstream(BaseHTTPRequestHandler):
    """Answers 429 (Retry-After 3) to bodies asking for it, 200 otherwise."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        refused = b"refuse" in body
        self.send_response(429 if refused else 200)
        if refused:
            self.send_header("Retry-After", "3")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def downstream_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Downstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/orders"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def sqs_event(queue: str, bodies: list[str]) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": f"message-{index}",
                "receiptHandle": f"handle-{index}",
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "1767225600000",
                    "SenderId": "sender",
                    "ApproximateFirstReceiveTimestamp": "1767225600010",
                },
                "messageAttributes": {},
                "md5OfBody": "0" * 32,
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:{REGION}:123456789012:{queue}",
                "awsRegion": REGION,
            }
            for index, body in enumerate(bodies)
        ]
    }


def test_built_example_function_runs_behind_the_wrapper_from_the_layer_in_isolation(
    tmp_path: Path,
    built: dict[str, Path],
    lambda_runtime: Path,
    template_environment: dict[str, dict[str, str]],
    downstream_url: str,
) -> None:
    layer = built["WorkerLayer"]
    assert (layer / "python" / "worker" / "wrapper.py").is_file()
    assert not (layer / "python" / "worker" / "example").exists()
    assert not (layer / "python" / "worker" / "Makefile").exists()
    function = built["ExampleWorkerFunction"]
    assert sorted(path.name for path in function.iterdir()) == ["app.py"]
    env = {
        **template_environment["ExampleWorkerFunction"],
        "DOWNSTREAM_URL": downstream_url,
        "AWS_DEFAULT_REGION": REGION,
    }
    assert env["QUEUEMESH_HANDLER"] == "app.handler"

    report, stdout = run_handler(
        tmp_path,
        [function, layer / "python"],
        lambda_runtime,
        "worker.wrapper.handler",
        [sqs_event("orders", ['{"order": 1}', '{"order": 2, "refuse": true}'])],
        env,
        report=("worker", "aws_lambda_powertools", "urllib3"),
    )

    assert_isolated(report, layer / "python", ("worker", "aws_lambda_powertools", "urllib3"))
    (result,) = report["results"]
    assert result == {"batchItemFailures": [{"itemIdentifier": "message-1"}]}
    # The worker holds its report for the rest of the second and prints it at the latest as
    # the interpreter exits; an EMF document is any JSON object with the `_aws` member.
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    (document,) = [line for line in lines if "_aws" in line]
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == "QueueMesh"
    assert document["QueueName"] == "orders"

    def total(value: Any) -> float:
        return float(sum(value)) if isinstance(value, list) else float(value)

    assert total(document["Downstream2xx"]) == 1
    assert total(document["Downstream429"]) == 1


# ------------------------------------------------------------------ Lambda's platform


AARCH64 = 183  # ELF e_machine of arm64


def elf_machines(folder: Path) -> set[int]:
    machines = set()
    for library in folder.rglob("*.so"):
        header = library.read_bytes()[:20]
        assert header[:4] == b"\x7fELF", library
        machines.add(int.from_bytes(header[18:20], "little"))
    return machines


def test_build_fetches_lambda_platform_wheels_and_the_layer_is_pure_python(
    built: dict[str, Path],
) -> None:
    assert set(built) == {
        "ControllerFunction",
        "ReducerFunction",
        "RegistrarFunction",
        "ExampleWorkerFunction",
        "WorkerLayer",
    }
    layer = built["WorkerLayer"] / "python"
    # The reducer and the registrar are the controller's package, built by the same target.
    for package in (
        built[name] for name in ("ControllerFunction", "ReducerFunction", "RegistrarFunction")
    ):
        assert (package / "aws_lambda_powertools").is_dir()
        assert (package / "six.py").is_file()
        # protobuf's compiled backend is the one native piece; it must be the arm64 build.
        assert elf_machines(package) == {AARCH64}
    assert (layer / "aws_lambda_powertools").is_dir()
    assert (layer / "urllib3").is_dir()
    # No native code at all: the layer serves arm64 and x86_64 functions alike.
    assert elf_machines(layer) == set()


def test_sam_validate_lint_passes_offline_and_catches_a_broken_template(
    sam_home: Path, tmp_path: Path
) -> None:
    completed = sam(["validate", "--lint", "--template-file", str(TEMPLATE)], sam_home)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    # The example worker pointed at a layer the template does not define.
    source = TEMPLATE.read_text(encoding="utf-8")
    assert source.count("Layers: [!Ref WorkerLayer]") == 1
    broken = tmp_path / "template.yaml"
    broken.write_text(source.replace("[!Ref WorkerLayer]", "[!Ref NoSuchLayer]"), "utf-8")
    completed = sam(["validate", "--lint", "--template-file", str(broken)], sam_home, tmp_path)
    assert completed.returncode != 0
    assert "NoSuchLayer" in completed.stdout + completed.stderr


def test_worker_layer_declares_what_its_build_serves() -> None:
    cfn = transform_template(TEMPLATE, {"ExampleDownstreamUrl": "http://unset/"})
    [layer] = [r for r in cfn["Resources"].values() if r["Type"] == "AWS::Lambda::LayerVersion"]
    properties = layer["Properties"]
    assert set(properties["CompatibleArchitectures"]) == {"arm64", "x86_64"}
    function = cfn["Resources"]["ExampleWorkerFunction"]["Properties"]
    assert function["Runtime"] in properties["CompatibleRuntimes"]
    # The layer's wheels are fetched for the newest runtime it names.
    newest = max(properties["CompatibleRuntimes"], key=lambda r: tuple(map(int, r[6:].split("."))))
    makefile = (ROOT / "worker" / "Makefile").read_text(encoding="utf-8")
    assert f"--python-version {newest.removeprefix('python')}" in makefile


def test_makefile_default_flags_target_the_template_runtime() -> None:
    cfn = transform_template(TEMPLATE, {"ExampleDownstreamUrl": "http://unset/"})
    function = cfn["Resources"]["ControllerFunction"]["Properties"]
    version = function["Runtime"].removeprefix("python")
    for package in ("controller", "worker"):
        makefile = (ROOT / package / "Makefile").read_text(encoding="utf-8")
        assert f"--python-version {version}" in makefile, package
        assert function["Architectures"] == ["arm64"]
        assert "manylinux2014_aarch64" in makefile, package
