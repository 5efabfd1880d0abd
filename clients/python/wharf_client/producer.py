"""The producer: route-aware queue selection, retries on another broker, latency fault tolerance.

:class:`Producer` is :class:`wharf_client.aio_producer.AsyncProducer` run on an event loop of its
own thread (:class:`wharf_client.blocking.LoopThread`): one implementation of routing, retries and
order, called from plain threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Self

from wharf_client.aio import AsyncRouteCache
from wharf_client.aio_producer import AsyncProducer
from wharf_client.auth import User
from wharf_client.blocking import LoopThread
from wharf_client.fault import LatencyFaultTolerance
from wharf_client.outgoing import OutgoingMessage, SendResult, send_results
from wharf_client.routes import TopicRoute

__all__ = ["OutgoingMessage", "Producer", "SendResult", "send_results"]


class Producer:
    """Sends messages to the brokers that serve a topic.

    Every message gets a unique id before the first try, so a retry after a lost answer is
    recognised by the broker's idempotency window instead of stored twice. Each call blocks until
    the broker answered; calls from several threads share one connection pool.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        retries: int = 2,
        timeout_s: float = 5.0,
        route_ttl_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        user: User | None = None,
        max_in_flight: int = 4,
    ) -> None:
        # user: "accessKey:secretKey" (or a pair) for brokers with an ACL.
        self._loop = LoopThread("wharf-producer")

        async def make() -> AsyncProducer:  # its connection pool belongs to the loop
            return AsyncProducer(
                bootstrap,
                retries=retries,
                timeout_s=timeout_s,
                route_ttl_s=route_ttl_s,
                max_in_flight=max_in_flight,
                clock=clock,
                user=user,
            )

        self.producer = self._loop.run(make())

    @property
    def routes(self) -> AsyncRouteCache:
        return self.producer.routes

    @property
    def faults(self) -> LatencyFaultTolerance:
        return self.producer.faults

    def route(self, topic: str, refresh: bool = False) -> TopicRoute:
        """The topic's route, as the producer has it cached (fetched when stale or ``refresh``)."""
        return self._loop.run(self.producer.routes.get(topic, refresh))

    def send(
        self,
        topic: str,
        body: bytes | str,
        *,
        tags: str = "",
        keys: Sequence[str] = (),
        properties: dict[str, str] | None = None,
        sharding_key: str | None = None,
    ) -> SendResult:
        return self._loop.call(
            lambda: self.producer.send(
                topic, body, tags=tags, keys=keys, properties=properties, sharding_key=sharding_key
            )
        )

    def send_batch(
        self,
        topic: str,
        messages: Sequence[OutgoingMessage],
        *,
        sharding_key: str | None = None,
        queue_id: int | None = None,
    ) -> list[SendResult]:
        """Send a batch to one queue, in the binary batch format; retry on another broker on failure.

        ``queue_id`` keeps the batch to queues with that id (on whichever broker serves one)."""
        return self._loop.call(
            lambda: self.producer.send_batch(topic, messages, sharding_key=sharding_key, queue_id=queue_id)
        )

    def begin(
        self,
        topic: str,
        body: bytes | str,
        producer_group: str,
        *,
        tags: str = "",
        keys: Sequence[str] = (),
        properties: dict[str, str] | None = None,
        sharding_key: str | None = None,
    ) -> SendResult:
        """Begin a transaction: store the message invisibly (a half message of ``producer_group``).
        Make it visible with :meth:`commit`, or drop it with :meth:`rollback`. A retry after a lost
        answer repeats the unique id, so the broker answers the same transaction."""
        return self._loop.call(
            lambda: self.producer.begin(
                topic,
                body,
                producer_group,
                tags=tags,
                keys=keys,
                properties=properties,
                sharding_key=sharding_key,
            )
        )

    def commit(self, begun: SendResult) -> dict[str, object]:
        """Commit the transaction ``begun`` (at the broker that holds it); the broker's answer."""
        return self._loop.run(self.producer.commit(begun))

    def rollback(self, begun: SendResult) -> dict[str, object]:
        """Roll back the transaction ``begun``; the broker's answer."""
        return self._loop.run(self.producer.rollback(begun))

    def close(self) -> None:
        """Wait for the batches sent to be answered, then close the connections and the loop."""
        if self._loop.loop.is_closed():
            return
        try:
            self._loop.run(self.producer.close())
        finally:
            self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
