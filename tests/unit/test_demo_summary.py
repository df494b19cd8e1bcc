"""The live demo's summary: what a person reads after the run."""

from __future__ import annotations

import io
from typing import Any

from load.sim.scenario import load_scenario
from stack.local.demo.summary import (
    FIRST_SHOWN,
    LAST_SHOWN,
    bound_not_shown,
    demo_figure,
    print_summary,
)

TOTALS = {
    "messages_total": 100,
    "messages_done": 100,
    "dlq_messages": 0,
    "messages_pending": 0,
    "calls_total": 110,
    "calls_rejected": 10,
    "wasted_ratio": 10 / 110,
    "calls_timed_out": 0,
    "drain_s": 50.0,
    "ideal_drain_s": 45.0,
    "esm_updates": 12,
    "detection_latency_s": 1.0,
    "reaction_s": 5.0,
}


def demo_result(transitions: int = 0, **extra: Any) -> dict[str, Any]:
    """A demo run's result for ``orders`` alone, with ``transitions`` steps and ``extra`` keys."""
    return {
        "scenario": "demo",
        "policy": "queuemesh-adaptive",
        "ended_at_s": 60.0,
        "wall_s": 90.0,
        "queues": {"orders": TOTALS},
        "totals": TOTALS,
        "ledger": {"orders": None},
        "transitions": [
            {
                "t": float(t),
                "queue": "orders",
                "action": "HOLD",
                "previous": 7,
                "target": 7,
                "reason": f"step {t}",
            }
            for t in range(transitions)
        ],
        **extra,
    }


def printed(result: dict[str, Any]) -> str:
    out = io.StringIO()
    print_summary(result, out)
    return out.getvalue()


def summary(transitions: int) -> list[str]:
    return [line.strip() for line in printed(demo_result(transitions)).splitlines()]


def listed(lines: list[str]) -> list[str]:
    """The reasons of the transitions listed."""
    return [line.split(maxsplit=6)[-1] for line in lines if line.startswith("t=")]


def test_a_long_run_shows_its_first_transitions_the_cure_and_its_last() -> None:
    lines = summary(20)
    first = [f"step {t}" for t in range(FIRST_SHOWN)]
    last = [f"step {t}" for t in range(20 - LAST_SHOWN, 20)]
    assert listed(lines) == first + last
    assert f"... {20 - FIRST_SHOWN - LAST_SHOWN} more (--json lists every one)" in lines


def test_a_short_run_shows_every_transition() -> None:
    count = FIRST_SHOWN + LAST_SHOWN
    assert listed(summary(count)) == [f"step {t}" for t in range(count)]


def test_each_queue_of_a_shared_downstream_shows_its_counts_state_and_own_transitions() -> None:
    refunds = dict(TOTALS, messages_total=200, messages_done=198, dlq_messages=2, esm_updates=1)

    def ledger(concurrency: int) -> dict[str, Any]:
        return {"state": "THROTTLED", "concurrency": concurrency, "version": 3, "last_reason": "x"}

    def transition(t: float, queue: str, previous: int, target: int) -> dict[str, Any]:
        return {
            "t": t,
            "queue": queue,
            "action": "MULTIPLICATIVE_DECREASE",
            "previous": previous,
            "target": target,
            "reason": f"{queue} cut",
        }

    result: dict[str, Any] = {
        "scenario": "demo",
        "policy": "queuemesh-adaptive",
        "ended_at_s": 60.0,
        "wall_s": 90.0,
        "queues": {"orders": TOTALS, "refunds": refunds},
        "totals": TOTALS,
        "ledger": {"orders": ledger(7), "refunds": ledger(2)},
        "transitions": [transition(21.0, "orders", 16, 7), transition(22.0, "refunds", 3, 2)],
    }
    lines = [line.strip() for line in printed(result).splitlines()]
    at = lines.index("refunds:")
    orders = lines[lines.index("orders:") : at]
    assert "200 sent, 198 done, 2 dead-lettered; drained at 50.0 s; 1 mapping changes" in lines
    assert lines[at + 2] == "ledger: THROTTLED at 2 (version 3): x"
    assert listed(orders) == ["orders cut"] and listed(lines[at:]) == ["refunds cut"]


def test_cards_without_a_bound_say_why() -> None:
    card = dict(TOTALS, drain_ratio=1.1)
    why = bound_not_shown(load_scenario("demo"))
    assert why is not None and "2 queues share payments (orders, refunds)" in why
    result = demo_result(simulated={"static": card, "queuemesh": card}, bound_not_shown=why)
    assert f"no bound card (the capacity known): {why}" in printed(result)
    assert bound_not_shown(load_scenario("capacity-drop")) is None


def plot_result() -> dict[str, Any]:
    """A live run's result as the plot reads it: two queues over five seconds."""
    queue = {"max_concurrency": [16] * 5, "in_flight": [3] * 5, "backlog": [9] * 5}
    return {
        "scenario": "demo",
        "timeline": {
            "t": [0.0, 1.0, 2.0, 3.0, 4.0],
            "capacity_rps": [68.0, 68.0, 30.0, 30.0, 30.0],
            "ok_per_s": [60, 60, 30, 30, 30],
            "rejected_per_s": [0, 0, 9, 2, 0],
            "queues": {
                "orders": {**queue, "dead_lettered": [0] * 5},
                "refunds": {**queue, "dead_lettered": [0] * 5},
            },
        },
    }


def test_the_plot_shows_the_storm_the_static_cap_would_have_made() -> None:
    from matplotlib import pyplot

    from load.sim.engine import simulate
    from load.sim.policies import StaticPolicy

    static = simulate(load_scenario("demo"), StaticPolicy())
    figure = demo_figure(plot_result(), static)
    lines = {line.get_label(): line for axis in figure.axes for line in axis.get_lines()}
    orders, refunds = static.queues["orders"], static.queues["refunds"]
    dead = orders.dlq_messages + refunds.dlq_messages
    assert dead > 0
    refused = list(lines[f"rejected /s, static cap, simulated ({dead} dead-lettered)"].get_ydata())
    assert refused[25] == orders.rejected_per_s[25] + refunds.rejected_per_s[25] > 0
    assert sum(refused) == orders.calls_rejected + refunds.calls_rejected
    # The live run's lines beside it, every queue's.
    assert "orders backlog" in lines and "refunds backlog" in lines
    # Without the simulated run, the live run's lines alone.
    alone = demo_figure(plot_result())
    labels = [line.get_label() for axis in alone.axes for line in axis.get_lines()]
    assert labels and not any("simulated" in label for label in labels)
    pyplot.close("all")
