"""Route lookup and caching: which (broker, queue) pairs serve a topic."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from app.client.errors import BrokerUnavailableError, raise_for_envelope
from app.routing.perm import PERM_READ, PERM_WRITE


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    broker_name: str
    queue_id: int
    address: str


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """The queues of a topic a producer may write and a consumer may read, on each broker's master."""

    topic: str
    write_queues: tuple[MessageQueue, ...]
    read_queues: tuple[MessageQueue, ...]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicRoute:
        """From the broker's answer to ``GET /v1/topics/{topic}/route`` (RocketMQ's TopicRouteData)."""
        masters = {
            broker["broker_name"]: broker["addresses"]["0"].rstrip("/")
            for broker in data["broker_datas"]
            if "0" in broker["addresses"]
        }
        write, read = [], []
        for queue_data in data["queue_datas"]:
            address = masters.get(queue_data["broker_name"])
            if address is None:
                continue
            if queue_data["perm"] & PERM_WRITE:
                write += [
                    MessageQueue(queue_data["broker_name"], q, address)
                    for q in range(queue_data["write_queue_nums"])
                ]
            if queue_data["perm"] & PERM_READ:
                read += [
                    MessageQueue(queue_data["broker_name"], q, address)
                    for q in range(queue_data["read_queue_nums"])
                ]
        return cls(data["topic"], tuple(sorted(write)), tuple(sorted(read)))


class RouteCache:
    """Routes fetched from any of the bootstrap brokers, refreshed after ``ttl_s`` or on demand."""

    def __init__(
        self,
        http: httpx.Client,
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

    def get(self, topic: str, refresh: bool = False) -> TopicRoute:
        cached = self._routes.get(topic)
        if cached is not None and not refresh and cached[0] > self.clock():
            return cached[1]
        route = self._fetch(topic)
        self._routes[topic] = (self.clock() + self.ttl_s, route)
        return route

    def _fetch(self, topic: str) -> TopicRoute:
        addresses = list(self.bootstrap)
        # Brokers learned from earlier routes can answer too, should the bootstrap ones be down.
        for _, route in self._routes.values():
            for queue in route.write_queues + route.read_queues:
                if queue.address not in addresses:
                    addresses.append(queue.address)
        return fetch_route(self.http.get, addresses, topic)


def fetch_route(get: Callable[[str], httpx.Response], addresses: Sequence[str], topic: str) -> TopicRoute:
    """The topic's route from the first of ``addresses`` that answers. A broker's error envelope is
    raised as BrokerError (404 when no broker serves the topic); BrokerUnavailableError when none answers."""
    errors = []
    for address in addresses:
        try:
            response = get(f"{address.rstrip('/')}/v1/topics/{topic}/route")
        except (httpx.HTTPError, BrokerUnavailableError) as exc:
            errors.append(f"{address}: {exc}")
            continue
        raise_for_envelope(response)
        return TopicRoute.from_json(response.json())
    raise BrokerUnavailableError(f"no broker answered the route of {topic!r}: {'; '.join(errors)}")
