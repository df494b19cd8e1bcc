"""Errors the CLI turns into one line on stderr (no traceback)."""

from __future__ import annotations


class CliError(Exception):
    """A user-facing error: the message says what is wrong and how to fix it."""
