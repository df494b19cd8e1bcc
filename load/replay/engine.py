"""The replay itself: batches and scheduled ticks through a ``ControllerApp`` on a virtual
clock, with in-memory adapters unless given others."""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from controller.model import Decision, Mode, QueueConfig, QueueStateName
from load.progress import ProgressCallback
from load.recording import RecordedLine, kinesis_event
from load.replay.batching import Batch, kinesis_batches
from load.replay.config import QueueSetup, ReplayConfig, ReplayError
from load.replay.report import ReplayedDecision

REPLAY_ACCOUNT = "000000000000"
REPLAY_REGION = "us-east-1"
STREAM_ARN = f"arn:aws:kinesis:{REPLAY_REGION}:{REPLAY_ACCOUNT}:stream/queuemesh-replay"
# Scheduled ticks a replay runs at most: a week of template.yaml's one-a-minute schedule. The
# ticks are what makes a replay's work grow with the time a recording spans rather than with
# its records, so this bounds it (a longer recording: a shorter stretch, or a sparser schedule).
MAX_SCHEDULED_TICKS = 7 * 24 * 60


@dataclass(slots=True)
class ReplayReport:
    decisions: list[ReplayedDecision] = field(default_factory=list)
    records: int = 0
    batches: int = 0
    samples: int = 0
    ticks: int = 0
    redelivered: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    counters: Counter[str] = field(default_factory=Counter)
    queues: list[str] = field(default_factory=list)
    start: float | None = None
    # With ``dry_run``: what the controller would have done, one line per step, by time.
    plan_lines: list[tuple[float, str]] = field(default_factory=list)


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def queues_in(records: Iterable[RecordedLine], namespace: str) -> list[str]:
    """Every queue some record of the recording carries telemetry (or reduced totals) for."""
    from controller.telemetry import DecodeResult, decode_record_data, reduced

    seen: set[str] = set()
    for record in records:
        if reduced.is_reduced(record.data):
            decoded = reduced.decode(record.data, Counter())
            if decoded is not None:
                seen.update(second.queue for second in decoded.seconds)
            continue
        result = decode_record_data(record.data, namespace=namespace, into=DecodeResult())
        seen.update(sample.queue for sample in result.samples)
    return sorted(seen)


def in_memory_adapters(
    config: ReplayConfig, queues: Sequence[str], clock: VirtualClock
) -> tuple[Any, Any]:
    """The in-memory ledger and actuator, with the replayed queues registered."""
    from controller.actuator import InMemoryActuator
    from controller.ledger import InMemoryLedger
    from controller.policy import memory_type

    ledger = InMemoryLedger(memory_types=memory_type)
    actuator = InMemoryActuator(clock=clock)
    setups = config.queues if config.queues is not None else dict.fromkeys(queues, QueueSetup())
    for queue, setup in sorted(setups.items()):
        esm_uuid = setup.esm_uuid or f"replay-{queue}"
        cmax = config.params.with_overrides(setup.overrides).cmax
        concurrency = setup.concurrency if setup.concurrency is not None else cmax
        actuator.add_mapping(
            esm_uuid,
            concurrency,
            event_source_arn=f"arn:aws:sqs:{REPLAY_REGION}:{REPLAY_ACCOUNT}:{queue}",
        )
        ledger.put_config(
            QueueConfig(
                queue=queue,
                esm_uuid=esm_uuid,
                mode=setup.mode,
                pinned_concurrency=concurrency if setup.mode is Mode.PINNED else None,
                overrides=dict(setup.overrides),
            )
        )
    return ledger, actuator


def replay(
    records: Sequence[RecordedLine],
    config: ReplayConfig,
    *,
    ledger: Any = None,
    actuator: Any = None,
    progress: ProgressCallback | None = None,
    dry_run: bool = False,
) -> ReplayReport:
    """Feed ``records`` through a fresh ``ControllerApp``; in-memory adapters unless given;
    ``progress`` hears of each invocation. A ``dry_run`` only reads the adapters: its plans
    are shown (``plan_lines``), never carried out, and the controller remembers each step as
    done."""
    import logging

    from aws_lambda_powertools import Logger

    from controller.app import ControllerApp
    from controller.executor import DisplayExecutor
    from controller.loop import ControlLoop
    from controller.policy import algorithm_named

    batches = kinesis_batches(records, config.batch_size, config.batch_window_s)
    invocations = _invocations(batches, config.schedule_s)
    clock = VirtualClock()
    report = ReplayReport(records=len(records), batches=len(batches))
    report.queues = queues_in(records, config.namespace)
    if ledger is None or actuator is None:
        ledger, actuator = in_memory_adapters(config, report.queues, clock)

    def show(line: str) -> None:
        report.plan_lines.append((clock.now, line))

    loop = ControlLoop(
        ledger,
        actuator,
        config.params,
        algorithm=algorithm_named(config.algorithm),
        clock=clock,
        executor=DisplayExecutor(show) if dry_run else None,
    )
    # The controller's logs are for CloudWatch; here only its warnings matter, on stderr.
    logger = Logger(
        service="queuemesh-replay",
        level="WARNING",
        logger_handler=logging.StreamHandler(sys.stderr),
    )
    app = ControllerApp(loop, clock=clock, namespace=config.namespace, emit=_discard, logger=logger)
    last_state: dict[str, str] = {}

    def keep(time: float, executed: Sequence[Decision]) -> None:
        for decision in executed:
            before = last_state.get(decision.queue, QueueStateName.HEALTHY.value)
            changed = decision.changes_mapping or decision.state.value != before
            last_state[decision.queue] = decision.state.value
            report.decisions.append(ReplayedDecision.of(time, decision, changed))

    report.start = records[0].arrival if records else None
    for done, invocation in enumerate(invocations):
        if progress is not None:
            progress(done, len(invocations), "controller invocations")
        clock.now = invocation.time
        if invocation.batch is None:
            outcome = app.tick(math.inf)
            report.ticks += 1
        else:
            event = kinesis_event(invocation.batch.records, STREAM_ARN)
            outcome = app.process_kinesis(event, math.inf)
            report.samples += outcome.samples
            report.redelivered += outcome.redelivered
            report.skipped.update(outcome.skipped)
        keep(invocation.time, outcome.decisions)
    report.counters = Counter(loop.counters)
    return report


@dataclass(frozen=True, slots=True)
class Invocation:
    time: float
    batch: Batch | None  # None: a scheduled tick


def _invocations(batches: Sequence[Batch], schedule_s: float | None) -> list[Invocation]:
    """The batches, and scheduled ticks every ``schedule_s`` from the first batch to the last
    (a tick at the same moment as a batch runs after it); ``ReplayError`` when those would be
    more than ``MAX_SCHEDULED_TICKS``."""
    invocations = [Invocation(batch.time, batch) for batch in batches]
    if schedule_s is None or not batches:
        return invocations
    first, last = batches[0].time, batches[-1].time
    ticks = math.floor((last - first) / schedule_s)
    if ticks > MAX_SCHEDULED_TICKS:
        raise ReplayError(
            f"the recording spans {last - first:.0f} s ({(last - first) / 86400:.1f} days): "
            f"a scheduled tick every {schedule_s:g} s makes {ticks} ticks, more than "
            f"{MAX_SCHEDULED_TICKS} (a week at one a minute); replay a shorter stretch, or "
            "raise 'schedule_s' (or set it to null) in --config"
        )
    invocations += [Invocation(first + n * schedule_s, None) for n in range(1, ticks + 1)]
    return sorted(invocations, key=lambda invocation: (invocation.time, invocation.batch is None))


def _discard(_: str) -> None:
    """The controller's dashboard metrics have no CloudWatch to go to in a replay."""
