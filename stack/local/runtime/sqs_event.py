"""The SQS batch as Lambda passes it to a function, and the partial batch response it returns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def sqs_event(messages: list[dict[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    """The event Lambda passes for an SQS batch, from ReceiveMessage's answer."""
    return {
        "Records": [
            {
                "messageId": message["MessageId"],
                "receiptHandle": message["ReceiptHandle"],
                "body": message["Body"],
                "attributes": dict(message.get("Attributes", {})),
                "messageAttributes": {
                    name: {
                        "stringValue": value.get("StringValue"),
                        "binaryValue": value.get("BinaryValue"),
                        "stringListValues": [],
                        "binaryListValues": [],
                        "dataType": value["DataType"],
                    }
                    for name, value in message.get("MessageAttributes", {}).items()
                },
                "md5OfBody": message.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
            for message in messages
        ]
    }


def failed_item_ids(response: Any, every_id: set[str]) -> set[str]:
    """The partial batch response's failures. Lambda fails the whole batch on a malformed one
    (an identifier that is empty or not in the batch)."""
    if response is None:
        return set()
    if not isinstance(response, Mapping):
        return set()
    failures = response.get("batchItemFailures")
    if failures is None:
        return set()
    if not isinstance(failures, list):
        return set(every_id)
    failed: set[str] = set()
    for item in failures:
        identifier = item.get("itemIdentifier") if isinstance(item, Mapping) else None
        if not identifier or identifier not in every_id:
            return set(every_id)
        failed.add(identifier)
    return failed
