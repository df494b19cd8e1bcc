"""Scenarios under several policies, side by side, on virtual time; their scorecards as a
table. The command is ``queuemesh simulate`` (stack/commands/simulate.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from load.progress import ProgressCallback
    from load.sim.engine import SimResult
    from load.sim.scenario import Scenario

POLICY_NAMES = ("static", "seed", "queuemesh")


@dataclass(frozen=True, slots=True)
class PolicyRun:
    """One (scenario, policy) run: its scorecard, the run itself, and its wall time."""

    card: dict[str, Any]
    result: SimResult
    wall_s: float


def run_policies(
    scenarios: Sequence[Scenario],
    policies: Sequence[str],
    algorithm: str,
    seed: int | None,
    progress: ProgressCallback | None = None,
) -> list[PolicyRun]:
    """Every scenario under every named policy, in that order (``algorithm`` for queuemesh);
    ``progress`` hears of each run as it starts."""
    from load.scorecard import scorecard
    from load.sim.engine import simulate
    from load.sim.policies import POLICIES, QueueMeshPolicy

    runs: list[PolicyRun] = []
    total = len(scenarios) * len(policies)
    for scenario in scenarios:
        for name in policies:
            if progress is not None:
                progress(len(runs), total, f"runs ({scenario.name}, {name})")
            policy = (
                QueueMeshPolicy(algorithm=algorithm) if name == "queuemesh" else POLICIES[name]()
            )
            started = time.perf_counter()
            result = simulate(scenario, policy, seed=seed)
            wall_s = time.perf_counter() - started
            runs.append(PolicyRun(scorecard(result), result, wall_s))
    return runs


_COLUMNS = (
    ("policy", "policy", "<"),
    ("queue", "queue", "<"),
    ("msgs", "messages_total", ">"),
    ("done", "messages_done", ">"),
    ("dlq", "dlq_messages", ">"),
    ("calls", "calls_total", ">"),
    ("rejected", "calls_rejected", ">"),
    ("wasted", "wasted_ratio", ">"),
    ("drain_s", "drain_s", ">"),
    ("ideal_s", "ideal_drain_s", ">"),
    ("ratio", "drain_ratio", ">"),
    ("esm", "esm_updates", ">"),
    ("react_s", "reaction_s", ">"),
)


def render_table(cards: Sequence[dict[str, Any]], timings: Sequence[float]) -> str:
    """The scorecards side by side, a block per scenario, with each run's wall time."""
    blocks: list[str] = []
    by_scenario: dict[str, list[tuple[dict[str, Any], float]]] = {}
    for card, wall in zip(cards, timings, strict=True):
        by_scenario.setdefault(card["scenario"], []).append((card, wall))
    for scenario, entries in by_scenario.items():
        rows: list[list[str]] = []
        for card, wall in entries:
            queues = card["queues"]
            named = list(queues.items())
            if len(named) > 1:
                named.append(("(total)", card["totals"]))
            for queue, score in named:
                row = [card["policy"], queue]
                row += [_cell(score[key]) for _, key, _ in _COLUMNS[2:]]
                row.append(f"{wall:.2f}")
                rows.append(row)
        headers = [title for title, _, _ in _COLUMNS] + ["wall_s"]
        aligns = [align for _, _, align in _COLUMNS] + [">"]
        widths = [max(len(headers[i]), *(len(row[i]) for row in rows)) for i in range(len(headers))]
        lines = [f"scenario {scenario} (seed {entries[0][0]['seed']})"]
        lines.append(
            "  ".join(f"{h:{a}{w}}" for h, a, w in zip(headers, aligns, widths, strict=True))
        )
        for row in rows:
            lines.append(
                "  ".join(f"{c:{a}{w}}" for c, a, w in zip(row, aligns, widths, strict=True))
            )
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    return str(value)
