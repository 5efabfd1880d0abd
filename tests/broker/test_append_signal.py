"""The replication streams' wake-up: an append wakes a waiting stream at once, from any thread; an
append while nobody waits is only counted (no wake-up of the event loop)."""

from __future__ import annotations

import asyncio
import threading

from app.broker.ha_master import AppendSignal

NEVER_S = 60.0  # a wait_past that ran into this timeout was not woken


def test_an_append_from_another_thread_wakes_a_waiting_stream() -> None:
    async def scenario() -> None:
        signal = AppendSignal()
        signal.bind(asyncio.get_running_loop())
        waiting = asyncio.create_task(signal.wait_past(signal.version, NEVER_S))
        while not signal._waiters:
            await asyncio.sleep(0)
        threading.Thread(target=signal.notify).start()
        await asyncio.wait_for(waiting, timeout=10)

    asyncio.run(scenario())


def test_an_append_before_the_wait_is_seen_by_it() -> None:
    async def scenario() -> None:
        signal = AppendSignal()
        signal.bind(asyncio.get_running_loop())
        version = signal.version
        signal.notify()  # nobody waits yet: counted, no wake-up scheduled
        assert not signal._scheduled
        await asyncio.wait_for(signal.wait_past(version, NEVER_S), timeout=10)

    asyncio.run(scenario())
