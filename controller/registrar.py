"""The registrar: the CloudFormation custom resource ``Custom::QueueMeshRegistration``.

A stack registers its queue's mapping while it deploys (template.yaml's
``ExampleQueueRegistration``): Create and Update write the CONFIG item through
``controller.registration.register_deployed`` and the ledger's codec, the one spelling of that
item; Delete removes it. Deployed from the controller's own package (same CodeUri, handler
``controller.registrar.handler``), so the item cannot drift from what the controller reads.

Properties: ``TableName`` (the ledger), ``QueueName``, ``EsmUuid`` (the mapping's UUID) and
``Mode`` (optional, ``ACTIVE``; only ever set on a new item). The physical id is the queue's
partition key, ``QUEUE#<QueueName>``.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools import Logger

from controller.ledger import DynamoLedger, queue_key
from controller.model import Mode
from controller.policy import memory_type
from controller.ports import DeployedConfigs
from controller.registration import register_deployed

# The resource type a template registers a queue with.
REGISTRATION_TYPE = "Custom::QueueMeshRegistration"
# CloudFormation waits up to an hour for an answer that never comes: answer within this.
RESPONSE_TIMEOUT_S = 10.0
QUEUE_KEY_PREFIX = queue_key("")

logger = Logger(service="queuemesh-registrar")


def carry_out(
    request_type: str,
    properties: Mapping[str, Any],
    physical_id: str,
    ledger_of: Callable[[str], DeployedConfigs],
) -> str:
    """Do what one request asks; returns the resource's physical id. ``ledger_of`` opens the
    ledger a table name names (the local stack passes its own)."""
    if request_type == "Delete":
        # A registration that never got created has no queue key: nothing to remove.
        if physical_id.startswith(QUEUE_KEY_PREFIX):
            ledger_of(str(properties["TableName"])).delete_config(
                physical_id.removeprefix(QUEUE_KEY_PREFIX)
            )
        return physical_id
    config = register_deployed(
        ledger_of(str(properties["TableName"])),
        properties.get("QueueName"),
        properties.get("EsmUuid"),
        properties.get("Mode", Mode.ACTIVE.value),
    )
    return queue_key(config.queue)


def open_ledger(table: str) -> DynamoLedger:
    return DynamoLedger(table, memory_types=memory_type)


def handler(event: dict[str, Any], context: Any) -> None:
    """Carry the request out and always answer CloudFormation, a failure included."""
    physical_id = str(event.get("PhysicalResourceId", ""))
    status, reason = "SUCCESS", ""
    try:
        physical_id = carry_out(
            event["RequestType"], event["ResourceProperties"], physical_id, open_ledger
        )
    except Exception as error:
        logger.exception("registration failed")
        status, reason = "FAILED", f"{type(error).__name__}: {error}"
    body = {
        "Status": status,
        "Reason": reason or f"see log stream {context.log_stream_name}",
        "PhysicalResourceId": physical_id or context.log_stream_name,
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
    }
    request = urllib.request.Request(
        event["ResponseURL"],
        data=json.dumps(body).encode(),
        method="PUT",
        headers={"Content-Type": ""},
    )
    with urllib.request.urlopen(request, timeout=RESPONSE_TIMEOUT_S):
        pass
