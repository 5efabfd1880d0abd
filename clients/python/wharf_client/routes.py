"""Route lookup and caching: which (broker, queue) pairs serve a topic."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from wharf_client.errors import BrokerUnavailableError, raise_for_envelope
from wharf_client.perm import PERM_READ, PERM_WRITE


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    broker_name: str
    queue_id: int
    address: str


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """The queues of a topic a producer may write (on each broker's master) and a consumer may read
    (on the master, or on a slave when the route lists no master), and every broker name's addresses
    by broker id."""

    topic: str
    write_queues: tuple[MessageQueue, ...]
    read_queues: tuple[MessageQueue, ...]
    # broker name -> {broker id: address}; id 0 is the master.
    brokers: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    # The queues a sharding key is mapped over: every writable queue of every broker name the
    # route lists, with or without a master now (address "" while it has none), so that a key
    # stays on its queue through a failover instead of moving to another broker name's.
    keyed_queues: tuple[MessageQueue, ...] = ()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicRoute:
        """From the broker's answer to ``GET /v1/topics/{topic}/route`` (RocketMQ's TopicRouteData)."""
        brokers = {
            broker["broker_name"]: {
                int(broker_id): address.rstrip("/") for broker_id, address in broker["addresses"].items()
            }
            for broker in data["broker_datas"]
        }
        write, read, keyed = [], [], []
        for queue_data in data["queue_datas"]:
            addresses = brokers.get(queue_data["broker_name"], {})
            master = addresses.get(0)
            if queue_data["perm"] & PERM_WRITE:
                keyed += [
                    MessageQueue(queue_data["broker_name"], q, master or "")
                    for q in range(queue_data["write_queue_nums"])
                ]
            if master is not None and queue_data["perm"] & PERM_WRITE:
                write += [
                    MessageQueue(queue_data["broker_name"], q, master)
                    for q in range(queue_data["write_queue_nums"])
                ]
            # Without a master (it died and the registry expired it) its slaves still serve reads.
            reader = master if master is not None else addresses[min(addresses)] if addresses else None
            if reader is not None and queue_data["perm"] & PERM_READ:
                read += [
                    MessageQueue(queue_data["broker_name"], q, reader)
                    for q in range(queue_data["read_queue_nums"])
                ]
        return cls(data["topic"], tuple(sorted(write)), tuple(sorted(read)), brokers, tuple(sorted(keyed)))

    def addresses(self) -> list[str]:
        """Every broker the route names: the queues' readers and writers, then each broker name's
        masters and slaves (a slave still answers while its master is down)."""
        found = [queue.address for queue in self.write_queues + self.read_queues]
        found += [address for by_id in self.brokers.values() for _, address in sorted(by_id.items())]
        return list(dict.fromkeys(found))

    def replicas(self, queue: MessageQueue) -> tuple[str, ...]:
        """The addresses that hold ``queue``: its own first, then the rest of its broker name's
        (the master, then the slaves by id)."""
        others = [address for _, address in sorted(self.brokers.get(queue.broker_name, {}).items())]
        return (queue.address, *[address for address in others if address != queue.address])


# After a broker of a name did not answer, reads stay away from it this long.
AVOID_S = 5.0


class ReadTarget:
    """Which broker a queue is read from: the master; the slave a broker suggests
    (``suggest_broker_id``, RocketMQ's whichBrokerWhenConsumeSlowly); the next broker of the name
    while one does not answer."""

    def __init__(
        self, queue: MessageQueue, route: TopicRoute, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.home = queue.address
        self.by_id = dict(route.brokers.get(queue.broker_name, {}))
        self.order = route.replicas(queue)
        self.address = self.home
        self.clock = clock
        self._avoid: dict[str, float] = {}

    def follow(self, suggest_broker_id: int) -> None:
        """A broker's answer suggested where to read next."""
        wanted = self.by_id.get(suggest_broker_id, self.home)
        if self._avoid.get(wanted, 0.0) <= self.clock():
            self.address = wanted

    def failed(self) -> None:
        """The broker read from did not answer: read from the next one of its name for a while."""
        self._avoid[self.address] = self.clock() + AVOID_S
        if len(self.order) > 1:
            index = self.order.index(self.address) if self.address in self.order else -1
            self.address = self.order[(index + 1) % len(self.order)]


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

    def forget(self, topics: Iterable[str]) -> None:
        """Fetch these topics' routes again at their next use: a broker of theirs failed, and the
        route may name another master by now (a failover) or list a broker no more."""
        for topic in topics:
            if topic in self._routes:  # kept for its addresses, which can answer the next fetch
                self._routes[topic] = (-math.inf, self._routes[topic][1])

    def _fetch(self, topic: str) -> TopicRoute:
        addresses = list(self.bootstrap)
        # Brokers learned from earlier routes can answer too, should the bootstrap ones be down.
        for _, route in self._routes.values():
            for address in route.addresses():
                if address not in addresses:
                    addresses.append(address)
        return fetch_route(self.http.get, addresses, topic)


def fetch_route(get: Callable[[str], httpx.Response], addresses: Sequence[str], topic: str) -> TopicRoute:
    """The topic's route from the first of ``addresses`` that answers. A broker's error envelope is
    raised as BrokerError (404 when no broker serves the topic); BrokerUnavailableError when none answers."""
    errors: list[str] = []
    for address in addresses:
        try:
            response = get(f"{address.rstrip('/')}/v1/topics/{topic}/route")
        except (httpx.HTTPError, BrokerUnavailableError) as exc:
            errors.append(f"{address}: {exc}")
            continue
        route = route_answer(address, response, errors)
        if route is not None:
            return route
    raise BrokerUnavailableError(f"no broker answered the route of {topic!r}: {'; '.join(errors)}")


def route_answer(address: str, response: httpx.Response, errors: list[str]) -> TopicRoute | None:
    """The route ``address`` answered; None (the reason added to ``errors``) when the broker failed
    for a passing reason (5xx: it cannot reach the route registry, or is shutting down) and another
    broker may answer. A refusal (a 4xx: no broker serves the topic, not allowed) is raised."""
    if response.status_code >= 500:
        errors.append(f"{address}: {response.status_code} {response.text[:200]}")
        return None
    raise_for_envelope(response)
    return TopicRoute.from_json(response.json())
