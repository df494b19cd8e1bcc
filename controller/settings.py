"""Policy parameters: contract defaults, overridden by environment, then per queue."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from controller.constants import MAX_CONCURRENCY, MIN_CONCURRENCY, WINDOW_RETENTION_S


class SettingsError(ValueError):
    """A policy parameter that is missing its meaning: wrong type or out of range."""


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

    def __post_init__(self) -> None:
        checks = (
            (0.0 < self.t1 <= 1.0, "T1 must be in (0, 1]"),
            (0.0 < self.t2 <= 1.0, "T2 must be in (0, 1]"),
            (0.0 < self.beta < 1.0, "beta must be in (0, 1)"),
            (
                1 <= self.alpha <= MAX_CONCURRENCY,
                f"alpha must be in 1..{MAX_CONCURRENCY}",
            ),
            (
                MIN_CONCURRENCY <= self.cmin <= self.cmax <= MAX_CONCURRENCY,
                f"need {MIN_CONCURRENCY} <= Cmin <= Cmax <= {MAX_CONCURRENCY}",
            ),
            (
                0 < self.window_s <= WINDOW_RETENTION_S,
                f"window_s must be in (0, {WINDOW_RETENTION_S:g}] seconds (the evidence kept)",
            ),
            (self.min_samples >= 1, "min_samples must be at least 1"),
            (
                0 <= self.settle_margin_s <= WINDOW_RETENTION_S,
                f"settle_margin_s must be in [0, {WINDOW_RETENTION_S:g}] seconds",
            ),
            (
                0 < self.stale_after_s <= WINDOW_RETENTION_S,
                f"stale_after_s must be in (0, {WINDOW_RETENTION_S:g}] seconds",
            ),
        )
        for ok, message in checks:
            if not ok:
                raise SettingsError(message)

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
        """Defaults from ``QUEUEMESH_<NAME>`` variables (``QUEUEMESH_T1``, ``QUEUEMESH_CMAX``)."""
        env = os.environ if environ is None else environ
        prefix = "QUEUEMESH_"
        names = {f.name for f in dataclasses.fields(cls)}
        overrides = {
            key[len(prefix) :].lower(): value
            for key, value in env.items()
            if key.startswith(prefix) and key[len(prefix) :].lower() in names
        }
        return cls().with_overrides(overrides)


def _coerce(name: str, raw: object, annotation: object) -> float | int:
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
        return int(value)
    return value
