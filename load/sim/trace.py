"""What a simulation leaves behind: each queue's trace, the telemetry as delivered, the run's
result, and the mapping setting the simulated poller reads (``load/sim/engine.py`` makes them;
the scorecard, the plots and the demo's comparison read them)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest

from controller.model import Sample
from load.sim.control_plane import ControlPlaneUse
from load.sim.scenario import Scenario


@dataclass(frozen=True, slots=True)
class MappingSetting:
    """What the simulated poller reads from a queue's event source mapping."""

    max_concurrency: int
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class TelemetryDelivery:
    """One sample as the controller's Kinesis stream receives it (virtual seconds)."""

    arrival: float
    sample: Sample


@dataclass(slots=True)
class QueueTrace:
    """What happened to one queue; per-second series are indexed by whole virtual seconds."""

    name: str
    downstream: str
    messages_total: int = 0
    messages_done: int = 0
    # When each message was sent to the dead-letter queue (virtual seconds), one entry each.
    dead_lettered_at: list[float] = field(default_factory=list)
    calls_total: int = 0
    calls_rejected: int = 0
    calls_timed_out: int = 0
    calls_noise: int = 0
    last_done_at: float | None = None
    pending_at_end: int = 0
    calls_per_s: list[int] = field(default_factory=list)
    rejected_per_s: list[int] = field(default_factory=list)
    ok_per_s: list[int] = field(default_factory=list)
    cap_per_s: list[int] = field(default_factory=list)
    running_per_s: list[int] = field(default_factory=list)
    enabled_per_s: list[bool] = field(default_factory=list)
    # Per whole second: messages left waiting at its end (visible, or invisible after a failed
    # call), not counting those in flight; the goodput share's "work waiting".
    waiting_end_per_s: list[int] = field(default_factory=list)
    # Per message done: its age when done (arrival to the end of its invocation), in seconds.
    ages_s: list[float] = field(default_factory=list)

    @property
    def dlq_messages(self) -> int:
        return len(self.dead_lettered_at)


def summed_per_second(series: Iterable[Sequence[int]]) -> list[int]:
    """Per-second series (one a queue) added up second by second, each a zero past its end:
    what every queue together sent, had refused, ... in each second."""
    return [sum(second) for second in zip_longest(*series, fillvalue=0)]


@dataclass(slots=True)
class SimResult:
    scenario: Scenario
    policy: str
    seed: int
    ended_at: float
    queues: dict[str, QueueTrace]
    esm_updates: dict[str, int]
    telemetry: list[TelemetryDelivery]
    control_plane: ControlPlaneUse | None = None
