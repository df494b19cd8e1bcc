"""Policy parameters: contract defaults, overridden by environment, then per queue.

Every parameter has a sane range, spelled once in ``BOUNDS`` (and shown in docs/deploy.md):
a value outside it would not tune control but silently switch it off (a ``min_samples`` no
queue ever reaches, a window or staleness bound shorter than telemetry takes to arrive, a
``beta`` whose cuts take one invocation at a time), so it is refused with a ``SettingsError``
naming the parameter and its range. A per-queue override out of range makes that queue's
CONFIG invalid (the queue is skipped, counted and logged once; the others are decided); an
environment value out of range fails the controller's cold start, naming the variable.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, NamedTuple

from controller.constants import MAX_CONCURRENCY, MIN_CONCURRENCY, WINDOW_RETENTION_S

ENV_PREFIX: Final = "QUEUEMESH_"


class SettingsError(ValueError):
    """A policy parameter that is missing its meaning: wrong type or out of range."""


class Bound(NamedTuple):
    """A parameter's sane range, both ends included."""

    low: float
    high: float
    unit: str = ""

    def __str__(self) -> str:
        return f"{self.low:g}..{self.high:g}{self.unit}"

    def holds(self, value: float) -> bool:
        return self.low <= value <= self.high


BOUNDS: Final[Mapping[str, Bound]] = MappingProxyType(
    {
        # Shares of the calls: a cut at T1 or more pressure, a raise at T2 or more success.
        "t1": Bound(0.001, 1.0),
        "t2": Bound(0.001, 1.0),
        # A cut keeps floor(C * beta): it takes at least 1% (nearer 1, a storm would be met with
        # one invocation less a decision: control in name only).
        "beta": Bound(0.01, 0.99),
        "alpha": Bound(1, MAX_CONCURRENCY),
        # AWS's MaximumConcurrency range; Cmin <= Cmax besides.
        "cmin": Bound(MIN_CONCURRENCY, MAX_CONCURRENCY),
        "cmax": Bound(MIN_CONCURRENCY, MAX_CONCURRENCY),
        # At least 10 s: telemetry takes seconds to arrive (CloudWatch Logs, then the stream's
        # batching window), and a shorter window would never hold any. At most the evidence a
        # warm controller keeps.
        "window_s": Bound(10.0, WINDOW_RETENTION_S, " s"),
        # Calls a verdict needs: past 1,000, most queues would never show enough in a window.
        "min_samples": Bound(1, 1000),
        # A change's effect shows within seconds; a margin of minutes would leave a storm
        # uncut for as long after each cut.
        "settle_margin_s": Bound(0.0, 60.0, " s"),
        # As the window: shorter than telemetry takes to arrive, every sample would be stale.
        "stale_after_s": Bound(10.0, WINDOW_RETENTION_S, " s"),
        # The longest a queue waits paused while its group time-shares a downstream below the
        # group's floor (docs/algorithms.md, "Groups"): at least a few rotations' worth (each
        # queue runs long enough for its telemetry to be judged), at most half the evidence a
        # warm controller keeps, so a paused queue's window still names its downstream.
        "group_pause_max_s": Bound(30.0, WINDOW_RETENTION_S / 2, " s"),
    }
)


@dataclass(frozen=True, slots=True)
class PolicyParams:
    t1: float = 0.05
    t2: float = 0.98
    beta: float = 0.5
    alpha: int = 5
    cmin: int = 2
    cmax: int = 100
    window_s: float = 30.0
    min_samples: int = 20
    settle_margin_s: float = 2.0
    stale_after_s: float = 60.0
    group_pause_max_s: float = 120.0

    def __post_init__(self) -> None:
        for name in BOUNDS:
            _within_bounds(name, getattr(self, name))
        if self.cmin > self.cmax:
            raise SettingsError(f"need Cmin <= Cmax; got Cmin={self.cmin}, Cmax={self.cmax}")

    def with_overrides(self, overrides: Mapping[str, object]) -> PolicyParams:
        """Apply overrides by field name (``t1``, ``cmax``...); unknown names are an error."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        changes: dict[str, object] = {}
        for name, raw in overrides.items():
            key = name.lower()
            if key not in fields:
                raise SettingsError(f"unknown policy parameter {name!r}; known: {sorted(fields)}")
            changes[key] = _coerce(key, raw, fields[key].type)
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PolicyParams:
        """Defaults from ``QUEUEMESH_<NAME>`` variables (``QUEUEMESH_T1``, ``QUEUEMESH_CMAX``);
        a value that does not hold is an error naming its variable."""
        env = os.environ if environ is None else environ
        fields = {f.name: f for f in dataclasses.fields(cls)}
        variables = {
            key[len(ENV_PREFIX) :].lower(): key
            for key in env
            if key.startswith(ENV_PREFIX) and key[len(ENV_PREFIX) :].lower() in fields
        }
        values: dict[str, float | int] = {}
        for name, variable in variables.items():
            raw = env[variable]
            try:
                values[name] = _coerce(name, raw, fields[name].type)
            except SettingsError as error:
                raise SettingsError(f"{variable}={raw!r}: {error}") from None
        try:
            return cls(**values)  # type: ignore[arg-type]
        except SettingsError as error:  # each value holds alone: Cmin > Cmax
            involved = ", ".join(variables[name] for name in ("cmin", "cmax") if name in variables)
            raise SettingsError(f"{involved}: {error}") from None


def _coerce(name: str, raw: object, annotation: object) -> float | int:
    """The number ``raw`` stands for, as ``annotation`` wants it, within ``name``'s bounds."""
    wants_int = annotation in (int, "int")
    try:
        value = float(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError) as error:
        raise SettingsError(f"policy parameter {name} must be a number, got {raw!r}") from error
    if not math.isfinite(value):
        raise SettingsError(f"policy parameter {name} must be a finite number, got {raw!r}")
    if wants_int:
        if not value.is_integer():
            raise SettingsError(f"policy parameter {name} must be a whole number, got {raw!r}")
        return _within_bounds(name, int(value))
    return _within_bounds(name, value)


def _within_bounds(name: str, value: float | int) -> float | int:
    """``value``, if it is within ``name``'s bounds; else the error naming both."""
    bound = BOUNDS[name]
    if not bound.holds(value):
        raise SettingsError(f"{name} must be in {bound}; got {value!r}")
    return value
