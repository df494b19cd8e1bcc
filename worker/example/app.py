"""An ordinary SQS worker: one call to DOWNSTREAM_URL per message, partial batch failures.

It knows nothing of QueueMesh; the wrapper observes it from outside. DOWNSTREAM_TIMEOUT_MS, if
set, is how long it waits for an answer (read timeout; default 10 s): a slower answer fails the
message as a client-side timeout.
"""

from __future__ import annotations

import os
from typing import Any

import urllib3
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

processor = BatchProcessor(event_type=EventType.SQS)
http = urllib3.PoolManager(retries=False)
CONNECT_TIMEOUT_S = 2.0
DEFAULT_READ_TIMEOUT_MS = 10_000.0


class DownstreamRefusedError(Exception):
    """The downstream answered something other than 2xx: the message goes back to the queue."""


def record_handler(record: SQSRecord) -> None:
    response = http.request(
        "POST",
        os.environ["DOWNSTREAM_URL"],
        body=record.body.encode(),
        headers={"Content-Type": "application/json"},
        timeout=client_timeout(),
    )
    if not 200 <= response.status < 300:
        raise DownstreamRefusedError(
            f"downstream answered {response.status} for message {record.message_id}"
        )


def client_timeout() -> urllib3.Timeout:
    """Read per call, like DOWNSTREAM_URL: the function's environment is its configuration."""
    read_ms = float(os.environ.get("DOWNSTREAM_TIMEOUT_MS", DEFAULT_READ_TIMEOUT_MS))
    return urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=read_ms / 1000.0)


def handler(event: dict[str, Any], context: Any) -> PartialItemFailureResponse:
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
