"""The live demo's pace: how many calls a second each running invocation made on this host."""

from __future__ import annotations

import math

import pytest

from stack.local.demo.result import running_pace


def test_the_pace_is_calls_over_the_running_invocations_in_seconds_nothing_was_refused() -> None:
    # Second 0: 40 calls by 10 invocations; second 1: 30 by 10, 5 refused (the capacity set
    # it, not the invocations: left out); second 2: 60 calls by 20.
    calls, refused = [40, 30, 60], [0, 5, 0]
    times, in_flight = [0.4, 1.6, 2.5], [10, 10, 20]
    assert running_pace(calls, refused, times, in_flight, 0, math.inf) == pytest.approx(100 / 30)
    # Each second reads the sample nearest its middle: second 0's is at 0.4 s, not 1.6 s.
    assert running_pace(calls, refused, [0.4, 1.6, 2.5], [10, 99, 20], 0, 1) == 4.0


def test_the_pace_is_read_within_its_span_and_is_none_without_a_clean_second() -> None:
    calls, refused, times, in_flight = [40, 60], [0, 0], [0.5, 1.5], [10, 20]
    assert running_pace(calls, refused, times, in_flight, 1, 2) == 3.0
    assert running_pace(calls, [1, 1], times, in_flight, 0, 2) is None
    assert running_pace(calls, refused, times, [0, 0], 0, 2) is None
    assert running_pace([], [], [], [], 0, math.inf) is None
