"""A WebSocket client's frames wait in the broker's memory one at a time: while the endpoint does not
take the message it has, the server reads nothing more from that socket (TCP pushes back on the
client) instead of queueing the client's frames."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from app.server import server_config
from app.settings import Settings
from tests.ws.rawsocket import BINARY, RawWebSocket, encode_frame
from tests.ws.wsclient import on_a_thread

FRAME_BYTES = 256 * 1024
# The kernel's buffers on both ends, set small so that what the client gets sent is what the
# server holds (an explicit size also stops the kernel from growing them).
KERNEL_BUFFER_BYTES = 32 * 1024


async def never_receives(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An endpoint that accepts a WebSocket and then reads nothing from it."""
    assert scope["type"] == "websocket"
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    await asyncio.Event().wait()


@pytest.fixture
def server() -> Iterator[str]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(
        socket.SOL_SOCKET, socket.SO_RCVBUF, KERNEL_BUFFER_BYTES
    )  # accepted sockets inherit it
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    config = server_config(never_receives, Settings(), lifespan="off", timeout_graceful_shutdown=1)  # type: ignore[arg-type]
    with on_a_thread(config, listener) as serving:
        yield serving.url


def test_the_server_holds_one_unread_frame_per_socket_not_a_queue(server: str) -> None:
    frame = encode_frame(BINARY, b"f" * FRAME_BYTES)
    with RawWebSocket(server, "/") as client:
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, KERNEL_BUFFER_BYTES)
        client.sock.settimeout(2)
        sent = 0
        with pytest.raises(TimeoutError):  # the server stopped reading
            while sent < 64:
                client.send_raw(frame)
                sent += 1
    # One frame with the endpoint, one being read, and the kernels' buffers (under one frame):
    # a server that queued the client's messages (32 of them, as websockets' own default does)
    # would have taken every frame sent here.
    assert sent <= 3, f"the server took {sent} frames of {FRAME_BYTES} bytes that nothing read"
