"""A member of a consumer group: the brokers allocate the queues, the client heartbeats and pulls.

The consumer joins every broker that hosts one of its topics (membership is per broker), renews
its membership there every ``heartbeat_interval_ms`` the brokers ask for, and pulls with
``GET /v1/groups/{group}/messages``, which reads only the queues that broker gave it. A batch is
committed with the generation it was pulled in; a commit refused as fenced (the group rebalanced in
between) is dropped: the queue's new owner reads those messages again (at-least-once).

    with GroupConsumer("http://127.0.0.1:8080", "billing", {"orders": "*"}) as consumer:
        for batch in consumer.batches(max_wait_ms=5_000):
            handle(batch.messages)
            consumer.commit(batch)

A subscription is a tag expression (``"*"``, ``"TagA || TagB"``) or a SQL92 filter over message
properties, ``{"type": "sql92", "expression": "region = 'eu' AND amount > 100"}``.

With ``consume_mode="orderly"`` the member also locks the queues each heartbeat assigns it (so
renewing them), and before each pull releases those no longer its own, once the batch it read
from them was committed; the broker hands it only the queues it holds, in order, and a commit
refused because a lock was lost is dropped like a fenced one.

A message sent back with :meth:`GroupConsumer.retry` comes again through the group's retry topic
with its original ``topic``; its ``retry_topic`` names the queue its ``queue_id`` and
``queue_offset`` belong to, and the batch's ``offsets`` commit that queue.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from wharf_client.auth import User, basic_auth
from wharf_client.closing import HttpOwner
from wharf_client.errors import BrokerError, BrokerUnavailableError, raise_for_envelope
from wharf_client.routes import RouteCache
from wharf_client.tls import client_ssl_context

NOT_A_MEMBER = 40407
FENCED = 40904
NOT_LOCKED = 40930
# Answers after which the route is fetched again: a slave's "send to the master" and a broker that
# is going away or cannot reach the registry.
MOVED = frozenset({421, 503})


@dataclass(frozen=True, slots=True)
class GroupBatch:
    """What one group pull answered: the messages (the API's message objects), the offsets to
    commit once they are handled, and the generation they were read in."""

    address: str
    generation: int
    messages: list[dict[str, Any]]
    offsets: list[dict[str, Any]] = field(default_factory=list)


class GroupConsumer(HttpOwner):
    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group: str,
        subscriptions: dict[str, str | dict[str, str]],
        *,
        client_id: str | None = None,
        model: str = "clustering",
        strategy: str = "averagely",
        consume_from: str = "last",
        consume_mode: str = "concurrently",
        consume_timestamp_ms: int | None = None,
        timeout_s: float = 10.0,
        user: User | None = None,
    ) -> None:
        self.group = group
        self.subscriptions = dict(subscriptions)
        self.client_id = client_id or f"wharf-{uuid.uuid4().hex[:12]}"
        self.join_body: dict[str, Any] = {
            "client_id": self.client_id,
            "subscriptions": self.subscriptions,
            "model": model,
            "strategy": strategy,
            "consume_from": consume_from,
            "consume_mode": consume_mode,
        }
        self.orderly = consume_mode == "orderly"
        if consume_timestamp_ms is not None:
            self.join_body["consume_timestamp_ms"] = consume_timestamp_ms
        self.timeout_s = timeout_s
        self.http = httpx.Client(timeout=timeout_s, auth=basic_auth(user), verify=client_ssl_context())
        self.routes = RouteCache(self.http, [bootstrap] if isinstance(bootstrap, str) else list(bootstrap))
        self.generations: dict[str, int] = {}  # broker address -> generation of its last answer
        self.assignments: dict[str, list[dict[str, Any]]] = {}
        self.locked: dict[str, list[dict[str, Any]]] = {}  # broker address -> queues held (orderly)
        self._interval_s = 10.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._turn = itertools.count()
        self.heartbeat()
        self._heartbeats = threading.Thread(
            target=self._heartbeat_loop, name="wharf-group-heartbeat", daemon=True
        )
        self._heartbeats.start()

    def brokers(self) -> list[str]:
        """The addresses of the masters that host any of the subscribed topics."""
        addresses = {
            queue.address for topic in self.subscriptions for queue in self.routes.get(topic).read_queues
        }
        return sorted(addresses)

    def heartbeat(self) -> None:
        """Join (or stay in) the group on every broker of the topics."""
        for address in self.brokers():
            self._join(address)

    def _join(self, address: str) -> None:
        answer = self.http.post(f"{address}/v1/groups/{self.group}/heartbeat", json=self.join_body)
        raise_for_envelope(answer)
        body = answer.json()
        with self._lock:
            self.generations[address] = body["generation"]
            self.assignments[address] = body["assignments"]
            self._interval_s = body["heartbeat_interval_ms"] / 1000
        if self.orderly:
            self._lock_queues(address, body["assignments"])

    def _lock_queues(self, address: str, assignments: list[dict[str, Any]]) -> None:
        """Lock (or renew) the queues assigned; those still held from before stay held until
        :meth:`_release_revoked`."""
        queues = [{"topic": item["topic"], "queue_id": item["queue_id"]} for item in assignments]
        body = {"client_id": self.client_id, "queues": queues}
        answer = self.http.post(f"{address}/v1/groups/{self.group}/locks", json=body)
        raise_for_envelope(answer)
        with self._lock:
            revoked = [queue for queue in self.locked.get(address, []) if queue not in queues]
            self.locked[address] = answer.json()["queues"] + revoked

    def _release_revoked(self, address: str) -> None:
        """Unlock the queues held that the broker no longer assigns this member."""
        with self._lock:
            assigned = [
                {"topic": i["topic"], "queue_id": i["queue_id"]} for i in self.assignments.get(address, [])
            ]
            revoked = [queue for queue in self.locked.get(address, []) if queue not in assigned]
        if revoked:
            body = {"client_id": self.client_id, "queues": revoked}
            raise_for_envelope(
                self.http.request("DELETE", f"{address}/v1/groups/{self.group}/locks", json=body)
            )
            with self._lock:
                self.locked[address] = [queue for queue in self.locked[address] if queue not in revoked]

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.heartbeat()
            except (httpx.HTTPError, BrokerError, BrokerUnavailableError):
                # The next beat tries again, with the route fetched again; a broker that stays
                # away drops the member.
                self.routes.forget(self.subscriptions)

    def poll(self, max_messages: int = 32, max_wait_ms: int = 0) -> GroupBatch:
        """One group pull from the next broker in turn (joining it again if it forgot the member)."""
        brokers = self.brokers()
        address = brokers[next(self._turn) % len(brokers)]
        params: dict[str, str | int] = {
            "client_id": self.client_id,
            "max_messages": max_messages,
            "max_wait_ms": max_wait_ms,
        }
        url = f"{address}/v1/groups/{self.group}/messages"
        timeout = self.timeout_s + max_wait_ms / 1000
        if self.orderly:
            self._release_revoked(address)  # the last batch of those queues was committed by now
            with self._lock:
                assignments = self.assignments.get(address, [])
                missing = len(self.locked.get(address, [])) < len(assignments)
            if missing:  # another member held some when they were assigned: ask again
                self._lock_queues(address, assignments)
        try:
            answer = self.http.get(url, params=params, timeout=timeout)
            if answer.status_code == 404 and _error_code(answer) == NOT_A_MEMBER:
                self._join(address)  # expired, or the broker restarted
                answer = self.http.get(url, params=params, timeout=timeout)
            raise_for_envelope(answer)
        except (httpx.TransportError, BrokerError) as error:
            if isinstance(error, httpx.TransportError) or error.status in MOVED:
                self.routes.forget(self.subscriptions)  # a failover may have named another master
            raise
        body = answer.json()
        with self._lock:
            self.generations[address] = body["generation"]
        return GroupBatch(address, body["generation"], body["messages"], body["offsets"])

    def batches(self, max_messages: int = 32, max_wait_ms: int = 2_000) -> Iterator[GroupBatch]:
        """Batches with messages, until :meth:`close`."""
        while not self._stop.is_set():
            batch = self.poll(max_messages, max_wait_ms)
            if batch.messages:
                yield batch

    def commit(self, batch: GroupBatch) -> bool:
        """Commit what ``batch`` read; False when the group rebalanced since, or an ordered member
        lost a queue's lock (nothing committed: the messages come again to the queue's owner)."""
        if not batch.offsets:
            return True
        offsets = [
            {"topic": item["topic"], "queue_id": item["queue_id"], "offset": item["next_offset"]}
            for item in batch.offsets
        ]
        body = {"client_id": self.client_id, "generation": batch.generation, "offsets": offsets}
        answer = self.http.put(f"{batch.address}/v1/groups/{self.group}/offsets", json=body)
        if answer.status_code == 409 and _error_code(answer) in (FENCED, NOT_LOCKED):
            self._join(batch.address)
            return False
        raise_for_envelope(answer)
        return True

    def retry(self, batch: GroupBatch, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message`` of ``batch`` back for another try (to the group's retry topic, or its
        dead-letter topic past the group's max reconsume times); the broker's answer. Commit the
        batch as usual: the message comes again by itself."""
        answer = self.http.post(
            f"{batch.address}/v1/groups/{self.group}/retry", json={"msg_id": message["msg_id"]}
        )
        raise_for_envelope(answer)
        result: dict[str, Any] = answer.json()
        return result

    def close(self) -> None:
        """Stop heartbeating and leave the group on every broker, so the others take the queues now."""
        self._stop.set()
        self._heartbeats.join(timeout=self.timeout_s)
        for address in list(self.generations):
            # A broker that cannot be reached drops the member when it expires.
            with contextlib.suppress(httpx.HTTPError):
                self.http.delete(f"{address}/v1/groups/{self.group}/members/{self.client_id}")
        super().close()


def _error_code(answer: httpx.Response) -> int | None:
    try:
        return int(answer.json()["error_code"])
    except (ValueError, KeyError, TypeError):
        return None
