"""The asyncio pull consumer: the sync :class:`PullConsumer`'s semantics, with a task per queue.

One fetcher task per queue long-polls its broker for stored records (``Accept:
application/vnd.wharf.records``) over one keep-alive ``httpx.AsyncClient``, and decodes them with
the client's record decoder (:func:`wharf_client.codec.decode_records`). Fetched messages wait in a local cache; fetchers pause while it holds
``max_cached_messages`` or ``max_cached_bytes`` (flow control, SPEC 4). A message counts as
processed when the application asks for the next one (or calls :meth:`AsyncConsumer.commit` after
handling it), so a crash re-delivers at most the message in hand: at-least-once.

    async with AsyncConsumer("http://127.0.0.1:8080", "orders", "billing") as consumer:
        async for message in consumer:
            handle(message.body)

A queue without a committed offset for the group starts at ``start`` (``last``, ``first`` or a
time in ms); later pulls go on from the offset the broker answered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any

import httpx

from wharf_client.aio import AsyncHttpOwner, AsyncRouteCache, bootstrap_list
from wharf_client.auth import User, basic_auth
from wharf_client.codec import RECORDS_MEDIA_TYPE, decode_records
from wharf_client.consumed import AT_END, MOVE_ON, ConsumedMessage, pull_params
from wharf_client.errors import BrokerError, WharfClientError, raise_for_envelope
from wharf_client.routes import MessageQueue, ReadTarget
from wharf_client.tls import client_ssl_context

log = logging.getLogger(__name__)


class AsyncConsumer(AsyncHttpOwner):
    """Reads every queue of ``topic`` (or those with an id in ``queue_ids``) for ``group``."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        topic: str,
        group: str,
        *,
        queue_ids: Sequence[int] | None = None,
        tags: str = "*",
        sql92: str | None = None,
        batch_size: int = 32,
        max_wait_ms: int = 2_000,
        max_cached_messages: int = 1_000,
        max_cached_bytes: int = 100 * 1024 * 1024,
        commit_interval_s: float = 5.0,
        timeout_s: float = 10.0,
        user: User | None = None,
        start: str = "last",
        auto_commit: bool = True,
        stop_at_end: bool = False,
    ) -> None:
        self.topic = topic
        self.group = group
        self.queue_ids = None if queue_ids is None else frozenset(queue_ids)
        self.tags = tags
        # A SQL92 expression over message properties, filtered by the broker instead of ``tags``.
        self.sql92 = sql92
        self.batch_size = batch_size
        self.max_wait_ms = max_wait_ms
        self.max_cached_messages = max_cached_messages
        self.max_cached_bytes = max_cached_bytes
        self.commit_interval_s = commit_interval_s
        self.start_from = start
        self.auto_commit = auto_commit
        # Read each queue to its end once, then stop: ``drained`` turns true (``wharf consume``).
        self.stop_at_end = stop_at_end
        self._at_end: set[MessageQueue] = set()
        # One long poll per queue holds a connection; no pool limit may queue them behind each other.
        self.http = httpx.AsyncClient(
            timeout=timeout_s + max_wait_ms / 1000,
            auth=basic_auth(user),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
            verify=client_ssl_context(),
        )
        self.routes = AsyncRouteCache(self.http, bootstrap_list(bootstrap))
        self._cache: asyncio.Queue[ConsumedMessage] = asyncio.Queue()
        self._room = asyncio.Event()
        self._cached_messages = 0
        self._cached_bytes = 0
        self._stopped = False
        self._fetchers: dict[MessageQueue, asyncio.Task[None]] = {}
        self._done: dict[MessageQueue, int] = {}  # next offset to commit, per queue
        self._committed: dict[MessageQueue, int] = {}
        self._in_hand: ConsumedMessage | None = None
        self._in_hand_batch: list[ConsumedMessage] = []  # the rest of a poll_batch's messages
        self._last_commit = time.monotonic()
        self._failure: Exception | None = None  # a pull the ACL refused, or a fault: retrying cannot help

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> AsyncConsumer:
        queues = [
            queue
            for queue in (await self.routes.get(self.topic, refresh=True)).read_queues
            if self.queue_ids is None or queue.queue_id in self.queue_ids
        ]
        if not queues:
            raise WharfClientError(f"topic {self.topic!r} has no readable queue to consume")
        for queue in queues:
            self._fetchers[queue] = asyncio.create_task(
                self._fetch_loop(queue), name=f"wharf-fetch-{queue.broker_name}-{queue.queue_id}"
            )
        return self

    async def close(self) -> None:
        self._finish_in_hand()
        self._stopped = True
        for task in self._fetchers.values():
            task.cancel()
        await asyncio.gather(*self._fetchers.values(), return_exceptions=True)
        try:
            if self.auto_commit:
                await self.commit()
        finally:
            await self.http.aclose()

    async def __aenter__(self) -> AsyncConsumer:
        return await self.start()

    @property
    def queues(self) -> list[MessageQueue]:
        return sorted(self._fetchers)

    @property
    def drained(self) -> bool:
        """With ``stop_at_end``: every queue was read to its end and every message fetched handed out."""
        return len(self._at_end) == len(self._fetchers) and self._cache.empty()

    # -- consuming -------------------------------------------------------------------------------

    async def poll(self, timeout_s: float = 1.0) -> ConsumedMessage | None:
        """The next message, or None after ``timeout_s``. Asking for it finishes the previous one.

        Raises the BrokerError (401 or 403) of a pull the broker's ACL refused."""
        if self._failure is not None:
            raise self._failure
        self._finish_in_hand()
        if self.auto_commit and time.monotonic() - self._last_commit >= self.commit_interval_s:
            await self._commit_finished()
        if self._cache.empty():
            try:
                # asyncio.timeout: wait_for (Python 3.11) can drop an item taken as it times out.
                async with asyncio.timeout(timeout_s):
                    consumed = await self._cache.get()
            except TimeoutError:
                return None
        else:
            consumed = self._cache.get_nowait()
        self._cached_messages -= 1
        self._cached_bytes -= consumed.message.size
        self._room.set()
        self._in_hand = consumed
        return consumed

    async def poll_batch(self, max_messages: int = 100, timeout_s: float = 1.0) -> list[ConsumedMessage]:
        """Up to ``max_messages`` fetched messages (at least one, or none after ``timeout_s``): the
        next one as :meth:`poll` gives it, then those already waiting. Asking again finishes them
        all; one message's Python at a time is what a busy reader saves."""
        first = await self.poll(timeout_s)
        if first is None:
            return []
        batch = [first]
        cache = self._cache
        while len(batch) < max_messages and not cache.empty():
            consumed = cache.get_nowait()
            self._cached_messages -= 1
            self._cached_bytes -= consumed.message.size
            batch.append(consumed)
        self._room.set()
        self._in_hand_batch = batch[1:]
        return batch

    def __aiter__(self) -> AsyncConsumer:
        return self

    async def __anext__(self) -> ConsumedMessage:
        """The next message; with ``stop_at_end``, the iteration ends once the consumer is drained."""
        while not self._stopped and not (self.stop_at_end and self.drained):
            consumed = await self.poll(0.5)
            if consumed is not None:
                return consumed
        raise StopAsyncIteration

    def _finish_in_hand(self) -> None:
        consumed, self._in_hand = self._in_hand, None
        if consumed is not None:
            self._done[consumed.queue] = consumed.message.queue_offset + 1
        if self._in_hand_batch:
            batch, self._in_hand_batch = self._in_hand_batch, []
            for consumed in batch:  # a queue's messages come in order: its last one counts
                self._done[consumed.queue] = consumed.message.queue_offset + 1

    async def commit(self, *, strict: bool = False) -> None:
        """Commit, per broker, the offsets after the messages the application finished, counting
        the message in hand as finished. A broker that refuses or does not answer is logged and
        tried again at the next commit; ``strict`` raises its error instead."""
        self._finish_in_hand()
        await self._commit_finished(strict)

    async def _commit_finished(self, strict: bool = False) -> None:
        self._last_commit = time.monotonic()
        by_address: dict[str, list[tuple[MessageQueue, int]]] = {}
        for queue, offset in self._done.items():
            if self._committed.get(queue) != offset:
                by_address.setdefault(queue.address, []).append((queue, offset))
        for address, items in by_address.items():
            body = {"offsets": [{"topic": self.topic, "queue_id": q.queue_id, "offset": o} for q, o in items]}
            # A master that does not answer: a slave keeps the offsets and hands them over later.
            replicas = (await self.routes.get(self.topic)).replicas(items[0][0])
            try:
                await self._put_offsets(replicas, f"/v1/groups/{self.group}/offsets", body)
            except (httpx.HTTPError, BrokerError) as exc:
                if strict:
                    raise
                log.warning("committing offsets to %s failed: %r", address, exc)
                continue
            for queue, offset in items:
                self._committed[queue] = offset

    async def _put_offsets(self, addresses: Sequence[str], path: str, body: dict[str, Any]) -> None:
        """PUT ``body`` to the first of ``addresses`` that answers (a broker's refusal is raised)."""
        for address in addresses[:-1]:
            try:
                raise_for_envelope(await self.http.put(address + path, json=body))
                return
            except httpx.TransportError:
                continue
        raise_for_envelope(await self.http.put(addresses[-1] + path, json=body))

    # -- fetching --------------------------------------------------------------------------------

    async def _wait_for_room(self) -> None:
        while (
            self._cached_messages >= self.max_cached_messages or self._cached_bytes >= self.max_cached_bytes
        ):
            self._room.clear()
            await self._room.wait()

    async def _fetch_loop(self, queue: MessageQueue) -> None:
        try:
            await self._fetch(queue)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a record that does not decode, a broker that answers nonsense
            log.error("fetching %s failed: %r", queue, exc)
            self._failure = exc

    async def _fetch(self, queue: MessageQueue) -> None:
        target = ReadTarget(queue, await self.routes.get(self.topic))
        path = f"/v1/topics/{self.topic}/queues/{queue.queue_id}/messages"
        offset: int | None = None  # None: the broker starts from the group's committed offset
        backoff_s = 0.1
        while True:
            await self._wait_for_room()
            params = pull_params(self.group, self.batch_size, self.max_wait_ms, self.tags, self.sql92)
            params.update({"offset": offset} if offset is not None else {"from": self.start_from})
            url = target.address + path
            try:
                response = await self.http.get(url, params=params, headers={"accept": RECORDS_MEDIA_TYPE})
                raise_for_envelope(response)
            except (httpx.HTTPError, BrokerError) as exc:
                if isinstance(exc, BrokerError) and exc.status in (401, 403):
                    self._failure = exc
                    return
                log.debug("pull from %s failed: %r", url, exc)
                if not isinstance(exc, BrokerError) or exc.status >= 500:
                    target.failed()  # read from another broker of the name meanwhile
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 2.0)
                continue
            backoff_s = 0.1
            target.follow(int(response.headers.get("x-wharf-suggest-broker-id", "0")))
            status = response.headers["x-wharf-status"]
            next_offset = int(response.headers["x-wharf-next-offset"])
            if status == "FOUND":
                records = decode_records(response.content)
                self._cached_messages += len(records)
                self._cached_bytes += sum(record.size for record in records)
                for record in records:
                    self._cache.put_nowait(ConsumedMessage(record, queue))
                offset = next_offset
            elif status in MOVE_ON or offset is None:
                offset = next_offset
            if self.stop_at_end and status in AT_END:
                self._at_end.add(queue)
                return
