"""The sync client's loop thread: a call interrupted by Ctrl-C leaves nothing running behind it."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from wharf_client.blocking import LoopThread


@pytest.fixture
def loop_thread() -> Iterator[LoopThread]:
    thread = LoopThread("test-blocking")
    yield thread
    thread.close()


def interrupt_main_after(event: threading.Event | None, delay_s: float) -> threading.Thread:
    """Ctrl-C as the terminal sends it: SIGINT to the main thread, where the blocking call waits."""

    def interrupt() -> None:
        if event is not None:
            assert event.wait(10)
        time.sleep(delay_s)
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    thread = threading.Thread(target=interrupt)
    thread.start()
    return thread


def test_an_interrupted_call_cancels_its_coroutine_and_waits_for_it(loop_thread: LoopThread) -> None:
    started = threading.Event()
    seen: list[str] = []

    async def poll() -> str:
        started.set()
        try:
            await asyncio.sleep(30)
            return "message"
        finally:
            seen.append("cancelled")
            await asyncio.sleep(0.2)  # its clean-up takes a while: the caller waits for it
            seen.append("unwound")

    interrupter = interrupt_main_after(started, 0.05)
    with pytest.raises(KeyboardInterrupt):
        loop_thread.run(poll())
    interrupter.join()
    assert seen == ["cancelled", "unwound"]
    assert loop_thread.run(asyncio.sleep(0, "free")) == "free"  # the loop serves the next call


def test_a_call_interrupted_before_it_began_never_runs(loop_thread: LoopThread) -> None:
    ran: list[str] = []

    async def send() -> None:
        ran.append("sent")

    with pytest.raises(KeyboardInterrupt):
        # The loop is busy (a slow callback) when the call comes, and still when Ctrl-C does.
        loop_thread.loop.call_soon_threadsafe(time.sleep, 0.5)
        interrupter = interrupt_main_after(None, 0.1)
        loop_thread.run(send())
    interrupter.join()
    assert loop_thread.run(asyncio.sleep(0.05, "free")) == "free"
    assert ran == []


def test_an_error_of_the_coroutine_is_raised_as_it_is(loop_thread: LoopThread) -> None:
    async def fail() -> None:
        raise LookupError("no such topic")

    with pytest.raises(LookupError, match="no such topic"):
        loop_thread.run(fail())
