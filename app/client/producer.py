"""The producer: route-aware queue selection, retries on another broker, latency fault tolerance."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx

from app.client.auth import User, basic_auth
from app.client.closing import HttpOwner
from app.client.errors import BrokerError, WharfClientError, raise_for_envelope
from app.client.fault import LatencyFaultTolerance
from app.client.routes import MessageQueue, RouteCache
from app.codec import BATCH_MEDIA_TYPE, IncomingMessage, encode_batch
from app.sharding import queue_for_key


@dataclass(slots=True)
class OutgoingMessage:
    body: bytes
    tags: str = ""
    keys: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    unique_id: str | None = None
    born_timestamp: int = 0  # milliseconds; 0: when the broker receives it
    # Delayed delivery (at most one): a level 1-18, a delay in ms, or an epoch time in ms.
    delay_level: int | None = None
    delay_ms: int | None = None
    deliver_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class SendResult:
    msg_id: str
    unique_id: str
    queue_id: int
    queue_offset: int | None  # None for a half message (a transaction's begin) or a delayed one
    status: str
    broker_name: str
    address: str
    transaction_id: str | None = None  # a begin's: commit or roll back with it


def send_results(response: httpx.Response, queue: MessageQueue) -> list[SendResult]:
    """The results of a produce the broker of ``queue`` answered."""
    return [
        SendResult(
            result["msg_id"],
            result["unique_id"],
            result["queue_id"],
            result["queue_offset"],
            result["status"],
            queue.broker_name,
            queue.address,
            result.get("transaction_id"),
        )
        for result in response.json()["results"]
    ]


class Producer(HttpOwner):
    """Sends messages to the brokers that serve a topic.

    Every message gets a unique id before the first try, so a retry after a lost answer is
    recognised by the broker's idempotency window instead of stored twice.
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
    ) -> None:
        # user: "accessKey:secretKey" (or a pair) for brokers with an ACL.
        self.http = httpx.Client(timeout=timeout_s, auth=basic_auth(user))
        self.routes = RouteCache(
            self.http, [bootstrap] if isinstance(bootstrap, str) else list(bootstrap), route_ttl_s, clock
        )
        self.retries = retries
        self.faults = LatencyFaultTolerance(clock)
        self._counter = itertools.count()

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
        message = OutgoingMessage(
            body.encode() if isinstance(body, str) else body, tags, list(keys), properties or {}
        )
        return self.send_batch(topic, [message], sharding_key=sharding_key)[0]

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
        return self._send(topic, messages, sharding_key, queue_id, None)

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
        message = OutgoingMessage(
            body.encode() if isinstance(body, str) else body, tags, list(keys), properties or {}
        )
        params = {"transaction": "begin", "producer_group": producer_group}
        return self._send(topic, [message], sharding_key, None, params)[0]

    def commit(self, begun: SendResult) -> dict[str, object]:
        """Commit the transaction ``begun`` (at the broker that holds it); the broker's answer."""
        return self._end(begun, "commit")

    def rollback(self, begun: SendResult) -> dict[str, object]:
        """Roll back the transaction ``begun``; the broker's answer."""
        return self._end(begun, "rollback")

    def _end(self, begun: SendResult, verb: str) -> dict[str, object]:
        if begun.transaction_id is None:
            raise WharfClientError("not a transaction's begin: it has no transaction_id")
        response = self.http.post(f"{begun.address}/v1/transactions/{begun.transaction_id}/{verb}")
        raise_for_envelope(response)
        answer: dict[str, object] = response.json()
        return answer

    def _send(
        self,
        topic: str,
        messages: Sequence[OutgoingMessage],
        sharding_key: str | None,
        queue_id: int | None,
        params: dict[str, str] | None,
    ) -> list[SendResult]:
        for message in messages:
            if message.unique_id is None:
                message.unique_id = uuid.uuid4().hex.upper()
        failed_broker: str | None = None
        last_error: Exception | None = None
        for attempt in range(self.retries + 1):
            route = self.routes.get(topic, refresh=attempt > 0)
            queues = route.write_queues
            if queue_id is not None:
                queues = tuple(queue for queue in queues if queue.queue_id == queue_id)
            if not queues:
                which = "" if queue_id is None else f" {queue_id}"
                raise WharfClientError(f"topic {topic!r} has no writable queue{which}")
            queue = self._select(queues, sharding_key, failed_broker)
            started = time.monotonic()
            try:
                results = self._post(topic, queue, messages, params)
            except (httpx.HTTPError, BrokerError) as exc:
                if isinstance(exc, BrokerError) and not exc.retryable:
                    raise
                self.faults.update(queue.broker_name, 0, failed=True)
                failed_broker = queue.broker_name
                last_error = exc
                continue
            self.faults.update(queue.broker_name, (time.monotonic() - started) * 1000)
            return results
        raise WharfClientError(f"sending to {topic!r} failed after {self.retries + 1} tries: {last_error}")

    def _select(
        self, queues: Sequence[MessageQueue], sharding_key: str | None, avoid: str | None
    ) -> MessageQueue:
        if sharding_key is not None:
            # One key, one queue: ordered messages must not move to another broker on retry.
            return queues[queue_for_key(sharding_key, len(queues))]
        start = next(self._counter)
        for step in range(len(queues)):
            queue = queues[(start + step) % len(queues)]
            if queue.broker_name != avoid and self.faults.available(queue.broker_name):
                return queue
        for step in range(len(queues)):
            queue = queues[(start + step) % len(queues)]
            if queue.broker_name != avoid:
                return queue
        least_bad = self.faults.least_bad({queue.broker_name for queue in queues})
        return next(queue for queue in queues if queue.broker_name == least_bad)

    def _post(
        self,
        topic: str,
        queue: MessageQueue,
        messages: Sequence[OutgoingMessage],
        params: dict[str, str] | None = None,
    ) -> list[SendResult]:
        batch = encode_batch(
            IncomingMessage(
                body=message.body,
                tags=message.tags,
                keys=message.keys,
                properties=message.properties,
                queue_id=queue.queue_id,
                unique_id=message.unique_id,
                born_timestamp=message.born_timestamp,
                delay_level=message.delay_level,
                delay_ms=message.delay_ms,
                deliver_at_ms=message.deliver_at_ms,
            )
            for message in messages
        )
        response = self.http.post(
            f"{queue.address}/v1/topics/{topic}/messages",
            content=batch,
            headers={"content-type": BATCH_MEDIA_TYPE},
            params=params,
        )
        raise_for_envelope(response)
        return send_results(response, queue)
