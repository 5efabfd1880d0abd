"""The broker's side of routing: register at start, heartbeat, scan for expired brokers, unregister,
and every other call to the route registry.

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

    # -- calling the registry --------------------------------------------------------------------

    async def call(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` in a registry thread, within ``timeout_s``."""
        loop = asyncio.get_running_loop()
        try:
            result = await asyncio.wait_for(
                loop.run_in_executor(self._executor, functools.partial(function, *args)), self.timeout_s
            )
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
        try:
            await self.call(self.registry.unregister, self.identity)
        except RegistryUnavailableError as exc:
            log.warning("could not unregister %s: %s", self.identity.broker_name, exc)
        except Exception:
            log.exception("could not unregister %s", self.identity.broker_name)
        # A call stuck in the driver ends at its own timeouts; nobody waits for it.
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def heartbeat(self) -> None:
        self._data_version += 1
        topics = list(self.topics())
        await self.call(self.registry.register, self.identity, topics, self._data_version)
        self.published = True

    async def topics_changed(self) -> None:
        """Publish a created or deleted topic now, so its route is right before the caller answers.
        Raises :class:`RegistryUnavailableError` when it could not; a later heartbeat publishes it."""
        self._route_cache.clear()
        self.published = False
        try:
            await self.heartbeat()
        except RegistryUnavailableError as exc:
            raise RegistryUnavailableError(
                f"{exc}; the change was made on this broker and a heartbeat publishes it once the "
                "registry is back"
            ) from exc

    async def _heartbeat_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heartbeat_now.wait(), self.heartbeat_interval_s)
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
