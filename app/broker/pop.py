"""Pop consumption, RocketMQ 5 style: a consumer of a group pops messages from any queue of a
topic, each invisible to other poppers for ``invisible_ms``, and acks each by its receipt handle;
it holds no queue and keeps no offset (RocketMQ's PopMessageProcessor, AckMessageProcessor and
ChangeInvisibleTimeProcessor, over the pop table of :mod:`app.broker.pop_table`).

- **pop** hands out first the messages whose invisible time passed without an ack (their
  reconsume count one higher), then messages never handed out, queue by queue from a queue that
  rotates with every pop so that poppers spread. With nothing visible it holds until a message
  arrives, one becomes visible again, or the wait ends. A message is in one popper's hands at a
  time: the choice and the marking happen with no other task in between.
- **ack** ends a message. An ack whose handle is not the message's latest answers ``expired``
  (the message was acked, handed out again, nacked or given another invisible time); one that
  names no message the group popped (never handed out, of another group or topic, garbage)
  ``unknown``. An ack after the invisible time, before anyone popped the message again, counts.
- **nack** makes a message visible again now, or after ``delay_ms``; **change_invisibility**
  sets a new invisible time from now and answers a new handle.
- A message delivered with the group's max reconsume times and not acked in time, or nacked,
  goes to the dead-letter topic instead (:mod:`app.broker.pop_revive`).
- An **orderly** pop (RocketMQ 5's orderly pop) hands out a queue one batch at a time: while a
  message of the queue is in flight and invisible, the queue is its popper's alone; once the
  batch is acked the next one follows, and a message nacked or not acked in time comes again
  first (with those after it still out), its reconsume count one higher: a retry in place.

Every answer waits until its changes are in the pop journal (:mod:`app.broker.pop_journal`).
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from app.broker.core import parse_start
from app.broker.errors import ReceiptHandleExpiredError, ReceiptHandleNotFoundError
from app.broker.pop_handle import ReceiptHandle, decode_handle
from app.broker.pop_journal import PopJournal
from app.broker.pop_revive import DeadLetters, Doomed
from app.broker.pop_state import InFlight, PopQueue, PopRecord, QueueKey, RecordKind
from app.broker.pop_table import PopTable
from app.longpoll.hold import HoldOutcome, Receive
from app.store import GetMessageResult, GetMessageStatus, MessageFilter
from app.store.config import FlushMode
from app.store.record import record_reconsume_times

if TYPE_CHECKING:
    from app.broker.core import Broker

JOURNAL_DIRECTORY = "pop"
# A pop is held again only while at least this much of its wait is left.
MIN_HOLD_S = 0.001

_OUT_OF_RANGE = (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY)
_READ = (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE)


class AckStatus(enum.StrEnum):
    OK = "ok"
    EXPIRED = "expired"
    UNKNOWN = "unknown"


class Popped(NamedTuple):
    """A message handed out: its stored record, its receipt handle, how often the group was
    handed it before, and when it becomes visible again (ms since the epoch)."""

    record: memoryview
    receipt_handle: str
    reconsume_times: int
    invisible_until_ms: int


class Found(NamedTuple):
    """What a receipt handle names when it is the message's latest."""

    handle: ReceiptHandle
    entry: InFlight

    @property
    def key(self) -> QueueKey:
        return self.handle.group, self.handle.topic, self.handle.queue_id


class PopService:
    def __init__(self, broker: Broker, journal: PopJournal, clock: Callable[[], float] = time.time) -> None:
        self.broker = broker
        self.clock = clock
        self.table = PopTable(broker, journal)
        self.dead_letters = DeadLetters(broker, self.table, self.now_ms)
        self._rotation: dict[tuple[str, str], int] = {}
        # Set when a message of (group, topic) may have become visible before its deadline (a
        # nack, a change of invisibility): held pops look again.
        self._watchers: dict[tuple[str, str], set[asyncio.Event]] = {}

    @classmethod
    async def open(cls, broker: Broker) -> PopService:
        """Load the pop state from the broker's config directory and start the reviver."""
        settings = broker.settings
        journal = PopJournal(
            settings.store_config().config_dir / JOURNAL_DIRECTORY,
            sync=settings.flush_mode is FlushMode.SYNC,
            flush_interval_s=settings.flush_interval_commitlog_ms / 1000,
        )
        service = cls(broker, journal)
        await asyncio.to_thread(service.table.load)
        service.dead_letters.start()
        return service

    async def close(self) -> None:
        await self.dead_letters.close()
        await asyncio.to_thread(self.table.journal.close)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- pop -------------------------------------------------------------------------------------

    async def pop(
        self,
        group: str,
        topic: str,
        max_messages: int,
        invisible_ms: int,
        max_wait_ms: int,
        start: str = "last",
        receive: Receive | None = None,
        message_filter: MessageFilter | None = None,
        orderly: bool = False,
    ) -> list[Popped]:
        """Up to ``max_messages`` messages of ``topic`` for ``group``, each invisible to other
        pops for ``invisible_ms``; with none visible, hold up to ``max_wait_ms`` (capped).
        ``start`` is where the group begins on a queue it has no offset for. With a filter, new
        messages it does not match are passed over for the group (as RocketMQ's pop does): a
        group's poppers share one filter. A message handed out again is not filtered again."""
        config = await self.broker.topic(topic)
        parse_start(start)
        queue_count = config.read_queue_nums
        # Queues that are no longer read (the read queues shrank) still give back their messages
        # in flight once their invisible time passes; nothing new is read from them.
        drained = range(queue_count, config.queue_nums)
        deadline = time.monotonic() + min(max_wait_ms, self.broker.settings.max_wait_ms) / 1000
        while True:
            changes: list[PopRecord] = []
            popped, doomed = self._take(
                group,
                topic,
                queue_count,
                drained,
                max_messages,
                invisible_ms,
                start,
                changes,
                message_filter,
                orderly,
            )
            await self._record(changes)
            self.dead_letters.send_later(group, topic, doomed)
            remaining = deadline - time.monotonic()
            if popped:
                self.broker.metrics.count_consumed(topic, group, len(popped))
                return popped
            if remaining < MIN_HOLD_S:
                return popped
            codes = message_filter.codes if message_filter is not None else None
            if not await self._wait(group, topic, queue_count, drained, remaining, receive, codes, orderly):
                return popped

    def _take(
        self,
        group: str,
        topic: str,
        queue_count: int,
        drained: range,
        max_messages: int,
        invisible_ms: int,
        start: str,
        changes: list[PopRecord],
        message_filter: MessageFilter | None = None,
        orderly: bool = False,
    ) -> tuple[list[Popped], list[Doomed]]:
        """Choose and mark what this pop hands out, and the messages it found due for the
        dead-letter topic. No await here: no other pop sees a message between its choice and
        its marking."""
        now = self.now_ms()
        until = now + invisible_ms
        popped: list[Popped] = []
        doomed: list[Doomed] = []
        rotation = self._rotation.get((group, topic), 0)
        self._rotation[group, topic] = rotation + 1
        for queue_id in drained:
            key = (group, topic, queue_id)
            if len(popped) < max_messages and (queue := self.table.existing(key, changes)) is not None:
                self._expired(key, queue, now, until, max_messages, popped, doomed, changes)
        for step in range(queue_count):
            if len(popped) >= max_messages:
                break
            key = (group, topic, (rotation + step) % queue_count)
            queue = self.table.queue(key, start, changes)
            if orderly and queue.inflight:
                self._again_in_order(key, queue, now, until, max_messages, popped, doomed, changes)
                continue
            self._expired(key, queue, now, until, max_messages, popped, doomed, changes)
            room = max_messages - len(popped)
            if room > 0:
                self._new(key, queue, room, until, popped, changes, message_filter)
        return popped, doomed

    def _expired(
        self,
        key: QueueKey,
        queue: PopQueue,
        now: int,
        until: int,
        max_messages: int,
        popped: list[Popped],
        doomed: list[Doomed],
        changes: list[PopRecord],
    ) -> None:
        """Hand out again the queue's messages whose invisible time passed, or hold those due for
        the dead-letter topic."""
        self._hand_back(key, queue.expired(now), until, max_messages, popped, doomed, changes)

    def _hand_back(
        self,
        key: QueueKey,
        entries: Iterable[tuple[int, InFlight]],
        until: int,
        max_messages: int,
        popped: list[Popped],
        doomed: list[Doomed],
        changes: list[PopRecord],
    ) -> None:
        """Hand out again each of ``entries``, or hold it for the dead-letter topic when due."""
        for offset, entry in entries:
            if len(popped) >= max_messages or len(doomed) >= max_messages:
                break
            if self.dead_letters.due(key[0], entry):
                doomed.append(self.dead_letters.hold(changes, key, offset, entry))
            else:
                self._again(key, offset, entry, until, popped, changes)

    def _again(
        self,
        key: QueueKey,
        offset: int,
        entry: InFlight,
        until: int,
        popped: list[Popped],
        changes: list[PopRecord],
    ) -> None:
        """Hand out again a message whose invisible time passed, one reconsume higher."""
        result = self.broker.store.get_message(key[1], key[2], offset, 1)
        if result.status is not GetMessageStatus.FOUND or result.queue_offsets[0] != offset:
            self.table.ack(changes, key, offset)  # retention took it: nothing is left to deliver
            return
        reconsume_times = entry.reconsume_times + 1
        nonce = self.table.hand_out(changes, key, offset, until, reconsume_times)
        handle = ReceiptHandle(*key, offset, nonce).encode()
        popped.append(Popped(result.records[0], handle, reconsume_times, until))

    def _again_in_order(
        self,
        key: QueueKey,
        queue: PopQueue,
        now: int,
        until: int,
        max_messages: int,
        popped: list[Popped],
        doomed: list[Doomed],
        changes: list[PopRecord],
    ) -> None:
        """An orderly queue with messages in flight: nothing while one of them is invisible (its
        batch is out); else its messages again, in offset order, before anything new."""
        if any(entry.deadline_ms > now for entry in queue.inflight.values()):
            return
        self._hand_back(key, list(queue.inflight.items()), until, max_messages, popped, doomed, changes)

    def _new(
        self,
        key: QueueKey,
        queue: PopQueue,
        room: int,
        until: int,
        popped: list[Popped],
        changes: list[PopRecord],
        message_filter: MessageFilter | None = None,
    ) -> None:
        """Hand out up to ``room`` messages never handed out (of those the filter matches), from
        ``popped_until``."""
        result = self._read_new(key, queue, room, changes, message_filter)
        for record, offset in zip(result.records, result.queue_offsets, strict=True):
            reconsume_times = record_reconsume_times(record)
            nonce = self.table.hand_out(changes, key, offset, until, reconsume_times)
            popped.append(Popped(record, ReceiptHandle(*key, offset, nonce).encode(), reconsume_times, until))
        if result.status in _READ and result.next_offset > queue.popped_until:
            # Entries that are no message (stale after a crash) are passed over for good.
            self.table.change(changes, PopRecord(RecordKind.ADVANCE, *key, result.next_offset))

    def _read_new(
        self,
        key: QueueKey,
        queue: PopQueue,
        room: int,
        changes: list[PopRecord],
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult:
        _, topic, queue_id = key
        store = self.broker.store
        result = store.get_message(topic, queue_id, queue.popped_until, room, message_filter)
        if result.status in _OUT_OF_RANGE:
            # Retention took messages never handed out (or the queue was rebuilt shorter).
            kind = RecordKind.SKIP if result.next_offset > queue.popped_until else RecordKind.POSITION
            self.table.change(changes, PopRecord(kind, *key, result.next_offset))
            result = store.get_message(topic, queue_id, queue.popped_until, room, message_filter)
        return result

    async def _wait(
        self,
        group: str,
        topic: str,
        queue_count: int,
        drained: range,
        remaining_s: float,
        receive: Receive | None,
        codes: frozenset[int] | None = None,
        orderly: bool = False,
    ) -> bool:
        """Hold until a message arrives past what was handed out, one in flight becomes visible,
        a nack or change of invisibility wakes the group's pops, or ``remaining_s`` ends. False
        when the client went away or the broker is stopping."""
        queues = {
            queue_id: queue
            for queue_id in range(queue_count)
            if (queue := self.table.queues.get((group, topic, queue_id))) is not None
        }
        timeout_s = remaining_s
        in_flight = [
            *queues.values(),
            *(queue for i in drained if (queue := self.table.queues.get((group, topic, i)))),
        ]
        deadlines = [ms for queue in in_flight if (ms := queue.next_deadline_ms()) is not None]
        if deadlines:
            timeout_s = min(timeout_s, max(0, min(deadlines) - self.now_ms()) / 1000 + MIN_HOLD_S)
        wake = asyncio.Event()
        watchers = self._watchers.setdefault((group, topic), set())
        watchers.add(wake)
        now = self.now_ms()
        holds = [
            asyncio.ensure_future(
                self.broker.holds.hold(topic, queue_id, queue.popped_until, codes, timeout_s)
            )
            for queue_id, queue in queues.items()
            # An orderly queue whose batch is out waits for its ack or deadline, not for arrivals.
            if not (orderly and any(entry.deadline_ms > now for entry in queue.inflight.values()))
        ]
        gone = asyncio.ensure_future(_disconnected(receive)) if receive is not None else None
        tasks = [*holds, asyncio.ensure_future(wake.wait()), asyncio.ensure_future(asyncio.sleep(timeout_s))]
        if gone is not None:
            tasks.append(gone)
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            watchers.discard(wake)
            if not watchers:
                del self._watchers[group, topic]
        if gone in done:
            return False
        return not any(hold in done and hold.result() is HoldOutcome.SHUTDOWN for hold in holds)

    def _wake(self, group: str, topic: str) -> None:
        for wake in self._watchers.get((group, topic), ()):
            wake.set()

    # -- ack, nack, change of invisibility --------------------------------------------------------

    def _find(self, group: str, topic: str, text: str, changes: list[PopRecord]) -> Found | AckStatus:
        handle = decode_handle(text)
        if handle is None or (handle.group, handle.topic) != (group, topic):
            return AckStatus.UNKNOWN
        queue = self.table.existing((group, topic, handle.queue_id), changes)
        if queue is None or handle.queue_offset >= queue.popped_until:
            return AckStatus.UNKNOWN
        entry = queue.current(handle.queue_offset, handle.nonce)
        return AckStatus.EXPIRED if entry is None else Found(handle, entry)

    async def ack(self, group: str, topic: str, handles: Sequence[str]) -> list[AckStatus]:
        """End the messages ``handles`` name; a status per handle."""
        await self.broker.topic(topic)
        changes: list[PopRecord] = []
        statuses = []
        for text in handles:
            found = self._find(group, topic, text, changes)
            if isinstance(found, Found):
                self.table.ack(changes, found.key, found.handle.queue_offset)
                found = AckStatus.OK
            statuses.append(found)
        await self._record(changes)
        self._wake(group, topic)  # an orderly queue whose batch is acked goes on
        return statuses

    async def nack(self, group: str, topic: str, handles: Sequence[str], delay_ms: int) -> list[AckStatus]:
        """Make the messages visible again after ``delay_ms`` (0: now), their next delivery one
        reconsume higher; one delivered with the max reconsume times goes to the dead-letter
        topic instead. A status per handle."""
        await self.broker.topic(topic)
        until = self.now_ms() + delay_ms
        changes: list[PopRecord] = []
        doomed: list[Doomed] = []
        statuses = []
        for text in handles:
            found = self._find(group, topic, text, changes)
            if isinstance(found, Found):
                offset, entry = found.handle.queue_offset, found.entry
                if self.dead_letters.due(group, entry):
                    doomed.append(self.dead_letters.hold(changes, found.key, offset, entry))
                else:
                    self.table.hand_out(changes, found.key, offset, until, entry.reconsume_times)
                found = AckStatus.OK
            statuses.append(found)
        await self._record(changes)
        self.dead_letters.send_later(group, topic, doomed)
        self._wake(group, topic)
        return statuses

    async def change_invisibility(
        self, group: str, topic: str, text: str, invisible_ms: int
    ) -> tuple[str, int]:
        """Make the message invisible for ``invisible_ms`` from now; its new receipt handle and
        when it becomes visible. An ack's ``unknown`` and ``expired`` are errors here."""
        await self.broker.topic(topic)
        changes: list[PopRecord] = []
        found = self._find(group, topic, text, changes)
        if not isinstance(found, Found):
            await self._record(changes)
            if found is AckStatus.UNKNOWN:
                raise ReceiptHandleNotFoundError(
                    f"the receipt handle names no message group {group!r} popped from topic {topic!r}"
                )
            raise ReceiptHandleExpiredError(
                "the receipt handle is not the message's latest: it was acked, handed out again, "
                "nacked or given another invisible time since"
            )
        until = self.now_ms() + invisible_ms
        offset = found.handle.queue_offset
        nonce = self.table.hand_out(changes, found.key, offset, until, found.entry.reconsume_times)
        await self._record(changes)
        self._wake(group, topic)
        return found.handle._replace(nonce=nonce).encode(), until

    async def _record(self, changes: list[PopRecord]) -> None:
        written = self.table.record(changes)
        if written is not None:
            await asyncio.wrap_future(written)


async def _disconnected(receive: Receive) -> None:
    while (await receive()).get("type") != "http.disconnect":
        pass
