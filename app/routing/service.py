"""The broker's side of routing: register at start, heartbeat, scan for expired brokers, unregister,
and every other call to the route registry.

A created or deleted topic is published at once by writing only its own rows (batched with any
other changes made meanwhile); the periodic heartbeat touches the broker's row and writes only the
queue data that differ from the registry's.

Every broker runs the expiry scan; the database makes concurrent scans harmless. Database calls
are synchronous SQLAlchemy, so they run in worker threads of their own, off the event loop and
apart from the store's: a database that hangs cannot take the threads the store needs.

Every call is bounded by ``timeout_s`` and raises :class:`RegistryUnavailableError` when the
database cannot be reached or does not answer in time. The service remembers the last outcome:
:meth:`available` (readiness) answers from it for ``PROBE_INTERVAL_S`` and otherwise asks the
database. When the registry is reachable again after a failure, a heartbeat is sent at once, so
the broker's registration and topics are back without waiting for the heartbeat interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import exc as sa_exc

from app.routing.errors import RegistryUnavailableError
from app.routing.registry import BrokerIdentity, RouteRegistry
from app.routing.topic_config import TopicConfig

log = logging.getLogger(__name__)

T = TypeVar("T")

# A miss on a local topic asks the registry; answers are kept this long.
ROUTE_CACHE_S = 2.0
# Readiness trusts the outcome of the last registry call for this long before asking again.
PROBE_INTERVAL_S = 1.0
REGISTRY_THREADS = 4

# What a database that is down, unreachable or too slow raises through SQLAlchemy.
UNREACHABLE = (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError, sa_exc.DisconnectionError)


class RoutingService:
    def __init__(
        self,
        registry: RouteRegistry,
        identity: BrokerIdentity,
        topics: Callable[[], Iterable[TopicConfig]],
        heartbeat_interval_s: float,
        expiry_s: float,
        scan_interval_s: float,
        timeout_s: float = 5.0,
    ) -> None:
        self.registry = registry
        self.identity = identity
        self.topics = topics
        self.heartbeat_interval_s = heartbeat_interval_s
        self.expiry_s = expiry_s
        self.scan_interval_s = scan_interval_s
        self.timeout_s = timeout_s
        self._executor = ThreadPoolExecutor(REGISTRY_THREADS, thread_name_prefix="wharf-registry")
        self._tasks: list[asyncio.Task[None]] = []
        self._heartbeat_now = asyncio.Event()
        self._data_version = 0
        self._route_cache: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self._probe_lock = asyncio.Lock()
        self._reachable = True
        self._last_outcome_at = float("-inf")
        self.last_error = ""
        # False from a topic change the registry has not taken until a heartbeat carries it.
        self.published = True
        self.last_heartbeat_ms: int | None = None  # wall clock of the last registration it took
        # Topic changes waiting for the publisher: name -> config, or None for a deleted topic.
        self._pending: dict[str, TopicConfig | None] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._full_requested = False
        self._wake = asyncio.Event()
        # A heartbeat reads every topic and a publish writes some: one at a time, so a heartbeat's
        # older view of the topics never lands after a newer publish.
        self._write_lock = asyncio.Lock()

    # -- calling the registry --------------------------------------------------------------------

    async def call(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` in a registry thread, within ``timeout_s``."""
        loop = asyncio.get_running_loop()
        try:
            # asyncio.timeout, not wait_for: before Python 3.12 wait_for returns the answer of a call
            # that finished just as its caller was cancelled, and the cancellation is lost (a slave's
            # task stopped for a promotion went on retrying, and the promotion waited for it forever).
            async with asyncio.timeout(self.timeout_s):
                result = await loop.run_in_executor(self._executor, functools.partial(function, *args))
        except (TimeoutError, *UNREACHABLE) as exc:
            reason = f"no answer within {self.timeout_s} s" if isinstance(exc, TimeoutError) else str(exc)
            self._outcome(reason.splitlines()[0] if reason else type(exc).__name__)
            raise RegistryUnavailableError(
                f"the route registry cannot be reached: {self.last_error}"
            ) from exc
        self._outcome(None)
        return result

    def _outcome(self, error: str | None) -> None:
        self._last_outcome_at = time.monotonic()
        if error is not None:
            if self._reachable:
                log.warning("the route registry cannot be reached: %s", error)
            self._reachable, self.last_error = False, error
            return
        if not self._reachable:
            log.warning("the route registry is reachable again")
            self._heartbeat_now.set()  # re-register and publish the topics now
        self._reachable, self.last_error = True, ""

    async def available(self) -> bool:
        """Whether the registry answers: the last call's outcome if recent, else a probe."""
        if time.monotonic() - self._last_outcome_at < PROBE_INTERVAL_S:
            return self._reachable
        async with self._probe_lock:  # concurrent readiness checks share one probe
            if time.monotonic() - self._last_outcome_at >= PROBE_INTERVAL_S:
                with contextlib.suppress(RegistryUnavailableError):
                    await self.call(self.registry.ping)
        return self._reachable

    async def require(self) -> None:
        """Raise :class:`RegistryUnavailableError` unless the registry answers."""
        if not await self.available():
            raise RegistryUnavailableError(f"the route registry cannot be reached: {self.last_error}")

    # -- lifecycle -------------------------------------------------------------------------------

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
        if self._tasks:  # a cancellation of this stop itself is not swallowed
            await asyncio.wait(self._tasks)
        self._tasks = []
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(RuntimeError("the routing service stopped"))
        self._waiters, self._pending = [], {}
        try:
            await self.call(self.registry.unregister, self.identity)
            log.info("unregistered %s from the route registry", self.identity.broker_name)
        except RegistryUnavailableError as exc:
            log.warning("could not unregister %s: %s", self.identity.broker_name, exc)
        except Exception:
            log.exception("could not unregister %s", self.identity.broker_name)
        # A call stuck in the driver ends at its own timeouts; nobody waits for it.
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def reidentify(self, broker_id: int) -> None:
        """Register under another broker id (a slave promoted to id 0, a master become a slave):
        the old row goes unless another broker holds it now, and a heartbeat writes the new one."""
        old = self.identity
        if old.broker_id == broker_id:
            return
        self.identity = dataclasses.replace(old, broker_id=broker_id)
        self._route_cache.clear()
        try:
            await self.call(self.registry.unregister, old)
            await self.heartbeat()
        except RegistryUnavailableError as exc:
            log.warning("registering as broker id %d waits for the route registry: %s", broker_id, exc)
            self._heartbeat_now.set()

    def heartbeat_soon(self) -> None:
        """Have the heartbeat loop register this broker now rather than at its next interval."""
        self._heartbeat_now.set()

    async def heartbeat(self) -> None:
        """Register in full: touch the broker's row and write the queue data that differ."""
        async with self._write_lock:
            self._data_version += 1
            topics = list(self.topics())
            await self.call(self.registry.register, self.identity, topics, self._data_version)
            self.published = True
            self.last_heartbeat_ms = int(time.time() * 1000)

    async def health(self) -> dict[str, Any]:
        """What an operator asks of the registry: its kind (the database's dialect, never its
        address or credentials), whether it answers now, the last error, and when it last took
        this broker's registration."""
        reachable = await self.available()
        return {
            "kind": self.registry.engine.dialect.name,
            "reachable": reachable,
            "last_error": self.last_error or None,
            "last_heartbeat_ms": self.last_heartbeat_ms,
            "heartbeat_interval_s": self.heartbeat_interval_s,
            "published": self.published,
        }

    async def topics_changed(self, upserted: Iterable[TopicConfig] = (), deleted: Iterable[str] = ()) -> None:
        """Publish created or deleted topics now, so their routes are right before the caller
        answers. Only those topics' rows are written; changes made while a write is under way are
        written together by the next one. Without arguments, a full heartbeat is written.

        Raises :class:`RegistryUnavailableError` when the registry could not take them; the
        change stays made on this broker and a later heartbeat publishes it."""
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
        except RegistryUnavailableError as exc:
            self.published = False
            raise RegistryUnavailableError(
                f"{exc}; the change was made on this broker and a heartbeat publishes it once the "
                "registry is back"
            ) from exc
        except Exception:  # the periodic heartbeat publishes it later
            self.published = False
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
                elif isinstance(outcome, RegistryUnavailableError):
                    waiter.set_exception(RegistryUnavailableError(str(outcome)))
                else:
                    waiter.set_exception(RuntimeError(f"publishing topic changes failed: {outcome!r}"))

    async def _publish(self, pending: dict[str, TopicConfig | None]) -> bool:
        upserted = [config for config in pending.values() if config is not None]
        deleted = [name for name, config in pending.items() if config is None]
        async with self._write_lock:
            self._data_version += 1
            return await self.call(
                self.registry.publish, self.identity, upserted, deleted, self._data_version
            )

    async def _heartbeat_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):  # not wait_for: see call()
                async with asyncio.timeout(self.heartbeat_interval_s):
                    await self._heartbeat_now.wait()
            self._heartbeat_now.clear()
            try:
                await self.heartbeat()
            except RegistryUnavailableError as exc:
                log.warning("heartbeat to the route registry failed: %s", exc)
            except Exception:
                log.exception("heartbeat to the route registry failed")

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval_s)
            try:
                removed = await self.call(self.registry.scan_expired, self.expiry_s)
                if removed:
                    log.warning("removed brokers silent for %s s: %s", self.expiry_s, removed)
                    self._route_cache.clear()
            except RegistryUnavailableError as exc:
                log.warning("expiry scan of the route registry failed: %s", exc)
            except Exception:
                log.exception("expiry scan of the route registry failed")

    # -- queries ---------------------------------------------------------------------------------

    async def topic_route(self, topic: str) -> dict[str, Any] | None:
        return await self.call(self.registry.topic_route, topic)

    async def clusters(self) -> list[dict[str, Any]]:
        return await self.call(self.registry.clusters, self.expiry_s)

    async def masters(
        self, cluster: str | None = None, broker_names: Iterable[str] | None = None
    ) -> list[tuple[str, str]]:
        return await self.call(self.registry.masters, cluster, broker_names)

    async def route(self, topic: str) -> dict[str, Any] | None:
        cached = self._route_cache.get(topic)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        route = await self.topic_route(topic)
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
