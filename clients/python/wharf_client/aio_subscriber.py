"""The asyncio WebSocket subscriber: the brokers push a topic's stored records, within credit.

One socket per broker name that serves the topic, ``/v1/ws/subscribe?format=binary``
(docs/reference/websocket.md): each binary frame holds stored CommitLog records, decoded by the client's record
decoder; text frames (``assignment``, ``committed``) are the broker's bookkeeping. A message counts
as processed when the application asks for the next one, as with :class:`AsyncConsumer`; with a
group, processed messages are acknowledged and the broker commits the group's offset (the oldest
unacknowledged one) and says so in a ``committed`` frame.

Frames the subscriber sends, batched: ``ack`` for the processed messages and ``permit`` for the
credit they free (one per message handed out, so at most ``credit`` messages wait in the client).
They go out when half the credit is to be given back, and whenever the subscriber is about to wait
for the broker: a broker that waits for acks or credit is never left waiting by a client that waits
for messages.

A socket follows its broker name, not an address. It is opened on the name's master (route id 0);
when that does not answer, on the next broker of the name that does (a slave serves subscriptions,
with a group too: it commits the group's offsets and hands them to its master later). While on a
slave it looks at the route every ``master_check_s`` and moves to the master once one answers (the
old one back, or a slave promoted in its place) and, with a group, holds the offsets committed on
the slave. A slave promoted under the socket simply becomes the master: the socket stays open.

A socket the broker closes for a passing reason (shutting down, try again later, the connection
dropped) is opened again after a pause, the route fetched afresh; any other close ends the
subscriber: :meth:`AsyncSubscriber.poll` raises it as a BrokerError whose ``status`` is the close
code less 4000 (4404 -> 404) and whose ``error_code`` leads the reason. Opened again, or moved:

* with a group, it starts at the group's committed offsets: what it delivered and was not
  acknowledged comes again, and whatever of it still waits in the client is dropped;
* without one, each queue goes on after the last message handed out. The subscribe socket starts
  only at ``last``, ``first`` or a time, so the subscriber reads what the broker stored past that
  message over HTTP first (pulls of stored records, a page at a time as the application takes
  them), then opens the socket at ``last`` and pulls what arrived in between. A broker whose queue
  ends before that message (a promoted slave never had the old master's unconfirmed tail) is read
  from its end; of what it stores there next, the messages handed out already (the same records,
  copied later from another replica) are skipped (wharf_client.handed_out).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlencode

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from wharf_client import _json
from wharf_client.aio import AsyncRouteCache, authorization_headers, bootstrap_list
from wharf_client.aio_pipeline import NO_COMPRESSION
from wharf_client.auth import User, basic_auth
from wharf_client.codec import RECORDS_MEDIA_TYPE, Message, decode_records
from wharf_client.consumed import ConsumedMessage
from wharf_client.errors import BrokerError, BrokerUnavailableError, WharfClientError, raise_for_envelope
from wharf_client.handed_out import HandedOut
from wharf_client.routes import AVOID_S, MessageQueue
from wharf_client.tls import client_ssl_context

log = logging.getLogger(__name__)

# Closes after which the same subscription is tried again: the broker is going away or restarting,
# asked the client to come back later, failed unexpectedly or cannot reach its registry.
PASSING_CLOSES = frozenset({1001, 1006, 1011, 1012, 1013, 4500, 4503})

MASTER_ID = 0  # a broker name's master in the route

# Pull answers after which a catch-up reads on from the answer's next offset; any other ends it: the
# queue's end, or a queue that ends before the offset asked for.
_PULL_ON = frozenset({"FOUND", "OFFSET_TOO_SMALL", "NO_MATCHED_MESSAGE"})


@dataclass(eq=False, slots=True)
class _Socket:
    """One broker name's subscribe socket, the broker it is open on, and what the client owes it."""

    broker_name: str
    address: str = ""  # the broker read: the name's master, or a slave while the master does not answer
    on_master: bool = False  # the route listed ``address`` as the name's master when it was opened
    queues: dict[int, MessageQueue] = field(default_factory=dict)
    connection: ClientConnection | None = None
    generation: int = 0  # one more per connection: messages of an earlier one are stale
    spent: int = 0  # messages handed out since the last permit: the credit to give back
    acks: dict[int, list[int]] = field(default_factory=dict)  # processed, not yet acknowledged
    acked_to: dict[int, int] = field(default_factory=dict)  # per queue: after the last acknowledged
    assigned: dict[int, int] = field(default_factory=dict)  # queue id -> offset it started at
    committed: dict[int, int] = field(default_factory=dict)
    # Without a group: per queue, the offset after the last message handed out (before any, the
    # offset the socket started at). The queue goes on from there when the socket is opened again.
    reached: dict[int, int] = field(default_factory=dict)
    # Without a group: what was handed out lately, skipped when a queue is read again.
    handed: HandedOut = field(default_factory=HandedOut)
    reader: asyncio.Task[None] | None = None
    watcher: asyncio.Task[None] | None = None  # on a slave: moves the socket to the master
    moving: bool = False  # the client closed the socket to open it on the master

    def queue(self, queue_id: int) -> MessageQueue:
        queue = self.queues.get(queue_id)
        if queue is None:
            queue = self.queues[queue_id] = MessageQueue(self.broker_name, queue_id, self.address)
        return queue

    def owed(self) -> int:
        return self.spent + sum(len(offsets) for offsets in self.acks.values())

    def move_to(self, address: str) -> None:
        if address != self.address:
            self.address = address
            self.queues.clear()  # messages name the broker they came from

    def reset(self) -> None:
        """The connection is gone: its credit, its unacknowledged messages and its queues with it."""
        self.connection = None
        self.generation += 1
        self.spent = 0
        self.acks.clear()
        self.acked_to.clear()
        self.assigned.clear()
        self.committed.clear()
        self.moving = False
        if self.watcher is not None:
            self.watcher.cancel()
            self.watcher = None


_Delivery = tuple[_Socket, int, ConsumedMessage]  # the socket, its generation then, the message


@dataclass(eq=False, slots=True)
class _Frame:
    """The messages of one binary frame (or one catch-up pull), handed out from ``taken`` on. They
    are of one queue: a broker's frame holds one read of one queue."""

    socket: _Socket
    generation: int  # the socket's then: messages of an earlier connection are stale
    messages: list[ConsumedMessage]
    taken: int = 0
    credited: bool = True  # pushed against credit (not pulled): handing them out gives credit back

    @property
    def stale(self) -> bool:
        return self.generation != self.socket.generation


class AsyncSubscriber:
    """Subscribes to ``topic`` over WebSocket, as a member of ``group`` (shared queues, acks and
    commits) or, without one, alone and without acks. ``queue_ids`` reads just those queues. While
    a socket reads from a slave, the route is looked at every ``master_check_s`` for its master."""

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
        master_check_s: float = 2.0,
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
        self.master_check_s = master_check_s
        self._headers = authorization_headers(user)
        # Routes, catch-up pulls and the masters' readiness go over HTTP.
        self._http = httpx.AsyncClient(timeout=timeout_s, auth=basic_auth(user), verify=client_ssl_context())
        self._routes = AsyncRouteCache(self._http, self.bootstrap)
        self._avoid: dict[str, float] = {}  # address -> until when (monotonic) it is tried last
        self._sockets: list[_Socket] = []
        self._cache: deque[_Frame] = deque()  # frames with messages not handed out yet
        self._delivered = asyncio.Event()  # set when a frame adds to the cache, or a socket fails
        self._pulled_taken = asyncio.Event()  # set (and replaced) when a pulled frame is all taken
        self._in_hand: _Delivery | None = None
        # The rest of a poll_batch's messages, per frame: (socket, generation, messages).
        self._in_hand_batch: list[tuple[_Socket, int, list[ConsumedMessage]]] = []
        self._commits = asyncio.Event()  # set on every committed or assignment frame
        self._failure: Exception | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> AsyncSubscriber:
        """Open a socket to every broker name with a queue to read; returns once each has its
        assignment."""
        try:
            route = await self._routes.get(self.topic)
            names = {
                queue.broker_name
                for queue in route.read_queues
                if self.queue_ids is None or queue.queue_id in self.queue_ids
            }
            if not names:
                raise WharfClientError(f"topic {self.topic!r} has no readable queue to subscribe to")
            self._sockets = [_Socket(name) for name in sorted(names)]
            for socket in self._sockets:
                await self._open(socket)
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
        tasks = [
            task for socket in self._sockets for task in (socket.reader, socket.watcher) if task is not None
        ]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for socket in self._sockets:
            await self._flush(socket)
            if socket.connection is not None:
                await socket.connection.close()
        await self._http.aclose()

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

    def _url(self, address: str, resuming: bool) -> str:
        """The socket's URL on ``address``; one ``resuming`` its queues without a group starts at
        ``last``, after a catch-up to there."""
        params: dict[str, str | int] = {"topic": self.topic, "format": "binary", "credit": self.credit}
        if self.group is not None:
            params["group"] = self.group
        if self.sql92 is not None:
            params.update(filter_type="sql92", filter=self.sql92)
        else:
            params["tags"] = self.tags
        params["from"] = "last" if resuming else self.start_from
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
                self._finished(cache.popleft())
            socket = frame.socket
            if frame.credited:
                socket.spent += 1
            if self.group is None:
                message = consumed.message
                socket.reached[message.queue_id] = message.queue_offset + 1
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
                self._finished(cache.popleft())
            if frame.credited:
                frame.socket.spent += len(chunk)
            if self.group is None:
                last = chunk[-1].message  # a frame's messages are of one queue
                frame.socket.reached[last.queue_id] = last.queue_offset + 1
            batch += chunk
            taken.append((frame.socket, frame.generation, chunk))
        self._in_hand_batch = taken
        for socket in self._sockets:
            if socket.owed() >= self.credit // 2:
                await self._flush(socket)
        return batch

    def _finished(self, frame: _Frame) -> None:
        """Every message of ``frame`` was handed out: a catch-up waiting on a pulled one pulls on."""
        if not frame.credited:
            self._pulled_taken.set()
            self._pulled_taken = asyncio.Event()

    async def _wait_for_deliveries(self, deadline: float) -> bool:
        """Wait until a frame delivered messages; False at ``deadline``. Raises a socket's failure."""
        while not self._cache:
            # About to wait: give the brokers every ack and permit first (again after a frame
            # whose messages were all skipped as handed out already).
            for socket in self._sockets:
                await self._flush(socket)
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
                async with asyncio.timeout_at(deadline):
                    await self._commits.wait()
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
            await socket.connection.send(_json.dumps(frame))

    # -- opening a broker name's socket ----------------------------------------------------------

    async def _open(self, socket: _Socket, refresh: bool = False) -> None:
        """Open the socket on its broker name's master or, when that does not answer, on the first
        other broker of the name that does (those that did not lately are tried last). Raises the
        last broker's error when none opens it."""
        route = await self._routes.get(self.topic, refresh=refresh)
        now = time.monotonic()
        brokers = sorted(
            route.brokers.get(socket.broker_name, {}).items(),
            key=lambda item: (self._avoid.get(item[1], 0.0) > now, item[0]),
        )
        error: Exception = _PassingClose(f"the route of {self.topic!r} has no broker of {socket.broker_name}")
        for broker_id, address in brokers:
            try:
                await self._connect(socket, address)
            except (OSError, TimeoutError, WebSocketException, WharfClientError, httpx.HTTPError) as exc:
                if not _passing(exc):
                    raise
                log.info("subscribing at %s failed: %r", address, exc)
                self._avoid[address] = time.monotonic() + AVOID_S
                socket.reset()  # what a catch-up pulled from it is dropped: the next one pulls it again
                error = exc
                continue
            socket.on_master = broker_id == MASTER_ID
            if not socket.on_master:
                log.warning(
                    "reading %s of %s from %s: the master of %s does not answer",
                    self.topic,
                    socket.broker_name,
                    address,
                    socket.broker_name,
                )
                assert socket.connection is not None
                socket.watcher = asyncio.create_task(
                    self._watch_master(socket, socket.connection),
                    name=f"wharf-ws-master-{socket.broker_name}",
                )
            return
        raise error

    async def _connect(self, socket: _Socket, address: str) -> None:
        """Open the socket on ``address`` and take its first frame, the assignment; a refusal raises
        here. A socket opened again without a group catches up over HTTP before and after."""
        socket.move_to(address)
        resuming = self.group is None and bool(socket.reached)
        pulled = await self._catch_up(socket, dict(socket.reached)) if resuming else {}
        connection = await connect(
            self._url(address, resuming),
            additional_headers=self._headers,
            open_timeout=self.timeout_s,
            max_size=None,
            compression=NO_COMPRESSION,
        )
        try:
            async with asyncio.timeout(self.timeout_s):
                first = await connection.recv()
            self._take(socket, first)
            if resuming:
                # What arrived between the catch-up's last pull and the socket's start.
                await self._catch_up(socket, pulled, socket.assigned)
        except ConnectionClosed as exc:
            raise _close_error_of(exc) from None
        except BaseException:
            await connection.close()
            raise
        socket.connection = connection

    async def _catch_up(
        self, socket: _Socket, start: dict[int, int], until: dict[int, int] | None = None
    ) -> dict[int, int]:
        """Hand out over HTTP what the socket's broker holds of each queue from ``start`` on, up to
        ``until`` (where the socket started each queue) or else to the queue's end. Returns where
        each queue's pulls ended: past a queue's end when it ends before ``start``.

        To the end, a page is pulled once the application took the one before: an outage may have
        left much to read. Up to ``until`` is what arrived in a moment, handed over at once."""
        ended = dict(start)
        for queue_id, offset in start.items():
            end = None if until is None else until.get(queue_id)
            if until is not None and end is None:
                continue  # the socket does not read it
            page: _Frame | None = None
            while end is None or offset < end:
                if page is not None:
                    await self._until_taken(page)
                count = self.credit if end is None else min(self.credit, end - offset)
                status, next_offset, records = await self._pull(socket.address, queue_id, offset, count)
                if end is not None:
                    records = [record for record in records if record.queue_offset < end]
                frame = self._add_frame(socket, records, credited=False)
                if end is None and frame is not None:
                    page = frame
                if status not in _PULL_ON or next_offset <= offset:
                    break
                offset = next_offset
            ended[queue_id] = offset
        return ended

    async def _pull(
        self, address: str, queue_id: int, offset: int, count: int
    ) -> tuple[str, int, list[Message]]:
        """A pull of stored records without a group: its status, next offset and records."""
        params: dict[str, str | int] = {"offset": offset, "max_messages": count}
        if self.sql92 is not None:
            params.update(filter_type="sql92", filter=self.sql92)
        else:
            params["tags"] = self.tags
        response = await self._http.get(
            f"{address}/v1/topics/{self.topic}/queues/{queue_id}/messages",
            params=params,
            headers={"accept": RECORDS_MEDIA_TYPE},
        )
        raise_for_envelope(response)
        status = response.headers["x-wharf-status"]
        records = decode_records(response.content) if status == "FOUND" else []
        return status, int(response.headers["x-wharf-next-offset"]), records

    async def _until_taken(self, frame: _Frame) -> None:
        """Wait until the application took every message of a pulled ``frame``."""
        while not frame.stale and frame.taken < len(frame.messages):
            await self._pulled_taken.wait()

    async def _watch_master(self, socket: _Socket, connection: ClientConnection) -> None:
        """While the socket reads from a slave: close it once the name's master answers (the old one
        back, or a slave promoted in its place), for the read loop to open it there."""
        while True:
            await asyncio.sleep(self.master_check_s)
            try:
                route = await self._routes.get(self.topic, refresh=True)
            except (httpx.HTTPError, WharfClientError) as exc:
                log.debug("the route of %s: %r", self.topic, exc)
                continue
            master = route.brokers.get(socket.broker_name, {}).get(MASTER_ID)
            if master == socket.address:
                socket.on_master = True  # the slave it reads was promoted
                log.info("%s is the master of %s now", master, socket.broker_name)
                return
            if master is None or not await self._master_ready(socket, master):
                continue
            log.warning(
                "the master %s of %s answers: moving the subscription to it", master, socket.broker_name
            )
            self._avoid.pop(master, None)
            socket.moving = True
            await self._flush(socket)  # the slave commits what was processed
            await connection.close()
            return

    async def _master_ready(self, socket: _Socket, master: str) -> bool:
        """Whether ``master`` answers and, with a group, holds the offsets the slave committed for
        it (the slave hands them over with its next metadata request): moved earlier, the socket
        would get again there what was acknowledged on the slave."""
        try:
            if self.group is None:
                return (await self._http.get(f"{master}/readyz")).status_code == 200
            response = await self._http.get(
                f"{master}/v1/groups/{self.group}/offsets", params={"topic": self.topic}
            )
        except httpx.HTTPError:
            return False
        if response.status_code != 200:
            return False
        at_master = {int(row["queue_id"]): row["committed_offset"] or 0 for row in response.json()["offsets"]}
        return all(at_master.get(queue_id, 0) >= offset for queue_id, offset in socket.committed.items())

    # -- frames from the broker ------------------------------------------------------------------

    async def _read_loop(self, socket: _Socket) -> None:
        backoff_s = 0.1
        while True:
            error: Exception
            try:
                if socket.connection is None:
                    await self._open(socket, refresh=True)
                    backoff_s = 0.1
                connection = socket.connection
                assert connection is not None
                # Ends at a normal close (1000, 1001); ConnectionClosedError for any other.
                async for frame in connection:
                    self._take(socket, frame)
                error = _close_error(connection.close_code or 1006, connection.close_reason or "")
            except ConnectionClosed as exc:
                error = _close_error_of(exc)
            except (OSError, TimeoutError, WebSocketException, WharfClientError, httpx.HTTPError) as exc:
                error = exc
            except Exception as exc:  # a record that does not decode, a frame that is no JSON
                self._fail(exc)
                return
            if not _passing(error):
                self._fail(error)
                return
            moving = socket.moving
            if not moving:
                log.info(
                    "subscription to %s at %s dropped, opening it again: %r",
                    socket.broker_name,
                    socket.address,
                    error,
                )
            socket.reset()
            self._commits.set()
            if not moving:
                await asyncio.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 2.0)

    def _take(self, socket: _Socket, frame: str | bytes) -> None:
        if isinstance(frame, bytes):
            self._add_frame(socket, decode_records(frame), credited=True)
            return
        parsed = _json.loads(frame)
        kind = parsed.get("type")
        if kind == "assignment":
            socket.assigned = {int(queue["queue_id"]): int(queue["offset"]) for queue in parsed["queues"]}
            for queue_id, offset in socket.assigned.items():
                socket.committed.setdefault(queue_id, offset)
                if self.group is None:
                    # A broker whose queue ends before where the subscriber reached is read from its
                    # end; what it then stores there again is skipped.
                    reached = socket.reached.get(queue_id)
                    if reached is None or offset < reached:
                        if reached is not None:
                            socket.handed.read_again(queue_id, offset, reached)
                        socket.reached[queue_id] = offset
            self._commits.set()
        elif kind == "committed":
            socket.committed[int(parsed["queue_id"])] = int(parsed["offset"])
            self._commits.set()

    def _add_frame(self, socket: _Socket, records: list[Message], credited: bool) -> _Frame | None:
        if not records:
            return None
        if self.group is None:
            queue_id = records[0].queue_id  # a frame's records are of one queue
            kept = socket.handed.fresh(queue_id, records)
            if len(kept) < len(records):
                if credited:
                    socket.spent += len(records) - len(kept)  # their credit goes back all the same
                if not kept:
                    self._delivered.set()  # a waiting poll gives that credit back
                    return None
                records = kept
            socket.handed.remember(queue_id, records)
        queue = socket.queue
        messages = [ConsumedMessage(record, queue(record.queue_id)) for record in records]
        frame = _Frame(socket, socket.generation, messages, credited=credited)
        self._cache.append(frame)
        self._delivered.set()
        return frame

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
    if isinstance(error, BrokerError):  # a refused close, or a route or pull answered with an error
        return error.status >= 500
    return isinstance(
        error,
        _PassingClose
        | BrokerUnavailableError
        | httpx.HTTPError
        | OSError
        | TimeoutError
        | WebSocketException,
    )


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
