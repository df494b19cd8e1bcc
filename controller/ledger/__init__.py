"""The ledger: queue state, audit trail and configuration in one DynamoDB table, and its twin.

The package's API, by concern: the items (``codec``), an algorithm's memory inside them
(``memory``: the registry of memory types is the builder's to hand in, storage knows no
algorithm), DynamoDB (``dynamodb``), the in-memory twin (``twin``) and the table's creation
(``tables``). Both ledgers store the same items, so they round-trip, order and compare
identically.
"""

from controller.ledger.codec import (
    AUDIT_END,
    AUDIT_PREFIX,
    CONFIG_SK,
    DEFAULT_RETENTION_S,
    ESM_UUID_ATTRIBUTE,
    GROUP_MEMORY_SK,
    GROUP_PREFIX,
    GROUP_SK,
    GUARD_ATTRIBUTES,
    STATE_SK,
    WAKE_UP_ATTRIBUTE,
    WAKE_UP_INDEX,
    WAKE_UP_KEY,
    Item,
    audit_sort_key,
    config_key,
    config_registration,
    decode_audit,
    decode_config,
    decode_group_memory,
    decode_group_report,
    decode_state,
    encode_audit,
    encode_config,
    encode_group_memory,
    encode_group_report,
    encode_state,
    epoch_of,
    group_key,
    group_memory_key,
    iso_utc,
    queue_key,
    read_config_items,
    wake_up_repair,
)
from controller.ledger.dynamodb import BATCH_GET_LIMIT, DynamoLedger
from controller.ledger.memory import MemoryCodec, MemoryTypes, to_number
from controller.ledger.tables import create_ledger_table
from controller.ledger.twin import InMemoryLedger

__all__ = [
    "AUDIT_END",
    "AUDIT_PREFIX",
    "BATCH_GET_LIMIT",
    "CONFIG_SK",
    "DEFAULT_RETENTION_S",
    "ESM_UUID_ATTRIBUTE",
    "GROUP_MEMORY_SK",
    "GROUP_PREFIX",
    "GROUP_SK",
    "GUARD_ATTRIBUTES",
    "STATE_SK",
    "WAKE_UP_ATTRIBUTE",
    "WAKE_UP_INDEX",
    "WAKE_UP_KEY",
    "DynamoLedger",
    "InMemoryLedger",
    "Item",
    "MemoryCodec",
    "MemoryTypes",
    "audit_sort_key",
    "config_key",
    "config_registration",
    "create_ledger_table",
    "decode_audit",
    "decode_config",
    "decode_group_memory",
    "decode_group_report",
    "decode_state",
    "encode_audit",
    "encode_config",
    "encode_group_memory",
    "encode_group_report",
    "encode_state",
    "epoch_of",
    "group_key",
    "group_memory_key",
    "iso_utc",
    "queue_key",
    "read_config_items",
    "to_number",
    "wake_up_repair",
]
