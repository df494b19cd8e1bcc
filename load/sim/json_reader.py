"""Checked reading of a JSON document's values: every complaint is one line naming the key's
path (``queues[0].batch_size``), what it must be, and what it is. The scenario reader
(load/sim/scenario.py) is one."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from load.sim.scenario import Schedule

MISSING = object()


def is_number(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def is_integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class CheckedReader:
    """Reads typed values out of a document from ``source``; a subclass names the ``error``
    its complaints raise and the ``kind`` of document they name."""

    error: ClassVar[type[ValueError]] = ValueError
    kind: ClassVar[str] = "document"

    def __init__(self, source: str) -> None:
        self._source = source

    def fail(self, key: str, expectation: str, value: object = MISSING) -> ValueError:
        got = "" if value is MISSING else f", got {json.dumps(value)}"
        return self.error(f"{self.kind} {self._source}: {key} {expectation}{got}")

    def _known_keys(self, item: Mapping[str, Any], known: set[str], path: str) -> None:
        for key in item:
            if key not in known:
                where = f"{path}.{key}" if path else str(key)
                raise self.fail(where, f"is not a known key (known: {', '.join(sorted(known))})")

    def _unique(self, names: Sequence[str], path: str) -> None:
        seen: set[str] = set()
        for index, name in enumerate(names):
            if name in seen:
                raise self.fail(f"{path}[{index}].name", "must be unique", name)
            seen.add(name)

    def _list(self, item: Mapping[str, Any], key: str) -> list[object]:
        value = item.get(key, MISSING)
        if value is MISSING:
            raise self.fail(key, "is required (a non-empty list)")
        if not isinstance(value, list) or not value:
            raise self.fail(key, "must be a non-empty list", value)
        return value

    def _text(self, item: Mapping[str, Any], key: str, path: str) -> str:
        where = f"{path}.{key}" if path else key
        value = item.get(key, MISSING)
        if value is MISSING:
            raise self.fail(where, "is required (a non-empty string)")
        if not isinstance(value, str) or not value.strip():
            raise self.fail(where, "must be a non-empty string", value)
        return value

    def _choice(
        self, item: Mapping[str, Any], key: str, path: str, choices: Sequence[str]
    ) -> str | None:
        """``item[key]``, one of ``choices`` (``None`` when absent or null)."""
        value = item.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or value not in choices:
            raise self.fail(f"{path}.{key}", f"must be one of {', '.join(choices)}", value)
        return value

    def _number(
        self,
        item: Mapping[str, Any],
        key: str,
        path: str,
        accept: Callable[[float], bool],
        expectation: str,
        default: float | None = None,
    ) -> float:
        where = f"{path}.{key}" if path else key
        value = item.get(key, MISSING)
        if value is MISSING:
            if default is None:
                raise self.fail(where, f"is required ({expectation})")
            return default
        if not is_number(value) or not accept(float(value)):
            raise self.fail(where, f"must be {expectation}", value)
        return float(value)

    def _integer(
        self,
        item: Mapping[str, Any],
        key: str,
        path: str,
        lower: int,
        upper: int | None = None,
        default: int | None = None,
    ) -> int:
        where = f"{path}.{key}" if path else key
        expectation = (
            f"an integer >= {lower}" if upper is None else f"an integer in [{lower}, {upper}]"
        )
        value = item.get(key, MISSING)
        if value is MISSING:
            if default is None:
                raise self.fail(where, f"is required ({expectation})")
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not is_integer(value) or value < lower or (upper is not None and value > upper):
            raise self.fail(where, f"must be {expectation}", value)
        return int(value)

    def _number_or_schedule(
        self,
        item: Mapping[str, Any],
        key: str,
        path: str,
        value_expectation: str,
        lower: float,
        upper: float = math.inf,
        default: float | None = None,
        exclusive: bool = False,
    ) -> Schedule:
        """A schedule, or one number meaning that value from t=0 on."""
        value = item.get(key, default)
        steps = [[0, value]] if is_number(value) else value
        return self._schedule(
            {key: steps}, key, path, value_expectation, lower, upper, exclusive=exclusive
        )

    def _schedule(
        self,
        item: Mapping[str, Any],
        key: str,
        path: str,
        value_expectation: str,
        lower: float,
        upper: float = math.inf,
        exclusive: bool = False,
    ) -> Schedule:
        """Steps whose values lie in [lower, upper] (in (lower, upper] when ``exclusive``)."""
        where = f"{path}.{key}" if path else key
        value = item.get(key, MISSING)
        shape = "a list of [t, value] steps starting at t=0"
        if value is MISSING:
            raise self.fail(where, f"is required ({shape})")
        if not isinstance(value, list) or not value:
            raise self.fail(where, f"must be {shape}", value)
        steps: list[tuple[float, float]] = []
        for index, step in enumerate(value):
            step_path = f"{where}[{index}]"
            if not isinstance(step, list) or len(step) != 2:
                raise self.fail(step_path, "must be a [t, value] pair", step)
            start, step_value = step
            if not is_number(start) or start < 0:
                raise self.fail(f"{step_path}[0]", "must be a time in seconds >= 0", start)
            if index == 0 and start != 0:
                raise self.fail(f"{step_path}[0]", "must be 0 (a schedule starts at t=0)", start)
            if steps and start <= steps[-1][0]:
                raise self.fail(f"{step_path}[0]", "must be later than the step before it", start)
            if (
                not is_number(step_value)
                or not lower <= step_value <= upper
                or (exclusive and step_value == lower)
            ):
                raise self.fail(f"{step_path}[1]", f"must be {value_expectation}", step_value)
            steps.append((float(start), float(step_value)))
        return tuple(steps)
