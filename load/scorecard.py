"""The scorecard of one simulated run: the contract's keys, per queue and in total.

Message age and goodput share (docs/simulator.md, "The scorecard"):

- ``age_p50_s`` / ``age_p99_s``: nearest-rank percentiles of the ages of done messages
  (arrival to the end of the invocation that did them); totals pool every queue's messages.
- ``goodput_share``: calls answered 2xx over what the downstream could have answered for the
  queue while it had work waiting. Per whole second, the queue's demand is its 2xx calls plus
  the messages still waiting at the second's end (visible, or invisible after a failed call;
  not those in flight); the downstream's capacity that second is shared max-min fairly between
  the demands of the queues on it (a queue alone gets ``min(capacity, demand)``). The share is
  the sum of 2xx calls over the sum of fair shares, at most 1; totals divide all 2xx calls by
  all fair shares, which is each downstream's pooled ``min(capacity, demand)``. ``None`` when
  the downstream could have answered nothing. ``goodput_share_min`` (totals only): the
  lowest queue's share beside the pooled one, the queue a fleet served worst.
- ``longest_pause_s``: the longest run of whole seconds the queue's mapping was disabled, as
  the once-a-second sample sees it; totals: the longest of any queue.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from load.oracle import ideal_drain_times
from load.sim.scenario import Schedule, value_at
from load.sim.trace import QueueTrace, SimResult

# The rejected share behind ``reaction_s`` is taken over the last few seconds of calls (those
# since the drop only), so one clean second amid a storm does not end it.
REACTION_WINDOW_S = 5
DEFAULT_T1 = 0.05


def scorecard(result: SimResult, t1: float = DEFAULT_T1) -> dict[str, Any]:
    """``{"scenario", "policy", "seed", "queues": {name: {...}}, "totals": {...}}``."""
    scenario = result.scenario
    ideals = ideal_drain_times(scenario)
    fair = fair_shares(result)
    queues: dict[str, dict[str, Any]] = {}
    for spec in scenario.queues:
        trace = result.queues[spec.name]
        capacity = scenario.downstream(spec.downstream).capacity_rps
        queues[spec.name] = _queue_score(
            trace,
            ideals.get(spec.name),
            result.esm_updates.get(spec.name, 0),
            reaction_time(trace, capacity, t1, result.ended_at),
            fair[spec.name],
        )
    traces = list(result.queues.values())
    shares = [queue["goodput_share"] for queue in queues.values()]
    measured = [share for share in shares if share is not None]
    return {
        "scenario": scenario.name,
        "policy": result.policy,
        "seed": result.seed,
        "queues": queues,
        "totals": {
            **_totals(list(queues.values())),
            **_age_and_goodput(
                [age for trace in traces for age in trace.ages_s],
                sum(sum(trace.ok_per_s) for trace in traces),
                sum(fair.values()),
            ),
            "goodput_share_min": min(measured, default=None),
            "longest_pause_s": max(
                (queue["longest_pause_s"] for queue in queues.values()), default=0
            ),
        },
    }


def longest_pause(enabled_per_s: Sequence[bool]) -> int:
    """The longest run of seconds with the mapping disabled (0: never paused)."""
    longest = run = 0
    for enabled in enabled_per_s:
        run = 0 if enabled else run + 1
        longest = max(longest, run)
    return longest


def fair_shares(result: SimResult) -> dict[str, float]:
    """Per queue, the calls its downstream could have answered for it while it had work waiting.

    Each second's capacity is split max-min fairly between the demands (2xx calls plus messages
    left waiting at the second's end) of the queues on that downstream.
    """
    scenario = result.scenario
    totals = dict.fromkeys(result.queues, 0.0)
    for downstream in scenario.downstreams:
        traces = [trace for trace in result.queues.values() if trace.downstream == downstream.name]
        seconds = max((len(trace.waiting_end_per_s) for trace in traces), default=0)
        for second in range(seconds):
            demands = [
                trace.ok_per_s[second] + trace.waiting_end_per_s[second]
                if second < len(trace.waiting_end_per_s)
                else 0
                for trace in traces
            ]
            capacity = value_at(downstream.capacity_rps, second)
            for trace, share in zip(traces, max_min_fair(capacity, demands), strict=True):
                totals[trace.name] += share
    return totals


def max_min_fair(capacity: float, demands: Sequence[float]) -> list[float]:
    """Water-filling: the smallest demands are met in full, the rest split what is left evenly."""
    shares = [0.0] * len(demands)
    left = capacity
    order = sorted(range(len(demands)), key=lambda index: demands[index])
    for position, index in enumerate(order):
        shares[index] = min(demands[index], left / (len(order) - position))
        left -= shares[index]
    return shares


def percentile(values: Sequence[float], share: float) -> float | None:
    """The nearest-rank percentile (``share`` in (0, 1]) of ``values``; ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


# Across seeds, the worst of a total is its lowest value for these keys and its highest for
# every other (seed-independent facts such as messages_total and ideal_drain_s are the same in
# every run, so their worst is their value).
LOWER_IS_WORSE = frozenset({"goodput_share", "goodput_share_min", "messages_done"})


def seed_summary(
    scenario: str, policy: str, runs: Sequence[tuple[int, dict[str, Any]]]
) -> dict[str, Any]:
    """``{"scenario", "policy", "seeds", "mean", "worst", "runs"}`` over per-seed totals.

    A key that is ``None`` in any run (not drained, no drop, nothing done) is ``None`` in the mean
    and the worst: a null drain ratio is worse than any number.
    """
    keys = list(runs[0][1]) if runs else []
    mean: dict[str, Any] = {}
    worst: dict[str, Any] = {}
    for key in keys:
        values = [totals[key] for _, totals in runs]
        if any(value is None for value in values):
            mean[key] = worst[key] = None
            continue
        mean[key] = round(sum(values) / len(values), 4)
        worst[key] = min(values) if key in LOWER_IS_WORSE else max(values)
    return {
        "scenario": scenario,
        "policy": policy,
        "seeds": [seed for seed, _ in runs],
        "mean": mean,
        "worst": worst,
        "runs": [{"seed": seed, "totals": totals} for seed, totals in runs],
    }


def reaction_time(
    trace: QueueTrace, capacity: Schedule, t1: float, ended_at: float
) -> float | None:
    """Worst time from a capacity drop until the queue's rolling rejected share is below T1.

    ``None`` when the downstream's capacity never drops during the run. Windows without calls
    are skipped; a share still at or above T1 when the run ends (or no calls since the drop)
    counts as the time from the drop to the end.
    """
    worst: float | None = None
    drops = [
        start
        for (start, value), (_, before) in zip(capacity[1:], capacity, strict=False)
        if value < before and start < ended_at
    ]
    last_second = len(trace.calls_per_s) - 1
    for drop in drops:
        first = int(drop)
        reacted: float | None = None
        for second in range(first, min(last_second, int(ended_at)) + 1):
            since = max(first, second - REACTION_WINDOW_S + 1)
            calls = sum(trace.calls_per_s[since : second + 1])
            rejected = sum(trace.rejected_per_s[since : second + 1])
            # Seconds without calls say nothing (an empty or paused queue): skip them.
            if calls and rejected / calls < t1:
                reacted = second + 1 - drop
                break
        if reacted is None:
            reacted = ended_at - drop
        worst = reacted if worst is None else max(worst, reacted)
    return worst


def _queue_score(
    trace: QueueTrace,
    ideal: float | None,
    esm_updates: int,
    reaction: float | None,
    fair_share: float,
) -> dict[str, Any]:
    drained = trace.messages_done == trace.messages_total and trace.pending_at_end == 0
    drain = trace.last_done_at if drained else None
    if drained and drain is None:
        drain = 0.0
    return {
        "messages_total": trace.messages_total,
        "messages_done": trace.messages_done,
        "dlq_messages": trace.dlq_messages,
        "messages_pending": trace.pending_at_end,
        "calls_total": trace.calls_total,
        "calls_rejected": trace.calls_rejected,
        "calls_5xx_noise": trace.calls_noise,
        "wasted_ratio": _ratio(trace.calls_rejected, trace.calls_total),
        "drain_s": _round(drain, 2),
        "ideal_drain_s": _round(ideal, 2),
        "drain_ratio": drain_ratio(drain, ideal),
        "esm_updates": esm_updates,
        "reaction_s": _round(reaction, 2),
        "calls_timed_out": trace.calls_timed_out,
        **_age_and_goodput(trace.ages_s, sum(trace.ok_per_s), fair_share),
        "longest_pause_s": longest_pause(trace.enabled_per_s),
    }


def _age_and_goodput(ages: Sequence[float], ok: int, fair_share: float) -> dict[str, Any]:
    return {
        "age_p50_s": _round(percentile(ages, 0.50), 2),
        "age_p99_s": _round(percentile(ages, 0.99), 2),
        "goodput_share": round(min(1.0, ok / fair_share), 4) if fair_share > 0 else None,
    }


def _totals(queues: Sequence[dict[str, Any]]) -> dict[str, Any]:
    summed = {
        key: sum(queue[key] for queue in queues)
        for key in (
            "messages_total",
            "messages_done",
            "dlq_messages",
            "messages_pending",
            "calls_total",
            "calls_rejected",
            "calls_5xx_noise",
            "esm_updates",
            "calls_timed_out",
        )
    }
    drains = [queue["drain_s"] for queue in queues]
    drain = None if any(value is None for value in drains) else max(drains, default=0.0)
    ideals = [queue["ideal_drain_s"] for queue in queues]
    ideal = None if any(value is None for value in ideals) else max(ideals, default=0.0)
    reactions = [queue["reaction_s"] for queue in queues if queue["reaction_s"] is not None]
    return {
        **summed,
        "wasted_ratio": _ratio(summed["calls_rejected"], summed["calls_total"]),
        "drain_s": drain,
        "ideal_drain_s": ideal,
        "drain_ratio": drain_ratio(drain, ideal),
        "reaction_s": max(reactions) if reactions else None,
    }


def _ratio(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


def drain_ratio(drain: float | None, ideal: float | None) -> float | None:
    """Drain time over the ideal, to three decimals (``None``: either unknown)."""
    if drain is None or ideal is None or ideal <= 0:
        return None
    return round(drain / ideal, 3)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


# A family's harm test (docs/simulator.md, "Families"): on a draw where the static cap wastes
# under HARMLESS_WASTE, a policy harms when it drains or ages the messages beyond these ratios.
HARMLESS_WASTE = 0.01
HARMFUL_DRAIN = 1.03
HARMFUL_AGE = 1.05
# The bound rule: a policy is within it on a draw where it wastes at most
# BOUND_WASTE_FACTOR x the bound's share + BOUND_WASTE_SLACK and drains within
# BOUND_DRAIN_FACTOR x the bound's drain ratio.
BOUND_WASTE_FACTOR = 2.0
BOUND_WASTE_SLACK = 0.01
BOUND_DRAIN_FACTOR = 1.1


def family_summary(
    family: str, policy: str, seed: int, draws: Sequence[Mapping[str, Mapping[str, Any]]]
) -> dict[str, Any]:
    """The scorecard of ``policy`` over a family's draws.

    Each draw maps policy names to that run's totals; every draw has ``policy`` and
    ``static``, and ``hindsight`` where the bound applies (``HindsightPolicy.knows``). A drain
    ratio or age that is ``None`` (not drained, nothing done) ranks as infinite.
    """
    runs = [draw[policy] for draw in draws]
    bounded = [draw for draw in draws if "hindsight" in draw]
    return {
        "family": family,
        "policy": policy,
        "draws": len(draws),
        "seed": seed,
        "harmful_draws": sum(1 for draw in draws if _harmful(draw[policy], draw["static"])),
        "dead_letter_draws": sum(1 for totals in runs if totals["dlq_messages"] > 0),
        # The drain ratio's mean is over the draws that drained: a policy draining more draws
        # may show a higher mean, so this says how many it left out.
        "undrained_draws": sum(1 for totals in runs if totals["drain_ratio"] is None),
        "wasted": spread([totals["wasted_ratio"] for totals in runs]),
        "drain_ratio": spread([totals["drain_ratio"] for totals in runs]),
        "timed_out_share": spread(
            [_ratio(totals["calls_timed_out"], totals["calls_total"]) for totals in runs]
        ),
        "draws_within_bound_rule": sum(
            1 for draw in bounded if not bound_limits_missed(draw[policy], draw["hindsight"])
        )
        if bounded
        else None,
        "goodput_share_min": spread(
            [totals["goodput_share_min"] for totals in runs], lower_is_worse=True
        ),
        "longest_pause_s": spread([totals["longest_pause_s"] for totals in runs]),
    }


def spread(values: Sequence[float | None], lower_is_worse: bool = False) -> dict[str, float | None]:
    """``{mean, p90, worst}`` of per-draw values where higher is worse (``lower_is_worse``: the
    p90 is the value nine draws in ten are at or above, the worst the lowest); ``None`` ranks as
    the worst of all: it is the worst (and the p90 when a tenth of the draws have it), and the
    mean is over the numbers (``None`` when there are none)."""
    if lower_is_worse:
        flipped = spread([None if value is None else -value for value in values])
        # Adding 0.0 turns a negated zero into 0.0.
        return {key: None if value is None else -value + 0.0 for key, value in flipped.items()}
    numbers = [value for value in values if value is not None]
    ranked = [math.inf if value is None else value for value in values]
    p90 = percentile(ranked, 0.90)
    worst = max(ranked, default=None)
    return {
        "mean": round(sum(numbers) / len(numbers), 4) if numbers else None,
        "p90": None if p90 is None or math.isinf(p90) else p90,
        "worst": None if worst is None or math.isinf(worst) else worst,
    }


def _harmful(totals: Mapping[str, Any], static: Mapping[str, Any]) -> bool:
    if static["wasted_ratio"] >= HARMLESS_WASTE:
        return False
    return _worse(totals["drain_s"], static["drain_s"], HARMFUL_DRAIN) or _worse(
        totals["age_p99_s"], static["age_p99_s"], HARMFUL_AGE
    )


def _worse(value: float | None, reference: float | None, factor: float) -> bool:
    """``value > factor x reference``, where ``None`` is infinite (two infinities tie)."""
    if value is None:
        return reference is not None
    return reference is not None and value > factor * reference


def bound_limits_missed(totals: Mapping[str, Any], bound: Mapping[str, Any]) -> tuple[str, ...]:
    """Which of the bound rule's limits a run's ``totals`` miss against the bound's on the same
    draw: ``("waste",)``, ``("drain",)``, both, or none (the run is within the rule)."""
    wastes = totals["wasted_ratio"] > (
        BOUND_WASTE_FACTOR * bound["wasted_ratio"] + BOUND_WASTE_SLACK
    )
    drains = _worse(totals["drain_ratio"], bound["drain_ratio"], BOUND_DRAIN_FACTOR)
    return (*(("waste",) if wastes else ()), *(("drain",) if drains else ()))
