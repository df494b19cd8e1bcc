"""The one reading of a count member of a worker's EMF document, shared by the readers of its
members (``emf``, ``aggregated``): nothing in a document is trusted."""

from __future__ import annotations

from typing import Any, Final

# Upper bound for any one count, latency or duration value of a document (and for a count's
# array sum). A worker invocation makes far fewer calls and Lambda runs at most 900,000 ms;
# anything larger is a broken or hostile producer, not evidence.
MAX_VALUE: Final = 1_000_000


def count_value(value: Any) -> int:
    """A count member (a number or an array of numbers, summed); -1 when it is not one."""
    kind = type(value)
    if kind is list:
        # Powertools writes every metric as an array, mostly of one value: keep that path short.
        if len(value) != 1:
            return _count_array(value)
        value = value[0]
        kind = type(value)
    if kind is float:
        return int(value) if 0.0 <= value <= MAX_VALUE and value.is_integer() else -1
    if kind is int:
        return value if 0 <= value <= MAX_VALUE else -1
    return -1


def _count_array(values: list[Any]) -> int:
    total = 0
    for item in values:
        kind = type(item)
        if kind is float and 0.0 <= item <= MAX_VALUE and item.is_integer():
            total += int(item)
        elif kind is int and 0 <= item <= MAX_VALUE:
            total += item
        else:
            return -1
    return total if total <= MAX_VALUE else -1
