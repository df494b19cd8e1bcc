"""The announced-limit members of a worker's EMF document (docs/telemetry.md, "Announced
limits"): what the downstream's rate-limit headers said, validated like every other member."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from controller import schema

# Upper bound for an announced quota, remaining quota or number of seconds: quotas run to
# millions a day and windows to a month; beyond this a value is a broken producer's.
MAX_ANNOUNCED: Final = 1e12

_QUOTA_NAMES: Final = tuple(
    metric.name
    for metric in (schema.RATE_LIMIT_QUOTA, schema.RATE_LIMIT_WINDOW, schema.RATE_LIMIT_RESET)
)

# (remaining, quota, window, reset), None where absent, in Sample's order.
Limit = tuple[float | None, float | None, float | None, float | None]
_NONE: Final[Limit] = (None, None, None, None)


def announced_limit(get: Callable[[str], Any], remaining: Any) -> Limit | None:
    """The document's announced limit (all None without ``RateLimitRemaining``, whose value is
    ``remaining``), or None when a member is not valid.

    The quota, window and reset are read only beside a remaining quota. A member may be an
    array (several flushes of one invocation): the remaining quota, the quota and the window
    are each the smallest, the reset the largest (the least quota left, held until the latest
    reset: the cautious reading).
    """
    if remaining is None:
        return _NONE
    quota, window, reset = map(get, _QUOTA_NAMES)
    limit: list[float | None] = []
    for value, pick in ((remaining, min), (quota, min), (window, min), (reset, max)):
        if value is None:
            limit.append(None)
            continue
        measured = _measured(value, pick)
        if measured is None:
            return None
        limit.append(measured)
    return (limit[0], limit[1], limit[2], limit[3])


def _measured(value: Any, pick: Callable[[list[Any]], Any]) -> float | None:
    """``pick`` of a value or non-empty array of values in [0, ``MAX_ANNOUNCED``]; None when
    it is not one (a bool, a string, a negative, infinite or NaN number, an empty array)."""
    items = value if type(value) is list else [value]
    if not items:
        return None
    for item in items:
        if type(item) not in (int, float) or not 0 <= item <= MAX_ANNOUNCED:
            return None
    return float(pick(items))
