"""Retry-After respect: keep failed messages invisible until the downstream said it is ready.

The only AWS access in the worker; the SQS client is created on first use.
"""

from __future__ import annotations

import logging
import math
import os
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("queuemesh")

RESPECT_RETRY_AFTER_ENV = "QUEUEMESH_RESPECT_RETRY_AFTER"
MAX_VISIBILITY_TIMEOUT_S = 43_200  # SQS's limit: 12 hours
BATCH_LIMIT = 10  # entries per ChangeMessageVisibilityBatch


def respect_retry_after_enabled() -> bool:
    value = os.environ.get(RESPECT_RETRY_AFTER_ENV, "")
    return value.strip().lower() in {"1", "true", "yes", "on"}


@dataclass(frozen=True, slots=True)
class Postponement:
    """One failed message to keep invisible for ``delay_s`` (before jitter)."""

    queue_arn: str
    receipt_handle: str
    delay_s: float


def visibility_timeout(delay_s: float, rng: random.Random) -> int:
    """The delay plus up to 10% (at least 1 s) of jitter, in whole seconds, capped at 12 h.

    Jitter spreads the return of messages postponed together, so they do not all hit the
    downstream in the same second it becomes ready.
    """
    jitter = rng.uniform(0.0, max(1.0, 0.1 * delay_s))
    return min(MAX_VISIBILITY_TIMEOUT_S, math.ceil(delay_s + jitter))


def _sqs_client(region: str) -> Any:
    import boto3

    return boto3.client("sqs", region_name=region)


class VisibilityExtender:
    """Change the visibility of failed messages, batched per queue; never raises."""

    def __init__(
        self,
        client_factory: Callable[[str], Any] = _sqs_client,
        rng: random.Random | None = None,
    ) -> None:
        self._client_factory = client_factory
        self._rng = rng or random.Random()
        self._clients: dict[str, Any] = {}
        self.failures = 0

    def extend(self, postponements: Iterable[Postponement]) -> None:
        by_queue: dict[str, list[Postponement]] = {}
        for postponement in postponements:
            by_queue.setdefault(postponement.queue_arn, []).append(postponement)
        for queue_arn, entries in by_queue.items():
            try:
                self._extend_queue(queue_arn, entries)
            except Exception as error:
                self._failed(f"could not postpone {len(entries)} message(s) of {queue_arn}", error)

    def _extend_queue(self, queue_arn: str, postponements: list[Postponement]) -> None:
        _, _, _, region, account, name = queue_arn.split(":", 5)
        client = self._clients.get(region)
        if client is None:
            client = self._clients[region] = self._client_factory(region)
        # The queue's URL on the client's own endpoint: right in every partition and against a
        # local endpoint, and no GetQueueUrl call (nor permission) is needed.
        queue_url = f"{client.meta.endpoint_url.rstrip('/')}/{account}/{name}"
        for start in range(0, len(postponements), BATCH_LIMIT):
            chunk = postponements[start : start + BATCH_LIMIT]
            response = client.change_message_visibility_batch(
                QueueUrl=queue_url,
                Entries=[
                    {
                        "Id": str(index),
                        "ReceiptHandle": postponement.receipt_handle,
                        "VisibilityTimeout": visibility_timeout(postponement.delay_s, self._rng),
                    }
                    for index, postponement in enumerate(chunk)
                ],
            )
            refused = response.get("Failed") or []
            if refused:
                reasons = sorted({str(entry.get("Code")) for entry in refused})
                self._failed(
                    f"SQS refused to postpone {len(refused)} message(s) of {queue_arn}",
                    RuntimeError(", ".join(reasons)),
                )

    def _failed(self, what: str, error: Exception) -> None:
        self.failures += 1
        if self.failures == 1:
            logger.warning("QueueMesh Retry-After respect: %s (logged once): %r", what, error)
