"""What a batch decided for each group of queues sharing one downstream, told to the operator:
the ledger's GROUP item (``queuemesh status`` and the dashboard read it) and the group metrics.

The group law decides (``Plan.groups``); this module only reports. A report is written when it
differs from the last one this container wrote, so a steady group costs no write per batch,
and a write that fails is counted, never the batch's failure: the report is what was decided,
the decisions themselves are in the queues' own items.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from controller.cache import LruCache
from controller.constants import CACHED_QUEUES
from controller.health import serialized
from controller.model import GroupReport
from controller.ports import Ledger, LedgerError
from controller.schema import (
    CONTROLLER_GROUP_DIMENSION,
    CONTROLLER_NAMESPACE,
    QUEUE_DIMENSION,
    GroupMetric,
)

# A capacity or share within this fraction of the one last written is the same for the report:
# a pooled estimate moves a little with every batch, and the operator reads calls a second.
REPORT_TOLERANCE = 0.02


def same_report(written: GroupReport | None, decided: GroupReport) -> bool:
    """Whether ``decided`` says what ``written`` said (its time aside): the same members in
    the same order, levels and pauses, and capacity and shares within ``REPORT_TOLERANCE``."""
    if written is None or len(written.members) != len(decided.members):
        return False
    if not _close(written.capacity_rps, decided.capacity_rps):
        return False
    return all(
        (old.queue, old.level, old.paused) == (new.queue, new.level, new.paused)
        and _close(old.share_rps, new.share_rps)
        for old, new in zip(written.members, decided.members, strict=True)
    )


def _close(old: float | None, new: float | None) -> bool:
    if old is None or new is None:
        return old is new
    return math.isclose(old, new, rel_tol=REPORT_TOLERANCE)


class GroupReportWriter:
    """Writes each group's report where it changed; remembers what it wrote for at most
    ``capacity`` groups (a group forgotten is written again at its next report)."""

    def __init__(self, capacity: int = CACHED_QUEUES) -> None:
        self._written: LruCache[str, GroupReport] = LruCache(capacity)

    def write(
        self,
        reports: Iterable[GroupReport],
        ledger: Ledger,
        in_time: Callable[[], bool] = lambda: True,
    ) -> int:
        """Put every changed report while ``in_time()`` holds; how many changed reports were
        not written (they are tried again with the group's next report). After a write
        fails, the rest are not tried: the ledger's retries would only spend the time
        left to the invocation's other work."""
        unwritten = 0
        for report in reports:
            if same_report(self._written.get(report.group), report):
                continue
            if unwritten or not in_time():
                unwritten += 1
                continue
            try:
                ledger.put_group_report(report)
            except LedgerError:
                unwritten += 1
                continue
            self._written[report.group] = report
        return unwritten


def group_documents(reports: Iterable[GroupReport]) -> list[str]:
    """The group metrics as EMF: per group its capacity (while known), per member its share
    and whether it is paused to share."""
    documents = []
    for report in reports:
        if report.capacity_rps is not None:
            metrics = EphemeralMetrics(namespace=CONTROLLER_NAMESPACE)
            metrics.add_dimension(name=CONTROLLER_GROUP_DIMENSION, value=report.group)
            metrics.add_metric(
                name=GroupMetric.CAPACITY, unit=MetricUnit.CountPerSecond, value=report.capacity_rps
            )
            documents.append(serialized(metrics))
        for member in report.members:
            metrics = EphemeralMetrics(namespace=CONTROLLER_NAMESPACE)
            metrics.add_dimension(name=CONTROLLER_GROUP_DIMENSION, value=report.group)
            metrics.add_dimension(name=QUEUE_DIMENSION, value=member.queue)
            metrics.add_metric(
                name=GroupMetric.SHARE, unit=MetricUnit.CountPerSecond, value=member.share_rps
            )
            metrics.add_metric(
                name=GroupMetric.PAUSED_TO_SHARE, unit=MetricUnit.Count, value=int(member.paused)
            )
            documents.append(serialized(metrics))
    return documents
