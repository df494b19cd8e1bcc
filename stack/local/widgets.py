"""The template's CloudWatch dashboard, read from ``template.yaml`` and evaluated here.

``dashboard_body`` takes the ``Dashboard`` resource's ``DashboardBody`` from the template and
substitutes its ``Fn::Sub`` variables with what the deployed stack holds (``StackFacts``: its
region, name, parameters and physical resource ids), so the page shows exactly the widgets
CloudFormation would create, and no second copy of them exists.

``MetricsReader`` evaluates the widgets' metrics with ListMetrics and GetMetricData (metric
lines as ``MetricStat`` queries; ``SEARCH`` expressions, the subset the template uses, as
ListMetrics then one ``MetricStat`` query per metric found), on AWS and on the local stack
alike. docs/dashboard.md lists where this differs from CloudWatch's own evaluation.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

DASHBOARD_TYPE = "AWS::CloudWatch::Dashboard"
DEFAULT_STAT = "Average"  # the console's default for a metric line without a stat
DEFAULT_PERIOD_S = 300  # the console's default for a widget without a period
# CloudWatch returns at most 500 time series for one SEARCH, and takes 500 queries a call.
MAX_SEARCH_RESULTS = 500
MAX_QUERIES_PER_CALL = 500
SHORT_PERIODS_S = (1, 5, 10, 30)
MAX_PAGES = 100  # of one ListMetrics or GetMetricData answer

_SEARCH = re.compile(
    r"""^SEARCH\(\s*'(?P<query>[^']*)'\s*,\s*'(?P<stat>[A-Za-z0-9.]+)'\s*,\s*(?P<period>\d+)\s*\)$"""
)
_SEARCH_QUERY = re.compile(r"""^\{(?P<schema>[^}]*)\}\s+MetricName\s*=\s*"(?P<metric>[^"]+)"$""")
_SUB_VARIABLE = re.compile(r"\$\{([^}]+)\}")


class DashboardError(ValueError):
    """The template's dashboard cannot be read or evaluated: what and where."""


def valid_period(period_s: int) -> bool:
    """GetMetricData's rule: 1, 5, 10, 30, or a multiple of 60 seconds."""
    return period_s in SHORT_PERIODS_S or (period_s > 0 and period_s % 60 == 0)


# -- the template's body, for one stack -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class StackFacts:
    """What CloudFormation would substitute into the body: pseudo parameters, the stack's
    parameters, and its resources' physical ids by logical id."""

    name: str
    region: str
    account_id: str = ""
    partition: str = "aws"
    parameters: Mapping[str, str] = field(default_factory=dict)
    physical: Mapping[str, str] = field(default_factory=dict)
    outputs: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, cloudformation: Any, stack_name: str) -> StackFacts:
        """DescribeStacks and ListStackResources of ``stack_name``."""
        stack = cloudformation.describe_stacks(StackName=stack_name)["Stacks"][0]
        arn_parts = str(stack.get("StackId", "")).split(":")
        physical: dict[str, str] = {}
        paginator = cloudformation.get_paginator("list_stack_resources")
        for page in paginator.paginate(StackName=stack_name):
            for resource in page.get("StackResourceSummaries", []):
                if "PhysicalResourceId" in resource:
                    physical[resource["LogicalResourceId"]] = resource["PhysicalResourceId"]
        return cls(
            name=str(stack["StackName"]),
            region=str(cloudformation.meta.region_name),
            account_id=arn_parts[4] if len(arn_parts) > 4 else "",
            partition=arn_parts[1] if len(arn_parts) > 1 else "aws",
            parameters={
                str(item["ParameterKey"]): str(item.get("ParameterValue", ""))
                for item in stack.get("Parameters", [])
            },
            physical=physical,
            outputs={
                str(item["OutputKey"]): str(item["OutputValue"])
                for item in stack.get("Outputs", [])
            },
        )

    def value(self, name: str) -> str:
        """``${name}`` or ``Ref name`` in this stack."""
        pseudo = {
            "AWS::Region": self.region,
            "AWS::StackName": self.name,
            "AWS::AccountId": self.account_id,
            "AWS::Partition": self.partition,
            "AWS::URLSuffix": "amazonaws.com",
        }
        for source in (pseudo, self.parameters, self.physical):
            if name in source:
                return source[name]
        raise DashboardError(f"the stack {self.name} has no parameter or resource {name!r}")

    def attribute(self, logical: str, attribute: str) -> str:
        """``Fn::GetAtt`` of the names the dashboard can use (a queue's or a resource's name:
        the last part of its physical id, which is a URL for a queue)."""
        if attribute not in ("QueueName", "Name", "StreamName"):
            raise DashboardError(f"cannot resolve {logical}.{attribute} for the dashboard")
        return self.value(logical).rstrip("/").rsplit("/", 1)[-1]


def dashboard_properties(template: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    """The template's one dashboard: its logical id and its properties."""
    found = [
        (logical, spec.get("Properties") or {})
        for logical, spec in (template.get("Resources") or {}).items()
        if isinstance(spec, dict) and spec.get("Type") == DASHBOARD_TYPE
    ]
    if len(found) != 1:
        raise DashboardError(f"the template must define one {DASHBOARD_TYPE}; it has {len(found)}")
    return found[0]


def dashboard_name(template: Mapping[str, Any], stack: StackFacts) -> str:
    logical, properties = dashboard_properties(template)
    return substitute(properties.get("DashboardName", logical), stack)


def dashboard_body(template: Mapping[str, Any], stack: StackFacts) -> dict[str, Any]:
    """The dashboard's body as CloudFormation would create it for ``stack``."""
    logical, properties = dashboard_properties(template)
    text = substitute(properties.get("DashboardBody"), stack)
    try:
        document = json.loads(text)
    except ValueError as error:
        raise DashboardError(f"{logical}'s DashboardBody is not JSON: {error}") from error
    if not isinstance(document, dict) or not isinstance(document.get("widgets"), list):
        raise DashboardError(f"{logical}'s DashboardBody has no list of widgets")
    return document


def substitute(value: Any, stack: StackFacts) -> str:
    """A string property as CloudFormation resolves it: plain, or ``Fn::Sub`` (a string, or a
    string and its variables) over the stack's pseudo parameters, parameters and resources."""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict) or list(value) != ["Fn::Sub"]:
        raise DashboardError(f"expected a string or an Fn::Sub, got {value!r}")
    argument = value["Fn::Sub"]
    text, variables = (argument, {}) if isinstance(argument, str) else argument
    values = {name: _resolve(item, stack) for name, item in variables.items()}

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("!"):
            return "${" + name[1:] + "}"
        if name in values:
            return values[name]
        if "." in name and not name.startswith("AWS::"):
            logical, attribute = name.split(".", 1)
            return stack.attribute(logical, attribute)
        return stack.value(name)

    return _SUB_VARIABLE.sub(replace, str(text))


def _resolve(value: Any, stack: StackFacts) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and list(value) == ["Ref"]:
        return stack.value(str(value["Ref"]))
    if isinstance(value, dict) and list(value) == ["Fn::GetAtt"]:
        target = value["Fn::GetAtt"]
        logical, attribute = target.split(".", 1) if isinstance(target, str) else target
        return stack.attribute(str(logical), str(attribute))
    raise DashboardError(f"cannot resolve {value!r} in the DashboardBody's Fn::Sub variables")


# -- widgets and their queries ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Search:
    """``SEARCH('{Namespace,Dim,...} MetricName="X"', 'Stat', period)``: every metric of that
    name in the namespace whose dimension names are exactly ``dimensions``."""

    namespace: str
    dimensions: tuple[str, ...]
    metric: str
    stat: str
    period_s: int


@dataclass(frozen=True, slots=True)
class MetricLine:
    """``[Namespace, MetricName, Dim, Value, ..., {options}]``: one metric."""

    namespace: str
    metric: str
    dimensions: tuple[tuple[str, str], ...]
    stat: str
    period_s: int
    label: str = ""


@dataclass(frozen=True, slots=True)
class Widget:
    title: str
    x: int
    y: int
    width: int
    height: int
    view: str
    queries: tuple[Search | MetricLine, ...]
    y_axis: Mapping[str, Any] = field(default_factory=dict)
    annotations: Mapping[str, Any] = field(default_factory=dict)
    unsupported: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "x": self.x,
            "y": self.y,
            "width": self.width,
            "height": self.height,
            "view": self.view,
            "yAxis": dict(self.y_axis),
            "annotations": dict(self.annotations),
            "unsupported": self.unsupported,
        }


def parse_search(expression: str) -> Search:
    """The SEARCH subset the template uses; anything else is a ``DashboardError``."""
    match = _SEARCH.match(expression.strip())
    query = _SEARCH_QUERY.match(match.group("query").strip()) if match else None
    if match is None or query is None:
        raise DashboardError(
            f"unsupported expression {expression!r}: only "
            "SEARCH('{Namespace,Dimension,...} MetricName=\"Name\"', 'Stat', period) is evaluated"
        )
    schema = [part.strip().strip('"') for part in query.group("schema").split(",")]
    if not schema[0] or not all(schema):
        raise DashboardError(f"SEARCH schema {{{query.group('schema')}}} has an empty name")
    return Search(
        namespace=schema[0],
        dimensions=tuple(schema[1:]),
        metric=query.group("metric"),
        stat=match.group("stat"),
        period_s=int(match.group("period")),
    )


def parse_widgets(body: Mapping[str, Any]) -> list[Widget]:
    widgets = []
    for index, raw in enumerate(body.get("widgets", [])):
        properties = raw.get("properties", {})
        title = str(properties.get("title") or f"widget {index + 1}")
        kind = raw.get("type")
        view = str(properties.get("view", "timeSeries"))
        unsupported = ""
        queries: tuple[Search | MetricLine, ...] = ()
        if kind != "metric" or view != "timeSeries":
            unsupported = f"{kind} widgets with view {view} are not rendered here"
        else:
            queries = tuple(_queries(title, properties))
        widgets.append(
            Widget(
                title=title,
                x=int(raw.get("x", 0)),
                y=int(raw.get("y", 0)),
                width=int(raw.get("width", 6)),
                height=int(raw.get("height", 6)),
                view=view,
                queries=queries,
                y_axis=properties.get("yAxis", {}),
                annotations=properties.get("annotations", {}),
                unsupported=unsupported,
            )
        )
    return widgets


def _queries(title: str, properties: Mapping[str, Any]) -> Iterator[Search | MetricLine]:
    widget_stat = str(properties.get("stat", DEFAULT_STAT))
    widget_period = int(properties.get("period", DEFAULT_PERIOD_S))
    for line in properties.get("metrics", []):
        if not isinstance(line, list) or not line:
            raise DashboardError(f"widget {title!r}: a metrics entry is not a list")
        options = line[-1] if isinstance(line[-1], dict) else {}
        names = [str(item) for item in (line[:-1] if options else line)]
        if "expression" in options:
            # A search's lines are named by what they find (see _label).
            yield parse_search(str(options["expression"]))
            continue
        if len(names) < 2 or len(names) % 2:
            raise DashboardError(
                f"widget {title!r}: metric line {line!r} is not "
                "[Namespace, MetricName, Dimension, Value, ...]"
            )
        yield MetricLine(
            namespace=names[0],
            metric=names[1],
            dimensions=tuple(zip(names[2::2], names[3::2], strict=True)),
            stat=str(options.get("stat", widget_stat)),
            period_s=int(options.get("period", widget_period)),
            label=str(options.get("label", "")),
        )


# -- evaluation ----------------------------------------------------------------------------


@dataclass(slots=True)
class Series:
    label: str
    namespace: str
    metric: str
    dimensions: tuple[tuple[str, str], ...]
    stat: str
    period_s: int
    timestamps: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "namespace": self.namespace,
            "metric": self.metric,
            "dimensions": dict(self.dimensions),
            "stat": self.stat,
            "period": self.period_s,
            "timestamps": self.timestamps,
            "values": self.values,
        }


class MetricsReader:
    """ListMetrics and GetMetricData against one CloudWatch (AWS or the local stack)."""

    def __init__(self, cloudwatch: Any) -> None:
        self._cloudwatch = cloudwatch

    def found(self, search: Search) -> list[tuple[tuple[str, str], ...]]:
        """The dimension sets a SEARCH matches: exactly its schema's dimension names, sorted by
        their values, at most ``MAX_SEARCH_RESULTS``."""
        wanted = set(search.dimensions)
        seen: set[tuple[tuple[str, str], ...]] = set()
        paginator = self._cloudwatch.get_paginator("list_metrics")
        pages = paginator.paginate(
            Namespace=search.namespace,
            MetricName=search.metric,
            Dimensions=[{"Name": name} for name in search.dimensions],
        )
        for page in itertools.islice(pages, MAX_PAGES):
            for metric in page.get("Metrics", []):
                dimensions = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
                if set(dimensions) == wanted and metric.get("Namespace") == search.namespace:
                    seen.add(tuple((name, dimensions[name]) for name in search.dimensions))
        return sorted(seen, key=lambda dims: [value for _, value in dims])[:MAX_SEARCH_RESULTS]

    def series(
        self,
        widgets: Sequence[Widget],
        start: float,
        end: float,
        period_override: int | None = None,
    ) -> list[list[Series]]:
        """Each widget's time series over [start, end), one GetMetricData per 500 queries."""
        per_widget: list[list[Series]] = []
        for widget in widgets:
            lines: list[Series] = []
            for query in widget.queries:
                period = period_override or query.period_s
                if isinstance(query, Search):
                    lines.extend(
                        Series("", query.namespace, query.metric, dims, query.stat, period)
                        for dims in self.found(query)
                    )
                else:
                    lines.append(
                        Series(
                            query.label,
                            query.namespace,
                            query.metric,
                            query.dimensions,
                            query.stat,
                            period,
                        )
                    )
            _label(lines)
            per_widget.append(lines)
        every = [line for lines in per_widget for line in lines]
        for offset in range(0, len(every), MAX_QUERIES_PER_CALL):
            self._fill(every[offset : offset + MAX_QUERIES_PER_CALL], start, end)
        return per_widget

    def _fill(self, lines: Sequence[Series], start: float, end: float) -> None:
        queries = [
            {
                "Id": f"q{index}",
                "MetricStat": {
                    "Metric": {
                        "Namespace": line.namespace,
                        "MetricName": line.metric,
                        "Dimensions": [{"Name": k, "Value": v} for k, v in line.dimensions],
                    },
                    "Period": line.period_s,
                    "Stat": line.stat,
                },
                "ReturnData": True,
            }
            for index, line in enumerate(lines)
        ]
        paginator = self._cloudwatch.get_paginator("get_metric_data")
        pages = paginator.paginate(
            MetricDataQueries=queries,
            StartTime=datetime.fromtimestamp(start, UTC),
            EndTime=datetime.fromtimestamp(end, UTC),
            ScanBy="TimestampAscending",
        )
        points: dict[int, dict[float, float]] = {}
        for page in itertools.islice(pages, MAX_PAGES):
            for result in page.get("MetricDataResults", []):
                index = int(str(result["Id"])[1:])
                for stamp, value in zip(result["Timestamps"], result["Values"], strict=True):
                    points.setdefault(index, {})[stamp.timestamp()] = float(value)
        for index, line in enumerate(lines):
            ordered = sorted(points.get(index, {}).items())
            line.timestamps = [stamp for stamp, _ in ordered]
            line.values = [value for _, value in ordered]


def _label(lines: list[Series]) -> None:
    """Labels for lines without one: the dimension values (a queue's name), after the metric
    name when the widget shows several metrics or one metric with no dimension to tell apart."""
    metrics = {line.metric for line in lines}
    for line in lines:
        if line.label:
            continue
        values = " ".join(value for _, value in line.dimensions)
        if len(metrics) > 1 or not values:
            line.label = f"{line.metric} {values}".strip()
        else:
            line.label = values
