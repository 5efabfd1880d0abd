"""Sending to a WebSocket within a byte bound and a time bound.

Several tasks of one socket (a subscriber's queue readers, its ack answers) send frames; each
frame is encoded before it waits for the socket, so a client that reads slowly would let encoded
frames pile up. :class:`FrameSender` counts them: ``queued_bytes`` is every frame encoded and not yet
handed to the socket, plus the frame being handed. Producers of frames ask :meth:`room_bytes`
before they read more and are woken (``on_release``) when bytes leave.

What was handed to the socket and not yet read by the peer (the transport's write buffer) is
bounded by the server's flow control: uvicorn's WebSocket protocols wait until the transport is
below its 64 KiB high-water mark before they write a frame, so at most one frame plus that mark is
ever buffered per socket, and that frame was counted here while it was handed. A send that waits
longer than ``send_timeout_s`` for the socket means the client stopped reading: it ends the socket
with close code 1013. One watchdog timer per socket keeps that time, not a timeout per frame (which
cost a timer scheduled and cancelled for every frame): it fires at the deadline of the send that was
in progress when it was armed, and cancels the send still in progress if that one is overdue, or
waits for the deadline of the one that is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect

from app.api.errors import ErrorCode
from app.api.ws.protocol import TRY_AGAIN_LATER, WsClose

ABNORMAL = 1006  # RFC 6455: the connection ended without a close frame


class FrameSender:
    """Serialised sends (JSON text frames, or binary ones) with a count of the bytes waiting for the socket."""

    def __init__(
        self,
        websocket: WebSocket,
        max_queued_bytes: int,
        send_timeout_s: float,
        on_release: Callable[[], None] | None = None,
    ) -> None:
        self.websocket = websocket
        self.max_queued_bytes = max_queued_bytes
        self.send_timeout_s = send_timeout_s
        self.queued_bytes = 0
        self._on_release = on_release
        self._lock = asyncio.Lock()
        # The send in progress: when it began and its task; the watchdog that times it; whether the
        # watchdog cancelled it.
        self._began: float | None = None
        self._sending: asyncio.Task[Any] | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._expired = False

    def room_bytes(self) -> int:
        """How many more bytes of frames may be encoded now (0 or less: wait for ``on_release``)."""
        return self.max_queued_bytes - self.queued_bytes

    async def send(self, frame: dict[str, Any]) -> None:
        await self.send_encoded(orjson.dumps(frame))

    async def send_encoded(self, data: bytes) -> None:
        """Send one JSON text frame, already encoded; its bytes count until it is handed over."""
        await self._send(data, text=True)

    async def send_binary(self, data: bytes) -> None:
        """Send one binary frame; its bytes count until it is handed over."""
        await self._send(data, text=False)

    async def _send(self, data: bytes, text: bool) -> None:
        size = len(data)
        self.queued_bytes += size
        try:
            async with self._lock:
                loop = asyncio.get_running_loop()
                self._began = loop.time()
                self._sending = task = asyncio.current_task()
                if self._watchdog is None:
                    self._watchdog = loop.call_at(self._began + self.send_timeout_s, self._watch)
                try:
                    if text:
                        await self.websocket.send_text(data.decode())
                    else:
                        await self.websocket.send_bytes(data)
                except RuntimeError:
                    # The server closed the connection itself (a protocol error of the client, a
                    # keepalive timeout) and refuses further sends: the client is gone.
                    raise WebSocketDisconnect(ABNORMAL) from None
                except asyncio.CancelledError:
                    expired, self._expired = self._expired, False
                    if not expired or task is None or task.uncancel() > 0:
                        raise  # cancelled by someone else (too)
                    raise WsClose(
                        TRY_AGAIN_LATER,
                        f"{int(ErrorCode.WS_CLIENT_TOO_SLOW)} the client read nothing for "
                        f"{self.send_timeout_s:g} s; {self.queued_bytes} bytes wait for it",
                    ) from None
                finally:
                    self._began = self._sending = None
        finally:
            self.queued_bytes -= size
            if self._on_release is not None:
                self._on_release()

    def close(self) -> None:
        """Stop the watchdog (the socket is done with)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    def _watch(self) -> None:
        """The watchdog's turn: cancel the send in progress if it is overdue, else wait for it."""
        self._watchdog = None
        if self._began is None or self._sending is None:
            return  # nothing is being sent; the next send arms the watchdog again
        deadline = self._began + self.send_timeout_s
        loop = asyncio.get_running_loop()
        if loop.time() < deadline:
            self._watchdog = loop.call_at(deadline, self._watch)
        elif not self._expired:
            self._expired = True
            self._sending.cancel()
