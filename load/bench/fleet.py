"""`queuemesh bench fleet`: one telemetry batch for a fleet of managed queues, on moto.

Setup (not timed): moto's server in this process on 127.0.0.1, the ledger table, a worker
function (a tiny zip), and per queue an SQS queue, an event source mapping at
MaximumConcurrency 100 and a CONFIG item. Then one Kinesis batch carrying a 40% 429 storm for
every queue goes through the real ``ControllerApp`` with ``DynamoLedger`` and
``LambdaActuator`` (real boto3 clients), with a Lambda-sized deadline.

Measured: decode, decide (plan), ledger (conditional state + audit commits), actuate
(UpdateEventSourceMapping, paced by the actuator's token bucket), and the most
UpdateEventSourceMapping calls seen in any one-second window. Lambda's control plane allows
15 requests/s per account, so 1,000 changes take more than a minute whatever the code does:
the controller executes what fits before its deadline and leaves the rest pending, and the
next batches carry them out. The benchmark follows batches until every mapping reads back at
its decided value, and reports how many batches and how long that took.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from controller.model import Mode, QueueConfig

REGION = "us-east-1"
LOCAL_KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
TABLE = "queuemesh-ledger"
FUNCTION = "queuemesh-worker"
START_CONCURRENCY = 100
SETUP_THREADS = 8
ROLE_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "lambda.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}


# --- the local fleet (shared with tests/test_ops.py) ----------------------------------------


@contextmanager
def moto_server() -> Iterator[str]:
    """moto's server in this process, on loopback and a free port; stopped on exit."""
    import logging

    from moto.server import ThreadedMotoServer

    # werkzeug logs every request on stderr: thousands of lines in a fleet benchmark.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def client(endpoint: str, service: str, **config: Any) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        config=Config(max_pool_connections=SETUP_THREADS * 2, **config),
        **LOCAL_KEYS,
    )


def create_table(dynamodb: Any, name: str = TABLE) -> str:
    dynamodb.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "PK", "KeyType": "HASH"},
            {"AttributeName": "SK", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def create_function(endpoint: str, name: str = FUNCTION) -> str:
    iam = client(endpoint, "iam")
    role = iam.create_role(
        RoleName=f"{name}-role", AssumeRolePolicyDocument=json.dumps(ROLE_POLICY)
    )["Role"]["Arn"]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", "def handler(event, context):\n    return None\n")
    client(endpoint, "lambda").create_function(
        FunctionName=name,
        Runtime="python3.12",
        Role=role,
        Handler="app.handler",
        Code={"ZipFile": buffer.getvalue()},
    )
    return name


def create_mapping(
    endpoint: str, queue: str, function: str = FUNCTION, concurrency: int = START_CONCURRENCY
) -> str:
    """An SQS queue and its event source mapping; returns the mapping's UUID."""
    sqs = client(endpoint, "sqs")
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return str(
        client(endpoint, "lambda").create_event_source_mapping(
            EventSourceArn=arn,
            FunctionName=function,
            BatchSize=10,
            ScalingConfig={"MaximumConcurrency": concurrency},
        )["UUID"]
    )


@dataclass(frozen=True, slots=True)
class LocalFleet:
    endpoint: str
    table: str
    mappings: dict[str, str]  # queue -> mapping UUID


def build_fleet(endpoint: str, queues: Sequence[str], register: bool = True) -> LocalFleet:
    """Table, function, queues and mappings on the emulator; CONFIG items when ``register``."""
    from controller.ledger import DynamoLedger

    table = create_table(client(endpoint, "dynamodb"))
    function = create_function(endpoint)
    with ThreadPoolExecutor(SETUP_THREADS) as pool:
        uuids = list(pool.map(lambda queue: create_mapping(endpoint, queue, function), queues))
    mappings = dict(zip(queues, uuids, strict=True))
    if register:
        ledger = DynamoLedger(table, client(endpoint, "dynamodb"))
        with ThreadPoolExecutor(SETUP_THREADS) as pool:
            list(
                pool.map(
                    lambda item: ledger.put_config(QueueConfig(item[0], item[1], Mode.ACTIVE)),
                    mappings.items(),
                )
            )
    return LocalFleet(endpoint, table, mappings)
