"""A fleet of SQS queues with event source mappings on a local AWS endpoint (moto), with the
ledger table and, optionally, every queue registered: what the fleet benchmark runs on, and what
tests of fleet-wide commands start from."""

from __future__ import annotations

import io
import json
import time
import zipfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from controller.model import (
    AuditEntry,
    AuditEvent,
    Mode,
    QueueConfig,
    QueueState,
)

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
    sqs: Any,
    lambda_api: Any,
    queue: str,
    function: str = FUNCTION,
    concurrency: int = START_CONCURRENCY,
) -> str:
    """An SQS queue and its event source mapping; returns the mapping's UUID."""
    url = sqs.create_queue(QueueName=queue)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    return str(
        lambda_api.create_event_source_mapping(
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
    function: str
    mappings: dict[str, str]  # queue -> mapping UUID


def build_fleet(
    endpoint: str, queues: Sequence[str], register: bool = True, suffix: str = ""
) -> LocalFleet:
    """Table, function, queues and mappings on the emulator; registered when ``register``.

    moto's backends are shared by every server in a process: ``suffix`` keeps the table and
    function names of one fleet apart from another's.
    """
    from controller.ledger import create_ledger_table

    dynamodb = client(endpoint, "dynamodb")
    table = create_ledger_table(dynamodb, TABLE + suffix)
    function = create_function(endpoint, FUNCTION + suffix)
    # boto3 clients are thread-safe; making one costs more than a call to the emulator.
    sqs, lambda_api = client(endpoint, "sqs"), client(endpoint, "lambda")
    with ThreadPoolExecutor(SETUP_THREADS) as pool:
        uuids = list(pool.map(lambda q: create_mapping(sqs, lambda_api, q, function), queues))
    mappings = dict(zip(queues, uuids, strict=True))
    if register:
        seed_registrations(dynamodb, table, mappings, START_CONCURRENCY, time.time())
    return LocalFleet(endpoint, table, function, mappings)


def seed_registrations(
    dynamodb: Any, table: str, mappings: Mapping[str, str], concurrency: int, now: float
) -> None:
    """The items ``queuemesh register`` writes (CONFIG, a first state at the mapping's known
    value, the operator's audit item), batch-written: moto copies the whole table for every
    transaction, which would make seeding a large fleet quadratic."""
    from boto3.dynamodb.types import TypeSerializer

    from controller.ledger import (
        DEFAULT_RETENTION_S,
        encode_audit,
        encode_config,
        encode_state,
    )

    serializer = TypeSerializer()
    items = []
    for queue, uuid in mappings.items():
        # As register's first commit leaves it.
        state = QueueState.first(queue, uuid, concurrency, at=now).evolve(version=1)
        audit = AuditEntry(
            queue=queue,
            timestamp=now,
            event_type=AuditEvent.OPERATOR,
            previous_value=concurrency,
            new_value=concurrency,
            action="REGISTER",
            reason=f"Registered: mapping {uuid}, mode ACTIVE.",
        )
        items += [
            encode_config(QueueConfig(queue, uuid, Mode.ACTIVE)),
            encode_state(state),
            encode_audit(audit, "seed", DEFAULT_RETENTION_S),
        ]
    for start in range(0, len(items), 25):
        requests = [
            {"PutRequest": {"Item": {k: serializer.serialize(v) for k, v in item.items()}}}
            for item in items[start : start + 25]
        ]
        pending: dict[str, Any] = {table: requests}
        for _ in range(10):
            pending = dynamodb.batch_write_item(RequestItems=pending).get("UnprocessedItems")
            if not pending:
                break
