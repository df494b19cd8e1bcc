"""What a deployed stack holds, by physical name, as the local runtime needs it: the worker
queues with their mappings, the controller's wake-up queue, the streams, functions and log
groups (``EmbeddedAws.deploy`` finds them)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stack.local.cloudformation import arn_function_name


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
    # The telemetry stream (the reducer reads it) and the reduced one (the controller reads it).
    stream_name: str
    stream_arn: str
    table_name: str
    worker_log_group: str
    controller_log_group: str
    reducer_function: str
    reducer_esm_uuid: str
    reducer_log_group: str
    reduced_stream_name: str
    reduced_stream_arn: str
    # The controller's wake-up queue and its mapping, when the template has one.
    wake_up_queue: QueueBinding | None = None
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


def queue_binding(sqs: Any, mapping: Mapping[str, Any]) -> QueueBinding:
    """The queue an SQS event source mapping reads, with its dead-letter queue, by name."""
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
        function_name=arn_function_name(str(mapping["FunctionArn"])),
        dlq_url=dlq_url,
        dlq_arn=dlq_arn,
    )
