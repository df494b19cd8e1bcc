"""The live demo's summary: what a person reads after the run."""

from __future__ import annotations

import io
from typing import Any

from stack.local.demo.summary import FIRST_SHOWN, LAST_SHOWN, print_summary

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


def summary(transitions: int) -> list[str]:
    result: dict[str, Any] = {
        "scenario": "demo",
        "policy": "queuemesh-adaptive",
        "ended_at_s": 60.0,
        "wall_s": 90.0,
        "totals": TOTALS,
        "ledger": {"orders": None},
        "transitions": [
            {"t": float(t), "action": "HOLD", "previous": 7, "target": 7, "reason": f"step {t}"}
            for t in range(transitions)
        ],
    }
    out = io.StringIO()
    print_summary(result, out)
    return [line.strip() for line in out.getvalue().splitlines()]


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
