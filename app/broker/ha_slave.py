"""The slave's side of replication: it connects to its master's replication WebSocket,
asks for the CommitLog from its own end, writes each chunk at the same offsets
(:meth:`MessageStore.append_replica`, which dispatches the messages to its ConsumeQueues and
index) and acknowledges after each chunk and at least every second. A lost connection is tried
again with a growing backoff, from wherever its log then ends. Beside it, the slave follows the
master's topic configurations and consumer offsets (app.broker.ha_metadata)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx
import websockets

from app.broker.ha_master import unframe
from app.store import MessageStore

log = logging.getLogger(__name__)

REPLICATE_PATH = "/v1/ha/replicate"
METADATA_PATH = "/v1/ha/metadata"
ACK_INTERVAL_S = 1.0
BACKOFF_FIRST_S = 0.2
BACKOFF_MAX_S = 5.0

# The master's address (http://host:port), or "" when it is not known yet.
MasterFinder = Callable[[], Awaitable[str]]
# Applies a metadata answer of the master (app.broker.ha_metadata) to this broker.
MetadataApplier = Callable[[dict[str, Any]], Awaitable[None]]


def replicate_url(master_url: str, offset: int, broker_id: int, own_url: str) -> str:
    parts = urlsplit(master_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    query = urlencode({"offset": offset, "broker_id": broker_id, "url": own_url})
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + REPLICATE_PATH, query, ""))


def basic_header(access_key: str, secret_key: str) -> str:
    return "Basic " + base64.b64encode(f"{access_key}:{secret_key}".encode()).decode("ascii")


class HaSlave:
    def __init__(
        self,
        store: MessageStore,
        find_master: MasterFinder,
        broker_id: int,
        own_url: str,
        apply_metadata: MetadataApplier | None = None,
        metadata_interval_ms: int = 10_000,
        account: tuple[str, str] | None = None,
    ) -> None:
        self.store = store
        self.find_master = find_master
        self.broker_id = broker_id
        self.own_url = own_url
        self.apply_metadata = apply_metadata
        self.metadata_interval_ms = metadata_interval_ms
        # Sent to a master with an ACL: an admin account's access and secret key, as Basic auth.
        self.headers = {"Authorization": basic_header(*account)} if account is not None else {}
        self.metadata_version = -1  # the master's version last applied; -1: none yet
        self.master_url = ""
        self.connected = False
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._retrying("replication", self._replicate), name="ha-slave")]
        if self.apply_metadata is not None:
            self._tasks.append(
                asyncio.create_task(
                    self._retrying("metadata sync", self._follow_metadata), name="ha-metadata"
                )
            )

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _retrying(self, what: str, follow: Callable[[str], Awaitable[None]]) -> None:
        """Run ``follow(master)`` again after each failure, with a growing backoff."""
        backoff = BACKOFF_FIRST_S
        while True:
            try:
                master = await self.find_master()
                if master:
                    self.master_url = master
                    await follow(master)
                    backoff = BACKOFF_FIRST_S
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a lost master, a refused chunk: try again later
                log.warning("%s from %s stopped: %s", what, self.master_url or "(no master)", error)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)

    async def _follow_metadata(self, master: str) -> None:
        """Ask for the master's metadata again as soon as the last answer is applied: the master
        holds each request until its metadata changes or the interval passes."""
        assert self.apply_metadata is not None
        wait_ms = self.metadata_interval_ms
        async with httpx.AsyncClient(
            base_url=master, timeout=wait_ms / 1000 + 10, headers=self.headers
        ) as http:
            while True:
                response = await http.get(
                    METADATA_PATH, params={"version": self.metadata_version, "wait_ms": wait_ms}
                )
                response.raise_for_status()
                answer = response.json()
                await self.apply_metadata(answer)
                self.metadata_version = answer["version"]

    async def _replicate(self, master: str) -> None:
        offset = self.store.commitlog.max_offset
        url = replicate_url(master, offset, self.broker_id, self.own_url)
        async with websockets.connect(
            url, max_size=None, open_timeout=5, additional_headers=self.headers
        ) as connection:
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
                self.connected = False
                acks.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await acks

    async def _ack(self, connection: websockets.ClientConnection) -> None:
        await connection.send(json.dumps({"acked_offset": self.store.commitlog.max_offset}))

    async def _ack_every_second(self, connection: websockets.ClientConnection) -> None:
        while True:
            await self._ack(connection)
            await asyncio.sleep(ACK_INTERVAL_S)
