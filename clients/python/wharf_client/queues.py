"""Reads that plan their own offsets, without a consumer group: a topic's route, its queues' offsets
on a broker, the offset of a time, and one page of stored records from a given offset.

Every call is one short request, retried a few times on transport errors and 502-504 answers; a
pull never waits (``max_wait_ms=0``) because the reader knows which offsets exist. The Spark source
plans and reads with these calls.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from wharf_client.auth import User, basic_auth
from wharf_client.closing import HttpOwner
from wharf_client.codec import RECORDS_MEDIA_TYPE
from wharf_client.errors import BrokerError, BrokerUnavailableError, raise_for_envelope
from wharf_client.routes import TopicRoute, fetch_route
from wharf_client.tls import client_ssl_context

RETRY_STATUSES = frozenset({502, 503, 504})


@dataclass(frozen=True, slots=True)
class QueueOffsets:
    """A queue's first stored offset and the offset after its last message."""

    queue_id: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class PullPage:
    """One binary pull answer: the records and the queue's offsets at the time."""

    status: str
    next_offset: int
    min_offset: int
    max_offset: int
    records: bytes


class QueueClient(HttpOwner):
    """A keep-alive HTTP client to any number of brokers."""

    def __init__(
        self, *, timeout_s: float = 30.0, retries: int = 3, backoff_s: float = 0.2, user: User | None = None
    ) -> None:
        """``user``: ``"accessKey:secretKey"`` (or a pair) for brokers with an ACL."""
        self.http = httpx.Client(timeout=timeout_s, auth=basic_auth(user), verify=client_ssl_context())
        self.retries = retries
        self.backoff_s = backoff_s
        # A broker's address -> the other brokers of its name (its master, its slaves), which are
        # asked the same when it does not answer. Learned from routes, or given.
        self.fallbacks: dict[str, tuple[str, ...]] = {}
        self._answering: dict[str, str] = {}  # an address -> the broker of its name that answered last

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        """GET with retries, from the other brokers of the name when the broker does not answer
        (and from the one that answered first next time); BrokerError for an error envelope,
        BrokerUnavailableError when none answers."""
        address = next((known for known in self.fallbacks if url.startswith(known + "/")), None)
        if address is None:
            return self._get(url, **kwargs)
        path = url[len(address) :]
        preferred = self._answering.get(address, address)
        error: BrokerUnavailableError | None = None
        for other in (preferred, *[a for a in (address, *self.fallbacks[address]) if a != preferred]):
            try:
                response = self._get(other + path, **kwargs)
            except BrokerUnavailableError as exc:
                error = exc
                continue
            self._answering[address] = other
            return response
        assert error is not None
        raise error

    def _get(self, url: str, **kwargs: Any) -> httpx.Response:
        error: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = self.http.get(url, **kwargs)
                raise_for_envelope(response)
            except httpx.TransportError as exc:
                error = exc
                continue
            except BrokerError as exc:
                if exc.status not in RETRY_STATUSES:
                    raise
                error = exc
                continue
            return response
        if isinstance(error, BrokerError):
            raise error
        raise BrokerUnavailableError(f"GET {url} failed after {self.retries + 1} tries: {error}")

    def route(self, bootstrap: Sequence[str], topic: str) -> TopicRoute | None:
        """The topic's route from the first of ``bootstrap`` that answers; None when it has none."""
        try:
            route = fetch_route(self.get, bootstrap, topic)
        except BrokerError as exc:
            if exc.status == 404:
                return None
            raise
        for queue in route.read_queues:
            self.fallbacks[queue.address] = route.replicas(queue)[1:]
        return route

    def queues(self, address: str, topic: str) -> list[QueueOffsets]:
        """The offsets of every queue of the topic on the broker at ``address``."""
        answer = self.get(f"{address}/v1/topics/{topic}/queues").json()
        return [
            QueueOffsets(int(queue["queue_id"]), int(queue["min_offset"]), int(queue["max_offset"]))
            for queue in answer["queues"]
        ]

    def search_offset(self, address: str, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The offset of the queue's first message stored at or after ``timestamp_ms``."""
        url = f"{address}/v1/topics/{topic}/queues/{queue_id}/offset"
        return int(self.get(url, params={"timestamp": timestamp_ms}).json()["offset"])

    def pull(
        self, address: str, topic: str, queue_id: int, offset: int, max_messages: int, tags: str | None
    ) -> PullPage:
        """One page of stored records from ``offset``, answered at once (no long polling)."""
        params: dict[str, Any] = {"offset": offset, "max_messages": max_messages, "max_wait_ms": 0}
        if tags:
            params["tags"] = tags
        response = self.get(
            f"{address}/v1/topics/{topic}/queues/{queue_id}/messages",
            params=params,
            headers={"Accept": RECORDS_MEDIA_TYPE},
        )
        headers = response.headers
        return PullPage(
            status=headers["X-Wharf-Status"],
            next_offset=int(headers["X-Wharf-Next-Offset"]),
            min_offset=int(headers["X-Wharf-Min-Offset"]),
            max_offset=int(headers["X-Wharf-Max-Offset"]),
            records=response.content,
        )
