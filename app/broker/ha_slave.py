"""The slave's side of replication: it connects to its master's replication WebSocket,
asks for the CommitLog from its own end, writes each chunk at the same offsets
(:meth:`MessageStore.append_replica`, which dispatches the messages to its ConsumeQueues and
index) and acknowledges after each chunk and at least every second. A lost connection is tried
again with a growing backoff, from wherever its log then ends."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode, urlsplit, urlunsplit

import websockets

from app.broker.ha_master import unframe
from app.store import MessageStore

log = logging.getLogger(__name__)

REPLICATE_PATH = "/v1/ha/replicate"
ACK_INTERVAL_S = 1.0
BACKOFF_FIRST_S = 0.2
BACKOFF_MAX_S = 5.0

# The master's address (http://host:port), or "" when it is not known yet.
MasterFinder = Callable[[], Awaitable[str]]


def replicate_url(master_url: str, offset: int, broker_id: int, own_url: str) -> str:
    parts = urlsplit(master_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    query = urlencode({"offset": offset, "broker_id": broker_id, "url": own_url})
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + REPLICATE_PATH, query, ""))


class HaSlave:
    def __init__(self, store: MessageStore, find_master: MasterFinder, broker_id: int, own_url: str) -> None:
        self.store = store
        self.find_master = find_master
        self.broker_id = broker_id
        self.own_url = own_url
        self.master_url = ""
        self.connected = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ha-slave")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        backoff = BACKOFF_FIRST_S
        while True:
            try:
                master = await self.find_master()
                if master:
                    self.master_url = master
                    await self._replicate(master)
                    backoff = BACKOFF_FIRST_S
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a lost master, a refused chunk: try again later
                log.warning("replication from %s stopped: %s", self.master_url or "(no master)", error)
            finally:
                self.connected = False
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _replicate(self, master: str) -> None:
        offset = self.store.commitlog.max_offset
        url = replicate_url(master, offset, self.broker_id, self.own_url)
        async with websockets.connect(url, max_size=None, open_timeout=5) as connection:
            self.connected = True
            log.info("replicating from %s at CommitLog offset %d", master, offset)
            acks = asyncio.create_task(self._ack_every_second(connection))
            try:
                async for message in connection:
                    if isinstance(message, str):
                        raise ValueError(f"the master sent text: {message[:200]}")
                    start, data = unframe(message)
                    await asyncio.to_thread(self.store.append_replica, start, data)
                    await self._ack(connection)
            finally:
                acks.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await acks

    async def _ack(self, connection: websockets.ClientConnection) -> None:
        await connection.send(json.dumps({"acked_offset": self.store.commitlog.max_offset}))

    async def _ack_every_second(self, connection: websockets.ClientConnection) -> None:
        while True:
            await self._ack(connection)
            await asyncio.sleep(ACK_INTERVAL_S)
