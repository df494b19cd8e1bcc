"""The demo's terminal view (stack/local/demo/view.py): what a user watching `make demo` reads.

Not on a terminal (CI, a pipe), one status line every few seconds; on one, a panel redrawn in
place. Both read the downstream's answers of the last whole seconds, the capacity now, and each
queue's mapping, work and state.
"""

from __future__ import annotations

import io
import re

from controller.model import QueueState, QueueStateName
from load.downstream import Counters, SecondCount
from stack.local.demo.result import Timeline
from stack.local.demo.view import PLAIN_VIEW_EVERY_S, RATE_WINDOW_S, LiveView, QueueView
from stack.local.runtime.sqs_poller import MappingSnapshot, QueueCounters, QueueDepth

CURSOR_UP = re.compile(r"\x1b\[(\d+)F")


def queue(
    name: str,
    max_concurrency: int,
    *,
    enabled: bool = True,
    state: QueueState | None = None,
) -> QueueView:
    return QueueView(
        name,
        f"queuemesh-local-{name}",
        MappingSnapshot(max_concurrency, enabled, batch_size=5, allowed=max_concurrency),
        QueueCounters(in_flight=3),
        QueueDepth(visible=100, in_flight=20, dead_lettered=1),
        state,
        finished=40,
        total=200,
    )


def answered(seconds: dict[int, tuple[int, int, int]]) -> Counters:
    """The downstream's answers: per second, (2xx, 429, timed out)."""
    return Counters(per_second={s: SecondCount(*counts) for s, counts in seconds.items()})


def timeline(capacity: float) -> Timeline:
    return Timeline(t=[0.0], capacity=[capacity])


THROTTLED = QueueState(
    "queuemesh-local-orders",
    "esm-orders",
    QueueStateName.THROTTLED,
    5,
    16,
    last_reason="Overload: newest pressure 65.0% >= T1 (5.0%); cut 16 -> 5.",
)


class TestPlainLines:
    """Off a terminal: a line every ``PLAIN_VIEW_EVERY_S``, nothing between."""

    def test_a_line_every_few_seconds_with_the_rates_of_the_last_whole_seconds(self) -> None:
        out = io.StringIO()
        view = LiveView(out, live=False)
        # Seconds 7-9 are the window at t=10.4: 90 answered 2xx, 30 refused, 0 timed out;
        # second 10 is still going on and second 5 is out of the window.
        calls = answered(
            {5: (100, 100, 0), 7: (30, 10, 0), 8: (30, 10, 0), 9: (30, 5, 5), 10: (9, 90, 0)}
        )
        queues = [queue("orders", 5, state=THROTTLED), queue("refunds", 2)]
        for now in (10.4, 10.4 + PLAIN_VIEW_EVERY_S / 2, 10.4 + PLAIN_VIEW_EVERY_S):
            view.show(now, "demo", queues, timeline(30.0), calls)
        lines = out.getvalue().splitlines()
        assert len(lines) == 2
        first = lines[0]
        assert first.startswith("t= 10.4s capacity=30/s goodput=30/s rejected=25% ")
        assert "[orders] max_concurrency=5 in_flight=3 backlog=120 dlq=1 state=THROTTLED" in first
        # A queue the controller has not decided yet reads as healthy.
        assert "[refunds] max_concurrency=2 in_flight=3 backlog=120 dlq=1 state=HEALTHY" in first
        assert lines[1].startswith(f"t={10.4 + PLAIN_VIEW_EVERY_S:5.1f}s ")

    def test_no_answers_yet_reads_as_nothing_refused(self) -> None:
        out = io.StringIO()
        LiveView(out, live=False).show(0.3, "demo", [queue("orders", 16)], timeline(68), Counters())
        assert out.getvalue().startswith("t=  0.3s capacity=68/s goodput=0/s rejected=0% ")


class TestPanel:
    """On a terminal: a panel of the first queue in full and each other in a line, redrawn
    over itself."""

    def test_the_panel_is_redrawn_in_place_line_for_line(self) -> None:
        out = io.StringIO()
        view = LiveView(out, live=True)
        queues = [queue("orders", 5, state=THROTTLED), queue("refunds", 2)]
        calls = answered({s: (28, 2, 0) for s in range(RATE_WINDOW_S + 1)})
        view.show(float(RATE_WINDOW_S), "demo", queues, timeline(30.0), calls)
        first = out.getvalue()
        drawn = first.count("\n")
        assert CURSOR_UP.search(first) is None
        view.show(float(RATE_WINDOW_S) + 1, "demo", queues, timeline(30.0), calls)
        second = out.getvalue()[len(first) :]
        assert CURSOR_UP.match(second) and CURSOR_UP.match(second)[1] == str(drawn)
        # Each line is cleared before it is written: a shorter one leaves nothing behind.
        assert second.count("\x1b[2K") == second.count("\n") == drawn

    def test_the_panel_names_the_cut_and_who_made_it(self) -> None:
        out = io.StringIO()
        queues = [queue("orders", 5, state=THROTTLED), queue("refunds", 2, enabled=False)]
        calls = answered({0: (28, 2, 0)})
        LiveView(out, live=True).show(1.0, "demo", queues, timeline(30.0), calls)
        panel = out.getvalue()
        assert "downstream capacity 30 req/s" in panel
        assert "queue orders (queuemesh-local-orders)" in panel
        assert "MaximumConcurrency    5  #####\n" in panel
        assert "done 40/200   dead-lettered 1" in panel
        assert "last decision: Overload: newest pressure 65.0%" in panel
        assert "queue refunds (queuemesh-local-refunds): MaximumConcurrency 2" in panel

    def test_the_refused_share_is_coloured_by_how_bad_it_is(self) -> None:
        def coloured(ok: int, rejected: int) -> str:
            out = io.StringIO()
            calls = answered({0: (ok, rejected, 0)})
            LiveView(out, live=True).show(1.0, "demo", [queue("orders", 5)], timeline(30), calls)
            share_line = out.getvalue().splitlines()[1]
            match = re.search(r"rejected share (\x1b\[3\dm)", share_line)
            assert match is not None
            return match[1]

        assert coloured(100, 0) == "\x1b[32m"  # green
        assert coloured(95, 5) == "\x1b[33m"  # yellow from 5%
        assert coloured(80, 20) == "\x1b[31m"  # red from 20%

    def test_a_paused_mapping_shows_paused_not_a_bar(self) -> None:
        out = io.StringIO()
        view = queue("orders", 2, enabled=False)
        LiveView(out, live=True).show(1.0, "demo", [view], timeline(30), Counters())
        assert "MaximumConcurrency    2  (paused)" in out.getvalue()
