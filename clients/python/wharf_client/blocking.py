"""The sync client's classes over the asyncio ones: an event loop of their own, in a thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An asyncio event loop running in a daemon thread. :meth:`run` hands it a coroutine and
    blocks the calling thread until its result (or exception) comes back; call it from any
    thread but the loop's own."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def call(self, start: Callable[[], Awaitable[T]]) -> T:
        """``await start()`` on the loop: for an API that must be called from inside it (one that
        returns a task, say)."""

        async def inside() -> T:
            return await start()

        return self.run(inside())

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()
