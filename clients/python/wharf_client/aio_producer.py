"""The asyncio producer: several batches in flight over one keep-alive connection pool, each
queue's batches stored in the order they were sent.

Routing, queue selection, retries and latency fault tolerance are the sync :class:`Producer`'s
(docs/guides/several-brokers.md). What asyncio adds is concurrency, and with it a question of order: two
batches for one queue posted at once may be stored either way round. So every queue has a line:

    send_batch(t, a, sharding_key="k")  ->  admission line of t  ->  line of queue q  ->  POST
    send_batch(t, b, sharding_key="k")  ->  (after a's)          ->  (after a's)      ->  POST

The admission line (per topic) keeps the route lookup and the queue choice in call order, so a call
that must wait for a route is not overtaken by a later one that finds it cached; the queue's line
lets a batch post only after every batch sent to that queue before it was answered. Both places
are taken synchronously by :meth:`AsyncProducer.send_batch`, which returns a task: the call order
is the order. Batches for different queues post concurrently, at most ``max_in_flight`` at once.

A retry that moves a batch to another queue (only without a sharding key: one key, one queue) takes
a new place at the end of that queue's line.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from typing import cast

import httpx

from wharf_client._kernel import compiled  # None without the broker's kernel
from wharf_client.aio import (
    AsyncHttpOwner,
    AsyncRouteCache,
    OrderedLines,
    Turn,
    authorization_headers,
    bootstrap_list,
)
from wharf_client.aio_pipeline import ProduceSocket
from wharf_client.auth import User, basic_auth
from wharf_client.codec import BATCH_MEDIA_TYPE, IncomingMessage, encode_batch
from wharf_client.errors import (
    BrokerError,
    BrokerUnavailableError,
    WharfClientError,
    raise_for_envelope,
    transport_reason,
)
from wharf_client.fault import LatencyFaultTolerance
from wharf_client.outgoing import OutgoingMessage, SendResult, results_of, send_results
from wharf_client.routes import MessageQueue, TopicRoute
from wharf_client.sharding import queue_for_key
from wharf_client.tls import client_ssl_context
from wharf_client.unique_ids import UniqueIdGenerator


class AsyncProducer(AsyncHttpOwner):
    """Sends messages to the brokers that serve a topic, from asyncio.

    ``async with AsyncProducer(url) as producer: await producer.send("orders", b"hello")``. Every
    message gets a unique id before the first try, so a retry after a lost answer is recognised
    by the broker's idempotency window instead of stored twice.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        *,
        retries: int = 2,
        timeout_s: float = 5.0,
        route_ttl_s: float = 30.0,
        max_in_flight: int = 4,
        clock: Callable[[], float] = time.monotonic,
        user: User | None = None,
        pipeline: bool = False,
    ) -> None:
        """``user``: "accessKey:secretKey" (or a pair) for brokers with an ACL. ``pipeline``: send
        batches over a produce WebSocket per broker and topic (wharf_client.aio_pipeline), several
        unanswered on one queue, instead of HTTP requests (one at a time per queue)."""
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        self._ids = UniqueIdGenerator()  # the id of each message sent without one
        self.http = httpx.AsyncClient(
            timeout=timeout_s,
            auth=basic_auth(user),
            limits=httpx.Limits(max_keepalive_connections=max(20, max_in_flight)),
            verify=client_ssl_context(),
        )
        self.routes = AsyncRouteCache(self.http, bootstrap_list(bootstrap), route_ttl_s, clock)
        self.retries = retries
        self.faults = LatencyFaultTolerance(clock)
        self.max_in_flight = max_in_flight
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self._admissions: OrderedLines[str] = OrderedLines()
        self._queue_lines: OrderedLines[tuple[str, MessageQueue]] = OrderedLines()
        self._counter = itertools.count()
        self._pending: set[asyncio.Future[list[SendResult]]] = set()
        self.pipeline = pipeline
        self._headers = authorization_headers(user)
        self._sockets: dict[tuple[str, str], ProduceSocket] = {}
        self._opening: dict[tuple[str, str], asyncio.Lock] = {}

    async def close(self) -> None:
        """Wait for the batches sent so far to be answered (or to fail), then close the connections."""
        await asyncio.gather(*self._pending, return_exceptions=True)
        sockets, self._sockets = list(self._sockets.values()), {}
        await asyncio.gather(*(socket.close() for socket in sockets), return_exceptions=True)
        await self.http.aclose()

    def send(
        self,
        topic: str,
        body: bytes | str,
        *,
        tags: str = "",
        keys: Sequence[str] = (),
        properties: dict[str, str] | None = None,
        sharding_key: str | None = None,
    ) -> asyncio.Future[SendResult]:
        """Send one message; await the returned task for its :class:`SendResult`."""
        message = OutgoingMessage(
            body.encode() if isinstance(body, str) else body, tags, list(keys), properties or {}
        )
        return asyncio.ensure_future(
            self._first(self.send_batch(topic, [message], sharding_key=sharding_key))
        )

    def send_batch(
        self,
        topic: str,
        messages: Sequence[OutgoingMessage],
        *,
        sharding_key: str | None = None,
        queue_id: int | None = None,
    ) -> asyncio.Future[list[SendResult]]:
        """Send a batch to one queue, in the binary batch format; retry on another broker on failure.

        Returns a task at once, its place in line already taken: of the batches this producer sends
        to one queue, one sent earlier is stored earlier. ``queue_id`` keeps the batch to queues with
        that id (on whichever broker serves one)."""
        return self._start(topic, messages, sharding_key, queue_id, None)

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
    ) -> asyncio.Future[SendResult]:
        """Begin a transaction: store the message invisibly (a half message of ``producer_group``);
        await the task for its :class:`SendResult`. Make it visible with :meth:`commit`, or drop
        it with :meth:`rollback`. A retry after a lost answer repeats the unique id, so the broker
        answers the same transaction."""
        message = OutgoingMessage(
            body.encode() if isinstance(body, str) else body, tags, list(keys), properties or {}
        )
        params = {"transaction": "begin", "producer_group": producer_group}
        return asyncio.ensure_future(self._first(self._start(topic, [message], sharding_key, None, params)))

    async def commit(self, begun: SendResult) -> dict[str, object]:
        """Commit the transaction ``begun`` (at the broker that holds it); the broker's answer."""
        return await self._end(begun, "commit")

    async def rollback(self, begun: SendResult) -> dict[str, object]:
        """Roll back the transaction ``begun``; the broker's answer."""
        return await self._end(begun, "rollback")

    async def _end(self, begun: SendResult, verb: str) -> dict[str, object]:
        if begun.transaction_id is None:
            raise WharfClientError("not a transaction's begin: it has no transaction_id")
        response = await self.http.post(f"{begun.address}/v1/transactions/{begun.transaction_id}/{verb}")
        raise_for_envelope(response)
        answer: dict[str, object] = response.json()
        return answer

    def _start(
        self,
        topic: str,
        messages: Sequence[OutgoingMessage],
        sharding_key: str | None,
        queue_id: int | None,
        params: dict[str, str] | None,
    ) -> asyncio.Future[list[SendResult]]:
        ids = self._ids
        for message in messages:
            if message.unique_id is None:
                message.unique_id = ids.next()
        admission = self._admissions.take(topic)
        sending = asyncio.ensure_future(
            self._send(topic, list(messages), sharding_key, queue_id, admission, params)
        )
        self._pending.add(sending)
        sending.add_done_callback(self._pending.discard)
        return sending

    @staticmethod
    async def _first(results: asyncio.Future[list[SendResult]]) -> SendResult:
        return (await results)[0]

    async def _send(
        self,
        topic: str,
        messages: list[OutgoingMessage],
        sharding_key: str | None,
        queue_id: int | None,
        admission: Turn,
        params: dict[str, str] | None,
    ) -> list[SendResult]:
        turn: Turn | None = None
        try:
            await admission.wait()
            queue = self._select(await self.routes.get(topic), topic, sharding_key, queue_id, None)
            turn = self._queue_lines.take((topic, queue))
            admission.end()
            await turn.wait()
            last_error: Exception | None = None
            for attempt in range(self.retries + 1):
                if attempt:
                    route = await self.routes.get(topic, refresh=True)
                    moved = self._select(route, topic, sharding_key, queue_id, queue.broker_name)
                    if moved != queue:
                        queue, previous = moved, turn
                        turn = self._queue_lines.take((topic, queue))
                        previous.end()
                        await turn.wait()
                try:
                    if not queue.address:
                        raise BrokerUnavailableError(
                            f"{queue.broker_name} has no master now, and messages of sharding key "
                            f"{sharding_key!r} stay on its queue {queue.queue_id} to keep their order"
                        )
                    if self.pipeline and params is None:
                        return await self._pipe(topic, queue, messages, turn)
                    return await self._post_timed(topic, queue, messages, params)
                except (httpx.HTTPError, BrokerError, BrokerUnavailableError) as exc:
                    if isinstance(exc, BrokerError) and not exc.retryable:
                        raise
                    self.faults.update(queue.broker_name, 0, failed=True)
                    last_error = exc
            raise WharfClientError(
                f"sending to {topic!r} failed after {self.retries + 1} tries: "
                f"{transport_reason(last_error) if last_error is not None else None}"
            )
        finally:
            admission.end()
            if turn is not None:
                turn.end()

    def _select(
        self, route: TopicRoute, topic: str, sharding_key: str | None, queue_id: int | None, avoid: str | None
    ) -> MessageQueue:
        """The queue to send to; for a sharding key, its queue even while that queue's broker name
        has no master (address ""): the send fails then, rather than break the key's order."""
        queues = (
            (route.keyed_queues or route.write_queues) if sharding_key is not None else route.write_queues
        )
        if queue_id is not None:
            queues = tuple(queue for queue in queues if queue.queue_id == queue_id)
        if not queues:
            which = "" if queue_id is None else f" {queue_id}"
            raise WharfClientError(f"topic {topic!r} has no writable queue{which}")
        return select_queue(queues, sharding_key, avoid, self.faults, self._counter)

    async def _pipe(
        self, topic: str, queue: MessageQueue, messages: list[OutgoingMessage], turn: Turn
    ) -> list[SendResult]:
        """Send the batch on the produce socket; the queue's next batch goes as soon as this one is
        written (the socket keeps it behind), before this one is answered."""
        async with self._in_flight:
            started = time.monotonic()
            socket = await self._socket(queue.address, topic)
            answered = await socket.write(outgoing_batch(messages, queue.queue_id), len(messages))
            turn.end()
            results = results_of(await answered, queue)
            self.faults.update(queue.broker_name, (time.monotonic() - started) * 1000)
            return results

    async def _socket(self, address: str, topic: str) -> ProduceSocket:
        key = (address, topic)
        socket = self._sockets.get(key)
        if socket is not None and not socket.closed:
            return socket
        async with self._opening.setdefault(key, asyncio.Lock()):
            socket = self._sockets.get(key)
            if socket is None or socket.closed:
                socket = self._sockets[key] = await ProduceSocket.open(address, topic, self._headers)
            return socket

    async def _post_timed(
        self, topic: str, queue: MessageQueue, messages: list[OutgoingMessage], params: dict[str, str] | None
    ) -> list[SendResult]:
        async with self._in_flight:
            started = time.monotonic()
            results = await self._post(topic, queue, messages, params)
            self.faults.update(queue.broker_name, (time.monotonic() - started) * 1000)
            return results

    async def _post(
        self, topic: str, queue: MessageQueue, messages: list[OutgoingMessage], params: dict[str, str] | None
    ) -> list[SendResult]:
        response = await self.http.post(
            f"{queue.address}/v1/topics/{topic}/messages",
            content=outgoing_batch(messages, queue.queue_id),
            headers={"content-type": BATCH_MEDIA_TYPE},
            params=params,
        )
        raise_for_envelope(response)
        return send_results(response, queue)


def select_queue(
    queues: Sequence[MessageQueue],
    sharding_key: str | None,
    avoid: str | None,
    faults: LatencyFaultTolerance,
    counter: Iterator[int],
) -> MessageQueue:
    """The sync producer's choice: the key's queue; else round robin over brokers neither just
    failed (``avoid``) nor being avoided, then over any but ``avoid``, then the least bad."""
    if sharding_key is not None:
        # One key, one queue: ordered messages must not move to another broker on retry.
        return queues[queue_for_key(sharding_key, len(queues))]
    start = next(counter)
    for step in range(len(queues)):
        queue = queues[(start + step) % len(queues)]
        if queue.broker_name != avoid and faults.available(queue.broker_name):
            return queue
    for step in range(len(queues)):
        queue = queues[(start + step) % len(queues)]
        if queue.broker_name != avoid:
            return queue
    least_bad = faults.least_bad({queue.broker_name for queue in queues})
    return next(queue for queue in queues if queue.broker_name == least_bad)


def outgoing_batch(messages: list[OutgoingMessage], queue_id: int) -> bytes:
    """The binary batch of ``messages``, every one to ``queue_id``: encoded by the compiled kernel
    when it is loaded and takes them, else by :func:`wharf_client.codec.encode_batch` (its twin)."""
    if compiled is not None:
        made = compiled.encode_outgoing(messages, queue_id)
        if made is not None:
            return cast(bytes, made)
    return encode_batch(_incoming(messages, queue_id))


def _incoming(messages: list[OutgoingMessage], queue_id: int) -> Iterator[IncomingMessage]:
    for message in messages:
        yield IncomingMessage(
            body=message.body,
            tags=message.tags,
            keys=message.keys,
            properties=message.properties,
            queue_id=queue_id,
            unique_id=message.unique_id,
            born_timestamp=message.born_timestamp,
            delay_level=message.delay_level,
            delay_ms=message.delay_ms,
            deliver_at_ms=message.deliver_at_ms,
        )
