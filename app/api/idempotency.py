"""The produce idempotency window: a producer-supplied unique id seen again returns the first result.

Entries are futures, so a retry that races the first request (still waiting for its group commit)
gets the first request's final answer rather than a second copy of the message.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

Key = tuple[str, str]  # (topic, unique id)


class IdempotencyWindow:
    def __init__(
        self, window_s: float, max_entries: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_s = window_s
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[Key, tuple[float, asyncio.Future[dict[str, Any]]]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self.window_s > 0 and self.max_entries > 0

    def get(self, key: Key) -> asyncio.Future[dict[str, Any]] | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[0] < self.clock():
            del self._entries[key]
            return None
        return entry[1]

    def put(self, key: Key, future: asyncio.Future[dict[str, Any]]) -> None:
        self._expire()
        self._entries[key] = (self.clock() + self.window_s, future)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def forget(self, key: Key) -> None:
        self._entries.pop(key, None)

    def _expire(self) -> None:
        now = self.clock()
        entries = self._entries
        while entries:
            key, (expires, _) = next(iter(entries.items()))
            if expires >= now:
                break
            del entries[key]

    def __len__(self) -> int:
        return len(self._entries)
