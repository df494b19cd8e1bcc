"""moto's EventBridge, kept to AWS's rule: a scheduled rule fires on its schedule only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def patch_moto_events() -> Callable[[], None]:
    """Keep PutEvents from reaching scheduled rules; returns the undo.

    In AWS a rule with a ``ScheduleExpression`` and no event pattern matches no event a
    PutEvents sends. moto matches it to every event, then fails the whole PutEvents on its
    Lambda target (a 500 and a traceback on the terminal for each of the controller's events).
    The local runtime runs scheduled rules itself (``stack/local/runtime/schedule.py``).
    """
    from moto.events import models

    method = "send_to_targets"
    original = getattr(models.Rule, method)

    def send_to_targets(rule: Any, event: Any, transform_input: bool = True) -> None:
        if rule.scheduled_expression and not rule.event_pattern.get_pattern():
            return
        original(rule, event, transform_input)

    setattr(models.Rule, method, send_to_targets)

    def restore() -> None:
        setattr(models.Rule, method, original)

    return restore
