"""Limits that AWS imposes, spelled once for the controller, the CLI, the simulator and replay."""

from __future__ import annotations

from typing import Final

# An SQS event source mapping's MaximumConcurrency: AWS accepts 2..1000.
MIN_CONCURRENCY: Final = 2
MAX_CONCURRENCY: Final = 1000

# One AWS call attempt's worst case: connecting, then waiting for the answer. Short, so a
# hanging call is cut off well inside a Lambda invocation; no attempt starts that could not end
# before the invocation's deadline (controller/aws.py).
CONNECT_TIMEOUT_S: Final = 1.0
READ_TIMEOUT_S: Final = 2.0
ATTEMPT_TIMEOUT_S: Final = CONNECT_TIMEOUT_S + READ_TIMEOUT_S
