"""The one bounded cache of a warm controller: a dict that forgets its least recently used
entries beyond a fixed size.

Every per-queue or per-stream memory a container keeps across invocations (configs, states,
windows, ingested positions, log-event ids) is one of these, so a container's memory is flat
whatever names the stream carries. The sizes live in :mod:`controller.constants`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """At most ``maxsize`` entries; reading or writing one makes it the newest, and writing
    one beyond the bound evicts the oldest (counted in ``evictions``).

    Losing an entry costs a re-read (a config, a state) or re-learning (a window), never a
    wrong answer: callers treat a missing entry as a cold container would.
    """

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be at least 1, got {maxsize}")
        self.maxsize = maxsize
        self.evictions = 0
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The entry, made the newest; ``None`` when absent."""
        try:
            self._entries.move_to_end(key)
        except KeyError:
            return None
        return self._entries[key]

    def __getitem__(self, key: K) -> V:
        self._entries.move_to_end(key)
        return self._entries[key]

    def __setitem__(self, key: K, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)
            self.evictions += 1

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def pop(self, key: K) -> V | None:
        return self._entries.pop(key, None)

    def items(self) -> Iterator[tuple[K, V]]:
        """Oldest first; does not change the order."""
        return iter(self._entries.items())

    def evict_oldest_while(self, expired: Callable[[V], bool]) -> None:
        """Drop entries from the oldest on while ``expired`` holds for them (a horizon in time
        for entries written in roughly that order)."""
        entries = self._entries
        while entries:
            key = next(iter(entries))
            if not expired(entries[key]):
                return
            del entries[key]
