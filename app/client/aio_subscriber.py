"""The asyncio WebSocket subscriber: the brokers push a topic's stored records, within credit.

One socket per broker that serves the topic, ``/v1/ws/subscribe?format=binary`` (README
"WebSocket"): each binary frame holds stored CommitLog records, decoded by the store's record
decoder; text frames (``assignment``, ``committed``) are the broker's bookkeeping. A message counts
as processed when the application asks for the next one, as with :class:`AsyncConsumer`; with a
group, processed messages are acknowledged and the broker commits the group's offset (the oldest
unacknowledged one) and says so in a ``committed`` frame.

Frames the subscriber sends, batched: ``ack`` for the processed messages and ``permit`` for the
credit they free (one per message handed out, so at most ``credit`` messages wait in the client).
They go out when half the credit is to be given back, and whenever the subscriber is about to wait
for the broker: a broker that waits for acks or credit is never left waiting by a client that waits
for messages.

A socket the broker closes for a passing reason (shutting down, try again later, the connection
dropped) is opened again after a pause; what it delivered and was not acknowledged comes again
from the group's committed offset, and whatever of it still waits in the client is dropped (without
a group the socket starts again at ``start``). Any
other close ends the subscriber: :meth:`AsyncSubscriber.poll` raises it as a BrokerError whose
``status`` is the close code less 4000 (4404 -> 404) and whose ``error_code`` leads the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlencode

import httpx
import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from app.client.aio import AsyncRouteCache, authorization_headers, bootstrap_list
from app.client.aio_pipeline import NO_COMPRESSION
from app.client.auth import User, basic_auth
from app.client.consumed import ConsumedMessage
from app.client.errors import BrokerError, WharfClientError
from app.client.routes import MessageQueue
from app.codec import decode_records
from app.tls import client_ssl_context

log = logging.getLogger(__name__)

# Closes after which the same subscription is tried again: the broker is going away or restarting,
# asked the client to come back later, failed unexpectedly or cannot reach its registry.
PASSING_CLOSES = frozenset({1001, 1006, 1011, 1012, 1013, 4500, 4503})


@dataclass(eq=False, slots=True)
class _Socket:
    """One broker's subscribe socket and what the client owes it."""

    broker_name: str
    address: str
    url: str
    queues: dict[int, MessageQueue] = field(default_factory=dict)
    connection: ClientConnection | None = None
    generation: int = 0  # one more per connection: messages of an earlier one are stale
    spent: int = 0  # messages handed out since the last permit: the credit to give back
    acks: dict[int, list[int]] = field(default_factory=dict)  # processed, not yet acknowledged
    acked_to: dict[int, int] = field(default_factory=dict)  # per queue: after the last acknowledged
    assigned: dict[int, int] = field(default_factory=dict)  # queue id -> offset it started at
    committed: dict[int, int] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None

    def queue(self, queue_id: int) -> MessageQueue:
        queue = self.queues.get(queue_id)
        if queue is None:
            queue = self.queues[queue_id] = MessageQueue(self.broker_name, queue_id, self.address)
        return queue

    def owed(self) -> int:
        return self.spent + sum(len(offsets) for offsets in self.acks.values())

    def reset(self) -> None:
        """The connection is gone: its credit, its unacknowledged messages and its queues with it."""
        self.connection = None
        self.generation += 1
        self.spent = 0
        self.acks.clear()
        self.acked_to.clear()
        self.assigned.clear()
        self.committed.clear()


_Delivery = tuple[_Socket, int, ConsumedMessage]  # the socket, its generation then, the message


@dataclass(eq=False, slots=True)
class _Frame:
    """The messages of one binary frame, handed out from ``taken`` on."""

    socket: _Socket
    generation: int  # the socket's then: messages of an earlier connection are stale
    messages: list[ConsumedMessage]
    taken: int = 0

    @property
    def stale(self) -> bool:
        return self.generation != self.socket.generation


class AsyncSubscriber:
    """Subscribes to ``topic`` over WebSocket, as a member of ``group`` (shared queues, acks and
    commits) or, without one, alone and without acks. ``queue_ids`` reads just those queues."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        topic: str,
        group: str | None = None,
        *,
        queue_ids: Sequence[int] | None = None,
        tags: str = "*",
        sql92: str | None = None,
        start: str = "last",
        credit: int = 256,
        timeout_s: float = 10.0,
        user: User | None = None,
    ) -> None:
        if credit < 2:
            raise ValueError("credit must be at least 2")
        self.bootstrap = bootstrap_list(bootstrap)
        self.topic = topic
        self.group = group
        self.queue_ids = None if queue_ids is None else sorted(set(queue_ids))
        self.tags = tags
        self.sql92 = sql92
        self.start_from = start
        self.credit = credit
        self.timeout_s = timeout_s
        self.user = user
        self._headers = authorization_headers(user)
        self._sockets: list[_Socket] = []
        self._cache: deque[_Frame] = deque()  # frames with messages not handed out yet
        self._delivered = asyncio.Event()  # set when a frame adds to the cache, or a socket fails
        self._in_hand: _Delivery | None = None
        # The rest of a poll_batch's messages, per frame: (socket, generation, messages).
        self._in_hand_batch: list[tuple[_Socket, int, list[ConsumedMessage]]] = []
        self._commits = asyncio.Event()  # set on every committed or assignment frame
        self._failure: Exception | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> AsyncSubscriber:
        """Open a socket to every broker with a queue to read; returns once each has its assignment."""
        async with httpx.AsyncClient(
            timeout=self.timeout_s, auth=basic_auth(self.user), verify=client_ssl_context()
        ) as http:
            route = await AsyncRouteCache(http, self.bootstrap).get(self.topic)
        brokers: dict[str, str] = {}
        for queue in route.read_queues:
            if self.queue_ids is None or queue.queue_id in self.queue_ids:
                brokers[queue.address] = queue.broker_name
        if not brokers:
            raise WharfClientError(f"topic {self.topic!r} has no readable queue to subscribe to")
        self._sockets = [_Socket(name, address, self._url(address)) for address, name in brokers.items()]
        try:
            for socket in self._sockets:
                await self._connect(socket)
        except BaseException:
            await self.close()
            raise
        for socket in self._sockets:
            socket.reader = asyncio.create_task(
                self._read_loop(socket), name=f"wharf-ws-{socket.broker_name}"
            )
        return self

    async def close(self) -> None:
        """Acknowledge what was processed (the message in hand too) and close the sockets."""
        if self._closed:
            return
        self._closed = True
        self._finish_in_hand()
        for socket in self._sockets:
            if socket.reader is not None:
                socket.reader.cancel()
        await asyncio.gather(
            *(socket.reader for socket in self._sockets if socket.reader is not None), return_exceptions=True
        )
        for socket in self._sockets:
            await self._flush(socket)
            if socket.connection is not None:
                await socket.connection.close()

    async def __aenter__(self) -> AsyncSubscriber:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def assignment(self) -> dict[MessageQueue, int]:
        """The queues the brokers gave this subscriber now, with the offset each started at."""
        return {
            socket.queue(queue_id): offset
            for socket in self._sockets
            for queue_id, offset in socket.assigned.items()
        }

    def _url(self, address: str) -> str:
        params: dict[str, str | int] = {"topic": self.topic, "format": "binary", "credit": self.credit}
        if self.group is not None:
            params["group"] = self.group
        if self.sql92 is not None:
            params.update(filter_type="sql92", filter=self.sql92)
        else:
            params["tags"] = self.tags
        params["from"] = self.start_from
        if self.queue_ids is not None:
            params["queues"] = ",".join(str(queue_id) for queue_id in self.queue_ids)
        scheme, rest = address.split("://", 1)
        return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/v1/ws/subscribe?{urlencode(params)}"

    # -- consuming -------------------------------------------------------------------------------

    async def poll(self, timeout_s: float = 1.0) -> ConsumedMessage | None:
        """The next message, or None after ``timeout_s``. Asking for it finishes the previous one.

        Raises the close of a socket the broker ended for good (BrokerError: refused, unknown topic)."""
        return await self._poll(timeout_s, give_back=True)

    async def _poll(self, timeout_s: float, give_back: bool) -> ConsumedMessage | None:
        """:meth:`poll`; without ``give_back`` its credit waits for the caller to give it back."""
        self._raise_failure()
        self._finish_in_hand()
        deadline = asyncio.get_running_loop().time() + timeout_s
        cache = self._cache
        while True:
            while not cache:
                if not await self._wait_for_deliveries(deadline):
                    return None
            frame = cache[0]
            if frame.stale:
                cache.popleft()  # delivered over a socket since closed: the broker sends it again
                continue
            consumed = frame.messages[frame.taken]
            frame.taken += 1
            if frame.taken == len(frame.messages):
                cache.popleft()
            socket = frame.socket
            socket.spent += 1
            if give_back and socket.owed() >= self.credit // 2:
                await self._flush(socket)
            self._in_hand = (socket, frame.generation, consumed)
            return consumed

    async def poll_batch(self, max_messages: int = 100, timeout_s: float = 1.0) -> list[ConsumedMessage]:
        """Up to ``max_messages`` delivered messages (at least one, or none after ``timeout_s``):
        the next one as :meth:`poll` gives it, then those already waiting. Asking again finishes
        them all, and their credit goes back to the brokers as :meth:`poll` gives it back."""
        # The batch's credit goes back at once below: given back for the first message alone (the
        # previous batch's acks count towards what is owed), the broker could send a frame of one.
        first = await self._poll(timeout_s, give_back=False)
        if first is None:
            return []
        batch = [first]
        taken = []
        cache = self._cache
        while len(batch) < max_messages and cache:
            frame = cache[0]
            if frame.stale:
                cache.popleft()
                continue
            start = frame.taken
            chunk = frame.messages[start : start + max_messages - len(batch)]
            frame.taken = start + len(chunk)
            if frame.taken == len(frame.messages):
                cache.popleft()
            frame.socket.spent += len(chunk)
            batch += chunk
            taken.append((frame.socket, frame.generation, chunk))
        self._in_hand_batch = taken
        for socket in self._sockets:
            if socket.owed() >= self.credit // 2:
                await self._flush(socket)
        return batch

    async def _wait_for_deliveries(self, deadline: float) -> bool:
        """Wait until a frame delivered messages; False at ``deadline``. Raises a socket's failure."""
        # About to wait: give the brokers every ack and permit first.
        for socket in self._sockets:
            await self._flush(socket)
        while not self._cache:
            self._raise_failure()
            self._delivered.clear()
            try:
                async with asyncio.timeout_at(deadline):
                    await self._delivered.wait()
            except TimeoutError:
                self._raise_failure()
                return False
        return True

    def __aiter__(self) -> AsyncSubscriber:
        return self

    async def __anext__(self) -> ConsumedMessage:
        while not self._closed:
            consumed = await self.poll(0.5)
            if consumed is not None:
                return consumed
        raise StopAsyncIteration

    async def nack(self, consumed: ConsumedMessage) -> None:
        """Have the message in hand delivered again (with ``reconsume_times`` raised), instead of
        finishing it; the broker's ``max_reconsume_times`` sends it to the dead-letter topic."""
        if self.group is None:
            raise WharfClientError("a subscriber without a group cannot nack")
        if self._in_hand is None or self._in_hand[2] is not consumed:
            raise WharfClientError("only the message in hand can be nacked")
        socket, generation, _ = self._in_hand
        self._in_hand = None
        if generation == socket.generation and socket.connection is not None:
            frame = {
                "type": "nack",
                "queue_id": consumed.message.queue_id,
                "offset": consumed.message.queue_offset,
            }
            await self._send(socket, frame)

    async def commit(self) -> None:
        """Acknowledge the processed messages (the one in hand too) and wait until the brokers
        committed the group's offsets past them. WharfClientError after ``timeout_s``."""
        if self.group is None:
            raise WharfClientError("a subscriber without a group has nothing to commit")
        self._finish_in_hand()
        for socket in self._sockets:
            await self._flush(socket)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while not self._committed_all():
            self._raise_failure()
            self._commits.clear()
            try:
                await asyncio.wait_for(self._commits.wait(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise WharfClientError(f"the brokers did not commit within {self.timeout_s} s") from None

    def _committed_all(self) -> bool:
        # A queue taken away by a rebalance is no longer this subscriber's to commit.
        return all(
            socket.committed.get(queue_id, -1) >= offset
            for socket in self._sockets
            for queue_id, offset in socket.acked_to.items()
            if queue_id in socket.assigned
        )

    def _finish_in_hand(self) -> None:
        delivery, self._in_hand = self._in_hand, None
        batch, self._in_hand_batch = self._in_hand_batch, []
        if delivery is None or self.group is None:
            return
        first_socket, first_generation, first = delivery
        for socket, generation, messages in ((first_socket, first_generation, [first]), *batch):
            if generation == socket.generation:
                for consumed in messages:
                    message = consumed.message
                    socket.acks.setdefault(message.queue_id, []).append(message.queue_offset)

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise self._failure

    # -- frames to the broker --------------------------------------------------------------------

    async def _flush(self, socket: _Socket) -> None:
        """Send the socket's pending acks and the credit they free."""
        acks, spent = socket.acks, socket.spent
        if socket.connection is None or not (acks or spent):
            return
        socket.acks, socket.spent = {}, 0
        for queue_id, offsets in acks.items():
            socket.acked_to[queue_id] = max(socket.acked_to.get(queue_id, 0), max(offsets) + 1)
            await self._send(socket, {"type": "ack", "queue_id": queue_id, "offsets": offsets})
        if spent:
            await self._send(socket, {"type": "permit", "n": spent})

    async def _send(self, socket: _Socket, frame: dict[str, object]) -> None:
        if socket.connection is None:
            return
        # A closed socket: the reader sees the close and opens it again; the acks are void.
        with contextlib.suppress(ConnectionClosed):
            await socket.connection.send(orjson.dumps(frame).decode())

    # -- frames from the broker ------------------------------------------------------------------

    async def _connect(self, socket: _Socket) -> None:
        """Open the socket and take its first frame, the assignment; a refusal raises here."""
        connection = await connect(
            socket.url,
            additional_headers=self._headers,
            open_timeout=self.timeout_s,
            max_size=None,
            compression=NO_COMPRESSION,
        )
        try:
            first = await asyncio.wait_for(connection.recv(), self.timeout_s)
        except ConnectionClosed as exc:
            raise _close_error_of(exc) from None
        except BaseException:
            await connection.close()
            raise
        socket.connection = connection
        self._take(socket, first)

    async def _read_loop(self, socket: _Socket) -> None:
        backoff_s = 0.1
        while True:
            error: Exception
            try:
                if socket.connection is None:
                    await self._connect(socket)
                    backoff_s = 0.1
                assert socket.connection is not None
                # Ends at a normal close (1000, 1001); ConnectionClosedError for any other.
                async for frame in socket.connection:
                    self._take(socket, frame)
                error = _close_error(
                    socket.connection.close_code or 1006, socket.connection.close_reason or ""
                )
            except ConnectionClosed as exc:
                error = _close_error_of(exc)
            except (OSError, TimeoutError, WebSocketException, WharfClientError) as exc:
                error = exc
            except Exception as exc:  # a record that does not decode, a frame that is no JSON
                self._fail(exc)
                return
            if not _passing(error):
                self._fail(error)
                return
            log.info("subscription to %s dropped, opening it again: %r", socket.address, error)
            socket.reset()
            self._commits.set()
            await asyncio.sleep(backoff_s)
            backoff_s = min(backoff_s * 2, 2.0)

    def _take(self, socket: _Socket, frame: str | bytes) -> None:
        if isinstance(frame, bytes):
            queue = socket.queue
            messages = [ConsumedMessage(record, queue(record.queue_id)) for record in decode_records(frame)]
            if messages:
                self._cache.append(_Frame(socket, socket.generation, messages))
                self._delivered.set()
            return
        parsed = orjson.loads(frame)
        kind = parsed.get("type")
        if kind == "assignment":
            socket.assigned = {int(queue["queue_id"]): int(queue["offset"]) for queue in parsed["queues"]}
            for queue_id, offset in socket.assigned.items():
                socket.committed.setdefault(queue_id, offset)
            self._commits.set()
        elif kind == "committed":
            socket.committed[int(parsed["queue_id"])] = int(parsed["offset"])
            self._commits.set()

    def _fail(self, error: Exception) -> None:
        log.error("subscription to %s ended: %r", self.topic, error)
        if self._failure is None:
            self._failure = error
        self._delivered.set()


class _PassingClose(WharfClientError):
    """A close after which the socket is opened again."""


def _passing(error: Exception) -> bool:
    """Whether the subscription is worth opening again after ``error``."""
    if isinstance(error, InvalidStatus):  # the handshake was answered with an HTTP error
        return error.response.status_code >= 500
    return isinstance(error, _PassingClose | OSError | TimeoutError | WebSocketException)


def _close_error_of(exc: ConnectionClosed) -> Exception:
    # No close frame received: the connection dropped (1006).
    return _close_error(1006, "") if exc.rcvd is None else _close_error(exc.rcvd.code, exc.rcvd.reason)


def _close_error(code: int, reason: str) -> Exception:
    """The broker's close as an exception: a passing close, after which the socket is opened again,
    or a BrokerError for a refusal (4404 -> status 404, with the error code that leads the reason)."""
    if code == 1000 or code in PASSING_CLOSES:
        return _PassingClose(f"closed with {code} {reason}".rstrip())
    number, _, message = reason.partition(" ")
    status = code - 4000 if 4000 <= code < 5000 else 400
    if not number.isdigit():
        number, message = str(status * 100), reason
    return BrokerError(status, int(number), message, {"close_code": code})
