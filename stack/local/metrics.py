"""CloudWatch's metric extraction from Embedded Metric Format log lines, for the local stack.

In AWS, CloudWatch Logs reads every log event of every log group; an event that is an EMF
document becomes metrics, whatever function printed it. The local runtime ships its
functions' lines with PutLogEvents, and the emulated CloudWatch Logs does not extract metrics,
so ``EmfMetricsPublisher`` does it: the same namespace, dimension sets, metric names, units,
values (a number, or an array of numbers, each one a sample) and timestamp (``_aws.Timestamp``)
are published with PutMetricData. The dashboard then reads the same metrics locally as in AWS.

The rules followed are the EMF specification's: the root is a JSON object whose ``_aws`` has a
numeric ``Timestamp`` (epoch milliseconds) and ``CloudWatchMetrics`` directives, each with a
``Namespace``, ``Dimensions`` (sets of keys, each naming a string member of the root) and
``Metrics`` (``Name``, optional ``Unit`` and ``StorageResolution``). A line that is not a
document is an ordinary log line; a document that breaks those rules yields no metric at all,
as CloudWatch rejects it whole; a declared metric whose member is missing or not numeric is
left out.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeGuard

# PutMetricData takes at most 1,000 metrics per call, and 150 values per metric (EMF itself
# allows 100 per member).
MAX_DATA_PER_CALL = 1000
MAX_VALUES_PER_DATUM = 150
MAX_DIMENSIONS = 30


class InvalidDocument(ValueError):
    """An EMF document CloudWatch would reject: no metric of it is published."""


@dataclass(frozen=True, slots=True)
class ExtractedMetric:
    """One metric of one dimension set of one EMF document."""

    namespace: str
    name: str
    dimensions: tuple[tuple[str, str], ...]
    values: tuple[float, ...]
    unit: str
    timestamp_ms: float
    storage_resolution: int

    def datum(self) -> dict[str, Any]:
        """The PutMetricData datum: each value a sample, repeated values counted."""
        counts = Counter(self.values)
        return {
            "MetricName": self.name,
            "Dimensions": [{"Name": name, "Value": value} for name, value in self.dimensions],
            "Timestamp": datetime.fromtimestamp(self.timestamp_ms / 1000.0, UTC),
            "Unit": self.unit,
            "StorageResolution": self.storage_resolution,
            "Values": list(counts),
            "Counts": [float(count) for count in counts.values()],
        }


def extract(message: str) -> list[ExtractedMetric]:
    """The metrics CloudWatch extracts from one log event's message.

    Not a document (plain text, JSON without ``_aws``): no metrics. A document that breaks the
    specification raises ``InvalidDocument``.
    """
    text = message.strip()
    if not text.startswith("{"):
        return []
    try:
        root = json.loads(text)
    except ValueError:
        return []
    if not isinstance(root, dict) or "_aws" not in root:
        return []
    metadata = root["_aws"]
    if not isinstance(metadata, dict):
        raise InvalidDocument("_aws is not an object")
    timestamp = metadata.get("Timestamp")
    if not _is_number(timestamp):
        raise InvalidDocument("_aws.Timestamp is not a number (epoch milliseconds)")
    directives = metadata.get("CloudWatchMetrics")
    if not isinstance(directives, list):
        raise InvalidDocument("_aws.CloudWatchMetrics is not a list")
    return [
        metric
        for directive in directives
        for metric in _directive_metrics(root, directive, float(timestamp))
    ]


def _directive_metrics(
    root: Mapping[str, Any], directive: Any, timestamp_ms: float
) -> Iterator[ExtractedMetric]:
    if not isinstance(directive, dict):
        raise InvalidDocument("a CloudWatchMetrics directive is not an object")
    namespace = directive.get("Namespace")
    dimension_sets = directive.get("Dimensions")
    definitions = directive.get("Metrics")
    if not isinstance(namespace, str) or not namespace:
        raise InvalidDocument("a directive has no Namespace")
    if not isinstance(dimension_sets, list) or not isinstance(definitions, list):
        raise InvalidDocument(f"directive {namespace}: Dimensions and Metrics must be lists")
    resolved = [_dimension_set(root, keys, namespace) for keys in dimension_sets]
    for definition in definitions:
        if not isinstance(definition, dict) or not isinstance(definition.get("Name"), str):
            raise InvalidDocument(f"directive {namespace}: a metric definition has no Name")
        values = _values(root.get(definition["Name"]))
        if not values:
            continue
        unit = definition.get("Unit") or "None"
        resolution = int(definition.get("StorageResolution") or 60)
        for dimensions in resolved:
            yield ExtractedMetric(
                namespace=namespace,
                name=definition["Name"],
                dimensions=dimensions,
                values=values,
                unit=str(unit),
                timestamp_ms=timestamp_ms,
                storage_resolution=resolution,
            )


def _dimension_set(
    root: Mapping[str, Any], keys: Any, namespace: str
) -> tuple[tuple[str, str], ...]:
    if not isinstance(keys, list) or len(keys) > MAX_DIMENSIONS:
        raise InvalidDocument(
            f"directive {namespace}: a dimension set is not a list of at most {MAX_DIMENSIONS} keys"
        )
    dimensions = []
    for key in keys:
        value = root.get(key) if isinstance(key, str) else None
        if not isinstance(value, str):
            raise InvalidDocument(
                f"directive {namespace}: dimension {key!r} is not a string member"
            )
        dimensions.append((key, value))
    return tuple(dimensions)


def _values(member: Any) -> tuple[float, ...]:
    """A metric member's samples: a number, or the numbers of an array."""
    if _is_number(member):
        return (float(member),)
    if isinstance(member, list) and all(_is_number(item) for item in member):
        return tuple(float(item) for item in member[:MAX_VALUES_PER_DATUM])
    return ()


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


class EmfMetricsPublisher:
    """Publishes the EMF metrics of shipped log lines with PutMetricData (thread-safe)."""

    def __init__(self, cloudwatch: Any) -> None:
        self._cloudwatch = cloudwatch
        self._lock = threading.Lock()
        self.published = 0
        self.invalid_documents = 0

    def publish(self, lines: Iterable[str]) -> int:
        """Extract and publish; returns how many metrics were published."""
        by_namespace: dict[str, list[dict[str, Any]]] = {}
        invalid = 0
        for line in lines:
            try:
                metrics = extract(line)
            except InvalidDocument:
                invalid += 1
                continue
            for metric in metrics:
                by_namespace.setdefault(metric.namespace, []).append(metric.datum())
        for namespace, data in by_namespace.items():
            for start in range(0, len(data), MAX_DATA_PER_CALL):
                self._cloudwatch.put_metric_data(
                    Namespace=namespace, MetricData=data[start : start + MAX_DATA_PER_CALL]
                )
        count = sum(len(data) for data in by_namespace.values())
        with self._lock:
            self.published += count
            self.invalid_documents += invalid
        return count
