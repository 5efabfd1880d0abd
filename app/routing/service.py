"""The broker's side of routing: register at start, heartbeat, scan for expired brokers, unregister.

A created or deleted topic is published at once by writing only its own rows (batched with any
other changes made meanwhile); the periodic heartbeat touches the broker's row and writes only the
queue data that differ from the registry's.

Every broker runs the expiry scan; the database makes concurrent scans harmless. Database calls
are synchronous SQLAlchemy, so they run in a worker thread, off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from app.routing.registry import BrokerIdentity, RouteRegistry
from app.routing.topic_config import TopicConfig

log = logging.getLogger(__name__)

# A miss on a local topic asks the registry; answers are kept this long.
ROUTE_CACHE_S = 2.0


class RoutingService:
    def __init__(
        self,
        registry: RouteRegistry,
        identity: BrokerIdentity,
        topics: Callable[[], Iterable[TopicConfig]],
        heartbeat_interval_s: float,
        expiry_s: float,
        scan_interval_s: float,
    ) -> None:
        self.registry = registry
        self.identity = identity
        self.topics = topics
        self.heartbeat_interval_s = heartbeat_interval_s
        self.expiry_s = expiry_s
        self.scan_interval_s = scan_interval_s
        self._tasks: list[asyncio.Task[None]] = []
        self._data_version = 0
        self._route_cache: dict[str, tuple[float, dict[str, Any] | None]] = {}
        # Topic changes waiting for the publisher: name -> config, or None for a deleted topic.
        self._pending: dict[str, TopicConfig | None] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._full_requested = False
        self._wake = asyncio.Event()
        # A heartbeat reads every topic and a publish writes some: one at a time, so a heartbeat's
        # older view of the topics never lands after a newer publish.
        self._write_lock = asyncio.Lock()

    async def start(self) -> None:
        await self.heartbeat()
        self._tasks = [
            asyncio.create_task(self._publish_loop(), name="wharf-topic-publisher"),
            asyncio.create_task(self._heartbeat_loop(), name="wharf-heartbeat"),
            asyncio.create_task(self._scan_loop(), name="wharf-expiry-scan"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(RuntimeError("the routing service stopped"))
        self._waiters, self._pending = [], {}
        try:
            await asyncio.to_thread(self.registry.unregister, self.identity)
        except Exception:
            log.exception("could not unregister %s", self.identity.broker_name)

    async def heartbeat(self) -> None:
        """Register in full: touch the broker's row and write the queue data that differ."""
        async with self._write_lock:
            self._data_version += 1
            topics = list(self.topics())
            await asyncio.to_thread(self.registry.register, self.identity, topics, self._data_version)

    async def topics_changed(self, upserted: Iterable[TopicConfig] = (), deleted: Iterable[str] = ()) -> None:
        """Publish created or deleted topics now, so their routes are right before the caller
        answers. Only those topics' rows are written; changes made while a write is under way are
        written together by the next one. Without arguments, a full heartbeat is written."""
        if not self._tasks:  # not started (the start registers every topic) or stopped
            return
        upserted, deleted = list(upserted), list(deleted)
        for config in upserted:
            self._pending[config.name] = config
            self._route_cache.pop(config.name, None)
        for name in deleted:
            self._pending[name] = None
            self._route_cache.pop(name, None)
        if not upserted and not deleted:
            self._route_cache.clear()
            self._full_requested = True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._wake.set()
        try:
            await waiter
        except Exception:  # the periodic heartbeat publishes it later
            log.exception("publishing topic changes to the route registry failed")

    async def _publish_loop(self) -> None:
        """The one writer of topic changes: takes everything pending, writes it in one transaction,
        then answers every caller whose change it covered."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._write_pending()

    async def _write_pending(self) -> None:
        pending, waiters, full = self._pending, self._waiters, self._full_requested
        self._pending, self._waiters, self._full_requested = {}, [], False
        outcome: BaseException | None = None
        try:
            if not pending and not full:
                pass  # taken by the write before
            elif full or not await self._publish(pending):
                await self.heartbeat()
        except BaseException as exc:
            outcome = exc
            if not isinstance(exc, Exception):
                raise
        finally:
            for waiter in waiters:
                if waiter.done():
                    continue
                if outcome is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(RuntimeError(f"publishing topic changes failed: {outcome!r}"))

    async def _publish(self, pending: dict[str, TopicConfig | None]) -> bool:
        upserted = [config for config in pending.values() if config is not None]
        deleted = [name for name, config in pending.items() if config is None]
        async with self._write_lock:
            self._data_version += 1
            return await asyncio.to_thread(
                self.registry.publish, self.identity, upserted, deleted, self._data_version
            )

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval_s)
            try:
                await self.heartbeat()
            except Exception:
                log.exception("heartbeat to the route registry failed")

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval_s)
            try:
                removed = await asyncio.to_thread(self.registry.scan_expired, self.expiry_s)
                if removed:
                    log.warning("removed brokers silent for %s s: %s", self.expiry_s, removed)
                    self._route_cache.clear()
            except Exception:
                log.exception("expiry scan of the route registry failed")

    async def route(self, topic: str) -> dict[str, Any] | None:
        cached = self._route_cache.get(topic)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        route = await asyncio.to_thread(self.registry.topic_route, topic)
        self._route_cache[topic] = (now + ROUTE_CACHE_S, route)
        return route

    async def brokers_hosting(self, topic: str) -> list[str]:
        """Addresses of the masters, other than this broker, whose queue data include ``topic``."""
        route = await self.route(topic)
        if route is None:
            return []
        hosting = {data["broker_name"] for data in route["queue_datas"]}
        return [
            data["addresses"]["0"]
            for data in route["broker_datas"]
            if data["broker_name"] in hosting
            and data["broker_name"] != self.identity.broker_name
            and "0" in data["addresses"]
        ]
