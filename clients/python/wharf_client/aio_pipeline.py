"""The asyncio producer's pipelined path: one WebSocket ``/v1/ws/produce?topic=T&format=binary``
per (broker, topic), several binary batches on it unanswered at once.

One socket keeps order without waiting: the broker stores a socket's frames in the order they
arrive and answers them in that order, so a batch written to the socket after another is stored
after it, answered or not. Each result carries the number of its binary frame on the socket
(``frame``, from 0) and its place in the batch (``index``); a frame's results may come in more
than one ``results`` frame. A socket that closes fails every batch still waiting on it with
:class:`BrokerUnavailableError`, which the producer retries like a lost HTTP answer (the unique ids
make the retry idempotent).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection, connect

from wharf_client import _json
from wharf_client.errors import BrokerError, BrokerUnavailableError

# A socket unanswered this long for its open is given up (the producer retries).
OPEN_TIMEOUT_S = 10.0
# The client's sockets do not negotiate permessage-deflate: their frames are message bodies, mostly
# incompressible, and deflating a 100 KiB batch costs about a millisecond of CPU at each end.
NO_COMPRESSION = None


def produce_url(address: str, topic: str) -> str:
    scheme, rest = address.split("://", 1)
    query = urlencode({"topic": topic, "format": "binary"})
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/v1/ws/produce?{query}"


class _Waiting:
    __slots__ = ("future", "results", "missing")

    def __init__(self, future: asyncio.Future[list[dict[str, Any]]], count: int) -> None:
        self.future = future
        self.results: list[dict[str, Any] | None] = [None] * count
        self.missing = count


class ProduceSocket:
    """One open produce socket: :meth:`write` sends a batch and returns the future of its results."""

    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection
        self._frames = 0
        self._waiting: dict[int, _Waiting] = {}
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, address: str, topic: str, headers: dict[str, str]) -> ProduceSocket:
        try:
            connection = await connect(
                produce_url(address, topic),
                additional_headers=headers,
                open_timeout=OPEN_TIMEOUT_S,
                max_size=None,
                close_timeout=1,
                compression=NO_COMPRESSION,
            )
        except OSError as exc:
            raise BrokerUnavailableError(f"no produce socket to {address}: {exc!r}") from exc
        return cls(connection)

    @property
    def closed(self) -> bool:
        return self._reader.done()

    async def write(self, batch: bytes, count: int) -> asyncio.Future[list[dict[str, Any]]]:
        """Send a batch of ``count`` messages; once this returns, batches written later are stored
        after it. The future resolves to its ``count`` results, in order."""
        if self.closed:
            raise BrokerUnavailableError("the produce socket is closed")
        future: asyncio.Future[list[dict[str, Any]]] = asyncio.get_running_loop().create_future()
        frame = self._frames
        self._frames += 1
        self._waiting[frame] = _Waiting(future, count)
        try:
            await self.connection.send(batch)
        except Exception as exc:
            self._waiting.pop(frame, None)
            raise BrokerUnavailableError(f"the produce socket failed: {exc!r}") from exc
        return future

    async def close(self) -> None:
        await self.connection.close()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    async def _read(self) -> None:
        error: Exception = BrokerUnavailableError("the broker closed the produce socket")
        try:
            async for message in self.connection:
                document = _json.loads(message)
                if document.get("type") == "results":
                    for result in document["results"]:
                        self._take(result)
        except Exception as exc:  # the connection dropped, or the broker sent nonsense
            error = BrokerUnavailableError(f"the produce socket failed: {exc!r}")
        finally:
            waiting, self._waiting = self._waiting, {}
            for entry in waiting.values():
                if not entry.future.done():
                    entry.future.set_exception(error)

    def _take(self, result: dict[str, Any]) -> None:
        entry = self._waiting.get(result.get("frame", -1))
        if entry is None:
            return
        if "error_code" in result:
            del self._waiting[result["frame"]]
            code = int(result["error_code"])
            if not entry.future.done():
                entry.future.set_exception(BrokerError(code // 100, code, str(result.get("message")), result))
            return
        index = result.get("index")
        if (
            not isinstance(index, int)
            or not 0 <= index < len(entry.results)
            or entry.results[index] is not None
        ):
            return
        entry.results[index] = result
        entry.missing -= 1
        if entry.missing == 0:
            del self._waiting[result["frame"]]
            entry.future.set_result([item for item in entry.results if item is not None])
