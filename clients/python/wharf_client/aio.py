"""What the asyncio client's classes share: the owner of one keep-alive ``httpx.AsyncClient``, an
async route cache, and ordered lines of turns.

The routes are parsed by :meth:`TopicRoute.from_json`, as the sync client's; only the fetch awaits.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, Self, TypeVar

import httpx

from wharf_client.auth import User, basic_auth
from wharf_client.errors import BrokerUnavailableError, transport_reason
from wharf_client.routes import TopicRoute, route_answer

Key = TypeVar("Key", bound=Hashable)


def bootstrap_list(bootstrap: str | Sequence[str]) -> list[str]:
    return [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)


def authorization_headers(user: User | None) -> dict[str, str]:
    """The ``Authorization`` header :func:`basic_auth` would send, for a socket httpx does not open."""
    auth = basic_auth(user)
    if auth is None:
        return {}
    request = next(auth.auth_flow(httpx.Request("GET", "http://broker")))
    return {"Authorization": request.headers["Authorization"]}


class AsyncHttpOwner:
    """Owns ``self.http``: closed by :meth:`close`, or at the end of an ``async with`` block."""

    http: httpx.AsyncClient

    async def close(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class AsyncRouteCache:
    """Routes fetched from any of the bootstrap brokers, refreshed after ``ttl_s`` or on demand."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        bootstrap: list[str],
        ttl_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not bootstrap:
            raise ValueError("give at least one broker address")
        self.http = http
        self.bootstrap = [address.rstrip("/") for address in bootstrap]
        self.ttl_s = ttl_s
        self.clock = clock
        self._routes: dict[str, tuple[float, TopicRoute]] = {}

    def fresh(self, topic: str) -> TopicRoute | None:
        """The cached route while it is fresh, without waiting; None when it must be fetched."""
        cached = self._routes.get(topic)
        return cached[1] if cached is not None and cached[0] > self.clock() else None

    async def get(self, topic: str, refresh: bool = False) -> TopicRoute:
        route = None if refresh else self.fresh(topic)
        if route is None:
            route = await self._fetch(topic)
            self._routes[topic] = (self.clock() + self.ttl_s, route)
        return route

    async def _fetch(self, topic: str) -> TopicRoute:
        addresses = list(self.bootstrap)
        # Brokers learned from earlier routes can answer too, should the bootstrap ones be down: the
        # slaves as well, which still answer while their master is down.
        for _, known in self._routes.values():
            addresses += [address for address in known.addresses() if address not in addresses]
        errors: list[str] = []
        for address in addresses:
            try:
                response = await self.http.get(f"{address}/v1/topics/{topic}/route")
            except httpx.HTTPError as exc:
                errors.append(f"{address}: {transport_reason(exc)}")
                continue
            route = route_answer(address, response, errors)
            if route is not None:
                return route
        raise BrokerUnavailableError(f"no broker answered the route of {topic!r}: {'; '.join(errors)}")


class Turn:
    """A place in one line of :class:`OrderedLines`: :meth:`wait` returns once every turn taken
    before it on the same key has ended; :meth:`end` lets the next one go (repeat-safe)."""

    __slots__ = ("_lines", "_key", "_previous", "_done")

    def __init__(
        self,
        lines: OrderedLines[Key],
        key: Key,
        previous: asyncio.Future[None] | None,
        done: asyncio.Future[None],
    ) -> None:
        self._lines: OrderedLines[Key] = lines
        self._key = key
        self._previous = previous
        self._done = done

    async def wait(self) -> None:
        if self._previous is not None and not self._previous.done():
            # Shielded: a cancelled waiter must not cancel the turn before it.
            await asyncio.shield(self._previous)

    def end(self) -> None:
        if self._done.done():
            return
        if self._previous is not None and not self._previous.done():
            # Ended before its time (its task was cancelled while waiting): the next turn still
            # waits for the one before this.
            self._previous.add_done_callback(lambda _: self.end())
            return
        self._done.set_result(None)
        self._lines.forget(self._key, self._done)


class OrderedLines(Generic[Key]):
    """One first-come-first-served line per key. Taking a turn is synchronous, so the order of the
    turns is exactly the order of the calls that take them, whatever the tasks do afterwards."""

    def __init__(self) -> None:
        self._tails: dict[Key, asyncio.Future[None]] = {}

    def take(self, key: Key) -> Turn:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        previous = self._tails.get(key)
        self._tails[key] = done
        return Turn(self, key, previous, done)

    def forget(self, key: Key, done: asyncio.Future[None]) -> None:
        """Drop the line of ``key`` once its last turn (``done``) ended."""
        if self._tails.get(key) is done:
            del self._tails[key]

    def __len__(self) -> int:
        return len(self._tails)
