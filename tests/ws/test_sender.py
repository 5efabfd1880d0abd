"""The send timeout: each send gets its whole ``send_timeout_s`` from when it began, however long
ago the sender's watchdog was armed, and a send cancelled by anyone else stays a cancellation."""

from __future__ import annotations

import asyncio

import pytest

from app.api.ws.protocol import TRY_AGAIN_LATER, WsClose
from app.api.ws.sender import FrameSender

TIMEOUT_S = 0.2


class Socket:
    """A WebSocket whose sends complete at once until ``stall`` is cleared."""

    def __init__(self) -> None:
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.sent: list[bytes] = []

    async def send_bytes(self, data: bytes) -> None:
        await self.flowing.wait()
        self.sent.append(data)

    def sender(self) -> FrameSender:
        """A sender on this socket with room for any frame and a send timeout of ``TIMEOUT_S``."""
        return FrameSender(self, 1 << 20, TIMEOUT_S)  # type: ignore[arg-type]


def test_a_stalled_send_is_timed_from_its_own_start_and_closes_1013() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        socket = Socket()
        sender = socket.sender()
        await sender.send_binary(b"first")  # arms the watchdog for TIMEOUT_S from now
        await asyncio.sleep(TIMEOUT_S * 0.75)
        socket.flowing.clear()
        began = loop.time()
        with pytest.raises(WsClose) as closed:
            await asyncio.wait_for(sender.send_binary(b"stalled"), TIMEOUT_S * 10)
        waited = loop.time() - began
        assert TIMEOUT_S <= waited < TIMEOUT_S * 3, waited
        assert closed.value.code == TRY_AGAIN_LATER
        assert closed.value.reason.startswith("40811 the client read nothing for 0.2 s")
        assert socket.sent == [b"first"] and sender.queued_bytes == 0
        sender.close()

    asyncio.run(scenario())


def test_sends_that_complete_are_never_cut_however_many() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        socket = Socket()
        sender = socket.sender()
        ends = loop.time() + TIMEOUT_S * 3
        while loop.time() < ends:
            await sender.send_binary(b"frame")
            await asyncio.sleep(TIMEOUT_S / 20)
        assert len(socket.sent) > 20
        sender.close()

    asyncio.run(scenario())


def test_a_stalled_send_cancelled_by_its_owner_is_a_cancellation() -> None:
    async def scenario() -> None:
        socket = Socket()
        socket.flowing.clear()
        sender = socket.sender()
        sending = asyncio.ensure_future(sender.send_binary(b"stalled"))
        await asyncio.sleep(TIMEOUT_S / 4)
        sending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sending
        # The next send has its own time, and the watchdog left from the first cuts nothing early.
        socket.flowing.set()
        await sender.send_binary(b"next")
        assert socket.sent == [b"next"] and sender.queued_bytes == 0
        sender.close()

    asyncio.run(scenario())


def test_each_stalled_send_is_cut_in_turn() -> None:
    async def scenario() -> None:
        socket = Socket()
        socket.flowing.clear()
        sender = socket.sender()
        # Two tasks of one socket send; the second waits for the first, then stalls on its own.
        sends = [asyncio.ensure_future(sender.send_binary(data)) for data in (b"one", b"two")]
        done, pending = await asyncio.wait(sends, timeout=TIMEOUT_S * 10)
        assert not pending, "a stalled send outlived its timeout"
        assert all(isinstance(send.exception(), WsClose) for send in done)
        sender.close()

    asyncio.run(scenario())
