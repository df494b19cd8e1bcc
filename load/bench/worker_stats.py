"""The worker bench's figures: medians, their spread and intervals, and the verdict on the
target, for one process's rounds and over processes.

An interval is distribution-free: the order statistics that bracket the median (``spread``).
The target, at most ``TARGET_OVERHEAD_US`` per call, is judged on a client's median
(``meets_target``) and on its whole interval (``target_shown``: met, missed or not resolved).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

TARGET_OVERHEAD_US = 5.0
CONFIDENCE_Z = 1.96  # of a 95% confidence interval


def spread(values: list[float]) -> tuple[float, float, tuple[float, float]]:
    """Median, interquartile range and 95% confidence interval of the median of per-round
    figures (distribution-free: the order statistics that bracket the median)."""
    ordered = sorted(values)
    count = len(ordered)
    lower, _, upper = statistics.quantiles(ordered, n=4) if count > 1 else ordered * 3
    # The ranks floor((n - z sqrt n) / 2) and n + 1 minus it, counted from 1.
    outside = max(0, math.floor((count - CONFIDENCE_Z * math.sqrt(count)) / 2) - 1)
    return (
        statistics.median(ordered),
        upper - lower,
        (ordered[outside], ordered[count - 1 - outside]),
    )


def verdict(low: float, high: float) -> str:
    """Whether a confidence interval shows the target met, missed, or neither."""
    if high <= TARGET_OVERHEAD_US:
        return "met"
    if low > TARGET_OVERHEAD_US:
        return "missed"
    return "not resolved"


def overall_verdict(verdicts: list[str]) -> str:
    """Met when shown met on every client, missed when shown missed on any."""
    if "missed" in verdicts:
        return "missed"
    if all(shown == "met" for shown in verdicts):
        return "met"
    return "not resolved"


def overheads(cpu: list[float], wall: list[float], *, can_show: bool) -> dict[str, Any]:
    """A client's overhead keys from its per-round or per-process figures: the medians, their
    spread and interval (``spread``) and the verdict on the target, shown only when
    ``can_show``."""
    cpu_overhead, cpu_iqr, (cpu_low, cpu_high) = spread(cpu)
    wall_overhead, wall_iqr, _ = spread(wall)
    return {
        "overhead_us": round(wall_overhead, 2),
        "overhead_iqr_us": round(wall_iqr, 2),
        "cpu_overhead_us": round(cpu_overhead, 2),
        "cpu_overhead_iqr_us": round(cpu_iqr, 2),
        "cpu_overhead_ci95_us": [round(cpu_low, 2), round(cpu_high, 2)],
        "meets_target": cpu_overhead <= TARGET_OVERHEAD_US,
        "target_shown": verdict(cpu_low, cpu_high) if can_show else "not resolved",
    }


def client_over_processes(per_process: list[dict[str, Any]], *, can_show: bool) -> dict[str, Any]:
    """One client's figures over processes: medians of the processes' figures, the 95%
    interval of the median overhead (``spread``), each process's overhead in run order, and
    the calls, rounds and counted calls summed. The target is shown met or missed only when
    ``can_show`` (enough processes)."""
    cpu_overheads = [result["cpu_overhead_us"] for result in per_process]
    medians = {
        key: round(statistics.median(result[key] for result in per_process), digits)
        for key, digits in (
            ("uninstrumented_us", 2),
            ("instrumented_us", 2),
            ("uninstrumented_cpu_us", 2),
            ("instrumented_cpu_us", 2),
            ("ratio", 4),
            ("cpu_ratio", 4),
            ("fold_cpu_us", 2),
        )
    }
    totals = {
        key: sum(result[key] for result in per_process)
        for key in ("calls", "rounds", "counted_calls")
    }
    return {
        **medians,
        "process_cpu_overheads_us": cpu_overheads,
        **totals,
        **overheads(
            cpu_overheads,
            [result["overhead_us"] for result in per_process],
            can_show=can_show,
        ),
    }
