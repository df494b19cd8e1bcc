"""A clock on virtual time: what a simulated account, a benchmark or a test gives the
controller's adapters for their clock and their sleep."""

from __future__ import annotations


class HandClock:
    """A clock moved by hand, and a ``sleep`` that moves it: the time an adapter's retries and
    paced calls, and a container's deadlines, read; its waits take no wall time."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
