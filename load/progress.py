"""A progress line for long commands: on stderr, only while a person watches the terminal.

Shown when stdout is a terminal and the command's output is not JSON; otherwise every call
does nothing, so piped output and ``--json`` stay exactly what they were. The line is redrawn
in place (at most every ``REDRAW_S``) and erased when the work is done, so the result that
follows starts on a clean line.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import IO

REDRAW_S = 0.2

ProgressCallback = Callable[[int, int, str], None]
"""``(done, total, what)`` as a long job advances (``total`` 0: unknown); ``Progress.update``
is one. Library functions take one of these, so they never decide where progress goes."""


class Progress:
    """``label: done/total what``, redrawn on ``stream``; silent when ``stream`` is None."""

    def __init__(
        self,
        label: str,
        stream: IO[str] | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._label = label
        self._stream = stream
        self._clock = clock
        self._last_draw = -math.inf
        self._drawn = False

    @classmethod
    def for_command(
        cls, label: str, *, json_output: bool = False, stdout: IO[str] | None = None
    ) -> Progress:
        """Drawn on stderr when ``stdout`` (default: sys.stdout) is a terminal, unless the
        command prints JSON."""
        watched = not json_output and (stdout or sys.stdout).isatty()
        return cls(label, sys.stderr if watched else None)

    def update(self, done: int, total: int = 0, what: str = "") -> None:
        if self._stream is None:
            return
        now = self._clock()
        if now - self._last_draw < REDRAW_S and done != total:
            return
        self._last_draw = now
        count = f"{done:,}/{total:,}" if total else f"{done:,}"
        line = f"{self._label}: {count}" + (f" {what}" if what else "")
        self._stream.write("\r\x1b[K" + line)
        self._stream.flush()
        self._drawn = True

    def close(self) -> None:
        """Erase the line (if one was drawn)."""
        if self._stream is not None and self._drawn:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
