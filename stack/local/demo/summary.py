"""The demo's summary and plot, and the simulator's cards it is read against."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from load.sim.trace import SimResult
    from load.simulate import PolicyRun

# The simulator's cards in the summary: the static cap, the original rule, QueueMesh; then,
# where it knows the scenario's capacity, the bound (load/sim/policies.py HindsightPolicy).
SIMULATED_POLICIES = ("static", "seed", "queuemesh")


# The ledger's transitions the summary lists: the first and the last.
FIRST_SHOWN = 3
LAST_SHOWN = 5


def print_summary(result: Mapping[str, Any], out: TextIO) -> None:
    from load.simulate import BOUND_POLICIES

    score = result["totals"]
    lines = [
        "",
        f"QueueMesh demo summary: scenario {result['scenario']}, policy {result['policy']}, "
        f"{result['ended_at_s']} s of load, {result['wall_s']} s wall time",
        f"  messages: {score['messages_total']} sent, {score['messages_done']} done, "
        f"{score['dlq_messages']} dead-lettered, {score['messages_pending']} pending",
        f"  downstream calls: {score['calls_total']}, rejected {score['calls_rejected']} "
        f"({score['wasted_ratio']:.1%}; {score['calls_timed_out']} of them timed out)",
        f"  drain: {_seconds(score['drain_s'])} (ideal {_seconds(score['ideal_drain_s'])})",
        *_pace_lines(result.get("pace")),
        f"  mapping changes: {score['esm_updates']}; detection latency (first 429 after the drop "
        f"-> mapping cut): {_seconds(score['detection_latency_s'])}; reaction (rejected share "
        f"back under T1): {_seconds(score['reaction_s'])}",
    ]
    queues = result["queues"]
    for name, ledger in result["ledger"].items():
        transitions = [t for t in result["transitions"] if t["queue"] == name]
        lines.extend(_queue_lines(name, queues.get(name) if len(queues) > 1 else None, ledger))
        lines.extend(_transition_lines(transitions))
    simulated = result.get("simulated")
    if simulated:
        lines.append("  the same scenario in the simulator (queuemesh simulate), for comparison:")
        for policy, totals in simulated.items():
            lines.append(
                f"    {policy:<10} rejected {totals['wasted_ratio']:6.1%} "
                f"(timed out {_share(totals['calls_timed_out'], totals['calls_total'])}), "
                f"dead-lettered {totals['dlq_messages']}, drain {_ratio(totals['drain_ratio'])}"
                + ("  (a bound: the capacity known)" if policy in BOUND_POLICIES else "")
            )
        if result.get("bound_not_shown"):
            lines.append(f"    no bound card (the capacity known): {result['bound_not_shown']}")
    if "plot" in result:
        lines.append(f"  plot: {result['plot']}")
    if "replay_command" in result:
        lines.append(f"  replay the recording as this run decided: {result['replay_command']}")
    out.write("\n".join(lines) + "\n")
    out.flush()


def _queue_lines(
    name: str, score: Mapping[str, Any] | None, ledger: Mapping[str, Any] | None
) -> list[str]:
    """A queue's own counts (only where the run had more than one queue: else the totals are
    its) and its state in the ledger."""
    lines = [f"  {name}:"]
    if score is not None:
        lines.append(
            f"    {score['messages_total']} sent, {score['messages_done']} done, "
            f"{score['dlq_messages']} dead-lettered; drained at {_seconds(score['drain_s'])}; "
            f"{score['esm_updates']} mapping changes"
        )
    lines.append(
        "    ledger: no decision yet"
        if ledger is None
        else f"    ledger: {ledger['state']} at {ledger['concurrency']} "
        f"(version {ledger['version']}): {ledger['last_reason']}"
    )
    return lines


def _transition_lines(transitions: list[Mapping[str, Any]]) -> list[str]:
    """The first (the storm's cuts: the cure) and the last (where it settled); probes between."""
    hidden = len(transitions) - FIRST_SHOWN - LAST_SHOWN
    shown: list[Mapping[str, Any] | None] = list(transitions)
    if hidden > 0:
        shown = [*transitions[:FIRST_SHOWN], None, *transitions[-LAST_SHOWN:]]
    lines = []
    for transition in shown:
        if transition is None:
            lines.append(f"    ... {hidden} more (--json lists every one)")
            continue
        lines.append(
            f"    t={transition['t']:6.1f}s {transition['action']:<24} "
            f"{transition['previous']:>4} -> {transition['target']:<4} {transition['reason'][:70]}"
        )
    return lines


def _pace_lines(pace: Mapping[str, Any] | None) -> list[str]:
    """How fast this host ran the invocations, against the simulator's, and the ideal drain at
    that pace: the oracle's ideal assumes the cap's invocations can send the whole capacity,
    and a slow host makes them slower."""
    if not pace or pace["ideal_drain_s"] is None:
        return []
    measured = ", ".join(
        f"{value:.2f} from {start:g} s"
        for start, value in zip(pace["from_s"], pace["calls_per_invocation_s"], strict=True)
        if value is not None
    )
    simulated = pace["simulated_calls_per_invocation_s"]
    return [
        f"  pace (calls a second per running invocation): {measured}"
        + ("" if simulated is None else f" (the simulator's {simulated:.2f})")
        + f"; the ideal drain at that pace: {_seconds(pace['ideal_drain_s'])}, this run "
        + ("n/a" if pace["drain_ratio"] is None else f"{pace['drain_ratio']:.2f}x it")
    ]


def simulated_runs(scenario: Any, algorithm: str) -> dict[str, PolicyRun]:
    """The simulator's runs of the static cap, the original rule and QueueMesh (running
    ``algorithm``) on the demo's scenario, and of the bound where it knows the scenario's
    capacity, a second or so in all: what the live run is to be read against."""
    from load.sim.policies import HindsightPolicy
    from load.simulate import run_policies

    bound = (HindsightPolicy.name,) if HindsightPolicy.knows(scenario) else ()
    policies = (*SIMULATED_POLICIES, *bound)
    runs = run_policies([scenario], policies, algorithm, seed=None)
    return dict(zip(policies, runs, strict=True))


def simulated_cards(runs: Mapping[str, PolicyRun]) -> dict[str, dict[str, Any]]:
    """The summary's cards: each of ``simulated_runs``' totals."""
    return {name: run.card["totals"] for name, run in runs.items()}


def bound_not_shown(scenario: Any) -> str | None:
    """Why the simulator's cards have no bound for ``scenario`` (``None``: they have one)."""
    from load.sim.policies import HindsightPolicy

    return HindsightPolicy.unknown_because(scenario)


def _ratio(value: float | None) -> str:
    return "not reached (not every message done)" if value is None else f"{value:.2f}x ideal"


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "0.0%"


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} s"


def write_plot(result: Mapping[str, Any], path: Path, static: SimResult | None = None) -> Path:
    """The run's plot (``demo_figure``) written to ``path``."""
    figure = demo_figure(result, static)  # selects the headless backend before pyplot loads
    from matplotlib import pyplot

    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path


def demo_figure(result: Mapping[str, Any], static: SimResult | None = None) -> Figure:
    """The live run over its seconds: the downstream's calls against its capacity, each
    queue's MaximumConcurrency and invocations in flight, and each backlog; and, where
    ``static`` (the simulator's static-cap run of the same scenario) is given, dotted beside
    the live run's refusals, the storm it was spared: the calls that cap had refused each
    second, and in its label the messages it had dead-lettered. The live run alone shows the
    cure, not what it cured. (That run's backlog is not drawn: drained at the capacity's pace
    as the cure's is, its line reads as good as the cure's, and its dead letters, a few dozen
    beside thousands waiting, do not show.)"""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    timeline = result["timeline"]
    seconds = list(range(len(timeline["ok_per_s"])))
    figure, (calls, concurrency, backlog) = pyplot.subplots(
        3, 1, figsize=(10, 8), sharex=True, constrained_layout=True
    )
    calls.step(timeline["t"], timeline["capacity_rps"], where="post", label="capacity", color="k")
    calls.plot(seconds, timeline["ok_per_s"], label="answered 2xx /s", color="tab:green")
    calls.plot(
        seconds, timeline["rejected_per_s"], label="rejected (429 or timed out) /s", color="tab:red"
    )
    calls.set_ylabel("downstream calls /s")
    calls.set_title(f"QueueMesh demo: {result['scenario']} (embedded AWS)")
    # The first queue (the storm's and the cure's) in full lines, the others dashed beside it.
    for index, (name, queue) in enumerate(timeline["queues"].items()):
        style = {"linestyle": "-" if index == 0 else "--"}
        concurrency.step(
            timeline["t"],
            queue["max_concurrency"],
            where="post",
            label=f"{name} MaximumConcurrency",
            **style,
        )
        concurrency.plot(
            timeline["t"], queue["in_flight"], label=f"{name} in flight", alpha=0.7, **style
        )
        backlog.plot(timeline["t"], queue["backlog"], label=f"{name} backlog", **style)
        backlog.plot(timeline["t"], queue["dead_lettered"], label=f"{name} dead-lettered", **style)
    if static is not None:
        _draw_static(static, calls)
    calls.legend(loc="upper right")
    concurrency.set_ylabel("concurrency")
    concurrency.legend(loc="upper right")
    backlog.set_ylabel("messages")
    backlog.set_xlabel("seconds")
    backlog.legend(loc="upper right")
    return figure


def _draw_static(static: SimResult, calls: Any) -> None:
    from load.sim.trace import summed_per_second

    traces = list(static.queues.values())
    refused = summed_per_second(trace.rejected_per_s for trace in traces)
    dead = sum(trace.dlq_messages for trace in traces)
    calls.plot(
        range(len(refused)),
        refused,
        label=f"rejected /s, static cap, simulated ({dead} dead-lettered)",
        color="tab:red",
        linestyle=":",
    )
