"""Scenario files: the simulator's input, read and checked once, with one-line errors.

A scenario is JSON (see ARCHITECTURE.md, "Scenario files"): times in seconds from the start,
schedules as ``[[t, value], ...]`` steps. Keys beyond the contract's are optional and keep their
meaning everywhere: ``description``, ``kinesis_batch_window_s``, ``controller_schedule_s`` (the
scenario-level ones); per downstream ``noise_5xx_rate``, ``latency_model``, ``latency_tail``,
``answers_429`` and ``announce`` (and ``latency_ms`` may be a schedule); per queue
``invocation_overhead_ms`` and ``timeout_ms``. docs/simulator.md says what each one means.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from controller.constants import (
    DEFAULT_PRIORITY,
    DEFAULT_WEIGHT,
    MAX_CONCURRENCY,
    MAX_PRIORITY,
    MAX_WEIGHT,
    MIN_CONCURRENCY,
    MIN_WEIGHT,
)
from load.announce import HeaderStyle
from load.sim.json_reader import MISSING, CheckedReader, is_number

Schedule = tuple[tuple[float, float], ...]

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"

# Between one invocation's end and the next one's first call in the same poller slot: the
# poller's delete and receive round trips plus Lambda's invoke overhead.
DEFAULT_INVOCATION_OVERHEAD_MS = 30.0
DEFAULT_KINESIS_BATCH_WINDOW_S = 1.0
# The controller also runs on a schedule (an EventBridge rule; rate(1 minute) is the shortest),
# so a paused mapping, which emits no telemetry, is still looked at.
DEFAULT_CONTROLLER_SCHEDULE_S = 60.0
# How a downstream's latency responds to load: "constant" (the contract's model) or "queueing"
# (latency grows as the recent calls approach the capacity).
LATENCY_MODELS = ("constant", "queueing")


class ScenarioError(ValueError):
    """A scenario that cannot be simulated; the message names the key and what is wrong."""


@dataclass(frozen=True, slots=True)
class DownstreamSpec:
    name: str
    capacity_rps: Schedule
    latency_ms: Schedule
    noise_5xx_rate: Schedule = ((0.0, 0.0),)
    latency_model: str = "constant"
    # The Pareto shape of each call's latency around ``latency_ms`` (its mean); None: no tail.
    latency_tail: float | None = None
    answers_429: bool = True
    # The rate-limit headers it answers with (None: none); load/announce.py.
    announce: HeaderStyle | None = None


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    downstream: str
    backlog: int
    arrivals_rps: Schedule
    batch_size: int
    visibility_timeout_s: float
    max_receive_count: int
    max_concurrency: int
    min_concurrency: int
    invocation_overhead_ms: float = DEFAULT_INVOCATION_OVERHEAD_MS
    # The worker's client timeout per downstream call; None: the client waits for the answer.
    timeout_ms: float | None = None
    # The queue's CONFIG standing in its downstream's group (controller.model.QueueConfig).
    group: str | None = None
    weight: float = DEFAULT_WEIGHT
    priority: int = DEFAULT_PRIORITY


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    duration_s: float
    seed: int
    telemetry_delay_s: tuple[float, float]
    downstreams: tuple[DownstreamSpec, ...]
    queues: tuple[QueueSpec, ...]
    description: str = ""
    kinesis_batch_window_s: float = DEFAULT_KINESIS_BATCH_WINDOW_S
    controller_schedule_s: float = DEFAULT_CONTROLLER_SCHEDULE_S

    def downstream(self, name: str) -> DownstreamSpec:
        return next(spec for spec in self.downstreams if spec.name == name)

    def alone(self, queue: str) -> Scenario:
        """This scenario with ``queue`` its only queue, on its downstream as it was (capacity,
        latency, noise); the other queues and downstreams gone. Raises ``ValueError`` naming
        the queues there are when there is no such queue."""
        spec = next((spec for spec in self.queues if spec.name == queue), None)
        if spec is None:
            names = [spec.name for spec in self.queues]
            listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if names[5:] else "")
            raise ValueError(f"scenario {self.name} has no queue {queue!r} (its queues: {listed})")
        return replace(
            self,
            name=f"{self.name}-alone-{queue}",
            downstreams=(self.downstream(spec.downstream),),
            queues=(spec,),
        )


def value_at(schedule: Schedule, t: float) -> float:
    """The step schedule's value at time ``t`` (the last step at or before ``t``)."""
    value = schedule[0][1]
    for start, step_value in schedule:
        if start > t:
            break
        value = step_value
    return value


def shipped_scenarios() -> list[str]:
    """Names of the scenarios shipped in ``load/scenarios``, sorted."""
    return sorted(path.stem for path in SCENARIO_DIR.glob("*.json"))


def load_scenario(name_or_file: str) -> Scenario:
    """A shipped scenario by name (``capacity-drop``) or a scenario file by path."""
    path = Path(name_or_file)
    if path.suffix == ".json" or path.exists():
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise ScenarioError(
                f"scenario {name_or_file}: cannot read it ({error.strerror or error})"
            ) from error
        return parse_scenario(text, source=path.name)
    if name_or_file not in shipped_scenarios():
        raise ScenarioError(
            f"unknown scenario {name_or_file!r}; shipped: {', '.join(shipped_scenarios())} "
            "(or pass a path to a .json file)"
        )
    shipped = SCENARIO_DIR / f"{name_or_file}.json"
    return parse_scenario(shipped.read_text(encoding="utf-8"), source=shipped.name)


def parse_scenario(text: str, source: str) -> Scenario:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ScenarioError(
            f"scenario {source}: not valid JSON ({error.msg} at line {error.lineno} "
            f"column {error.colno})"
        ) from error
    return _Reader(source).scenario(document)


_SCENARIO_KEYS = {
    "name",
    "description",
    "duration_s",
    "seed",
    "telemetry_delay_s",
    "kinesis_batch_window_s",
    "controller_schedule_s",
    "downstreams",
    "queues",
}
_DOWNSTREAM_KEYS = {
    "name",
    "capacity_rps",
    "latency_ms",
    "noise_5xx_rate",
    "latency_model",
    "latency_tail",
    "answers_429",
    "announce",
}
_QUEUE_KEYS = {
    "name",
    "downstream",
    "backlog",
    "arrivals_rps",
    "batch_size",
    "visibility_timeout_s",
    "max_receive_count",
    "max_concurrency",
    "min_concurrency",
    "invocation_overhead_ms",
    "timeout_ms",
    "group",
    "weight",
    "priority",
}


class _Reader(CheckedReader):
    """Walks the document; every complaint names the key's path (``queues[0].batch_size``)."""

    error = ScenarioError
    kind = "scenario"

    def scenario(self, document: object) -> Scenario:
        if not isinstance(document, dict):
            raise ScenarioError(f"scenario {self._source}: must be a JSON object")
        self._known_keys(document, _SCENARIO_KEYS, "")
        name = self._text(document, "name", "")
        duration = self._number(document, "duration_s", "", lambda v: v > 0, "a number > 0")
        seed = self._integer(document, "seed", "", 0, default=0)
        delay = self._delay(document.get("telemetry_delay_s", MISSING))
        window = self._number(
            document,
            "kinesis_batch_window_s",
            "",
            lambda v: 0 < v <= 300,
            "a number in (0, 300]",
            default=DEFAULT_KINESIS_BATCH_WINDOW_S,
        )
        schedule = self._number(
            document,
            "controller_schedule_s",
            "",
            lambda v: v > 0,
            "a number > 0",
            default=DEFAULT_CONTROLLER_SCHEDULE_S,
        )
        description = document.get("description", "")
        if not isinstance(description, str):
            raise self.fail("description", "must be a string", description)
        downstreams = tuple(
            self._downstream(item, f"downstreams[{index}]")
            for index, item in enumerate(self._list(document, "downstreams"))
        )
        self._unique([spec.name for spec in downstreams], "downstreams")
        known = {spec.name for spec in downstreams}
        queues = tuple(
            self._queue(item, f"queues[{index}]", known)
            for index, item in enumerate(self._list(document, "queues"))
        )
        self._unique([spec.name for spec in queues], "queues")
        return Scenario(
            name=name,
            duration_s=float(duration),
            seed=seed,
            telemetry_delay_s=delay,
            downstreams=downstreams,
            queues=queues,
            description=description,
            kinesis_batch_window_s=float(window),
            controller_schedule_s=float(schedule),
        )

    def _downstream(self, item: object, path: str) -> DownstreamSpec:
        if not isinstance(item, dict):
            raise self.fail(path, "must be an object", item)
        self._known_keys(item, _DOWNSTREAM_KEYS, path)
        if "latency_ms" not in item:
            raise self.fail(f"{path}.latency_ms", "is required (a number > 0, or a schedule)")
        model = self._choice(item, "latency_model", path, LATENCY_MODELS) or "constant"
        answers_429 = item.get("answers_429", True)
        if not isinstance(answers_429, bool):
            raise self.fail(f"{path}.answers_429", "must be true or false", answers_429)
        if not answers_429 and model != "queueing":
            raise self.fail(
                f"{path}.answers_429",
                'may be false only with "latency_model": "queueing" (else nothing limits the '
                "downstream)",
                answers_429,
            )
        announce = self._choice(item, "announce", path, tuple(HeaderStyle))
        if announce is not None and not answers_429:
            raise self.fail(
                f"{path}.announce",
                "needs a downstream that answers 429 (its capacity is the limit announced)",
                announce,
            )
        tail = item.get("latency_tail")
        return DownstreamSpec(
            name=self._text(item, "name", path),
            capacity_rps=self._schedule(item, "capacity_rps", path, "a number >= 0", 0.0),
            latency_ms=self._number_or_schedule(
                item, "latency_ms", path, "a number > 0", 0.0, exclusive=True
            ),
            noise_5xx_rate=self._number_or_schedule(
                item, "noise_5xx_rate", path, "a number in [0, 1]", 0.0, upper=1.0, default=0.0
            ),
            latency_model=model,
            latency_tail=None
            if tail is None
            else self._number(
                item, "latency_tail", path, lambda v: v > 1, "a Pareto shape > 1 (e.g. 2)"
            ),
            answers_429=answers_429,
            announce=None if announce is None else HeaderStyle(announce),
        )

    def _queue(self, item: object, path: str, downstreams: set[str]) -> QueueSpec:
        if not isinstance(item, dict):
            raise self.fail(path, "must be an object", item)
        self._known_keys(item, _QUEUE_KEYS, path)
        downstream = self._text(item, "downstream", path)
        if downstream not in downstreams:
            raise self.fail(
                f"{path}.downstream",
                f"must name one of the downstreams ({', '.join(sorted(downstreams))})",
                downstream,
            )
        arrivals = item.get("arrivals_rps", [[0, 0]])
        max_concurrency = self._integer(
            item, "max_concurrency", path, MIN_CONCURRENCY, upper=MAX_CONCURRENCY
        )
        return QueueSpec(
            name=self._text(item, "name", path),
            downstream=downstream,
            backlog=self._integer(item, "backlog", path, 0, default=0),
            arrivals_rps=self._schedule(
                {"arrivals_rps": arrivals}, "arrivals_rps", path, "a number >= 0", 0.0
            ),
            batch_size=self._integer(item, "batch_size", path, 1),
            visibility_timeout_s=float(
                self._number(item, "visibility_timeout_s", path, lambda v: v > 0, "a number > 0")
            ),
            max_receive_count=self._integer(item, "max_receive_count", path, 1, upper=1000),
            max_concurrency=max_concurrency,
            min_concurrency=self._integer(
                item,
                "min_concurrency",
                path,
                MIN_CONCURRENCY,
                upper=max_concurrency,
                default=MIN_CONCURRENCY,
            ),
            invocation_overhead_ms=float(
                self._number(
                    item,
                    "invocation_overhead_ms",
                    path,
                    lambda v: v >= 0,
                    "a number >= 0",
                    default=DEFAULT_INVOCATION_OVERHEAD_MS,
                )
            ),
            timeout_ms=None
            if item.get("timeout_ms") is None
            else self._number(item, "timeout_ms", path, lambda v: v > 0, "a number > 0"),
            group=None if item.get("group") is None else self._text(item, "group", path),
            weight=self._number(
                item,
                "weight",
                path,
                lambda v: MIN_WEIGHT <= v <= MAX_WEIGHT,
                f"a number in [{MIN_WEIGHT:g}, {MAX_WEIGHT:g}]",
                default=DEFAULT_WEIGHT,
            ),
            priority=self._integer(
                item, "priority", path, 0, upper=MAX_PRIORITY, default=DEFAULT_PRIORITY
            ),
        )

    def _delay(self, value: object) -> tuple[float, float]:
        shape = "[lo, hi] seconds with 0 <= lo <= hi"
        if value is MISSING:
            raise self.fail("telemetry_delay_s", f"is required ({shape})")
        if (
            not isinstance(value, list)
            or len(value) != 2
            or not all(is_number(bound) for bound in value)
            or not 0 <= value[0] <= value[1]
        ):
            raise self.fail("telemetry_delay_s", f"must be {shape}", value)
        return float(value[0]), float(value[1])
