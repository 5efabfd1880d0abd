"""The broker's own HTTP protocol in this process, without sockets: a connection is the protocol
uvicorn would make for it (``app.server.server_config``'s), fed request bytes with
``data_received``, and writing its answers to a :class:`Transport` that hands each to a callback.
Used where the order or the cost of answers must be seen exactly (tests/api/test_lane_now.py,
bench.produce_inprocess)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from uvicorn.server import ServerState

from app.server import server_config
from app.settings import Settings


class Transport(asyncio.Transport):
    """A connection's transport: every write goes to ``on_write``, whole."""

    def __init__(self, on_write: Callable[[bytes], None]) -> None:
        super().__init__()
        self.on_write = on_write
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.on_write(bytes(data))

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def connector(app: FastAPI, settings: Settings) -> Callable[[Transport], Any]:
    """What opens a connection to ``app`` (started) on the running loop: ``connect(transport)``
    returns the connection's protocol, to be fed with ``data_received``."""
    config = server_config(app, settings, access_log=False)
    config.load()
    state = ServerState()
    loop = asyncio.get_running_loop()

    def connect(transport: Transport) -> Any:
        protocol = config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=state, app_state={}, _loop=loop
        )
        protocol.connection_made(transport)
        return protocol

    return connect
