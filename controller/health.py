"""The health documents both Lambdas of the controller package print (EMF, namespace
``CONTROLLER_NAMESPACE``): one per reason something was skipped, under the dimension
``Reason``, and one of counts without dimensions. The controller and the reducer each print
theirs; CloudWatch sums them, so an alarm or a widget sees the stack's whole count."""

from __future__ import annotations

import json
from collections.abc import Mapping

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from controller.schema import (
    CONTROLLER_NAMESPACE,
    CONTROLLER_REASON_DIMENSION,
    CONTROLLER_SKIPPED,
    HealthMetric,
)


def skip_documents(skipped: Mapping[str, int]) -> list[str]:
    """One ``Skipped`` document per reason with a count, in the reasons' order."""
    documents = []
    for reason, count in sorted(skipped.items()):
        if not count:
            continue
        metrics = EphemeralMetrics(namespace=CONTROLLER_NAMESPACE)
        metrics.add_dimension(name=CONTROLLER_REASON_DIMENSION, value=reason)
        metrics.add_metric(name=CONTROLLER_SKIPPED, unit=MetricUnit.Count, value=count)
        documents.append(serialized(metrics))
    return documents


def health_document(
    counts: Mapping[str, int], gauges: Mapping[HealthMetric, float] | None = None
) -> str:
    """The counts (and seconds gauges) as one document without dimensions."""
    metrics = EphemeralMetrics(namespace=CONTROLLER_NAMESPACE)
    for metric, count in counts.items():
        metrics.add_metric(name=metric, unit=MetricUnit.Count, value=count)
    for metric, seconds in (gauges or {}).items():
        metrics.add_metric(name=metric, unit=MetricUnit.Seconds, value=seconds)
    return serialized(metrics)


def serialized(metrics: EphemeralMetrics) -> str:
    """One EMF document as the line a Lambda prints (compact JSON)."""
    return json.dumps(metrics.serialize_metric_set(), separators=(",", ":"))
