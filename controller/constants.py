"""Limits that AWS imposes, spelled once for the controller, the CLI, the simulator and replay."""

from __future__ import annotations

from typing import Final

# An SQS event source mapping's MaximumConcurrency: AWS accepts 2..1000.
MIN_CONCURRENCY: Final = 2
MAX_CONCURRENCY: Final = 1000
