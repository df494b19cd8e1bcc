"""The local Lambda runtime: the pollers Lambda runs in AWS, over the embedded AWS's APIs.

``LocalRuntime`` wires a deployment's parts, one module each:

- ``containers``: functions run in containers, one spawned process each, one invocation at a
  time, cold-started on demand and reused while warm, as Lambda's execution environments are.
- ``logs``: each invocation's output goes to its function's log group with PutLogEvents, from
  where the emulator's subscription filter delivers it to Kinesis.
- ``sqs_poller``: ``QueuePoller``, an SQS event source mapping (the workers, and the
  controller on its wake-up queue); the event it passes and the partial batch response it
  reads are ``sqs_event``'s, the log shipping and deletes it hands off run on ``handoff``'s
  threads.
- ``kinesis_poller``: ``StreamPoller``, a Kinesis event source mapping (the reducer on the
  telemetry stream, the controller on the reduced stream).
- ``schedule``: ``ScheduleRunner``, EventBridge's ``rate(...)`` rules (the controller's tick).
- ``service_metrics``: ``ServiceMetrics``, the ``AWS/SQS`` and ``AWS/Lambda`` metrics AWS
  publishes of the queues and of the invocations, for the dashboard and the alarms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stack.local.deployment import Deployment
from stack.local.emulator import EmbeddedAws
from stack.local.metrics import EmfMetricsPublisher
from stack.local.runtime.containers import ContainerPool, FunctionSpec, InvocationFailed
from stack.local.runtime.kinesis_poller import StreamPoller, first_failure
from stack.local.runtime.logs import LogShipper, ensure_log_group
from stack.local.runtime.schedule import ScheduleRunner, rate_seconds
from stack.local.runtime.service_metrics import InvocationMetrics, ServiceMetrics
from stack.local.runtime.sqs_event import failed_item_ids, sqs_event
from stack.local.runtime.sqs_poller import QueuePoller

__all__ = [
    "ContainerPool",
    "FunctionSpec",
    "InvocationFailed",
    "LocalRuntime",
    "LogShipper",
    "QueuePoller",
    "ScheduleRunner",
    "ServiceMetrics",
    "StreamPoller",
    "failed_item_ids",
    "first_failure",
    "rate_seconds",
    "sqs_event",
]


class LocalRuntime:
    """Every poller of a deployment, and the containers they run. Stop it in a ``finally``."""

    def __init__(
        self,
        aws: EmbeddedAws,
        deployment: Deployment,
        *,
        on_error: Callable[[str], None] | None = None,
        on_record: Callable[[str, dict[str, Any]], None] | None = None,
        warm_workers: int = 0,
    ) -> None:
        """``warm_workers``: containers started per worker function before any poller, so the
        first invocations do not pay cold starts (a function that has been busy has them)."""
        self._aws = aws
        self._warm_workers = warm_workers
        self._deployment = deployment
        self._on_error = on_error
        self._on_record = on_record
        self._controller_log_group = deployment.controller_log_group
        self._pools: list[ContainerPool] = []
        self.queues: dict[str, QueuePoller] = {}
        # The controller's poller on its wake-up queue, when the deployment has one.
        self.wake_ups: QueuePoller | None = None
        # The reducer's poller (telemetry stream) and the controller's (reduced stream).
        self.telemetry: StreamPoller | None = None
        self.stream: StreamPoller | None = None
        self.schedules: ScheduleRunner | None = None
        self.invocations = InvocationMetrics()
        self.service_metrics: ServiceMetrics | None = None

    def start(self) -> LocalRuntime:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        aws, deployment = self._aws, self._deployment
        lambda_client = aws.client("lambda")
        logs = aws.client("logs")
        environment = {**aws.environment(), "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST"}
        metrics = EmfMetricsPublisher(aws.client("cloudwatch"))

        def poller(
            stream: tuple[str, str, str],
            function: str,
            log_group: str,
            *,
            rotate: bool = False,
            **hooks: Any,
        ) -> StreamPoller:
            """A stream function's poller, its containers warm when workers are."""
            ensure_log_group(logs, log_group)
            extra = {**environment, "AWS_LAMBDA_FUNCTION_NAME": function}
            containers = ContainerPool(
                FunctionSpec.read(lambda_client, function, log_group, extra),
                self.invocations.invoked,
                rotate=rotate,
            )
            self._pools.append(containers)
            shipper = LogShipper(logs, log_group, metrics)
            polling = StreamPoller(
                aws,
                *stream,
                containers,
                shipper,
                on_error=self._on_error,
                on_batch_age=self.invocations.batch_age,
                **hooks,
            )
            if self._warm_workers:
                containers.prewarm(polling.concurrency)
            return polling

        self.stream = poller(
            (
                deployment.reduced_stream_name,
                deployment.reduced_stream_arn,
                deployment.controller_esm_uuid,
            ),
            deployment.controller_function,
            self._controller_log_group,
            # Lambda pins no shard to a container: each batch goes to the controller container
            # idle longest, so every batch here reads the reduced stream back as AWS may make
            # it (docs/architecture.md, "Scaling out the controller").
            rotate=True,
        ).start()
        self.telemetry = poller(
            (deployment.stream_name, deployment.stream_arn, deployment.reducer_esm_uuid),
            deployment.reducer_function,
            deployment.reducer_log_group,
            on_record=self._on_record,
        ).start()
        workers: dict[str, ContainerPool] = {}
        for binding in deployment.queues:
            if binding.function_name not in workers:
                workers[binding.function_name] = ContainerPool(
                    FunctionSpec.read(
                        lambda_client,
                        binding.function_name,
                        deployment.worker_log_group,
                        {
                            **environment,
                            "AWS_LAMBDA_FUNCTION_NAME": binding.function_name,
                            "LAMBDA_TASK_ROOT": deployment.code_dirs.get(binding.function_name, ""),
                        },
                    ),
                    self.invocations.invoked,
                )
                self._pools.append(workers[binding.function_name])
                workers[binding.function_name].prewarm(self._warm_workers)
        for binding in deployment.queues:
            self.queues[binding.name] = QueuePoller(
                aws,
                binding,
                workers[binding.function_name],
                LogShipper(logs, deployment.worker_log_group, metrics),
                on_error=self._on_error,
            ).start()
        if deployment.wake_up_queue is not None:
            # A wake-up is handed to the controller's containers, as its stream's batches and
            # its scheduled tick are.
            self.wake_ups = QueuePoller(
                aws,
                deployment.wake_up_queue,
                self.stream.pool,
                self.stream.shipper,
                on_error=self._on_error,
            ).start()
        self.schedules = ScheduleRunner(
            aws,
            {deployment.controller_function: self.stream.pool},
            {deployment.controller_function: self.stream.shipper},
            on_error=self._on_error,
        ).start()
        self.service_metrics = ServiceMetrics(aws, self.invocations, on_error=self._on_error)
        self.service_metrics.start()

    def stop(self) -> None:
        """Stop polling, give invocations in progress a few seconds to finish, then stop every
        container (which ends any invocation still running) and join what is left."""
        pollers: list[QueuePoller | StreamPoller | ScheduleRunner] = list(self.queues.values())
        if self.wake_ups is not None:
            pollers.append(self.wake_ups)
        pollers += [poller for poller in (self.telemetry, self.stream) if poller is not None]
        if self.schedules is not None:
            pollers.append(self.schedules)
        for poller in pollers:
            poller.request_stop()
        for poller in pollers:
            poller.stop()
        for pool in self._pools:
            pool.close()
        for poller in pollers:
            poller.stop()
        if self.service_metrics is not None:
            self.service_metrics.stop()

    def __enter__(self) -> LocalRuntime:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def cold_starts(self) -> int:
        return sum(pool.cold_starts for pool in self._pools)
