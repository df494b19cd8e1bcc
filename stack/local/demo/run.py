"""The demo's run: deploy the template on the embedded AWS, send the scenario's load, watch the
mapping, and tear everything down."""

from __future__ import annotations

import contextlib
import json
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stack.local.demo.result import Timeline, demo_result
from stack.local.demo.view import VIEW_REFRESH_S, LiveView

if TYPE_CHECKING:
    from load.announce import HeaderStyle
    from stack.local.deployment import Deployment
    from stack.local.emulator import EmbeddedAws

# The demo lasts two minutes: the dashboard shows it from its start, in 5 s periods (moto keeps
# every data point, so periods under a minute work here; see docs/dashboard.md).
DASHBOARD_PERIOD_S = 5
DASHBOARD_REFRESH_S = 2.0


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
    telemetry_shards: int = 1,
    parallelization_factor: int = 1,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    announce: HeaderStyle | None = None,
    on_running: Callable[[EmbeddedAws, Deployment], None] | None = None,
) -> dict[str, Any]:
    """Deploy, run and tear down; every server, thread and process stops before it returns
    (also on Ctrl-C). ``dashboard`` serves the dashboard page for the run (its URL goes to the
    view); ``telemetry_shards`` shapes the telemetry stream, ``parallelization_factor`` the
    reading of both streams (the reducer's and the controller's); ``on_result`` gets the
    result while the embedded AWS and the page still run (the runtime has stopped: nothing
    more is polled or invoked); ``announce`` is the rate-limit headers the downstream sends
    (none by default); ``on_running`` is called once, as the load starts, with the runtime up
    (the workers polling, the streams read, the functions invoked): traffic of the caller's
    own sent then is handled as the stack handles the demo's."""
    from controller.ledger import DynamoLedger
    from controller.policy import memory_type
    from load.downstream import Downstream
    from load.recording import RecordedLine
    from stack.local.dashboard import DashboardServer, DashboardSettings, DashboardSource
    from stack.local.emulator import DEFAULT_TEMPLATE, EmbeddedAws
    from stack.local.runtime import LocalRuntime

    spec = scenario.queues[0]
    # Set when the scenario starts, with the workers warm. Until then the clock stands at 0 and
    # the API answers as at the scenario's start: the pollers' first calls, made as the
    # runtime starts, were answered at the seconds since this process began, past the drop
    # after a slow deploy (the announced demo's first documents said 28 calls a second).
    origin: float | None = None

    def clock() -> float:
        return 0.0 if origin is None else time.monotonic() - origin

    downstream = Downstream(
        scenario.downstreams[0], clock=clock, seed=scenario.seed, announce=announce
    )
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
                "TelemetryShardCount": str(telemetry_shards),
                "TelemetryParallelizationFactor": str(parallelization_factor),
                "ControllerParallelizationFactor": str(parallelization_factor),
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
        if on_running is not None:
            on_running(aws, deployment)
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
        result = endpoints | demo_result(
            scenario,
            policy,
            duration_s,
            ended_at,
            drained_at,
            binding.name,
            poller,
            producer.sent,
            downstream,
            ledger,
            timeline,
            time.monotonic() - wall_started,
            origin,
            errors,
        )
        result.update(
            telemetry_shards=telemetry_shards, parallelization_factor=parallelization_factor
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
