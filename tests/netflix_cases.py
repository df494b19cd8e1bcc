"""Evidence for the Netflix concurrency-limits ports' tests: one window of invocations, and
the situation a port judges it in."""

from __future__ import annotations

from typing import TypeVar

from controller.model import Sample
from controller.policy import Situation, Verdict, algorithm_named
from controller.settings import PolicyParams
from controller.window import QueueWindow, WindowStats
from tests.factories import state

M = TypeVar("M")
PARAMS = PolicyParams()


def evidence(
    *,
    rtt_ms: float | None = 100.0,
    invocations: int = 10,
    calls: int = 10,
    dropped: int = 0,
    timed_out: int = 0,
    failed: int = 0,
    busy_ms: float = 1000.0,
) -> WindowStats:
    """``invocations`` invocations started one a second from t=1000, each of ``calls`` calls
    (``dropped`` of them 429, ``timed_out`` timed out, ``failed`` a 5xx other than 503), at
    ``rtt_ms`` each, busy ``busy_ms``: in use = invocations x busy_ms / (the span from the
    first start to the last emission)."""
    window = QueueWindow()
    for index in range(invocations):
        ok = calls - dropped - timed_out - failed
        window.add(
            Sample(
                queue="orders",
                event_time=1000.0 + index + busy_ms / 1000.0,
                requests=calls,
                ok=ok,
                throttled=dropped,
                server_errors=failed,
                overloaded=0,
                latency_ms_sum=0.0 if rtt_ms is None else rtt_ms * calls,
                latency_count=0 if rtt_ms is None else calls,
                invocation_ms=busy_ms,
                timed_out=timed_out,
            )
        )
    return window.stats(1000.0, 2000.0)


def judged(
    name: str, stats: WindowStats, memory: M, concurrency: int, breaches: int = 0
) -> Verdict[M]:
    """The verdict of the port ``name`` on admissible ``stats`` at t=2000, for a queue at
    ``concurrency`` that remembers ``memory``."""
    queue = state(concurrency, breaches=breaches)
    situation = Situation(queue, memory, stats, None, QueueWindow().snapshot(), 2000.0, PARAMS)
    verdict: Verdict[M] = algorithm_named(name).decide(situation)
    return verdict
