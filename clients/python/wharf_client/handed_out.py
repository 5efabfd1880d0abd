"""What a subscriber without a group handed out lately, per queue, so that a queue read again from
an earlier offset does not hand out the same stored messages twice.

A socket opened on a broker whose queue ends before where the subscriber reached (a slave that
had not copied the master's last messages yet) reads that queue from the broker's end. What comes
next at those offsets is either the same messages, once the slave copied them from a promoted
slave that had them, or others, the new master's, where the old master's unconfirmed tail was
lost. The first are skipped, the second handed out: a replica's copy of a record is byte for byte
its master's, so it has the same CommitLog offset, store time and body checksum, and another
message stored at the same queue offset does not.
"""

from __future__ import annotations

from collections import deque

from wharf_client.codec import Message

# Kept per queue: the last frames, up to this many messages and record bytes (the newest frame is
# always kept). A queue read again further back than that may hand a message out twice.
REMEMBERED_MESSAGES = 1024
REMEMBERED_BYTES = 4 << 20

Identity = tuple[int, int, int]


def identity(message: Message) -> Identity:
    return message.physical_offset, message.store_timestamp, message.body_crc


class _Queue:
    __slots__ = ("again", "again_until", "bytes", "count", "frames")

    def __init__(self) -> None:
        self.frames: deque[tuple[list[Message], int]] = deque()  # (records, their bytes)
        self.count = 0
        self.bytes = 0
        self.again: dict[int, Identity] = {}  # queue offset -> what was handed out there
        # Where the furthest read again ended: handed out up to there, kept past the guard's end,
        # as the subscriber's own mark stays where the read again started.
        self.again_until = 0


class HandedOut:
    """Per queue: the records of the last frames, and the offsets being read a second time."""

    def __init__(self) -> None:
        self._queues: dict[int, _Queue] = {}

    def remember(self, queue_id: int, records: list[Message]) -> None:
        """A frame's records (of one queue), in the order they are handed out."""
        queue = self._queues.get(queue_id)
        if queue is None:
            queue = self._queues[queue_id] = _Queue()
        size = sum(record.size for record in records)
        queue.frames.append((records, size))
        queue.count += len(records)
        queue.bytes += size
        frames = queue.frames
        while len(frames) > 1 and (queue.count > REMEMBERED_MESSAGES or queue.bytes > REMEMBERED_BYTES):
            dropped, dropped_size = frames.popleft()
            queue.count -= len(dropped)
            queue.bytes -= dropped_size

    def read_again(self, queue_id: int, start: int, reached: int) -> None:
        """The queue is read again from ``start``: what was handed out from there up to ``reached``
        is skipped when it comes again (and what an earlier read again had not passed yet)."""
        queue = self._queues.get(queue_id)
        if queue is None:
            return
        until = max(reached, queue.again_until)
        queue.again = {
            record.queue_offset: identity(record)
            for records, _ in queue.frames
            for record in records
            if start <= record.queue_offset < until
        }
        queue.again_until = until

    def fresh(self, queue_id: int, records: list[Message]) -> list[Message]:
        """``records`` (of one queue, in queue order) less those handed out already."""
        queue = self._queues.get(queue_id)
        if queue is None or not queue.again:
            return records
        again = queue.again
        kept = [record for record in records if again.get(record.queue_offset) != identity(record)]
        if records[-1].queue_offset + 1 >= queue.again_until:
            again.clear()  # read past the guard: nothing further back comes again on this socket
        return kept
