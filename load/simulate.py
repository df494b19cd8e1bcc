"""Scenarios under several policies, side by side, on virtual time; their scorecards as a
table. The command is ``queuemesh simulate`` (stack/commands/simulate.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from load.progress import ProgressCallback
    from load.sim.engine import SimPolicy
    from load.sim.scenario import Scenario
    from load.sim.trace import SimResult

# The peers: each the real controller running that limit algorithm, named after it in the
# scorecard (ports of Netflix concurrency-limits', Vector's and Envoy's rules, docs/algorithms.md).
PEER_POLICIES = ("netflix-aimd", "vegas", "gradient2", "vector-arc", "envoy-gradient")
POLICY_NAMES = ("static", "seed", "queuemesh", *PEER_POLICIES)
# Bounds, not policies to deploy: each run when named, never by "all"
# (load/sim/policies.py HindsightPolicy).
BOUND_POLICIES = ("hindsight", "hindsight-lagged", "hindsight-climbing")
# Seeds run in a small process pool: the simulator is CPU-bound, one run per core.
SEED_WORKERS = 2
MAX_SEEDS = 100


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

    runs: list[PolicyRun] = []
    total = len(scenarios) * len(policies)
    for scenario in scenarios:
        for name in policies:
            if progress is not None:
                progress(len(runs), total, f"runs ({scenario.name}, {name})")
            policy = make_policy(name, algorithm)
            started = time.perf_counter()
            result = simulate(scenario, policy, seed=seed)
            wall_s = time.perf_counter() - started
            runs.append(PolicyRun(scorecard(result), result, wall_s))
    if progress is not None:
        progress(total, total, "runs")
    return runs


def make_policy(name: str, algorithm: str) -> SimPolicy:
    """A fresh policy by its ``--policy`` name (queuemesh with the limit ``algorithm``, a peer
    with its own)."""
    from load.sim.policies import POLICIES, QueueMeshPolicy

    if name in PEER_POLICIES:
        return QueueMeshPolicy(algorithm=name, name=name)
    return QueueMeshPolicy(algorithm=algorithm) if name == "queuemesh" else POLICIES[name]()


def parse_seeds(text: str) -> list[int]:
    """``1-10`` or ``3,5,8`` (or both: ``1-3,7``) as a list of seeds, in the order given.

    Raises ``ValueError`` saying what is wrong and how to write it.
    """
    how = "write a range like 1-10 or a list like 3,5,8"
    seeds: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"{part.strip()!r} is not a seed or a range of seeds; {how}")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"the range {part.strip()} runs backwards; {how}")
        if len(seeds) + last - first + 1 > MAX_SEEDS:
            raise ValueError(f"more than {MAX_SEEDS} seeds; name fewer")
        for seed in range(first, last + 1):
            if seed in seeds:
                raise ValueError(f"seed {seed} is named twice; name each seed once")
            seeds.append(seed)
    return seeds


def run_seeds(
    scenarios: Sequence[Scenario], policies: Sequence[str], algorithm: str, seeds: Sequence[int]
) -> list[dict[str, Any]]:
    """One ``seed_summary`` per (scenario, policy), each over every seed."""
    from load.scorecard import seed_summary

    jobs = [
        (scenario, policy, algorithm, seed)
        for scenario in scenarios
        for policy in policies
        for seed in seeds
    ]
    totals = [card["totals"] for card in _seed_cards(jobs)]
    summaries = []
    for index in range(0, len(jobs), len(seeds)):
        scenario, policy, _, _ = jobs[index]
        runs = list(zip(seeds, totals[index : index + len(seeds)], strict=True))
        summaries.append(seed_summary(scenario.name, policy, runs))
    return summaries


def _seed_cards(jobs: Sequence[tuple[Scenario, str, str, int | None]]) -> list[dict[str, Any]]:
    """Each job's scorecard, in order: in the process pool when there are several."""
    if len(jobs) == 1:
        return [_seed_card(jobs[0])]
    with ProcessPoolExecutor(max_workers=SEED_WORKERS) as pool:
        return list(pool.map(_seed_card, jobs))


def _seed_card(job: tuple[Scenario, str, str, int | None]) -> dict[str, Any]:
    """One run's scorecard (a top-level function, so the process pool can call it)."""
    from load.scorecard import scorecard
    from load.sim.engine import simulate

    scenario, policy, algorithm, seed = job
    return scorecard(simulate(scenario, make_policy(policy, algorithm), seed=seed))


def compare_alone(
    scenario: Scenario, queue: str, policies: Sequence[str], algorithm: str, seeds: Sequence[int]
) -> list[dict[str, Any]]:
    """Issue 33's priority measure: ``queue``'s p99 message age in ``scenario`` and alone on
    its downstream (``Scenario.alone``), per policy, ``{"scenario", "queue", "policy",
    "seeds", "runs", "ratio"}``. Each run is ``{"seed", "fleet_age_p99_s", "alone_age_p99_s",
    "ratio"}`` (the fleet's age over the lone queue's; ``None`` where either did nothing), and
    ``ratio`` their ``mean`` and ``worst`` (the highest), ``None`` when any run's is."""
    lone = scenario.alone(queue)
    jobs = [
        (run, policy, algorithm, seed)
        for policy in policies
        for seed in seeds
        for run in (scenario, lone)
    ]
    ages = [card["queues"][queue]["age_p99_s"] for card in _seed_cards(jobs)]
    summaries = []
    for index, policy in enumerate(policies):
        runs = []
        for position, seed in enumerate(seeds):
            fleet, alone = ages[2 * (index * len(seeds) + position) :][:2]
            ratio = round(fleet / alone, 3) if fleet is not None and alone else None
            runs.append(
                {"seed": seed, "fleet_age_p99_s": fleet, "alone_age_p99_s": alone, "ratio": ratio}
            )
        ratios = [run["ratio"] for run in runs]
        known = None not in ratios
        summaries.append(
            {
                "scenario": scenario.name,
                "queue": queue,
                "policy": policy,
                "seeds": list(seeds),
                "runs": runs,
                "ratio": {
                    "mean": round(sum(ratios) / len(ratios), 3) if known else None,
                    "worst": max(ratios) if known else None,
                },
            }
        )
    return summaries


def render_alone_table(summaries: Sequence[dict[str, Any]]) -> str:
    """A row per (policy, seed): the queue's p99 age in the fleet and alone, and their ratio;
    then each policy's mean and worst ratio."""
    first = summaries[0]
    title = (
        f"queue {first['queue']} of {first['scenario']}: p99 message age (s) in the fleet and "
        "alone on its downstream"
    )
    rows = [["policy", "seed", "fleet", "alone", "ratio"]]
    for summary in summaries:
        rows += [
            [summary["policy"], str(run["seed"])]
            + [_cell(run[key]) for key in ("fleet_age_p99_s", "alone_age_p99_s", "ratio")]
            for run in summary["runs"]
        ]
        rows += [
            [summary["policy"], stat, "", "", _cell(summary["ratio"][stat])]
            for stat in ("mean", "worst")
        ]
    return "\n".join([title, *_aligned(rows, ["<", ">", ">", ">", ">"])]) + "\n"


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
    ("goodput", "goodput_share", ">"),
    ("gp_min", "goodput_share_min", ">"),
    ("pause_s", "longest_pause_s", ">"),
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
                # A queue's row leaves the fleet's keys (its lowest share) blank.
                row += [_cell(score[key]) if key in score else "" for _, key, _ in _COLUMNS[2:]]
                row.append(f"{wall:.2f}")
                rows.append(row)
        headers = [title for title, _, _ in _COLUMNS] + ["wall_s"]
        aligns = [align for _, _, align in _COLUMNS] + [">"]
        title = f"scenario {scenario} (seed {entries[0][0]['seed']})"
        blocks.append("\n".join([title, *_aligned([headers, *rows], aligns)]))
    return "\n\n".join(blocks) + "\n"


_SEED_COLUMNS = (
    ("done", "messages_done"),
    ("dlq", "dlq_messages"),
    ("rejected", "calls_rejected"),
    ("timed_out", "calls_timed_out"),
    ("wasted", "wasted_ratio"),
    ("ratio", "drain_ratio"),
    ("age_p50", "age_p50_s"),
    ("age_p99", "age_p99_s"),
    ("goodput", "goodput_share"),
    ("gp_min", "goodput_share_min"),
    ("pause_s", "longest_pause_s"),
    ("esm", "esm_updates"),
)


def render_seed_table(summaries: Sequence[dict[str, Any]]) -> str:
    """Per scenario, a mean and a worst row per policy over the seeds' totals."""
    blocks: list[str] = []
    for scenario, entries in _grouped(summaries, "scenario").items():
        headers = ["policy", "over"] + [title for title, _ in _SEED_COLUMNS]
        rows = [
            [summary["policy"], stat] + [_cell(summary[stat][key]) for _, key in _SEED_COLUMNS]
            for summary in entries
            for stat in ("mean", "worst")
        ]
        aligns = ["<", "<"] + [">"] * len(_SEED_COLUMNS)
        seeds = ",".join(str(seed) for seed in entries[0]["seeds"])
        title = f"scenario {scenario} (seeds {seeds}: mean and worst of the totals)"
        blocks.append("\n".join([title, *_aligned([headers, *rows], aligns)]))
    return "\n\n".join(blocks) + "\n"


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    return str(value)


def run_family(
    family: str,
    seed: int,
    draws: int,
    policies: Sequence[str],
    algorithm: str,
    progress: ProgressCallback | None = None,
) -> list[dict[str, Any]]:
    """One ``family_summary`` per named policy over draws 1..``draws`` of ``family``.

    Static runs on every draw and the bound on every draw it applies to, named or not: the
    harm test and the bound rule judge by them. Runs go to a pool of ``SEED_WORKERS``
    processes; each is a function of (family, seed, draw, policy), so the pool changes nothing.
    """
    from load.scorecard import family_summary
    from load.sim.families import draw_scenario
    from load.sim.policies import HindsightPolicy

    jobs: list[tuple[str, int, int, str, str]] = []
    for draw in range(1, draws + 1):
        needed = {*policies, "static"}
        if HindsightPolicy.knows(draw_scenario(family, seed, draw)):
            needed.add("hindsight")
        jobs += [(family, seed, draw, policy, algorithm) for policy in sorted(needed)]
    per_draw: list[dict[str, dict[str, Any]]] = [{} for _ in range(draws)]
    with ProcessPoolExecutor(max_workers=SEED_WORKERS) as pool:
        for done, (job, totals) in enumerate(zip(jobs, pool.map(_draw_totals, jobs), strict=True)):
            if progress is not None:
                progress(done, len(jobs), f"runs ({family} draw {job[2]}, {job[3]})")
            per_draw[job[2] - 1][job[3]] = totals
    if progress is not None:
        progress(len(jobs), len(jobs), "runs")
    return [family_summary(family, policy, seed, per_draw) for policy in policies]


def _draw_totals(job: tuple[str, int, int, str, str]) -> dict[str, Any]:
    """One draw's run under one policy: its totals (for the process pool)."""
    from load.sim.families import draw_scenario

    family, seed, draw, policy, algorithm = job
    totals: dict[str, Any] = _seed_card(
        (draw_scenario(family, seed, draw), policy, algorithm, None)
    )["totals"]
    return totals


_FAMILY_COLUMNS = (
    ("harmful", "harmful_draws"),
    ("dlq_draws", "dead_letter_draws"),
    ("undrained", "undrained_draws"),
    ("wasted", "wasted"),
    ("drain_ratio", "drain_ratio"),
    ("timed_out", "timed_out_share"),
    ("in_bound", "draws_within_bound_rule"),
    ("gp_min", "goodput_share_min"),
    ("pause_s", "longest_pause_s"),
)


def render_family_table(summaries: Sequence[dict[str, Any]]) -> str:
    """Per family, a row per policy: the draw counts, and mean / p90 / worst of the shares."""
    blocks: list[str] = []
    for family, entries in _grouped(summaries, "family").items():
        headers = ["policy"] + [title for title, _ in _FAMILY_COLUMNS]
        rows = [
            [summary["policy"]]
            + [
                "/".join(_cell(value) for value in summary[key].values())
                if isinstance(summary[key], dict)
                else _cell(summary[key])
                for _, key in _FAMILY_COLUMNS
            ]
            for summary in entries
        ]
        aligns = ["<"] + [">"] * len(_FAMILY_COLUMNS)
        title = (
            f"family {family} ({entries[0]['draws']} draws, seed {entries[0]['seed']}; "
            "shares: mean/p90/worst)"
        )
        blocks.append("\n".join([title, *_aligned([headers, *rows], aligns)]))
    return "\n\n".join(blocks) + "\n"


def _grouped(summaries: Sequence[dict[str, Any]], key: str) -> dict[str, list[dict[str, Any]]]:
    """The summaries by their ``key``, in the order each value first comes."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for summary in summaries:
        groups.setdefault(summary[key], []).append(summary)
    return groups


def _aligned(rows: Sequence[Sequence[str]], aligns: Sequence[str]) -> list[str]:
    """The rows (the headers first) as lines, each column as wide as its widest cell."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(aligns))]
    return [
        "  ".join(f"{cell:{a}{w}}" for cell, a, w in zip(row, aligns, widths, strict=True))
        for row in rows
    ]
