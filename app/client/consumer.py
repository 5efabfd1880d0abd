"""The pull consumer: long-poll every queue of a topic, hand messages out in order per queue,
commit what the application finished.

One fetcher thread per queue long-polls its broker. Fetched messages wait in a local cache;
fetchers pause while it holds 1000 messages or 100 MiB (flow control, SPEC 4). A message counts
as processed when the application asks for the next one (or calls :meth:`PullConsumer.commit`
after handling it), so a crash re-delivers at most the message in hand: at-least-once.

Options for one-off readers (the ``wharf consume`` command): ``start`` is where a group without a
committed offset begins (``last``, ``first`` or a time in ms); ``auto_commit=False`` commits only
when :meth:`PullConsumer.commit` is called; ``stop_at_end`` reads each queue up to its end once,
after which :attr:`PullConsumer.drained` turns true.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from app.client.auth import User, basic_auth
from app.client.errors import BrokerError, raise_for_envelope
from app.client.routes import MessageQueue, ReadTarget, RouteCache
from app.codec import RECORDS_MEDIA_TYPE, decode_records
from app.store.record import StoredMessage

log = logging.getLogger(__name__)

MOVE_ON = {"OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY", "NO_MATCHED_MESSAGE"}
# The pull reached the queue's end: nothing after the offset asked for.
AT_END = {"NO_MESSAGE_IN_QUEUE", "OFFSET_OVERFLOW_ONE"}


@dataclass(frozen=True, slots=True)
class ConsumedMessage:
    message: StoredMessage
    queue: MessageQueue

    @property
    def body(self) -> bytes:
        return self.message.body


def put_offsets(http: httpx.Client, addresses: Sequence[str], path: str, body: dict[str, Any]) -> None:
    """PUT ``body`` to the first of ``addresses`` that answers (a broker's refusal is raised)."""
    for address in addresses[:-1]:
        try:
            raise_for_envelope(http.put(address + path, json=body))
            return
        except httpx.TransportError:
            continue
    raise_for_envelope(http.put(addresses[-1] + path, json=body))


def pull_params(
    group: str, batch_size: int, max_wait_ms: int, tags: str, sql92: str | None
) -> dict[str, str | int]:
    """A consumer's pull parameters, but for where it reads from (``offset`` or ``from``)."""
    params: dict[str, str | int] = {"group": group, "max_messages": batch_size, "max_wait_ms": max_wait_ms}
    if sql92 is not None:
        params.update(filter_type="sql92", filter=sql92)
    else:
        params["tags"] = tags
    return params


class PullConsumer:
    def __init__(
        self,
        bootstrap: str | Sequence[str],
        topic: str,
        group: str,
        *,
        tags: str = "*",
        sql92: str | None = None,
        batch_size: int = 32,
        max_wait_ms: int = 2_000,
        max_cached_messages: int = 1_000,
        max_cached_bytes: int = 100 * 1024 * 1024,
        commit_interval_s: float = 5.0,
        timeout_s: float = 10.0,
        user: User | None = None,
        start: str = "last",
        auto_commit: bool = True,
        stop_at_end: bool = False,
    ) -> None:
        self.topic = topic
        self.group = group
        self.tags = tags
        # A SQL92 expression over message properties, filtered by the broker instead of ``tags``.
        self.sql92 = sql92
        self.batch_size = batch_size
        self.max_wait_ms = max_wait_ms
        self.max_cached_messages = max_cached_messages
        self.max_cached_bytes = max_cached_bytes
        self.commit_interval_s = commit_interval_s
        self.start_from = start
        self.auto_commit = auto_commit
        self.stop_at_end = stop_at_end
        self.timeout_s = timeout_s + max_wait_ms / 1000
        # user: "accessKey:secretKey" (or a pair) for brokers with an ACL.
        self._auth = basic_auth(user)
        self._http = httpx.Client(timeout=self.timeout_s, auth=self._auth)
        self.routes = RouteCache(self._http, [bootstrap] if isinstance(bootstrap, str) else list(bootstrap))
        self._cache: queue.Queue[ConsumedMessage] = queue.Queue()
        self._room = threading.Condition()
        self._cached_messages = 0
        self._cached_bytes = 0
        self._stop = threading.Event()
        self._threads: dict[MessageQueue, threading.Thread] = {}
        self._done: dict[MessageQueue, int] = {}  # next offset to commit, per queue
        self._committed: dict[MessageQueue, int] = {}
        self._at_end: set[MessageQueue] = set()
        self._done_lock = threading.Lock()
        self._in_hand: ConsumedMessage | None = None
        self._last_commit = time.monotonic()
        self._refused: BrokerError | None = None  # a pull the ACL refused: retrying cannot help

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> PullConsumer:
        for message_queue in self.routes.get(self.topic, refresh=True).read_queues:
            thread = threading.Thread(
                target=self._fetch_loop,
                args=(message_queue,),
                name=f"wharf-fetch-{message_queue.queue_id}",
                daemon=True,
            )
            self._threads[message_queue] = thread
            thread.start()
        return self

    def close(self) -> None:
        self._finish_in_hand()
        self._stop.set()
        with self._room:
            self._room.notify_all()
        for thread in self._threads.values():
            thread.join(self.timeout_s)
        if self.auto_commit:
            self.commit()
        self._http.close()

    def __enter__(self) -> PullConsumer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def queues(self) -> list[MessageQueue]:
        return sorted(self._threads)

    @property
    def drained(self) -> bool:
        """With ``stop_at_end``: every queue was read to its end and every message fetched handed out."""
        with self._done_lock:
            every_queue_ended = len(self._at_end) == len(self._threads)
        return every_queue_ended and self._cache.empty()

    # -- consuming -------------------------------------------------------------------------------

    def poll(self, timeout_s: float = 1.0) -> ConsumedMessage | None:
        """The next message, or None after ``timeout_s``. Asking for it finishes the previous one.

        Raises the BrokerError (401 or 403) of a pull the broker's ACL refused."""
        if self._refused is not None:
            raise self._refused
        self._finish_in_hand()
        if self.auto_commit and time.monotonic() - self._last_commit >= self.commit_interval_s:
            self._commit_finished()
        try:
            consumed = self._cache.get(timeout=timeout_s)
        except queue.Empty:
            return None
        with self._room:
            self._cached_messages -= 1
            self._cached_bytes -= consumed.message.size
            self._room.notify_all()
        self._in_hand = consumed
        return consumed

    def __iter__(self) -> Iterator[ConsumedMessage]:
        while not self._stop.is_set():
            consumed = self.poll(0.5)
            if consumed is not None:
                yield consumed
        if self._refused is not None:
            raise self._refused

    def _finish_in_hand(self) -> None:
        consumed, self._in_hand = self._in_hand, None
        if consumed is not None:
            with self._done_lock:
                self._done[consumed.queue] = consumed.message.queue_offset + 1

    def commit(self, *, strict: bool = False) -> None:
        """Commit, per broker, the offsets after the messages the application finished, counting
        the message in hand as finished. A broker that refuses or does not answer is logged and
        tried again at the next commit; ``strict`` raises its error instead."""
        self._finish_in_hand()
        self._commit_finished(strict)

    def _commit_finished(self, strict: bool = False) -> None:
        self._last_commit = time.monotonic()
        with self._done_lock:
            pending = {q: offset for q, offset in self._done.items() if self._committed.get(q) != offset}
        by_address: dict[str, list[tuple[MessageQueue, int]]] = {}
        for message_queue, offset in pending.items():
            by_address.setdefault(message_queue.address, []).append((message_queue, offset))
        for address, items in by_address.items():
            body = {"offsets": [{"topic": self.topic, "queue_id": q.queue_id, "offset": o} for q, o in items]}
            # A master that does not answer: a slave keeps the offsets and hands them over later.
            replicas = self.routes.get(self.topic).replicas(items[0][0])
            try:
                put_offsets(self._http, replicas, f"/v1/groups/{self.group}/offsets", body)
            except (httpx.HTTPError, BrokerError) as exc:
                if strict:
                    raise
                log.warning("committing offsets to %s failed: %s", address, exc)
                continue
            with self._done_lock:
                for message_queue, offset in items:
                    self._committed[message_queue] = offset

    # -- fetching --------------------------------------------------------------------------------

    def _wait_for_room(self) -> bool:
        with self._room:
            while not self._stop.is_set() and (
                self._cached_messages >= self.max_cached_messages
                or self._cached_bytes >= self.max_cached_bytes
            ):
                self._room.wait(0.5)
        return not self._stop.is_set()

    def _fetch_loop(self, message_queue: MessageQueue) -> None:
        target = ReadTarget(message_queue, self.routes.get(self.topic))
        path = f"/v1/topics/{self.topic}/queues/{message_queue.queue_id}/messages"
        offset: int | None = None  # None: the broker starts from the group's committed offset
        backoff_s = 0.1
        with httpx.Client(timeout=self.timeout_s, auth=self._auth) as http:
            while self._wait_for_room():
                params = pull_params(self.group, self.batch_size, self.max_wait_ms, self.tags, self.sql92)
                params.update({"offset": offset} if offset is not None else {"from": self.start_from})
                url = target.address + path
                try:
                    response = http.get(url, params=params, headers={"accept": RECORDS_MEDIA_TYPE})
                    raise_for_envelope(response)
                except (httpx.HTTPError, BrokerError) as exc:
                    if isinstance(exc, BrokerError) and exc.status in (401, 403):
                        self._refused = exc
                        self._stop.set()
                        return
                    log.debug("pull from %s failed: %s", url, exc)
                    if not isinstance(exc, BrokerError) or exc.status >= 500:
                        target.failed()  # read from another broker of the name meanwhile
                    self._stop.wait(backoff_s)
                    backoff_s = min(backoff_s * 2, 2.0)
                    continue
                backoff_s = 0.1
                target.follow(int(response.headers.get("x-wharf-suggest-broker-id", "0")))
                status = response.headers["x-wharf-status"]
                next_offset = int(response.headers["x-wharf-next-offset"])
                if status == "FOUND":
                    records = decode_records(response.content)
                    with self._room:
                        self._cached_messages += len(records)
                        self._cached_bytes += sum(record.size for record in records)
                    for record in records:
                        self._cache.put(ConsumedMessage(record, message_queue))
                    offset = next_offset
                elif status in MOVE_ON or offset is None:
                    offset = next_offset
                if self.stop_at_end and status in AT_END:
                    with self._done_lock:
                        self._at_end.add(message_queue)
                    return
