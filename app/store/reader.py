"""MessageReader: reads of the store, from a ConsumeQueue and the CommitLog (SPEC 1.10).

:meth:`MessageReader.get_message` checks every record a queue entry points at
(:func:`app.store.record.record_is`) and skips an entry that does not name its message: one left
behind by a crash in a damaged store. The skip is logged once per queue. Without a filter, each
run of entries whose records lie in one CommitLog segment is read by one call
(:meth:`CommitLog.collect`, compiled); an entry that call leaves is read on its own.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

from app.store.commit_log import ENTRY_OFFSET, CommitLog
from app.store.config import StoreConfig
from app.store.consume_queue import UNIT
from app.store.filter import MessageFilter
from app.store.log_walk import records_since
from app.store.queue_table import QueueTable
from app.store.record import (
    HEAD_SIZE,
    CheckedRecord,
    StoredMessage,
    check_record,
    decode_record,
    message_size,
    record_is,
)
from app.store.results import GetMessageResult, GetMessageStatus
from app.store.topic_deletions import TopicDeletions

log = logging.getLogger(__name__)


def _physical_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


class MessageReader:
    def __init__(
        self, config: StoreConfig, commitlog: CommitLog, queues: QueueTable, deletions: TopicDeletions
    ) -> None:
        self.config = config
        self.commitlog = commitlog
        self.queues = queues
        self.deletions = deletions
        self._stale_queues_logged: set[tuple[str, int]] = set()
        # RocketMQ's accessMessageInMemoryMaxRatio applied: how much of the newest CommitLog is
        # taken to be in the page cache (checkInDiskByConsumeOffset, whichBrokerWhenConsumeSlowly).
        self.in_memory_bytes = int(_physical_memory_bytes() * config.access_message_in_memory_max_ratio / 100)

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, queue_offset: int) -> bool:
        """Whether the message at ``queue_offset`` is old enough to be out of the page cache: more
        than WHARF_ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO (40 %) of physical memory of CommitLog lies
        after it (RocketMQ's checkInDiskByConsumeOffset)."""
        queue = self.queues.get(topic, queue_id)
        entry = queue.entry(queue_offset) if queue is not None else None
        if entry is None:
            return False
        return self.commitlog.max_offset - entry[0] > self.in_memory_bytes

    def get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int = 32,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult:
        """Read up to ``max_messages`` records of one queue from ``offset``; with a filter, those it
        matches (an entry whose tag hash cannot match is passed over without reading the record)."""
        queue = self.queues.queues.get((topic, queue_id))
        max_offset = queue.max_offset if queue is not None else 0
        if queue is None or max_offset == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        min_offset = queue.min_offset
        if offset < min_offset:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
        if offset == max_offset:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
        if offset > max_offset:
            next_offset = min_offset if min_offset == 0 else max_offset
            return GetMessageResult(
                GetMessageStatus.OFFSET_OVERFLOW_BADLY, next_offset, min_offset, max_offset
            )

        config = self.config
        scan_entries = max(config.max_scan_bytes_per_pull, max_messages * 20) // UNIT.size
        max_bytes = config.max_transfer_bytes_per_pull
        commitlog = self.commitlog
        commitlog_min = commitlog.min_offset
        records: list[memoryview] = []
        queue_offsets: list[int] = []
        total = 0
        next_offset = offset
        codes = message_filter.codes if message_filter is not None else None
        topic_bytes = topic.encode()
        raw = queue.entries(offset, scan_entries)
        if raw is None or (len(raw) >= UNIT.size and UNIT.unpack_from(raw)[0] < commitlog_min):
            # Retention deleted what this offset names since min_offset was read: never read it.
            queue.correct_min_offset(commitlog_min)
            if offset < queue.min_offset:
                return GetMessageResult(
                    GetMessageStatus.OFFSET_TOO_SMALL, queue.min_offset, queue.min_offset, queue.max_offset
                )
        if raw is not None:
            count = len(raw) // UNIT.size
            index = 0
            while index < count:
                if message_filter is None:
                    # Whole runs of one segment in one call; what it leaves is read one by one.
                    index, total = commitlog.collect(
                        raw,
                        index,
                        commitlog_min,
                        topic_bytes,
                        queue_id,
                        offset,
                        max_messages,
                        max_bytes,
                        records,
                        queue_offsets,
                        total,
                    )
                    if index == count:
                        break
                physical_offset, size, tags_code = UNIT.unpack_from(raw, index * UNIT.size)
                if records and (len(records) >= max_messages or total + size > max_bytes):
                    break
                current = offset + index
                index += 1
                if size <= 0 or physical_offset < commitlog_min:
                    continue
                if codes is not None and tags_code not in codes:
                    continue
                data = commitlog.read(physical_offset, size)
                if data is None:
                    continue
                if not record_is(data, topic_bytes, queue_id, current, physical_offset):
                    self._skip_stale_entry(topic, queue_id, current, physical_offset, size)
                    continue
                if message_filter is not None and not message_filter.matches_record(data):
                    continue
                records.append(data)
                queue_offsets.append(current)
                total += size
            next_offset = offset + index
        if not records:
            return GetMessageResult(
                GetMessageStatus.NO_MATCHED_MESSAGE,
                next_offset,
                min_offset,
                max_offset,
                records,
                queue_offsets,
            )
        assert raw is not None  # the records came from its entries
        (last_physical,) = ENTRY_OFFSET.unpack_from(raw, (queue_offsets[-1] - offset) * UNIT.size)
        return GetMessageResult(
            GetMessageStatus.FOUND,
            next_offset,
            min_offset,
            max_offset,
            records,
            queue_offsets,
            total,
            commitlog.max_offset - last_physical > self.in_memory_bytes,
        )

    def _skip_stale_entry(
        self, topic: str, queue_id: int, queue_offset: int, physical_offset: int, size: int
    ) -> None:
        # Never served: recovery removes such entries, so one here means a damaged store.
        key = (topic, queue_id)
        if key not in self._stale_queues_logged:
            self._stale_queues_logged.add(key)
            log.warning(
                "skipping %s/%d offset %d: its entry (CommitLog offset %d, %d bytes) does not point at "
                "that message; further skips in this queue are not logged",
                topic,
                queue_id,
                queue_offset,
                physical_offset,
                size,
            )

    def read_record(self, physical_offset: int) -> memoryview | None:
        """The stored message record that starts at ``physical_offset``, or None if there is none."""
        head = self.commitlog.read(physical_offset, HEAD_SIZE)
        size = message_size(head) if head is not None else None
        if size is None:
            return None
        data = self.commitlog.read(physical_offset, size)
        if data is None or check_record(data, 0, physical_offset) is None:
            return None
        return data

    def look_message(self, physical_offset: int) -> StoredMessage | None:
        """The message stored at ``physical_offset`` (the offset a message id names), or None."""
        data = self.read_record(physical_offset)
        return decode_record(data) if data is not None else None

    def read_live_record(self, physical_offset: int) -> memoryview | None:
        """As :meth:`read_record`, None for a record of a topic deleted since it was stored."""
        data = self.read_record(physical_offset)
        dead = self.deletions.is_dead
        if data is not None and self.deletions.floors and dead(decode_record(data).topic, physical_offset):
            return None
        return data

    def look_live_message(self, physical_offset: int) -> StoredMessage | None:
        """As :meth:`look_message`, None for a record of a topic deleted since it was stored."""
        message = self.look_message(physical_offset)
        if message is None or self.deletions.is_dead(message.topic, physical_offset):
            return None
        return message

    def records_since(self, timestamp_ms: int) -> Iterator[tuple[int, CheckedRecord]]:
        """(CommitLog offset, record) of every live message stored at or after ``timestamp_ms``,
        in log order; records of deleted topics are left out."""
        is_dead = self.deletions.is_dead
        for offset, record in records_since(self.commitlog, timestamp_ms):
            if not is_dead(record.topic, offset):
                yield offset, record

    def last_store_timestamp(self, topic: str, queue_id: int) -> int | None:
        """Store time of the newest message of a queue, None for an empty queue."""
        queue = self.queues.queues.get((topic, queue_id))
        if queue is None or queue.max_offset == 0:
            return None
        entry = queue.entry(queue.max_offset - 1)
        message = self.look_message(entry[0]) if entry is not None else None
        return message.store_timestamp if message is not None else None
