"""A TCP proxy the tests can cut and restore: a database that goes away and comes back."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from tests.api.server import free_port

CHUNK = 65536


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target``. :meth:`stop` closes the listener and every open
    connection (connecting then fails at once); :meth:`hang` keeps every connection open and accepts
    new ones but forwards nothing, as a database that stopped answering; :meth:`start` forwards
    again on the same port, after dropping whatever :meth:`hang` held."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._thread.start()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._hanging = False

    def _run(self, coroutine: object) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)  # type: ignore[arg-type]

    def start(self) -> TcpProxy:
        if self._hanging:
            self.stop()
        self._run(self._start())
        return self

    def stop(self) -> None:
        self._run(self._stop())

    def hang(self) -> None:
        self._hanging = True
        self._run(self._start())

    def close(self) -> None:
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(
                self._accept, "127.0.0.1", self.port, reuse_address=True
            )

    async def _stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()  # a reset, as when the database host goes away
        self._writers.clear()
        self._hanging = False
        if server is not None:
            await server.wait_closed()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        if self._hanging:
            self._writers.add(client_writer)
            with contextlib.suppress(ConnectionError, OSError):
                while await client_reader.read(CHUNK):
                    pass  # swallowed: no answer ever comes
            return
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.transport.abort()
            return
        self._writers |= {client_writer, server_writer}
        await asyncio.gather(
            self._pump(client_reader, server_writer), self._pump(server_reader, client_writer)
        )

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(CHUNK):
                if self._hanging:
                    continue  # swallowed: no answer ever comes
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()
