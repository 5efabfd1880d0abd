"""The sync client's classes over the asyncio ones: an event loop of their own, in a thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

UNWIND_S = 5.0  # how long an interrupted call waits for its coroutine to finish being cancelled


class LoopThread:
    """An asyncio event loop running in a daemon thread. :meth:`run` hands it a coroutine and
    blocks the calling thread until its result (or exception) comes back; call it from any
    thread but the loop's own.

    A call interrupted in the calling thread (Ctrl-C's KeyboardInterrupt) cancels its coroutine
    and waits for it to unwind before the interruption goes on: nothing it started keeps running
    on the loop behind the caller's back (a poll taking messages no one will see, say)."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        began: list[asyncio.Task[Any]] = []  # the task running the coroutine, once it has begun
        abandoned = threading.Event()  # the caller was interrupted: do not begin

        async def tracked() -> T:
            if abandoned.is_set():
                coroutine.close()
                raise asyncio.CancelledError
            task = asyncio.current_task()
            assert task is not None
            began.append(task)
            return await coroutine

        future = asyncio.run_coroutine_threadsafe(tracked(), self.loop)
        try:
            return future.result()
        except BaseException:
            abandoned.set()
            if future.cancel():  # interrupted here, not an outcome of the coroutine
                with contextlib.suppress(BaseException):
                    # Runs after the cancel has reached the task (both go through the loop, in order).
                    unwound = asyncio.run_coroutine_threadsafe(_unwind(began), self.loop)
                    unwound.result(UNWIND_S)
            raise

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


async def _unwind(began: list[asyncio.Task[Any]]) -> None:
    """Wait for a cancelled call's task to finish, if it had begun (else it never will)."""
    if began:
        await asyncio.wait(began)
