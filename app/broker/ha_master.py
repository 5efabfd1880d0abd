"""The master's side of replication: it streams its CommitLog to slaves from the offset
each asks for, learns how far each holds it from their acknowledgements, and under SYNC_MASTER holds
a produce's answer until a slave holds the message.

A stream sends chunks of whole records (:meth:`MessageStore.read_replica`), each framed as the
8-byte big-endian CommitLog offset of its first byte followed by the bytes; it reads the disk off
the event loop and, once the slave has everything, waits for the next append
(:class:`AppendSignal`) instead of polling.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from app.store import MessageStore
from app.store.epochs import Epoch, common_point
from app.store.record import store_timestamp

CHUNK_BYTES = 256 * 1024
# A slave further behind than this is not in sync (RocketMQ's haMaxGapNotInSync).
MAX_IN_SYNC_GAP = 256 * 1024 * 1024
# How long a stream that has sent everything waits for an append before it looks again anyway
# (appends that reach no ConsumeQueue, such as half transaction messages, signal nothing).
IDLE_WAIT_S = 1.0
FRAME_OFFSET = struct.Struct(">q")

SEND_OK = "SEND_OK"
FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


def frame(offset: int, data: bytes) -> bytes:
    return FRAME_OFFSET.pack(offset) + data


def unframe(message: bytes) -> tuple[int, bytes]:
    """(CommitLog offset, bytes) of a frame; ValueError for one too short to hold an offset."""
    if len(message) < FRAME_OFFSET.size:
        raise ValueError("a replication frame starts with an 8-byte offset")
    (offset,) = FRAME_OFFSET.unpack_from(message)
    return offset, message[FRAME_OFFSET.size :]


class AppendSignal:
    """Tells the streams of the event loop that the CommitLog grew. ``notify`` is an arrival
    listener of the store: called from any thread, it counts the append and, only while a stream
    waits, schedules at most one wake-up at a time (an append with no slave waiting costs no
    wake-up of the event loop)."""

    def __init__(self) -> None:
        self.version = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: set[asyncio.Future[None]] = set()
        self._scheduled = False

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def notify(self, topic: str = "", queue_id: int = 0, next_offset: int = 0, tags_code: int = 0) -> None:
        self.version += 1
        loop = self._loop
        if loop is None or self._scheduled or not self._waiters:
            return
        self._scheduled = True
        try:
            loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the loop is closed: the broker is stopping
            self._scheduled = False

    def _wake(self) -> None:
        self._scheduled = False
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait_past(self, version: int, timeout_s: float) -> None:
        """Return once an append came after ``version`` was read, or after ``timeout_s``."""
        waiter = asyncio.get_running_loop().create_future()
        # Waiting before the version is looked at: an append between the two either is seen
        # here or finds the waiter to wake.
        self._waiters.add(waiter)
        try:
            if self.version != version:
                return
            await asyncio.wait({waiter}, timeout=timeout_s)
        finally:
            self._waiters.discard(waiter)


@dataclass
class SlaveLink:
    """One connected slave, as the master sees it."""

    broker_id: int
    url: str
    acked_offset: int
    connected_at: float = field(default_factory=time.time)


class HaMaster:
    def __init__(self, store: MessageStore, signal: AppendSignal, sync_timeout_ms: int) -> None:
        self.store = store
        self.signal = signal
        self.sync_timeout_s = sync_timeout_ms / 1000
        self.slaves: dict[int, SlaveLink] = {}
        # Produces waiting for a slave to hold their end offset: (end offset, order, future).
        self._waiting: list[tuple[int, int, asyncio.Future[bool]]] = []
        self._order = itertools.count()
        self.closed = False  # stepped down: the streams end

    def close(self) -> None:
        """This broker is no longer the master: end the streams, fail the waiting produces."""
        self.closed = True
        self._fail_waiting()
        self.signal.notify()

    def handshake(self, slave_epochs: list[Epoch], offset: int) -> dict[str, Any]:
        """The first frame to a slave that asks for ``offset`` with ``slave_epochs``: this log's
        epochs; when the slave's log goes past what the two share, where to cut it; and where the
        stream starts (this log's first offset when the slave asks for one retention deleted)."""
        entries = self.store.epochs.entries
        first = self.store.commitlog.min_offset
        if offset < first:
            # Retention deleted what the slave lacks: it starts again from this log's first segment.
            return {"epochs": entries, "truncate_to": None, "start_at": first}
        common = common_point(entries, self.store.commitlog.max_offset, slave_epochs or [(0, 0)], offset)
        return {"epochs": entries, "truncate_to": common if common < offset else None, "start_at": offset}

    # -- the stream ------------------------------------------------------------------------------

    def connect(self, broker_id: int, url: str, offset: int) -> SlaveLink:
        link = SlaveLink(broker_id, url, offset)
        self.slaves[broker_id] = link
        self._resolve()
        return link

    def disconnect(self, link: SlaveLink) -> None:
        if self.slaves.get(link.broker_id) is link:
            del self.slaves[link.broker_id]
        if not self.slaves:
            self._fail_waiting()

    async def stream(self, offset: int, send: Callable[[bytes], Awaitable[None]]) -> None:
        """Send the CommitLog from ``offset`` on, then each append as it comes; runs until ``send``
        fails or the task is cancelled. ReplicaError when ``offset`` is not stored here."""
        while not self.closed:
            version = self.signal.version
            data = await asyncio.to_thread(self.store.read_replica, offset, CHUNK_BYTES)
            if data:
                await send(frame(offset, data))
                offset += len(data)
            else:
                await self.signal.wait_past(version, IDLE_WAIT_S)

    def ack(self, link: SlaveLink, offset: int) -> None:
        """The slave holds the CommitLog up to ``offset``."""
        if offset > link.acked_offset:
            link.acked_offset = offset
            self._resolve()

    # -- SYNC_MASTER -----------------------------------------------------------------------------

    def in_sync(self, link: SlaveLink) -> bool:
        return self.store.commitlog.max_offset - link.acked_offset <= MAX_IN_SYNC_GAP

    def _held_by_slave(self) -> int:
        return max((link.acked_offset for link in self.slaves.values() if self.in_sync(link)), default=-1)

    def _resolve(self) -> None:
        held = self._held_by_slave()
        waiting = self._waiting
        while waiting and waiting[0][0] <= held:
            _, _, future = heapq.heappop(waiting)
            if not future.done():
                future.set_result(True)

    def _fail_waiting(self) -> None:
        waiting, self._waiting = self._waiting, []
        for _, _, future in waiting:
            if not future.done():
                future.set_result(False)

    async def wait_for_slave(self, end_offset: int) -> str:
        """SEND_OK once an in-sync slave holds the CommitLog up to ``end_offset``;
        FLUSH_SLAVE_TIMEOUT after the sync timeout, SLAVE_NOT_AVAILABLE when none is connected.
        One heap of waiters, resolved as acknowledgements arrive, serves every producer."""
        if not self.slaves:
            return SLAVE_NOT_AVAILABLE
        if self._held_by_slave() >= end_offset:
            return SEND_OK
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (end_offset, next(self._order), future))
        done, _ = await asyncio.wait({future}, timeout=self.sync_timeout_s)
        if done and future.result():
            return SEND_OK
        if not future.done():
            future.cancel()  # left in the heap; the next resolve drops it
        return FLUSH_SLAVE_TIMEOUT if self.slaves else SLAVE_NOT_AVAILABLE

    # -- status ----------------------------------------------------------------------------------

    def stored_at_ms(self, offset: int) -> int | None:
        """The store timestamp of the record at CommitLog ``offset`` (a record boundary, as a slave's
        acknowledged offset is), or of the next segment's first record when ``offset`` is a
        segment's blank end; None when none is stored there."""
        record = self.store.read_record(offset)
        if record is None:
            later = [mapped.file_from_offset for mapped in self.store.commitlog.files.files]
            following = [start for start in later if start > offset]
            record = self.store.read_record(following[0]) if following else None
        return store_timestamp(record) if record is not None else None

    def lag_ms(self, link: SlaveLink, end: int, now_ms: int) -> int | None:
        """How long ago this master stored the oldest record the slave does not hold: 0 when it
        holds everything, None when that record cannot be read (retention deleted it)."""
        if link.acked_offset >= end:
            return 0
        stored = self.stored_at_ms(link.acked_offset)
        return None if stored is None else max(0, now_ms - stored)

    def describe_slaves(self) -> list[dict[str, object]]:
        end = self.store.commitlog.max_offset
        now_ms = int(time.time() * 1000)
        return [
            {
                "url": link.url,
                "broker_id": link.broker_id,
                "acked_offset": link.acked_offset,
                "lag_bytes": max(0, end - link.acked_offset),
                "lag_ms": self.lag_ms(link, end, now_ms),
                "in_sync": self.in_sync(link),
            }
            for link in sorted(self.slaves.values(), key=lambda link: link.broker_id)
        ]
