"""The demo's run: deploy the template on the embedded AWS, send the scenario's load, watch the
mapping, and tear everything down."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from controller.policy import algorithm_name
from stack.local.demo.result import QueueRun, QueueTimeline, Timeline, demo_result
from stack.local.demo.view import VIEW_REFRESH_S, LiveView, QueueView

if TYPE_CHECKING:
    from load.announce import HeaderStyle
    from stack.local.deployment import Deployment, QueueBinding
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
    producers: dict[str, Producer] = {}
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
        policy = f"queuemesh-{algorithm_name(controller_env)}"
        deployment = _add_queues(aws, deployment, scenario.queues[1:])
        # The template's example queue is the scenario's first; the others follow it.
        bindings = dict(
            zip((queue.name for queue in scenario.queues), deployment.queues, strict=True)
        )
        sqs = aws.client("sqs")
        _enable(aws, bindings.values(), enabled=False)
        for queue in scenario.queues:
            _tune_pipeline(aws, bindings[queue.name], queue)
            # The first queue's bounds are the template's (PolicyCmin, PolicyCmax); the
            # others', registered beside it, are their own, as `queuemesh register --cmax`.
            aws.register_queue(
                deployment,
                bindings[queue.name].name,
                overrides=None
                if queue is spec
                else {"cmin": queue.min_concurrency, "cmax": queue.max_concurrency},
            )
            producers[queue.name] = Producer(
                sqs, bindings[queue.name].url, queue.arrivals_rps, duration_s
            )
            producers[queue.name].send(queue.backlog, first=0)
        ledger = DynamoLedger(
            deployment.table_name, client=aws.client("dynamodb"), memory_types=memory_type
        )
        replay_command = None
        if record is not None:
            replay_command = write_replay_config(
                record,
                controller_env,
                ledger,
                {bindings[queue.name].name: queue.max_concurrency for queue in scenario.queues},
            )
        view.note(
            f"stack {deployment.stack_name} deployed; "
            + ", ".join(
                f"{producer.sent} messages in {name}" for name, producer in producers.items()
            )
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
        # One function runs every queue's batches: warm as many as all their caps.
        warm = sum(queue.max_concurrency for queue in scenario.queues)
        view.note(f"starting {warm} worker environments")
        runtime = LocalRuntime(
            aws, deployment, on_error=errors.append, on_record=on_record, warm_workers=warm
        ).start()
        # The scenario's clock starts with the workers warm, as a busy function's are, and
        # the mappings enabled with it: polling from the runtime's start, the workers' calls
        # before it would all be answered at second 0 (the clock stands there), a burst over
        # the API's capacity that no scenario has (116 calls in one second, 48 refused, read
        # by the group law as an overload).
        origin = time.monotonic()
        _enable(aws, bindings.values(), enabled=True)
        for producer in producers.values():
            producer.start(clock)
        if on_running is not None:
            on_running(aws, deployment)
        timeline = Timeline(queues={name: QueueTimeline() for name in bindings})
        drained: dict[str, float | None] = dict.fromkeys(bindings)
        end = duration_s
        while True:
            now = clock()
            states = ledger.get_states([binding.name for binding in bindings.values()])
            timeline.t.append(round(now, 2))
            timeline.capacity.append(downstream.capacity_at(now))
            views: list[QueueView] = []
            for name, binding in bindings.items():
                poller = runtime.queues[binding.name]
                mapping, counters, depth = poller.snapshot()
                state = states.get(binding.name)
                rows = timeline.queues[name]
                rows.max_concurrency.append(mapping.max_concurrency)
                rows.in_flight.append(counters.in_flight)
                rows.backlog.append(depth.visible + depth.in_flight)
                rows.dead_lettered.append(depth.dead_lettered)
                rows.state.append(state.state.value if state else "HEALTHY")
                finished = len(poller.done_ids) + depth.dead_lettered
                pending = depth.visible + depth.in_flight + counters.in_flight
                # The last message done so far; arrivals after a momentary empty queue undo it.
                if finished >= producers[name].sent and pending == 0:
                    drained[name] = now if drained[name] is None else drained[name]
                else:
                    drained[name] = None
                views.append(
                    QueueView(
                        name,
                        binding.name,
                        mapping,
                        counters,
                        depth,
                        state,
                        finished,
                        producers[name].sent,
                    )
                )
            view.show(now, scenario.name, views, timeline, downstream.counters())
            if now >= end:
                if None not in drained.values() or now >= duration_s + grace_s:
                    break
                end = now + VIEW_REFRESH_S
            time.sleep(max(0.0, VIEW_REFRESH_S - (clock() - now)))
        for producer in producers.values():
            producer.stop()
        ended_at = clock()
        runtime.stop()
        endpoints = {"aws": aws.endpoint, "downstream": downstream.url}
        if page is not None:
            endpoints["dashboard"] = page.url
        runs = {
            name: QueueRun(
                binding.name, runtime.queues[binding.name], producers[name].sent, drained[name]
            )
            for name, binding in bindings.items()
        }
        result = endpoints | demo_result(
            scenario,
            policy,
            duration_s,
            ended_at,
            runs,
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
        if replay_command is not None:
            result["replay_command"] = replay_command
        if on_result is not None:
            on_result(result)
        return result
    finally:
        view.close()
        for producer in producers.values():
            producer.stop()
        if runtime is not None:
            runtime.stop()
        if page is not None:
            page.stop()
        aws.stop()
        downstream.stop()
        recording.close()


def replay_config_path(recording: Path) -> Path:
    """Where ``--record X.jsonl`` writes the run's replay configuration: ``X.config.json``."""
    return recording.with_name(f"{recording.stem}.config.json")


def write_replay_config(
    recording: Path, controller_env: dict[str, str], ledger: Any, concurrency: dict[str, int]
) -> str:
    """Write the replay configuration of the queues just registered (the controller's policy
    and algorithm, each queue's bounds and starting mapping) beside the recording; return the
    command that replays the recording with it."""
    from load.replay import config_document, deployed_config

    path = replay_config_path(recording)
    config = deployed_config(controller_env, ledger.list_configs(), concurrency)
    path.write_text(json.dumps(config_document(config), indent=2) + "\n", encoding="utf-8")
    return shlex.join(["queuemesh", "replay", str(recording), "--config", str(path)])


def _add_queues(aws: Any, deployment: Deployment, queues: Sequence[Any]) -> Deployment:
    """The scenario's queues after its first, each added beside the template's example queue as
    an operator adds one: a queue with its dead-letter queue, mapped to the example worker
    function (so it calls the same downstream), named ``<stack>-<queue>``."""
    from stack.local.deployment import queue_binding

    if not queues:
        return deployment
    sqs = aws.client("sqs")
    lambda_client = aws.client("lambda")
    worker = deployment.queues[0].function_name
    added: list[QueueBinding] = []
    for spec in queues:
        name = f"{deployment.stack_name}-{spec.name}"
        dlq_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
        redrive = {
            "deadLetterTargetArn": _queue_arn(sqs, dlq_url),
            "maxReceiveCount": spec.max_receive_count,
        }
        url = sqs.create_queue(QueueName=name, Attributes={"RedrivePolicy": json.dumps(redrive)})[
            "QueueUrl"
        ]
        mapping = lambda_client.create_event_source_mapping(
            EventSourceArn=_queue_arn(sqs, url),
            FunctionName=worker,
            BatchSize=spec.batch_size,
            FunctionResponseTypes=["ReportBatchItemFailures"],
            ScalingConfig={"MaximumConcurrency": spec.max_concurrency},
        )
        added.append(queue_binding(sqs, mapping))
    # moto would run the new mappings itself; the local runtime is their one poller.
    aws.detach_moto_pollers()
    return dataclasses.replace(deployment, queues=(*deployment.queues, *added))


def _enable(aws: Any, bindings: Iterable[QueueBinding], *, enabled: bool) -> None:
    """Turn the queues' mappings on or off, as the console's switch does."""
    lambda_client = aws.client("lambda")
    for binding in bindings:
        lambda_client.update_event_source_mapping(UUID=binding.esm_uuid, Enabled=enabled)


def _queue_arn(sqs: Any, url: str) -> str:
    return str(
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
    )


def _tune_pipeline(aws: Any, binding: QueueBinding, spec: Any) -> None:
    """The scenario's queue settings, through the same APIs an operator would use."""
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
