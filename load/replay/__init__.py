"""Replay: a recording through the real controller, on a virtual clock.

The records are grouped into Kinesis batches the way a Kinesis event source mapping forms them
(``batching``), each batch is handed to ``ControllerApp.process_kinesis`` with the clock reading
the batch's delivery time, and every decision the controller takes is reported (``engine``).
Nothing reads the wall clock, and the in-memory adapters have no randomness in what they
decide: the same file and configuration (``config``) give the same decisions, which is what
golden decision logs (``report``) rely on. The command itself is ``stack/commands/replay.py``.
"""

from __future__ import annotations

from load.replay.batching import Batch, kinesis_batches
from load.replay.config import (
    QueueSetup,
    ReplayConfig,
    ReplayError,
    config_document,
    deployed_config,
    load_config,
    parse_config,
)
from load.replay.engine import (
    ReplayReport,
    VirtualClock,
    in_memory_adapters,
    queues_in,
    replay,
)
from load.replay.report import (
    ReplayedDecision,
    compare,
    decisions_json,
    decisions_table,
    load_expected,
)

__all__ = [
    "Batch",
    "QueueSetup",
    "ReplayConfig",
    "ReplayError",
    "ReplayReport",
    "ReplayedDecision",
    "VirtualClock",
    "compare",
    "config_document",
    "decisions_json",
    "decisions_table",
    "deployed_config",
    "in_memory_adapters",
    "kinesis_batches",
    "load_config",
    "load_expected",
    "parse_config",
    "queues_in",
    "replay",
]
