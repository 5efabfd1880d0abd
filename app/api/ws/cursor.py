"""One queue's read position and unacknowledged messages for a WebSocket subscriber.

The committed offset is the next offset a restarted consumer must read: the smallest offset still
unacknowledged, or the read position when nothing is (RocketMQ's ProcessQueue minimum). Acks may
arrive out of order; the commit only ever moves forward past a contiguous acknowledged prefix.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import deque

from app.longpoll.hold import WakeEvent


class QueueCursor:
    def __init__(self, queue_id: int, offset: int, committed: int) -> None:
        self.queue_id = queue_id
        self.offset = offset  # the next offset to read from the store
        self.at_end = False  # the last read ended at the queue's end: hold before reading again
        self.committed = committed  # the last offset committed for the group
        self.inflight: set[int] = set()
        self._heap: list[int] = []  # inflight offsets, with acknowledged ones removed lazily
        self.nacks: dict[int, int] = {}  # offset -> times it was negatively acknowledged
        self.redeliver: deque[int] = deque()
        self.kick = WakeEvent()  # wakes the reader out of a hold: a redelivery is waiting
        self.task: asyncio.Task[None] | None = None

    def delivered(self, offsets: list[int]) -> None:
        for offset in offsets:
            if offset not in self.inflight:
                self.inflight.add(offset)
                heapq.heappush(self._heap, offset)

    def ack(self, offset: int) -> bool:
        """Forget an acknowledged message; False if it was not in flight (a repeat, or revoked)."""
        if offset not in self.inflight:
            return False
        self.inflight.discard(offset)
        self.nacks.pop(offset, None)
        return True

    def nack(self, offset: int) -> bool:
        """Queue an in-flight message for redelivery; False if it was not in flight."""
        if offset not in self.inflight:
            return False
        self.nacks[offset] = self.nacks.get(offset, 0) + 1
        if offset not in self.redeliver:
            self.redeliver.append(offset)
        self.kick.set()
        return True

    def commit_point(self) -> int:
        heap = self._heap
        while heap and heap[0] not in self.inflight:
            heapq.heappop(heap)
        return heap[0] if heap else self.offset

    def advance_commit(self) -> int | None:
        """The new committed offset if acknowledgements moved it forward, else None."""
        point = self.commit_point()
        if point <= self.committed:
            return None
        self.committed = point
        return point
