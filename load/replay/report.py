"""The decision log: one record per decision, as JSON, as a table, and against a golden log."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controller.model import Decision
from load.replay.config import ReplayError


@dataclass(frozen=True, slots=True)
class ReplayedDecision:
    time: float
    queue: str
    action: str
    state: str
    previous: int
    target: int
    reason: str
    pressure_rate: float
    success_rate: float
    enabled: bool
    changed: bool

    @classmethod
    def of(cls, time: float, decision: Decision, changed: bool) -> ReplayedDecision:
        return cls(
            time=time,
            queue=decision.queue,
            action=decision.action.value,
            state=decision.state.value,
            previous=decision.previous,
            target=decision.target,
            reason=decision.reason,
            pressure_rate=decision.pressure_rate,
            success_rate=decision.success_rate,
            enabled=decision.enabled,
            changed=changed,
        )

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ReplayedDecision:
        return cls(
            time=float(raw["time"]),
            queue=str(raw["queue"]),
            action=str(raw["action"]),
            state=str(raw["state"]),
            previous=int(raw["previous"]),
            target=int(raw["target"]),
            reason=str(raw["reason"]),
            pressure_rate=float(raw.get("pressure_rate", 0.0)),
            success_rate=float(raw.get("success_rate", 0.0)),
            enabled=bool(raw.get("enabled", True)),
            changed=bool(raw.get("changed", raw["previous"] != raw["target"])),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "time": round(self.time, 6),
            "queue": self.queue,
            "action": self.action,
            "state": self.state,
            "previous": self.previous,
            "target": self.target,
            "reason": self.reason,
            "pressure_rate": round(self.pressure_rate, 6),
            "success_rate": round(self.success_rate, 6),
            "enabled": self.enabled,
            "changed": self.changed,
        }

    def render(self) -> str:
        """One line per decision: what golden comparisons diff."""
        paused = "" if self.enabled else " (paused)"
        return (
            f"{self.time:.3f} {self.queue} {self.action} {self.state} "
            f"{self.previous}->{self.target}{paused} | {self.reason}"
        )


def decisions_json(decisions: Sequence[ReplayedDecision]) -> str:
    """A JSON list, one decision per line, so golden files diff well in review."""
    if not decisions:
        return "[]"
    lines = ",\n".join(json.dumps(d.to_json(), sort_keys=True) for d in decisions)
    return f"[\n{lines}\n]"


def decisions_table(decisions: Sequence[ReplayedDecision], start: float | None) -> str:
    header = ("t (s)", "queue", "action", "state", "concurrency", "reason")
    rows = [
        (
            f"{d.time - (start or 0.0):.1f}",
            d.queue,
            d.action,
            d.state,
            f"{d.previous} -> {d.target}" + ("" if d.enabled else " (paused)"),
            d.reason,
        )
        for d in decisions
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = []
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def load_expected(path: Path) -> list[ReplayedDecision]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ReplayError(f"cannot read expected decisions {path}: {error.strerror}") from error
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ReplayError(f"expected decisions {path} are not JSON: {error}") from error
    if not isinstance(raw, list):
        raise ReplayError(f"expected decisions {path}: want a JSON list (`replay --json` output)")
    decisions = []
    for number, item in enumerate(raw, start=1):
        try:
            if not isinstance(item, dict):
                raise TypeError(f"want a JSON object, got {type(item).__name__}")
            decisions.append(ReplayedDecision.from_json(item))
        except KeyError as error:
            raise ReplayError(
                f"expected decisions {path}: decision {number} lacks {error}; regenerate the file "
                "with `queuemesh replay ... --json`"
            ) from error
        except (TypeError, ValueError, OverflowError) as error:
            raise ReplayError(
                f"expected decisions {path}: decision {number} is not a decision ({error}); "
                "regenerate the file with `queuemesh replay ... --json`"
            ) from error
    return decisions


def compare(
    expected: Sequence[ReplayedDecision],
    actual: Sequence[ReplayedDecision],
    expected_name: str,
) -> list[str]:
    """A unified diff of the one-line renderings; empty when they agree."""
    return list(
        difflib.unified_diff(
            [d.render() for d in expected],
            [d.render() for d in actual],
            fromfile=expected_name,
            tofile="replay",
            lineterm="",
        )
    )
