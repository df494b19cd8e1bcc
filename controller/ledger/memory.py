"""Records <-> ledger attributes, by reflection over their dataclass fields and type hints.

An algorithm's memory is a frozen dataclass the ledger has never heard of: it is stored by its
own field names (``{algorithm: {field: value}}``) and read back into the field's declared type.
Which record belongs to which algorithm is the registry the ledger's builder hands in
(``MemoryTypes``): storage knows no algorithm.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from decimal import Decimal
from enum import Enum
from typing import Any

from controller.ports import LedgerError

# The memory record of the algorithm of that name, None for an algorithm not registered.
MemoryTypes = Callable[[str], type[Any] | None]


def to_number(value: float) -> Decimal:
    if not math.isfinite(value):
        raise LedgerError(f"cannot store non-finite number {value!r}")
    # repr round-trips a float exactly; Decimal(float) would carry binary noise.
    return Decimal(repr(float(value)))


def to_attribute(value: object) -> object:
    """A record's field value as the ledger stores it (numbers as ``Decimal``, enums by value)."""
    if isinstance(value, Enum):
        return to_attribute(value.value)
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return to_number(value)
    if isinstance(value, list | tuple):
        return [to_attribute(element) for element in value]
    if isinstance(value, Mapping):
        return {str(key): to_attribute(element) for key, element in value.items()}
    raise LedgerError(f"cannot store policy memory value {value!r} ({type(value).__name__})")


def from_attribute(value: object, annotation: Any) -> object:
    """Turn a stored value back into the field's declared type."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        choices = [arg for arg in args if arg is not type(None)]
        if isinstance(value, Decimal):
            return int(value) if int in choices and float not in choices else float(value)
        return from_attribute(value, choices[0]) if len(choices) == 1 else value
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return annotation(value)
    if isinstance(value, Decimal):
        return int(value) if annotation is int else float(value)
    if isinstance(value, list):
        element_type = args[0] if args else Any
        elements = [from_attribute(element, element_type) for element in value]
        return tuple(elements) if origin is tuple else elements
    if isinstance(value, dict):
        value_type = args[1] if len(args) == 2 else Any
        return {key: from_attribute(element, value_type) for key, element in value.items()}
    return value


def encode_memory(algorithm: str, memory: object) -> dict[str, Any]:
    """``{algorithm: {field: value}}``, by the record's own field names; ``{}`` for none."""
    if not algorithm or memory is None:
        return {}
    if not dataclasses.is_dataclass(memory) or isinstance(memory, type):
        raise LedgerError(f"cannot store memory {memory!r}: not a dataclass record")
    fields = dataclasses.fields(memory)
    return {algorithm: {f.name: to_attribute(getattr(memory, f.name)) for f in fields}}


class MemoryCodec:
    """Reads stored records back: the memory of the algorithms in ``memory_types``, and the
    fields of any record type by its hints (resolved once per type, per codec)."""

    def __init__(self, memory_types: MemoryTypes) -> None:
        self._memory_types = memory_types
        self._type_hints: dict[type, dict[str, Any]] = {}

    def fields(self, record_type: type, stored: Mapping[str, Any]) -> dict[str, object]:
        """The stored values of ``record_type``'s fields, in their declared types; a field not
        stored is absent (the record's default applies)."""
        hints = self._hints(record_type)
        return {
            name: from_attribute(value, hints[name])
            for name, value in stored.items()
            if name in hints
        }

    def decode_memory(self, stored: Mapping[str, Any]) -> tuple[str, object]:
        """The algorithm's name and its record. A record of an algorithm not registered (any
        more) is dropped; a stored field the record no longer has is ignored, and one it lacks
        takes its default."""
        for algorithm, fields in stored.items():
            record_type = self._memory_types(algorithm)
            if record_type is None:
                continue
            names = {f.name for f in dataclasses.fields(record_type)}
            known = {name: value for name, value in fields.items() if name in names}
            return algorithm, record_type(**self.fields(record_type, known))
        return "", None

    def _hints(self, record_type: type) -> dict[str, Any]:
        hints = self._type_hints.get(record_type)
        if hints is None:
            hints = self._type_hints[record_type] = typing.get_type_hints(record_type)
        return hints
