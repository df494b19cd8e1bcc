"""`queuemesh demo`: the whole loop on an embedded AWS, the storm and the cure in two minutes.

The SAM template is deployed onto moto's server on loopback; the example worker runs behind
the telemetry wrapper in local Lambda containers and calls a real HTTP downstream whose
capacity follows the scenario; its EMF lines go through CloudWatch Logs and Kinesis to the
real controller, which moves the mapping's MaximumConcurrency and writes the DynamoDB ledger.
Every number in the summary comes from the downstream's own counters, the emulated SQS queues
and the ledger. See docs/demo.md.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import math
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from controller.policy import ALGORITHMS, memory_type
from stack.errors import CliError

DEMO_SCENARIO = Path(__file__).resolve().parent.parent / "load" / "scenarios" / "demo.json"
# Shipped scenarios sized for the demo (minutes, a few dozen local worker processes) under the
# shipped scenario's file name: `--scenario NAME` runs the variant when there is one.
DEMO_VARIANTS = DEMO_SCENARIO.parent / "demo-variants"
# The simulator's cards in the summary: the static cap, the original rule, QueueMesh; then,
# where it knows the scenario's capacity, the bound (load/sim/policies.py HindsightPolicy).
SIMULATED_POLICIES = ("static", "seed", "queuemesh")
DEFAULT_PLOT_DIR = Path("out")
VIEW_REFRESH_S = 1.0
PLAIN_VIEW_EVERY_S = 5.0
RATE_WINDOW_S = 3
DEFAULT_GRACE_S = 60.0
# The demo lasts two minutes: the dashboard shows it from its start, in 5 s periods (moto keeps
# every data point, so periods under a minute work here; see docs/dashboard.md).
DASHBOARD_PERIOD_S = 5
DASHBOARD_REFRESH_S = 2.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the whole loop on an embedded local AWS (no account needed)",
        description=(
            "Deploy template.yaml onto an embedded AWS (moto) on 127.0.0.1, run the example "
            "worker against a rate-limited local API whose capacity drops and returns, and "
            "watch the controller steer the mapping's MaximumConcurrency."
        ),
    )
    parser.add_argument(
        "--scenario",
        default=str(DEMO_SCENARIO),
        help="scenario name or JSON file (default: the two-minute demo scenario)",
    )
    parser.add_argument(
        "--duration", type=float, metavar="S", help="run for S seconds instead of the scenario's"
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_S,
        metavar="S",
        help="after the scenario, keep running up to S seconds until the queue is drained "
        f"(default {DEFAULT_GRACE_S:.0f})",
    )
    parser.add_argument(
        "--headless", action="store_true", help="no live view: periodic status lines on stderr"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    parser.add_argument(
        "--plot", metavar="PNG", help="where to write the plot (default: out/demo-<scenario>.png)"
    )
    parser.add_argument("--no-plot", action="store_true", help="do not write a plot")
    parser.add_argument(
        "--template", metavar="FILE", help="SAM template to deploy (default: template.yaml)"
    )
    parser.add_argument(
        "--algorithm",
        choices=sorted(ALGORITHMS),
        help="the controller's algorithm (the template's PolicyAlgorithm; default: its default)",
    )
    parser.add_argument(
        "--record",
        metavar="JSONL",
        help="also write the telemetry stream as a recording (for queuemesh replay)",
    )
    parser.add_argument(
        "--dashboard",
        action="store_true",
        help="also serve the template's dashboard and the ledger on 127.0.0.1 (its URL is "
        "printed); it stays up after the summary until Ctrl-C",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    scenario, variant = demo_scenario(args.scenario)
    if len(scenario.queues) != 1 or len(scenario.downstreams) != 1:
        raise CliError(
            f"scenario {scenario.name} has {len(scenario.queues)} queues and "
            f"{len(scenario.downstreams)} downstreams; the demo runs the template's one example "
            "pipeline: pass a scenario file with one queue and one downstream"
        )
    duration = scenario.duration_s if args.duration is None else args.duration
    # Written so that nan fails too; the run is in real time, so both are finite.
    if not (0 < duration < math.inf and 0 <= args.grace < math.inf):
        raise CliError(
            "--duration must be a positive number of seconds and --grace a non-negative one, "
            "both finite"
        )
    plot = (
        None if args.no_plot else Path(args.plot or DEFAULT_PLOT_DIR / f"demo-{scenario.name}.png")
    )
    out: TextIO = sys.stderr if args.json else sys.stdout
    live = not args.headless and not args.json and out.isatty()
    template = Path(args.template) if args.template else None
    record = Path(args.record) if args.record else None
    view = LiveView(out, live=live)
    if variant is not None:
        view.note(
            f"running {scenario.name}, {args.scenario} sized for the demo "
            f"({scenario.duration_s:.0f} s of load); for the full scenario pass its file, "
            f"load/scenarios/{args.scenario}.json"
        )

    def report(result: dict[str, Any]) -> None:
        # QueueMesh's card runs the algorithm the live controller ran.
        result["simulated"] = simulated_cards(scenario, result["policy"].removeprefix("queuemesh-"))
        if plot is not None:
            result["plot"] = str(write_plot(result, plot))
        if args.json:
            print(json.dumps(result, indent=2, default=str), flush=True)
        else:
            print_summary(result, out)
        if args.dashboard:
            _hold_dashboard(result["dashboard"], sys.stderr if args.json else out)

    run_demo(
        scenario,
        duration,
        args.grace,
        view=view,
        template=template,
        record=record,
        algorithm=args.algorithm,
        dashboard=args.dashboard,
        on_result=report,
    )
    return 0


def demo_scenario(name_or_file: str) -> tuple[Any, Path | None]:
    """The scenario to run, and the demo variant file when a shipped name has one."""
    from load.sim.scenario import ScenarioError, load_scenario, shipped_scenarios

    variant = DEMO_VARIANTS / f"{name_or_file}.json"
    chosen = variant if name_or_file in shipped_scenarios() and variant.is_file() else None
    try:
        return load_scenario(str(chosen or name_or_file)), chosen
    except ScenarioError as error:
        raise CliError(str(error)) from error


def _hold_dashboard(url: str, out: TextIO) -> None:
    """Keep the stack and the page up for a look after the run, until Ctrl-C."""
    out.write(f"queuemesh demo: the dashboard stays up at {url}; Ctrl-C to stop\n")
    out.flush()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        out.write("queuemesh demo: stopping\n")


# -- the run -------------------------------------------------------------------------------


@dataclass(slots=True)
class Timeline:
    """One row per second of the run, for the summary and the plot."""

    t: list[float] = field(default_factory=list)
    capacity: list[float] = field(default_factory=list)
    max_concurrency: list[int] = field(default_factory=list)
    in_flight: list[int] = field(default_factory=list)
    backlog: list[int] = field(default_factory=list)
    dead_lettered: list[int] = field(default_factory=list)
    state: list[str] = field(default_factory=list)


class Producer:
    """Sends the scenario's arrivals to the queue, paced per second, and counts what SQS took."""

    def __init__(self, sqs: Any, queue_url: str, arrivals: Any, duration_s: float) -> None:
        self._sqs = sqs
        self._url = queue_url
        self._arrivals = arrivals
        self._duration = duration_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.errors: list[str] = []

    def send(self, count: int, first: int) -> None:
        for start in range(0, count, 10):
            entries = [
                {"Id": str(index), "MessageBody": json.dumps({"order": first + start + index})}
                for index in range(min(10, count - start))
            ]
            answer = self._sqs.send_message_batch(QueueUrl=self._url, Entries=entries)
            self.sent += len(answer.get("Successful", []))

    def start(self, clock: Any) -> Producer:
        self._thread = threading.Thread(
            target=self._run, args=(clock,), name="demo-producer", daemon=True
        )
        self._thread.start()
        return self

    def _run(self, clock: Any) -> None:
        from load.sim.scenario import value_at

        owed = 0.0
        second = 0
        while second < self._duration and not self._stop.is_set():
            owed += value_at(self._arrivals, second)
            count = int(owed)
            owed -= count
            try:
                self.send(count, first=self.sent)
            except Exception as error:
                self.errors.append(str(error))
            second += 1
            self._stop.wait(max(0.0, second - clock()))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def run_demo(
    scenario: Any,
    duration_s: float,
    grace_s: float,
    *,
    view: LiveView,
    template: Path | None = None,
    record: Path | None = None,
    algorithm: str | None = None,
    dashboard: bool = False,
    on_result: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Deploy, run and tear down; every server, thread and process stops before it returns
    (also on Ctrl-C). ``dashboard`` serves the dashboard page for the run (its URL goes to the
    view); ``on_result`` gets the result while everything still runs."""
    from controller.ledger import DynamoLedger
    from load.downstream import Downstream
    from load.recording import RecordedLine
    from stack.dashboard import DashboardServer, DashboardSettings, DashboardSource
    from stack.emulator import DEFAULT_TEMPLATE, EmbeddedAws
    from stack.runtime import LocalRuntime

    spec = scenario.queues[0]
    origin = time.monotonic()

    def clock() -> float:
        return time.monotonic() - origin

    downstream = Downstream(scenario.downstreams[0], clock=clock, seed=scenario.seed)
    aws = EmbeddedAws()
    runtime: LocalRuntime | None = None
    producer: Producer | None = None
    page: DashboardServer | None = None
    errors: list[str] = []
    wall_started = time.monotonic()
    recording = contextlib.ExitStack()
    try:
        on_record = None
        if record is not None:
            record.parent.mkdir(parents=True, exist_ok=True)
            sink = recording.enter_context(record.open("w", encoding="utf-8"))

            def on_record(shard: str, raw: dict[str, Any]) -> None:
                sink.write(RecordedLine.from_kinesis(shard, raw).to_json() + "\n")

        downstream.start()
        aws.start()
        view.note(f"embedded AWS on {aws.endpoint}; downstream API on {downstream.url}")
        deployment = aws.deploy(
            template or DEFAULT_TEMPLATE,
            parameters={
                "ExampleDownstreamUrl": downstream.url,
                "ExampleMaxConcurrency": str(spec.max_concurrency),
                "PolicyCmax": str(spec.max_concurrency),
                "PolicyCmin": str(spec.min_concurrency),
                **(
                    {"ExampleDownstreamTimeoutMs": f"{spec.timeout_ms:g}"}
                    if spec.timeout_ms is not None
                    else {}
                ),
                **({"PolicyAlgorithm": algorithm} if algorithm else {}),
            },
        )
        controller_env = (
            aws.client("lambda")
            .get_function_configuration(FunctionName=deployment.controller_function)
            .get("Environment", {})
            .get("Variables", {})
        )
        policy = f"queuemesh-{controller_env.get('QUEUEMESH_ALGORITHM', 'aimd')}"
        binding = deployment.queues[0]
        _tune_pipeline(aws, deployment, spec)
        aws.register_queue(deployment, binding.name)
        sqs = aws.client("sqs")
        producer = Producer(sqs, binding.url, spec.arrivals_rps, duration_s)
        producer.send(spec.backlog, first=0)
        view.note(f"stack {deployment.stack_name} deployed; {producer.sent} messages in the queue")
        ledger = DynamoLedger(
            deployment.table_name, client=aws.client("dynamodb"), memory_types=memory_type
        )
        if dashboard:
            settings = DashboardSettings(
                window_s=math.inf,
                start=time.time() - DASHBOARD_PERIOD_S,
                period_s=DASHBOARD_PERIOD_S,
                refresh_s=DASHBOARD_REFRESH_S,
            )
            source = DashboardSource(
                aws.client,
                deployment.stack_name,
                template or DEFAULT_TEMPLATE,
                deployment.table_name,
                settings,
                target=aws.endpoint,
            )
            page = DashboardServer(source)
            view.dashboard = page.start()
            view.note(f"dashboard on {view.dashboard}")
        view.note(f"starting {spec.max_concurrency} worker environments")
        runtime = LocalRuntime(
            aws,
            deployment,
            on_error=errors.append,
            on_record=on_record,
            warm_workers=spec.max_concurrency,
        ).start()
        # The scenario's clock starts with the workers warm, as a busy function's are.
        origin = time.monotonic()
        producer.start(clock)
        poller = runtime.queues[binding.name]
        timeline = Timeline()
        drained_at: float | None = None
        end = duration_s
        while True:
            now = clock()
            mapping, counters, depth = poller.snapshot()
            state = ledger.get_states([binding.name]).get(binding.name)
            capacity = downstream.capacity_at(now)
            timeline.t.append(round(now, 2))
            timeline.capacity.append(capacity)
            timeline.max_concurrency.append(mapping.max_concurrency)
            timeline.in_flight.append(counters.in_flight)
            timeline.backlog.append(depth.visible + depth.in_flight)
            timeline.dead_lettered.append(depth.dead_lettered)
            timeline.state.append(state.state.value if state else "HEALTHY")
            finished = len(poller.done_ids) + depth.dead_lettered
            pending = depth.visible + depth.in_flight + counters.in_flight
            # The last message done so far; arrivals after a momentary empty queue undo it.
            if finished >= producer.sent and pending == 0:
                drained_at = now if drained_at is None else drained_at
            else:
                drained_at = None
            view.show(
                now,
                scenario.name,
                f"{spec.name} ({binding.name})",
                mapping,
                counters,
                depth,
                timeline,
                downstream.counters(),
                state,
                finished,
                producer.sent,
            )
            if now >= end:
                if drained_at is not None or now >= duration_s + grace_s:
                    break
                end = now + VIEW_REFRESH_S
            time.sleep(max(0.0, VIEW_REFRESH_S - (clock() - now)))
        producer.stop()
        ended_at = clock()
        runtime.stop()
        endpoints = {"aws": aws.endpoint, "downstream": downstream.url}
        if page is not None:
            endpoints["dashboard"] = page.url
        result = endpoints | _result(
            scenario,
            policy,
            duration_s,
            ended_at,
            drained_at,
            binding.name,
            poller,
            producer,
            downstream,
            ledger,
            timeline,
            time.monotonic() - wall_started,
            origin,
            errors,
        )
        if on_result is not None:
            on_result(result)
        return result
    finally:
        view.close()
        if producer is not None:
            producer.stop()
        if runtime is not None:
            runtime.stop()
        if page is not None:
            page.stop()
        aws.stop()
        downstream.stop()
        recording.close()


def _tune_pipeline(aws: Any, deployment: Any, spec: Any) -> None:
    """The scenario's queue settings, through the same APIs an operator would use."""
    binding = deployment.queues[0]
    sqs = aws.client("sqs")
    attributes: dict[str, str] = {"VisibilityTimeout": str(int(spec.visibility_timeout_s))}
    if binding.dlq_arn is not None:
        attributes["RedrivePolicy"] = json.dumps(
            {"deadLetterTargetArn": binding.dlq_arn, "maxReceiveCount": spec.max_receive_count}
        )
    sqs.set_queue_attributes(QueueUrl=binding.url, Attributes=attributes)
    lambda_client = aws.client("lambda")
    lambda_client.update_event_source_mapping(
        UUID=binding.esm_uuid,
        BatchSize=spec.batch_size,
        ScalingConfig={"MaximumConcurrency": spec.max_concurrency},
    )


def _result(
    scenario: Any,
    policy: str,
    duration_s: float,
    ended_at: float,
    drained_at: float | None,
    queue: str,
    poller: Any,
    producer: Producer,
    downstream: Any,
    ledger: Any,
    timeline: Timeline,
    wall_s: float,
    origin: float,
    errors: list[str],
) -> dict[str, Any]:
    from controller.settings import PolicyParams
    from load.oracle import ideal_drain_times, invocation_pace, paced_drain_time
    from load.scorecard import drain_ratio, reaction_time
    from load.sim.engine import QueueTrace

    spec = scenario.queues[0]
    counters = downstream.counters()
    last = max([*counters.per_second, int(ended_at)])
    ok_per_s = [
        counters.per_second[s].ok if s in counters.per_second else 0 for s in range(last + 1)
    ]
    timed_out_per_s = [
        counters.per_second[s].timed_out if s in counters.per_second else 0 for s in range(last + 1)
    ]
    # Rejected as the scorecard counts it: answered 429, or timed out on the client side.
    rejected_per_s = [
        counters.per_second[s].rejected + counters.per_second[s].timed_out
        if s in counters.per_second
        else 0
        for s in range(last + 1)
    ]
    calls_per_s = [ok + rejected for ok, rejected in zip(ok_per_s, rejected_per_s, strict=True)]
    _, queue_counters, depth = poller.snapshot()
    epoch_origin = time.time() - (time.monotonic() - origin)
    audit = ledger.audit_trail(queue)
    changes = [entry for entry in audit if entry.new_value != entry.previous_value]
    detection = _detection_latencies(counters.first_rejection_after_drop, changes, epoch_origin)
    ideal = ideal_drain_times(scenario).get(spec.name)
    trace = QueueTrace(
        name=spec.name,
        downstream=spec.downstream,
        calls_per_s=calls_per_s,
        rejected_per_s=rejected_per_s,
    )
    t1 = PolicyParams().t1
    steps = scenario.downstreams[0].capacity_rps
    bounds = [start for start, _ in steps[1:]] + [math.inf]
    paces = [
        running_pace(calls_per_s, rejected_per_s, timeline.t, timeline.in_flight, start, until)
        for (start, _), until in zip(steps, bounds, strict=True)
    ]
    paced_ideal = (
        None if all(pace is None for pace in paces) else paced_drain_time(scenario, spec, paces)
    )
    simulated_pace = invocation_pace(scenario, spec)
    calls_total = sum(calls_per_s)
    calls_rejected = sum(rejected_per_s)
    done = len(poller.done_ids)
    state = ledger.get_states([queue]).get(queue)
    score = {
        "messages_total": producer.sent,
        "messages_done": done,
        "dlq_messages": depth.dead_lettered,
        "messages_pending": depth.visible + depth.in_flight,
        "calls_total": calls_total,
        "calls_rejected": calls_rejected,
        "calls_timed_out": sum(timed_out_per_s),
        "wasted_ratio": round(calls_rejected / calls_total, 4) if calls_total else 0.0,
        "drain_s": None if drained_at is None else round(drained_at, 1),
        "ideal_drain_s": None if ideal is None else round(ideal, 1),
        "drain_ratio": drain_ratio(drained_at, ideal),
        "esm_updates": len(changes),
        "reaction_s": reaction_time(trace, steps, t1, ended_at),
        "detection_latency_s": max(detection) if detection else None,
        "detection_latencies_s": detection,
        "duplicate_deliveries": max(0, queue_counters.deleted - done),
        "peak_in_flight": queue_counters.peak_in_flight,
    }
    return {
        "scenario": scenario.name,
        "policy": policy,
        "duration_s": duration_s,
        "ended_at_s": round(ended_at, 1),
        "wall_s": round(wall_s, 1),
        "queue": queue,
        "queues": {spec.name: score},
        "totals": dict(score),
        "ledger": {
            spec.name: None
            if state is None
            else {
                "state": state.state.value,
                "concurrency": state.concurrency,
                "previous_concurrency": state.previous_concurrency,
                "last_action": state.last_action.value,
                "last_reason": state.last_reason,
                "version": state.version,
            }
        },
        "transitions": [
            {
                "t": round(entry.timestamp - epoch_origin, 1),
                "action": entry.action,
                "previous": entry.previous_value,
                "target": entry.new_value,
                "reason": entry.reason,
            }
            for entry in audit
        ],
        "timeline": {
            "t": timeline.t,
            "capacity_rps": timeline.capacity,
            "max_concurrency": timeline.max_concurrency,
            "in_flight": timeline.in_flight,
            "backlog": timeline.backlog,
            "dead_lettered": timeline.dead_lettered,
            "state": timeline.state,
            "ok_per_s": ok_per_s,
            "rejected_per_s": rejected_per_s,
            "timed_out_per_s": timed_out_per_s,
        },
        "pace": {
            "from_s": [start for start, _ in steps],
            "calls_per_invocation_s": [None if pace is None else round(pace, 2) for pace in paces],
            "simulated_calls_per_invocation_s": (
                None if simulated_pace is None else round(simulated_pace, 2)
            ),
            "ideal_drain_s": None if paced_ideal is None else round(paced_ideal, 1),
            "drain_ratio": drain_ratio(drained_at, paced_ideal),
        },
        "errors": errors[:20],
    }


def running_pace(
    calls_per_s: Sequence[int],
    rejected_per_s: Sequence[int],
    times: Sequence[float],
    in_flight: Sequence[int],
    since: float,
    until: float,
) -> float | None:
    """Calls a second per running invocation, as this host ran them from ``since`` to
    ``until``: over the whole seconds in which invocations ran and the downstream refused none
    of their calls (so that their own pace, not the capacity, set how many they made), each
    second's invocations read from the view's sample nearest its middle (``None``: no such
    second)."""
    calls = invocations = 0
    for second, (made, refused) in enumerate(zip(calls_per_s, rejected_per_s, strict=True)):
        if not since <= second < until or refused or not made:
            continue
        middle = second + 0.5
        after = bisect.bisect_left(times, middle)
        nearby = [index for index in (after - 1, after) if 0 <= index < len(times)]
        if not nearby:
            continue
        running = in_flight[min(nearby, key=lambda index: abs(times[index] - middle))]
        if running:
            calls += made
            invocations += running
    return calls / invocations if invocations else None


def _detection_latencies(
    first_rejections: Mapping[float, float], changes: list[Any], epoch_origin: float
) -> list[float]:
    """Per capacity drop: from the first 429 after it to the first mapping cut after that."""
    latencies: list[float] = []
    for _, first_429 in sorted(first_rejections.items()):
        cuts = [
            entry.timestamp - epoch_origin
            for entry in changes
            if entry.new_value < entry.previous_value
            and entry.timestamp - epoch_origin >= first_429
        ]
        if cuts:
            latencies.append(round(min(cuts) - first_429, 2))
    return latencies


# -- the view ------------------------------------------------------------------------------


class LiveView:
    """The terminal view: redrawn in place on a TTY, a status line every few seconds if not."""

    def __init__(self, out: TextIO, *, live: bool) -> None:
        self._out = out
        self._live = live
        self._drawn = 0
        self._last_plain = -math.inf
        self.dashboard: str | None = None

    def note(self, message: str) -> None:
        self._out.write(f"queuemesh demo: {message}\n")
        self._out.flush()

    def show(
        self,
        now: float,
        scenario: str,
        queue: str,
        mapping: Any,
        counters: Any,
        depth: Any,
        timeline: Timeline,
        answered: Any,
        state: Any,
        finished: int,
        total: int,
    ) -> None:
        second = int(now)
        window = range(max(0, second - RATE_WINDOW_S), second)
        ok = sum(answered.per_second[s].ok for s in window if s in answered.per_second)
        rejected = sum(
            answered.per_second[s].rejected + answered.per_second[s].timed_out
            for s in window
            if s in answered.per_second
        )
        goodput = ok / max(1, len(window))
        share = rejected / (ok + rejected) if ok + rejected else 0.0
        state_name = state.state.value if state else "HEALTHY"
        reason = state.last_reason if state else "no decision yet"
        capacity = timeline.capacity[-1]
        if not self._live:
            if now - self._last_plain >= PLAIN_VIEW_EVERY_S:
                self._last_plain = now
                self._out.write(
                    f"t={now:5.1f}s capacity={capacity:.0f}/s max_concurrency="
                    f"{mapping.max_concurrency} in_flight={counters.in_flight} "
                    f"backlog={depth.visible + depth.in_flight} goodput={goodput:.0f}/s "
                    f"rejected={share:.0%} dlq={depth.dead_lettered} state={state_name}\n"
                )
                self._out.flush()
            return
        bar = "#" * min(40, mapping.max_concurrency) if mapping.enabled else "(paused)"
        lines = [
            f"\x1b[1mQueueMesh demo\x1b[0m  scenario {scenario}  t={now:5.1f}s   "
            f"downstream capacity {capacity:.0f} req/s",
            f"queue {queue}",
            f"  MaximumConcurrency {mapping.max_concurrency:4d}  {bar}",
            f"  in flight {counters.in_flight:4d}   backlog {depth.visible + depth.in_flight:6d}"
            f"   done {finished}/{total}   dead-lettered {depth.dead_lettered}",
            f"  goodput {goodput:6.1f} /s   rejected share "
            f"{_colour(share)}{share:6.1%}\x1b[0m   state \x1b[1m{state_name}\x1b[0m",
            f"  last decision: {reason[:100]}",
        ]
        if self.dashboard is not None:
            lines.append(f"  dashboard: {self.dashboard}")
        if self._drawn:
            self._out.write(f"\x1b[{self._drawn}F")
        for line in lines:
            self._out.write(f"\x1b[2K{line}\n")
        self._out.flush()
        self._drawn = len(lines)

    def close(self) -> None:
        self._out.flush()


def _colour(share: float) -> str:
    if share >= 0.2:
        return "\x1b[31m"
    if share >= 0.05:
        return "\x1b[33m"
    return "\x1b[32m"


# -- summary and plot ----------------------------------------------------------------------


def print_summary(result: Mapping[str, Any], out: TextIO) -> None:
    from load.simulate import BOUND_POLICIES

    score = result["totals"]
    ledger = next(iter(result["ledger"].values()))
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
    if ledger is not None:
        lines.append(
            f"  ledger: {ledger['state']} at {ledger['concurrency']} "
            f"(version {ledger['version']}): {ledger['last_reason']}"
        )
    for transition in result["transitions"][-8:]:
        lines.append(
            f"    t={transition['t']:6.1f}s {transition['action']:<24} "
            f"{transition['previous']:>4} -> {transition['target']:<4} {transition['reason'][:70]}"
        )
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
    if "plot" in result:
        lines.append(f"  plot: {result['plot']}")
    out.write("\n".join(lines) + "\n")
    out.flush()


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


def simulated_cards(scenario: Any, algorithm: str) -> dict[str, dict[str, Any]]:
    """The simulator's totals for the static cap, the original rule and QueueMesh (running
    ``algorithm``) on the demo's scenario, and the bound where it knows the scenario's
    capacity, a second or so in all: what the live run is to be read against."""
    from load.sim.policies import HindsightPolicy
    from load.simulate import run_policies

    bound = (HindsightPolicy.name,) if HindsightPolicy.knows(scenario) else ()
    policies = (*SIMULATED_POLICIES, *bound)
    runs = run_policies([scenario], policies, algorithm, seed=None)
    return {name: run.card["totals"] for name, run in zip(policies, runs, strict=True)}


def _ratio(value: float | None) -> str:
    return "not reached (not every message done)" if value is None else f"{value:.2f}x ideal"


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "0.0%"


def _seconds(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} s"


def write_plot(result: Mapping[str, Any], path: Path) -> Path:
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
    calls.legend(loc="upper right")
    calls.set_title(f"QueueMesh demo: {result['scenario']} (embedded AWS)")
    concurrency.step(
        timeline["t"], timeline["max_concurrency"], where="post", label="MaximumConcurrency"
    )
    concurrency.plot(timeline["t"], timeline["in_flight"], label="in flight", alpha=0.7)
    concurrency.set_ylabel("concurrency")
    concurrency.legend(loc="upper right")
    backlog.plot(timeline["t"], timeline["backlog"], label="queue backlog")
    backlog.plot(timeline["t"], timeline["dead_lettered"], label="dead-lettered")
    backlog.set_ylabel("messages")
    backlog.set_xlabel("seconds")
    backlog.legend(loc="upper right")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path
