"""One Server-Sent Events stream: a topic's queues read as they grow, written as ``text/event-stream``.

One reader task per queue reads through the store and, when its queue has nothing new, waits in the
pull hold service exactly as a long poll does (:func:`app.broker.read_or_hold`), so an arrival wakes
it and nothing polls. Readers render each message and leave it, in queue order, to the one writer,
which gives it its ``id:`` (the cursor naming every queue's next offset, :mod:`app.api.event_cursor`)
and writes it. Events of one queue are written in queue order; queues interleave as they arrive.

Bounds, as for WebSocket subscribers: readers render events only while fewer than
``sse_max_queued_bytes`` wait for the client, so a client that stops reading costs the broker at
most that (plus one read's events); a write the client does not take within ``sse_send_timeout_s``
closes the connection. After ``sse_heartbeat_s`` without an event the writer sends a ``: ping``
comment. The stream ends, its last event complete, when the broker shuts down (its held reads are
answered then), and when the client goes away.

It ends the same way, at once and committing nothing more, when the broker's log is cut to follow
a new master (a former master steps down): other messages are then stored at the queue offsets it
read. The client reconnects; its ``Last-Event-ID`` names offsets read before the cut, so a stream
with ``commit`` resumes at the group's committed offset where that is lower (the cut lowered it to
the queue's new end): see :func:`app.api.events.start_offsets`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import Receive, Send

from app.api.event_cursor import encode_cursor
from app.broker import Broker, BrokerError, read_or_hold
from app.store import GetMessageResult, GetMessageStatus, MessageFilter

log = logging.getLogger(__name__)

_WAIT_STATUSES = (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MESSAGE_IN_QUEUE)
PING = b": ping\n\n"
READ_BATCH = 32  # messages a reader takes from the store at once
HOLD_S = 30.0  # how long one held read waits before it reads again (nothing is answered then)

# Renders one stored record: (the event's name, its data, one line of JSON).
Render = Callable[[memoryview], tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class StreamPlan:
    """What a stream reads and how: decided (and validated) before the response starts."""

    topic: str
    offsets: dict[int, int]  # queue id -> the next offset to read, for every queue the stream reads
    message_filter: MessageFilter | None
    render: Render
    group: str | None  # with commit: the group whose offsets follow the written events
    commit: bool


@dataclass(slots=True)
class _Event:
    queue_id: int
    next_offset: int
    chunk: bytes  # "event: ...\ndata: ...\n\n", without the id


class _CloseConnection(Exception):
    """The connection is to be closed: the client took nothing for ``sse_send_timeout_s``, or a
    reader failed."""


class EventStream:
    """The stream of one request: :meth:`run` sends the whole response."""

    def __init__(self, broker: Broker, plan: StreamPlan) -> None:
        settings = broker.settings
        self.broker = broker
        self.plan = plan
        self.offsets = dict(plan.offsets)  # what the client has been sent: the cursor
        self.heartbeat_s = settings.sse_heartbeat_s
        self.retry_ms = settings.sse_retry_ms
        self.max_queued_bytes = settings.sse_max_queued_bytes
        self.send_timeout_s = settings.sse_send_timeout_s
        self.queued_bytes = 0
        self._pending: deque[_Event] = deque()
        self._arrived = asyncio.Event()  # an event was queued for the writer, or a reader ended
        self._room = asyncio.Event()  # bytes left the queue: readers may read again
        self._readers_left = 0
        self._shutdown = False
        self._log_cut = False  # the log was cut under the offsets read: the stream ends, uncommitted
        self._fault: BaseException | None = None  # a reader's unexpected error: the stream ends

    async def run(self, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),  # nginx: pass each event on at once
                ],
            }
        )
        readers = [asyncio.ensure_future(self._read(queue_id)) for queue_id in sorted(self.offsets)]
        self._readers_left = len(readers)
        watcher = asyncio.ensure_future(self._watch_disconnect(receive))
        writer = asyncio.ensure_future(self._write(send))
        stop_listening = self.broker.on_log_cut(self._end_on_log_cut)
        try:
            await asyncio.wait({watcher, writer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_listening()
            for task in (watcher, writer, *readers):
                task.cancel()
            await asyncio.gather(watcher, writer, *readers, return_exceptions=True)
        if writer.done() and not writer.cancelled() and writer.exception() is None:
            # The broker shuts down, or its log was cut: the response ends cleanly and the client
            # reconnects.
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        # Otherwise the client is gone or too slow: returning without ending the response makes
        # the server close the connection.

    def _end_on_log_cut(self) -> None:
        """The log under the stream's offsets was cut: nothing more is written or committed."""
        self._log_cut = True
        self._arrived.set()

    # -- reading -----------------------------------------------------------------------------------

    async def _read(self, queue_id: int) -> None:
        broker, plan = self.broker, self.plan
        offset = plan.offsets[queue_id]
        try:
            while True:
                while self.queued_bytes >= self.max_queued_bytes:
                    self._room.clear()
                    await self._room.wait()
                read = await read_or_hold(
                    broker.store,
                    broker.holds,
                    plan.topic,
                    queue_id,
                    offset,
                    READ_BATCH,
                    plan.message_filter,
                    HOLD_S,
                )
                if read.shutdown:
                    self._shutdown = True
                    return
                result = read.result
                if result.status is GetMessageStatus.FOUND:
                    offset = self._queue_events(queue_id, result)
                elif result.status not in _WAIT_STATUSES:
                    offset = result.next_offset  # past non-matching messages, or back into range
        except Exception as exc:
            # A stream missing a queue would look alive and stay silent: it ends instead, and the
            # client resumes from its last event.
            log.exception("event stream of %r: reading queue %d failed", plan.topic, queue_id)
            self._fault = exc
        finally:
            self._readers_left -= 1
            self._arrived.set()

    def _queue_events(self, queue_id: int, result: GetMessageResult) -> int:
        """Render a read's messages for the writer, in queue order, while the byte bound allows
        (one at least); the offset to read next."""
        records, queue_offsets = result.records, result.queue_offsets
        last = len(records) - 1
        rendered = 0
        next_offset = result.next_offset
        for index, record in enumerate(records):
            name, data = self.plan.render(record)
            chunk = b"event: %s\ndata: %s\n\n" % (name.encode(), data)
            # Past the last record: past the non-matching messages read with it too.
            next_offset = result.next_offset if index == last else queue_offsets[index + 1]
            self._pending.append(_Event(queue_id, next_offset, chunk))
            self.queued_bytes += len(chunk)
            rendered += 1
            if self.queued_bytes >= self.max_queued_bytes:
                break
        self._arrived.set()
        self.broker.metrics.count_consumed(self.plan.topic, self.plan.group, rendered)
        return next_offset

    # -- writing -----------------------------------------------------------------------------------

    async def _write(self, send: Send) -> None:
        await self._send(send, b"retry: %d\n\n" % self.retry_ms)
        pending = self._pending
        while True:
            if self._fault is not None:
                raise _CloseConnection from self._fault
            if self._log_cut:
                return  # what waits to be written was read before the cut
            if not pending:
                if self._shutdown or self._readers_left == 0:
                    return
                self._arrived.clear()
                try:
                    async with asyncio.timeout(self.heartbeat_s):
                        await self._arrived.wait()
                except TimeoutError:
                    await self._send(send, PING)
                continue
            # Every event queued now goes out in one write, each with the cursor after it.
            parts = []
            size = 0
            committed: dict[int, int] = {}
            while pending:
                event = pending.popleft()
                self.offsets[event.queue_id] = committed[event.queue_id] = event.next_offset
                parts.append(b"id: %s\n" % encode_cursor(self.offsets).encode())
                parts.append(event.chunk)
                size += len(event.chunk)
            try:
                await self._send(send, b"".join(parts))
            finally:
                self.queued_bytes -= size
                self._room.set()
            if self.plan.commit and self.plan.group is not None and not self._log_cut:
                self._commit(committed)

    def _commit(self, offsets: dict[int, int]) -> None:
        """At most once: what was written is committed, whether or not the client reads it."""
        assert self.plan.group is not None
        for queue_id, offset in offsets.items():
            try:
                self.broker.commit_offset(self.plan.group, self.plan.topic, queue_id, offset)
            except BrokerError as exc:  # the queue's start passed it (retention): the next commit
                log.warning(
                    "event stream of %r: commit on queue %d refused: %s", self.plan.topic, queue_id, exc
                )

    async def _send(self, send: Send, body: bytes) -> None:
        try:
            async with asyncio.timeout(self.send_timeout_s):
                await send({"type": "http.response.body", "body": body, "more_body": True})
        except TimeoutError:
            log.warning(
                "event stream of %r closed: the client took nothing for %g s; %d bytes wait for it",
                self.plan.topic,
                self.send_timeout_s,
                self.queued_bytes,
            )
            raise _CloseConnection from None

    @staticmethod
    async def _watch_disconnect(receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
