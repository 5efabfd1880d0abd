"""Pop state of one (group, topic, queue): what was handed out, what is in flight, what is done.

Offsets below :attr:`PopQueue.done` are consumed (it is the group's committed offset); offsets
from ``popped_until`` on were never handed out; in between, an offset is either in flight (handed
out, not acked: a deadline, a reconsume count and the nonce of its current receipt handle) or
acked. ``done`` is the first offset in flight, else ``popped_until``: an ack moves it over the
acked prefix.

Every change is one of four :class:`PopRecord` kinds, applied the same way in memory and when
the journal is replayed at start (:func:`apply`):

- ``HANDOUT``: the offset is in flight with this deadline, reconsume count and nonce (a first
  pop, a pop after the invisible time, a nack, a change of invisibility);
- ``ACK``: the offset is done;
- ``POSITION``: start over at the offset (nothing in flight): a new queue, or the group's offset
  moved back by someone else;
- ``SKIP``: everything below the offset is done (the group's offset moved on, or retention took
  the messages);
- ``ADVANCE``: nothing below the offset is left to hand out (entries that are no message were
  passed over).
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterable, Iterator
from typing import NamedTuple

QueueKey = tuple[str, str, int]  # group, topic, queue id

# The expiry heap is rebuilt once stale items (acked or handed out again) outnumber live ones.
_HEAP_SLACK = 64


class RecordKind(enum.IntEnum):
    HANDOUT = 1
    ACK = 2
    POSITION = 3
    SKIP = 4
    ADVANCE = 5


class PopRecord(NamedTuple):
    kind: RecordKind
    group: str
    topic: str
    queue_id: int
    offset: int
    deadline_ms: int = 0
    reconsume_times: int = 0
    nonce: int = 0

    @property
    def key(self) -> QueueKey:
        return self.group, self.topic, self.queue_id


class InFlight(NamedTuple):
    deadline_ms: int
    reconsume_times: int
    nonce: int


class PopQueue:
    """The in-flight table of one queue, kept in offset order, with a heap of deadlines."""

    __slots__ = ("popped_until", "inflight", "committed", "_expiry")

    def __init__(self, popped_until: int) -> None:
        self.popped_until = popped_until
        # The group offset last committed for this queue from this state (not journaled): another
        # value in the offset table means someone else moved it.
        self.committed = -1
        # Insertion order is offset order: new offsets come at popped_until, which only grows
        # (POSITION clears the table), and a hand-out again keeps an entry's place.
        self.inflight: dict[int, InFlight] = {}
        self._expiry: list[tuple[int, int, int]] = []  # (deadline ms, offset, nonce), stale ones too

    @property
    def done(self) -> int:
        """The first offset not consumed: the group's committed offset."""
        return next(iter(self.inflight), self.popped_until)

    def hand_out(self, offset: int, deadline_ms: int, reconsume_times: int, nonce: int) -> None:
        self.inflight[offset] = InFlight(deadline_ms, reconsume_times, nonce)
        if offset >= self.popped_until:
            self.popped_until = offset + 1
        heapq.heappush(self._expiry, (deadline_ms, offset, nonce))
        if len(self._expiry) > 2 * len(self.inflight) + _HEAP_SLACK:
            self._expiry = [(entry.deadline_ms, o, entry.nonce) for o, entry in self.inflight.items()]
            heapq.heapify(self._expiry)

    def ack(self, offset: int) -> InFlight | None:
        return self.inflight.pop(offset, None)

    def position(self, offset: int) -> None:
        self.inflight.clear()
        self._expiry.clear()
        self.popped_until = offset

    def skip(self, offset: int) -> None:
        for doomed in [o for o in self.inflight if o < offset]:
            del self.inflight[doomed]
        self.popped_until = max(self.popped_until, offset)

    def advance(self, offset: int) -> None:
        self.popped_until = max(self.popped_until, offset)

    def current(self, offset: int, nonce: int) -> InFlight | None:
        """The entry at ``offset`` if ``nonce`` is its current hand-out's."""
        entry = self.inflight.get(offset)
        return entry if entry is not None and entry.nonce == nonce else None

    def _live_top(self) -> tuple[int, int, int] | None:
        heap = self._expiry
        while heap:
            top = heap[0]
            entry = self.inflight.get(top[1])
            if entry is not None and entry.nonce == top[2]:
                return top
            heapq.heappop(heap)
        return None

    def next_deadline_ms(self) -> int | None:
        """The earliest deadline in flight, None when nothing is."""
        top = self._live_top()
        return top[0] if top is not None else None

    def expired(self, now_ms: int) -> Iterator[tuple[int, InFlight]]:
        """(offset, entry) of entries whose deadline passed, earliest first. The caller hands each
        out again with a later deadline, or acks it, before it takes the next one."""
        while (top := self._live_top()) is not None and top[0] <= now_ms:
            offset = top[1]
            yield offset, self.inflight[offset]

    def sort(self) -> None:
        """Put the table back in offset order (a replayed journal may add an offset late)."""
        self.inflight = dict(sorted(self.inflight.items()))


def apply(queues: dict[QueueKey, PopQueue], record: PopRecord) -> None:
    """Apply one record to the table of queues. A HANDOUT or a POSITION of a queue the table
    does not hold makes it; the other kinds change nothing then."""
    kind = record.kind
    queue = queues.get(record.key)
    if queue is None:
        if kind not in (RecordKind.HANDOUT, RecordKind.POSITION):
            return
        queue = queues[record.key] = PopQueue(record.offset)
    if kind is RecordKind.HANDOUT:
        queue.hand_out(record.offset, record.deadline_ms, record.reconsume_times, record.nonce)
    elif kind is RecordKind.ACK:
        queue.ack(record.offset)
    elif kind is RecordKind.POSITION:
        queue.position(record.offset)
    elif kind is RecordKind.SKIP:
        queue.skip(record.offset)
    else:
        queue.advance(record.offset)


def snapshot(queues: dict[QueueKey, PopQueue]) -> Iterable[PopRecord]:
    """Records that rebuild ``queues`` from nothing: a POSITION per queue, then its entries."""
    for (group, topic, queue_id), queue in queues.items():
        yield PopRecord(RecordKind.POSITION, group, topic, queue_id, queue.popped_until)
        for offset, entry in queue.inflight.items():
            yield PopRecord(
                RecordKind.HANDOUT,
                group,
                topic,
                queue_id,
                offset,
                entry.deadline_ms,
                entry.reconsume_times,
                entry.nonce,
            )
