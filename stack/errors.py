"""Errors the CLI turns into one line on stderr (no traceback)."""

from __future__ import annotations


class CliError(Exception):
    """A user-facing error: the message says what is wrong and how to fix it."""


def quoted(value: str, limit: int = 40) -> str:
    """``value`` as an error message quotes it: cut to ``limit`` characters, so a pasted
    megabyte still makes one readable line."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value)} characters)"
