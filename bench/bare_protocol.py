"""The HTTP benchmark's floor below ASGI: an asyncio protocol on uvloop that parses requests with
httptools (as uvicorn does) and answers each, once its body is in, with prepared bytes: the answer
of :mod:`bench.bare_app`, in one write. No ASGI cycle, no task per request, no framework: what a
request costs a Python server on this machine at the least, the ceiling of any path the broker could
serve below uvicorn's request cycle::

    .venv/bin/python -m bench.bare_protocol --port 8082
"""

from __future__ import annotations

import argparse
import asyncio
from typing import cast

import httptools
import uvloop

from bench.bare_app import ANSWER

RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(ANSWER) + ANSWER
)


class BareProtocol(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection: every complete request answered with :data:`RESPONSE`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's, which does not subclass it

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_message_complete(self) -> None:
        assert self.transport is not None
        self.transport.write(RESPONSE)


async def serve(host: str, port: int) -> None:
    server = await asyncio.get_running_loop().create_server(BareProtocol, host, port)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8082)
    arguments = parser.parse_args()
    uvloop.run(serve(arguments.host, arguments.port))


if __name__ == "__main__":
    main()
