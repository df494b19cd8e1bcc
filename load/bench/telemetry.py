"""`queuemesh bench telemetry`: the bytes a worker invocation costs in telemetry, before and
after aggregation (issue 31), and whether the controller decides the same with either.

Bytes: one execution environment runs ``rate`` invocations a second for ``seconds`` virtual
seconds, ten downstream calls each (latencies as ``perf_counter`` differences have them: full
floats), a third of the run in a 429 storm (30% of calls, ``Retry-After``). The same invocations
are written twice, and the log lines' bytes (with their newline) counted per invocation:

- ``before``: main's per-invocation document, as its worker printed it through
  aws-lambda-powertools (every count an array of one float, one latency value per call);
- ``after``: the worker's own code (``worker.aggregate``, ``worker.emf``): one document per
  queue and second of invocation starts, zero counts left out, latency as a sum and a count.

Both streams go through the controller's decoder, and the windows they fill are compared
second by second (``evidence_equal``: every count equal, sums to rounding).

Decisions, closed loop: the same scenarios and seeds run through the simulator with
per-invocation telemetry and with aggregated telemetry
(``simulate(..., aggregated_telemetry=True)``; both draw one telemetry delay per invocation
end); the changes each queue's mapping went through must be the same, in the same order, each
within ``DECISION_TOLERANCE_S`` (``decisions_equal``). Beside it, the per-invocation run once
more with other draws of the telemetry delays (``simulate(..., delay_draw=1)``): how soon the
same encoding parts from itself when only its arrival times change
(``first_difference_other_delays_s``), the noise any change to what arrives when is measured
against. The closed loop is chaotic in when evidence arrives, so the changes part at the first
cut whatever is written; what the bench also reports is how far each scorecard figure moves
with aggregation against how far it moves with the delays drawn anew, on average over every
scenario and seed (``outcome_moves``, ``outcomes_within_delay_noise``: the restated target
docs/benchmarks.md proposes), judged as a paired comparison: per run, the aggregated move less
the redrawn one, whose mean may exceed zero by chance, within ``NOISE_Z`` standard errors
(more seeds narrow it).

Decisions, open loop: the per-invocation run's telemetry as a recording, and the same
invocations re-encoded as aggregating workers write them
(``load.sim.environments.as_aggregated``), each replayed through the controller
(``load.replay``); the changes must be the same alike (``replay_decisions_equal``). The
aggregated run's telemetry is also encoded as a recording's records and decoded again, and
must give back the samples the simulated controller read (``recording_equal``): a replay of it
reads the same evidence.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import Counter
from collections.abc import Iterable
from typing import Any

from controller.model import Sample
from controller.telemetry import samples_from_log_message
from controller.window import QueueWindow
from load.bench import BenchError
from worker import emf, schema
from worker.aggregate import Reports
from worker.tally import Tally

TARGET_BYTES_PER_INVOCATION = 150
TARGET_RATE = 5.0  # invocations a second per execution environment, at which the target holds
DECISION_TOLERANCE_S = 1
SUM_TOLERANCE_MS = 0.01
QUEUE = "orders"
DOWNSTREAM = "payments.example.com"
CALLS = 10
START_S = 1_767_225_600.37
DEFAULT_SCENARIOS = ("capacity-drop", "shared-downstream", "flash-crowd")
# What the runs' scorecards are compared on, per-invocation against aggregated telemetry.
SCORECARD_KEYS = ("esm_updates", "wasted_ratio", "drain_ratio", "reaction_s", "goodput_share")
# Aggregation is within the delays' noise where its mean move exceeds the redrawn delays' by at
# most this many standard errors of the runs' paired differences (a one-sided test at about
# 2.5%): each of the two moves is one draw of a chaotic loop, and a strict comparison of their
# means fails by chance on about half the figures even where aggregation changes nothing.
NOISE_Z = 2.0


def measure(
    *, rates: Iterable[float], seconds: int, scenarios: Iterable[str], seeds: Iterable[int]
) -> dict[str, Any]:
    """The report: bytes per invocation at each rate, and the decision comparison."""
    by_rate = [_bytes_at(rate, seconds) for rate in rates]
    from load.sim.scenario import load_scenario

    decisions = [
        {"scenario": name, **compare_decisions(load_scenario(name), seed)}
        for name in dict.fromkeys(scenarios)
        for seed in seeds
    ]
    moves = outcome_moves(decisions)
    at_target = min(
        (row for row in by_rate if row["rate"] >= TARGET_RATE),
        key=lambda row: row["rate"],
        default=None,
    )
    return {
        "benchmark": "telemetry",
        "seconds": seconds,
        "calls_per_invocation": CALLS,
        "rates": by_rate,
        "bytes_per_invocation": None if at_target is None else at_target["after"],
        "bytes_per_invocation_before": None if at_target is None else at_target["before"],
        "ratio": None if at_target is None else at_target["ratio"],
        "evidence_equal": all(row["evidence_equal"] for row in by_rate),
        "decisions": decisions,
        "decisions_equal": all(run["decisions_equal"] for run in decisions),
        "replay_decisions_equal": all(run["replay_decisions_equal"] for run in decisions),
        "recording_equal": all(run["recording_equal"] for run in decisions),
        "outcome_moves": moves,
        "outcomes_within_delay_noise": within_delay_noise(moves),
        "target_bytes_per_invocation": TARGET_BYTES_PER_INVOCATION,
        "target_rate": TARGET_RATE,
        "meets_target": at_target is not None and at_target["after"] <= TARGET_BYTES_PER_INVOCATION,
    }


# --- bytes ------------------------------------------------------------------------------------


# One invocation: its calls, their latencies in ms, its duration in ms, its end (epoch s).
_Invocation = tuple[Tally, list[float], float, float]


def _invocations(rate: float, seconds: int) -> list[_Invocation]:
    """One environment's invocations at ``rate`` a second, back to back as a busy poller
    feeds them."""
    rng = random.Random(f"telemetry:{rate}")
    invocations = []
    period = 1.0 / rate
    for index in range(int(rate * seconds)):
        started = START_S + index * period
        stormy = seconds / 3 <= index * period < 2 * seconds / 3
        tally = Tally()
        latencies = [rng.uniform(5, 60) for _ in range(CALLS)]
        for latency in latencies:
            if stormy and rng.random() < 0.3:
                tally.add(429, latency, 2.0, DOWNSTREAM)
            else:
                tally.add(200, latency, None, DOWNSTREAM)
        duration_s = period * rng.uniform(0.6, 0.95)
        invocations.append((tally, latencies, duration_s * 1000.0, started + duration_s))
    return invocations


def _before_line(
    tally: Tally, latencies: list[float], invocation_ms: float, ended_at: float
) -> str:
    """Main's per-invocation document, as its worker printed it through powertools."""
    counts = (
        (schema.REQUESTS, tally.requests),
        (schema.OK, tally.ok),
        (schema.THROTTLED, tally.throttled),
        (schema.SERVER_ERRORS, tally.server_errors),
        (schema.OVERLOADED, tally.overloaded),
        (schema.CLIENT_ERRORS, tally.client_errors),
        (schema.TIMED_OUT, tally.timed_out),
    )
    members: list[tuple[schema.Metric, Any]] = [(metric, [float(n)]) for metric, n in counts]
    members.append((schema.LATENCY, latencies))
    if tally.retry_after_s > 0:
        members.append((schema.RETRY_AFTER, [tally.retry_after_s]))
    members.append((schema.INVOCATION_DURATION, [invocation_ms]))
    document = schema.emf_document(
        QUEUE,
        members,
        timestamp_ms=math.ceil(ended_at * 1000),
        dimensions={schema.DOWNSTREAM_DIMENSION: DOWNSTREAM},
    )
    return json.dumps(document, separators=(",", ":")) + "\n"


def _after_lines(invocations: list[_Invocation]) -> list[str]:
    """The worker's documents for the same invocations, as ``worker.aggregate`` lets them go
    (the last ones at shutdown)."""
    reports = Reports()
    lines = []
    for tally, _, invocation_ms, ended_at in invocations:
        for queue, report in reports.ended({QUEUE: tally}, invocation_ms, ended_at):
            document = emf.document(queue, report, namespace=schema.NAMESPACE)
            lines.append(json.dumps(document, separators=(",", ":")) + "\n")
    for queue, report in reports.drain():
        document = emf.document(queue, report, namespace=schema.NAMESPACE)
        lines.append(json.dumps(document, separators=(",", ":")) + "\n")
    return lines


def _bytes_at(rate: float, seconds: int) -> dict[str, Any]:
    invocations = _invocations(rate, seconds)
    if not invocations:
        raise BenchError(f"at {rate} invocations a second, {seconds} s run none")
    before = [_before_line(*invocation) for invocation in invocations]
    after = _after_lines(invocations)
    before_bytes = sum(len(line.encode()) for line in before)
    after_bytes = sum(len(line.encode()) for line in after)
    return {
        "rate": rate,
        "invocations": len(invocations),
        "documents_before": len(before),
        "documents_after": len(after),
        "before": round(before_bytes / len(invocations), 1),
        "after": round(after_bytes / len(invocations), 1),
        "ratio": round(after_bytes / before_bytes, 3),
        "evidence_equal": same_windows(_windows(before), _windows(after)),
    }


# What a window holds of one queue's second: (queue, second, counts, sums in ms).
Held = tuple[str, int, tuple[int | float, ...], tuple[float, ...]]


def _windows(lines: list[str]) -> list[Held]:
    """What the controller's windows hold from these log lines (``held``)."""
    skipped: Counter[str] = Counter()
    samples = [
        sample
        for line in lines
        for sample in samples_from_log_message(line.rstrip("\n"), None, skipped=skipped)
    ]
    if skipped:
        raise BenchError(f"the decoder skipped worker documents: {dict(skipped)}")
    return held(samples)


def held(samples: Iterable[Sample]) -> list[Held]:
    """What the controller's windows hold from these samples, queue by queue and second by
    second."""
    windows: dict[str, QueueWindow] = {}
    for sample in samples:
        windows.setdefault(sample.queue, QueueWindow(retention_s=1e9)).add(sample)
    return [
        (
            queue,
            second,
            (
                stats.samples,
                stats.requests,
                stats.ok,
                stats.throttled,
                stats.server_errors,
                stats.client_errors,
                stats.timed_out,
                stats.pressure,
                stats.timed_samples,
                stats.latency_count,
                stats.retry_after_s,
            ),
            (stats.latency_ms_sum, stats.busy_ms),
        )
        for queue, window in sorted(windows.items())
        for second, stats in window.snapshot().seconds(-math.inf, math.inf)
    ]


def same_windows(first: list[Held], second: list[Held]) -> bool:
    """The same seconds with the same counts, and sums within ``SUM_TOLERANCE_MS`` (the
    worker sends them rounded to the microsecond; a recording, latencies as means)."""
    return len(first) == len(second) and all(
        one[:3] == other[:3]
        and all(
            math.isclose(value, other_value, rel_tol=1e-9, abs_tol=SUM_TOLERANCE_MS)
            for value, other_value in zip(one[3], other[3], strict=True)
        )
        for one, other in zip(first, second, strict=True)
    )


# --- decisions --------------------------------------------------------------------------------


def compare_decisions(scenario: Any, seed: int) -> dict[str, Any]:
    """``scenario`` (a ``load.sim.scenario.Scenario``) at ``seed`` with either telemetry,
    closed loop through the simulator and open loop through replay: the changes each made,
    where they first differ, and the scorecards."""
    from load.recording import emf_line
    from load.scorecard import scorecard
    from load.sim.engine import simulate
    from load.sim.environments import as_aggregated
    from load.simulate import make_policy

    def run(aggregated: bool, delay_draw: int = 0) -> Any:
        policy = make_policy("queuemesh", _algorithm())
        return simulate(
            scenario,
            policy,
            seed=seed,
            aggregated_telemetry=aggregated,
            delay_draw=delay_draw,
        )

    runs = {aggregated: run(aggregated) for aggregated in (False, True)}
    before, after = (_changes(runs[aggregated]) for aggregated in (False, True))
    differs_at = first_difference(before, after)
    redrawn = run(False, delay_draw=1)
    other_delays = first_difference(before, _changes(redrawn))
    replayed = _replayed_changes(scenario, runs[False].telemetry)
    reencoded = as_aggregated(runs[False].telemetry, runs[False].ended_at)
    replayed_aggregated = _replayed_changes(scenario, reencoded)
    replay_differs_at = first_difference(replayed, replayed_aggregated)
    delivered = [delivery.sample for delivery in runs[True].telemetry]
    recorded = [emf_line(sample) + "\n" for sample in delivered]
    cards = [scorecard(runs[aggregated])["totals"] for aggregated in (False, True)]
    redrawn_card = scorecard(redrawn)["totals"]
    return {
        "seed": seed,
        "changes": sum(len(changes) for changes in before.values()),
        "changes_aggregated": sum(len(changes) for changes in after.values()),
        "documents": len(runs[False].telemetry),
        "documents_aggregated": len(delivered),
        "first_difference_s": differs_at,
        "decisions_equal": differs_at is None,
        "first_difference_other_delays_s": other_delays,
        "replay_changes": sum(len(changes) for changes in replayed.values()),
        "replay_changes_aggregated": sum(len(changes) for changes in replayed_aggregated.values()),
        "replay_first_difference_s": replay_differs_at,
        "replay_decisions_equal": replay_differs_at is None,
        "scorecard": {key: [card[key] for card in cards] for key in SCORECARD_KEYS},
        "scorecard_other_delays": {key: redrawn_card[key] for key in SCORECARD_KEYS},
        "recording_equal": same_windows(_windows(recorded), held(delivered)),
    }


def outcome_moves(decisions: Iterable[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per scorecard figure, how far it moves from the per-invocation run, on average over the
    runs: with aggregated telemetry (``aggregated``), and with per-invocation telemetry whose
    delays were drawn anew (``other_delays``: the noise a closed loop has whatever is written);
    ``excess_se``, the standard error of the mean of the runs' paired differences (the
    aggregated move less the redrawn one; ``None`` under two runs). A run that has no value for
    a figure (no reaction to measure) is left out."""
    runs = list(decisions)
    moves: dict[str, dict[str, float | None]] = {}
    for key in SCORECARD_KEYS:
        aggregated, redrawn = [], []
        for run in runs:
            per_invocation, with_aggregated = run["scorecard"][key]
            other = run["scorecard_other_delays"][key]
            if per_invocation is None or with_aggregated is None or other is None:
                continue
            aggregated.append(abs(with_aggregated - per_invocation))
            redrawn.append(abs(other - per_invocation))
        excess = [a - r for a, r in zip(aggregated, redrawn, strict=True)]
        moves[key] = {
            "aggregated": _mean(aggregated),
            "other_delays": _mean(redrawn),
            "excess_se": (
                round(statistics.stdev(excess) / math.sqrt(len(excess)), 4)
                if len(excess) >= 2
                else None
            ),
        }
    return moves


def within_delay_noise(moves: dict[str, dict[str, float | None]]) -> bool:
    """The restated target (docs/benchmarks.md, "Telemetry"), read off ``outcome_moves``:
    aggregation moves no scorecard figure further from the per-invocation run, on average,
    than drawing the telemetry delays anew does, beyond ``NOISE_Z`` standard errors of the
    difference (with fewer than two runs, none at all)."""
    return all(
        move["aggregated"] is None
        or (
            move["other_delays"] is not None
            and move["aggregated"] - move["other_delays"] <= NOISE_Z * (move["excess_se"] or 0.0)
        )
        for move in moves.values()
    )


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _replayed_changes(scenario: Any, deliveries: Iterable[Any]) -> dict[str, list[Change]]:
    """Each queue's mapping changes when ``deliveries`` (a run's telemetry, virtual seconds),
    recorded, are replayed through the controller, its queues registered as the simulator
    registers them: (virtual second, (MaximumConcurrency, enabled))."""
    from controller.model import Action
    from load.recording import record_deliveries
    from load.replay import QueueSetup, ReplayConfig, replay
    from load.sim.engine import SIM_EPOCH

    records = record_deliveries(
        (SIM_EPOCH + delivery.arrival, delivery.sample) for delivery in deliveries
    )
    queues = {
        spec.name: QueueSetup(
            overrides={"cmax": spec.max_concurrency, "cmin": spec.min_concurrency},
            concurrency=spec.max_concurrency,
        )
        for spec in scenario.queues
    }
    report = replay(records, ReplayConfig(queues=queues, algorithm=_algorithm()))
    changes: dict[str, list[Change]] = {name: [] for name in queues}
    for decision in report.decisions:
        if decision.action != Action.HOLD:
            second = math.floor(decision.time - SIM_EPOCH)
            changes[decision.queue].append((second, (decision.target, decision.enabled)))
    return changes


def _algorithm() -> str:
    from controller.policy import DEFAULT_ALGORITHM

    return DEFAULT_ALGORITHM


Change = tuple[int, tuple[int, bool]]


def _changes(result: Any) -> dict[str, list[Change]]:
    """Each queue's mapping changes: (second, (MaximumConcurrency, enabled)) where it moved."""
    changes: dict[str, list[Change]] = {}
    for name, trace in result.queues.items():
        settings = list(zip(trace.cap_per_s, trace.enabled_per_s, strict=False))
        changes[name] = [
            (second, setting)
            for second, setting in enumerate(settings)
            if second and setting != settings[second - 1]
        ]
    return changes


def first_difference(before: dict[str, list[Change]], after: dict[str, list[Change]]) -> int | None:
    """The second of the first change one run made and the other did not make alike (the
    same setting within ``DECISION_TOLERANCE_S``); None when they made the same changes."""
    first: int | None = None
    for queue, changes in before.items():
        other = after.get(queue, [])
        for (second, setting), (other_second, other_setting) in zip(changes, other, strict=False):
            if setting != other_setting or abs(second - other_second) > DECISION_TOLERANCE_S:
                first = min(second, other_second, first if first is not None else second)
                break
        else:
            if len(changes) != len(other):
                shorter = min(len(changes), len(other))
                extra = (changes if len(changes) > shorter else other)[shorter][0]
                first = min(extra, first if first is not None else extra)
    return first
