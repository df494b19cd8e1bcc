"""The decoder's shortcut past the metric declarations a worker repeats in every document."""

from __future__ import annotations

from typing import Final

from controller.telemetry.emf import JSON_ERRORS, scan_json

# The key of a directive's metric declarations, as it reads inside a payload's message string.
DECLARATIONS_KEY: Final = '\\"Metrics\\":['
# How many declarations one decoder remembers, newest first.
MAX_KNOWN_DECLARATIONS: Final = 16


class KnownDeclarations:
    """The declarations seen to be flat objects, escaped and with their closing bracket.

    EMF's declarations (``"Metrics":[{"Name": ..., "Unit": ...}, ...]`` in each directive) are
    a third of a worker document and the decoder needs nothing of them but a list. A worker
    repeats the same declarations in every document, so the decoder remembers the few it has
    seen parse as a list of flat objects and, where a payload's message repeats one, cuts it:
    that document reads ``"Metrics":[]``. The outcome is that of a full parse, whatever the
    payload: the cut text is a valid string's content by itself (so the payload parses, or
    fails, alike) and a valid list's content once unescaped (so the message does), and where
    the key's escaped quotes are not inside a string, the payload is not JSON either way.
    """

    def __init__(self) -> None:
        self._known: list[str] = []

    def cut(self, text: str) -> str:
        """The payload with the metric declarations it repeats from earlier ones left out."""
        at = text.find(DECLARATIONS_KEY)
        if at < 0:
            return text
        pieces = []
        kept_from = 0
        while at >= 0:
            start = at + len(DECLARATIONS_KEY)
            for known in self._known:
                if text.startswith(known, start):
                    end = start + len(known) - 1  # the closing bracket stays
                    break
            else:
                end = self._learn(text, start)
            if end > start:
                pieces.append(text[kept_from:start])
                kept_from = end
            at = text.find(DECLARATIONS_KEY, start)
        if not pieces:
            return text
        pieces.append(text[kept_from:])
        return "".join(pieces)

    def _learn(self, text: str, start: int) -> int:
        """Where the declarations starting at ``start`` end (their ``]``), remembered, if they
        are flat objects; -1 if not."""
        end = text.find("]", start)
        if end <= start or not _flat_objects(text[start:end]):
            return -1
        self._known.insert(0, text[start : end + 1])
        del self._known[MAX_KNOWN_DECLARATIONS:]
        return end


def _flat_objects(escaped: str) -> bool:
    """Whether ``escaped`` is, as a JSON string's content, a list's content of objects that
    hold only scalars."""
    try:
        content, end = scan_json(f'"{escaped}"', 0)
        if end != len(escaped) + 2:
            return False
        items, end = scan_json(f"[{content}]", 0)
    except JSON_ERRORS:
        return False
    return end == len(content) + 2 and all(
        type(item) is dict and all(type(v) in (str, int, float) for v in item.values())
        for item in items
    )
