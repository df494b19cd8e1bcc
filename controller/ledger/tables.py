"""The ledger table's creation where no template does it: local stacks, benchmarks and tests."""

from __future__ import annotations

from typing import Any

from controller.ledger.codec import (
    GROUP_ATTRIBUTE,
    GROUP_INDEX,
    GUARD_ATTRIBUTES,
    WAKE_UP_ATTRIBUTE,
    WAKE_UP_INDEX,
)


def create_ledger_table(client: Any, name: str) -> str:
    """Create an on-demand table with the ledger's key schema (local stacks, benchmarks and
    tests; template.yaml creates the deployed one, with TTL, recovery and encryption)."""
    client.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "PK", "KeyType": "HASH"},
            {"AttributeName": "SK", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "SK", "AttributeType": "S"},
            {"AttributeName": WAKE_UP_ATTRIBUTE, "AttributeType": "S"},
            {"AttributeName": GUARD_ATTRIBUTES["wake_at"], "AttributeType": "N"},
            {"AttributeName": GROUP_ATTRIBUTE, "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": WAKE_UP_INDEX,
                "KeySchema": [
                    {"AttributeName": WAKE_UP_ATTRIBUTE, "KeyType": "HASH"},
                    {"AttributeName": GUARD_ATTRIBUTES["wake_at"], "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            },
            {
                "IndexName": GROUP_INDEX,
                "KeySchema": [{"AttributeName": GROUP_ATTRIBUTE, "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            },
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    return name
