"""Plots of simulated runs: per queue and policy, concurrency, goodput against capacity, and the
rejected share over time."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

from load.sim.scenario import value_at
from load.sim.trace import SimResult

ROLLING_S = 5
_COLOURS = {"static": "#d62728", "seed": "#ff7f0e", "queuemesh": "#1f77b4"}
# Any other policy (the peers, the bound) takes the next of these, in the order its run comes.
_MORE_COLOURS = ("#2ca02c", "#9467bd", "#8c564b", "#7f7f7f", "#e377c2", "#17becf")


def policy_colours(policies: Sequence[str]) -> dict[str, str]:
    """One colour per policy, for its every line (cap, running, goodput, share): the static cap,
    the original rule and QueueMesh always their own, any other the next free one."""
    others = itertools.cycle(_MORE_COLOURS)
    return {policy: _COLOURS.get(policy) or next(others) for policy in dict.fromkeys(policies)}


def rolling_share(
    rejected: Sequence[int], calls: Sequence[int], span: int = ROLLING_S
) -> list[float]:
    """Rejected share over the last ``span`` seconds, second by second (0 without calls)."""
    shares = []
    for second in range(len(calls)):
        start = max(0, second - span + 1)
        total = sum(calls[start : second + 1])
        shares.append(sum(rejected[start : second + 1]) / total if total else 0.0)
    return shares


def plot_runs(results: Sequence[SimResult], path: Path) -> Path:
    """One figure for one scenario: a row per queue, a line per policy; returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not results:
        raise ValueError("nothing to plot: no runs")
    scenario = results[0].scenario
    queues = [spec.name for spec in scenario.queues]
    colours = policy_colours([result.policy for result in results])
    figure, axes = plt.subplots(
        len(queues), 3, figsize=(16, 3.6 * len(queues)), squeeze=False, sharex=True
    )
    for row, queue in enumerate(queues):
        spec = next(spec for spec in scenario.queues if spec.name == queue)
        capacity = scenario.downstream(spec.downstream).capacity_rps
        cap_axis, goodput_axis, share_axis = axes[row]
        longest = 0
        for result in results:
            trace = result.queues[queue]
            colour = colours[result.policy]
            seconds = list(range(len(trace.cap_per_s)))
            longest = max(longest, len(seconds))
            cap_axis.step(
                seconds, trace.cap_per_s, where="post", color=colour, label=f"{result.policy} cap"
            )
            cap_axis.plot(seconds, trace.running_per_s, color=colour, alpha=0.35, linewidth=0.8)
            goodput = trace.ok_per_s[: len(seconds)]
            goodput_axis.plot(seconds, goodput, color=colour, linewidth=0.9, label=result.policy)
            share = rolling_share(trace.rejected_per_s, trace.calls_per_s)[: len(seconds)]
            share_axis.plot(seconds, share, color=colour, linewidth=0.9, label=result.policy)
        horizon = list(range(longest))
        goodput_axis.step(
            horizon,
            [value_at(capacity, second) for second in horizon],
            where="post",
            color="black",
            linestyle="--",
            linewidth=1.0,
            label=f"{spec.downstream} capacity",
        )
        cap_axis.set_ylabel(f"{queue}\nconcurrency")
        # Log scale: a mapping found at 100 and run at 2 to 10 stays readable.
        cap_axis.set_yscale("log")
        cap_axis.set_ylim(bottom=1)
        goodput_axis.set_ylabel("calls/s answered 2xx")
        share_axis.set_ylabel(f"rejected share ({ROLLING_S}s)")
        share_axis.set_ylim(0, 1)
        for axis in axes[row]:
            axis.grid(alpha=0.3)
        if row == 0:
            cap_axis.set_title("MaximumConcurrency (line) and running (faint)")
            goodput_axis.set_title("goodput against capacity")
            share_axis.set_title("429/503 share of calls")
            cap_axis.legend(fontsize=8)
            goodput_axis.legend(fontsize=8)
    for axis in axes[-1]:
        axis.set_xlabel("seconds")
    figure.suptitle(f"queuemesh simulate: {scenario.name} (seed {results[0].seed})")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
