"""EventBridge's scheduled rules, locally: ``rate(...)`` rules invoke their target function."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any

from stack.local.emulator import EmbeddedAws
from stack.local.runtime.containers import STOP_JOIN_S, ContainerPool
from stack.local.runtime.logs import LogShipper

RATE_UNITS_S = {"minute": 60.0, "minutes": 60.0, "hour": 3600.0, "hours": 3600.0, "day": 86400.0}


def rate_seconds(expression: str) -> float | None:
    """The period of an EventBridge ``rate(N unit)`` expression (``cron(...)`` is not run)."""
    match = re.fullmatch(r"rate\((\d+) (\w+)\)", expression.strip())
    if match is None or match.group(2) not in RATE_UNITS_S:
        return None
    return int(match.group(1)) * RATE_UNITS_S[match.group(2)]


class ScheduleRunner:
    """EventBridge's scheduler for rules whose target is a function of this runtime: each
    ``rate(...)`` rule invokes its target with the target's Input every period."""

    def __init__(
        self,
        aws: EmbeddedAws,
        pools: Mapping[str, ContainerPool],
        shippers: Mapping[str, LogShipper],
        *,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        self._pools = pools
        self._shippers = shippers
        self._on_error = on_error or (lambda message: None)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.invocations = 0
        events = aws.client("events")
        self.schedules: list[tuple[str, float, str, dict[str, Any]]] = []
        for rule in events.list_rules()["Rules"]:
            period = rate_seconds(rule.get("ScheduleExpression", ""))
            if period is None or rule.get("State") != "ENABLED":
                continue
            for target in events.list_targets_by_rule(Rule=rule["Name"])["Targets"]:
                function = target["Arn"].split(":function:", 1)[-1]
                if function in pools:
                    payload = json.loads(target.get("Input") or "{}")
                    self.schedules.append((rule["Name"], period, function, payload))

    def start(self) -> ScheduleRunner:
        for name, period, function, payload in self.schedules:
            thread = threading.Thread(
                target=self._run, args=(period, function, payload), name=f"rule-{name}"
            )
            self._threads.append(thread)
            thread.start()
        return self

    def _run(self, period: float, function: str, payload: dict[str, Any]) -> None:
        while not self._stop.wait(period):
            try:
                with self._pools[function].container() as container:
                    result = container.invoke(payload)
                self.invocations += 1
                self._shippers[function].ship(result.log_stream, result.log_lines)
            except Exception as error:
                if not self._stop.is_set():
                    self._on_error(f"scheduled invocation of {function}: {error}")

    def request_stop(self) -> None:
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=STOP_JOIN_S)
