"""CommitLog: the one append-only log every message goes to, across fixed-size segments.

Records are encoded outside the lock (:func:`app.store.record.encode_record`); under the lock the
CommitLog only assigns the queue offsets, copies the bytes into the mapped segment and patches three
fields per record (:func:`app.store.log_codec.write_records`, one compiled call per batch), then
hands the batch's ConsumeQueue entries to the dispatcher as one run per queue. A record that does
not fit in the rest of a segment (with room for an 8-byte blank) is preceded by a blank END_OF_FILE
record and goes to the next one.

A batch is stored whole or not at all: every segment it will roll to is prepared, and every byte it
will write is allocated on disk (:meth:`MappedFileQueue.reserve`), before its first byte is
written, so a full disk refuses it with :class:`DiskFullError` up front. Segments get their disk
blocks a chunk (``chunk_size``) at a time; the next chunk and the next segment are normally
allocated already (:class:`app.store.allocate.AllocateSegmentService`), and the writer wakes that
service once less than half a chunk is left ahead of it.

A slave's CommitLog is written with its master's bytes instead (:mod:`app.store.log_replica`), and
the log is read back record by record, validated, by :mod:`app.store.log_walk`.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from app.store.consume_queue import UNIT
from app.store.errors import MessageTooLargeError, StoreClosedError
from app.store.log_codec import QueueKey, QueueRun, collect_records, write_records
from app.store.mapped_file import Growth, MappedFile
from app.store.mapped_file_queue import MappedFileQueue
from app.store.record_format import (
    BLANK_MAGIC,
    BLANK_MIN_SIZE,
    SIZE_MAGIC,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    EncodedRecord,
)
from app.store.results import AppendResult

ENTRY_OFFSET = struct.Struct(">q")  # the CommitLog offset that leads a ConsumeQueue entry

# The disk a CommitLog segment allocates at a time, unless the store says otherwise.
DEFAULT_CHUNK_SIZE = 16 * 1024 * 1024

# (topic, queue_id, queue_offset, physical_offset, size, tags_code, store_timestamp, keys, uniq_key)
Dispatch = Callable[[str, int, int, int, int, int, int, str, str], None]

# (topic, queue_id, first queue offset, the run's ConsumeQueue entries packed back to back)
DispatchRun = Callable[[str, int, int, bytearray], None]

# Called once per appended batch, under the lock, in log order: (records, where each landed).
# It must be cheap (the message index queues the batch and builds its entries on its own thread).
BatchListener = Callable[[Sequence[EncodedRecord], list[AppendResult]], None]


def store_time_ms() -> int:
    """The store timestamp a record written now gets: the one clock of every append path."""
    return int(time.time() * 1000)


def skips_consume_queue(sysflag: int) -> bool:
    """Half (prepared) and rolled-back transaction messages get no queue offset."""
    kind = sysflag & SYSFLAG_TRANSACTION_MASK
    return kind in (SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK)


def check_fits(record_size: int, segment_size: int) -> None:
    """MessageTooLargeError unless a record of ``record_size`` bytes fits a segment of
    ``segment_size`` with room for the blank that ends it."""
    if record_size + BLANK_MIN_SIZE > segment_size:
        raise MessageTooLargeError(
            f"record of {record_size} bytes does not fit a CommitLog segment of {segment_size} bytes"
        )


class CommitLog:
    def __init__(
        self,
        directory: Path,
        file_size: int,
        store_host: bytes,
        dispatch: Dispatch,
        dispatch_run: DispatchRun,
        on_batch: BatchListener | None = None,
        check_room: Callable[[int], None] | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        spare_directory: Path | None = None,
    ) -> None:
        """``dispatch`` gets every replicated record that has a queue offset, ``dispatch_run`` the
        ConsumeQueue entries of an appended batch, queue by queue, ``on_batch`` every batch (all
        under the lock); ``check_room`` vets each allocation's size before it is made. Segments
        get their disk blocks ``chunk_size`` bytes at a time; the next segment is prepared in
        ``spare_directory`` (None: beside the segments, under a ``.spare`` name)."""
        self.chunk_size = min(chunk_size, file_size)
        self.files = MappedFileQueue(
            directory,
            file_size,
            check_room=check_room,
            growth=Growth(self.chunk_size, self.chunk_size),
            spare_directory=spare_directory,
        )
        self.file_size = file_size
        self.store_host = store_host
        self.dispatch = dispatch
        self.dispatch_run = dispatch_run
        self.on_batch = on_batch
        self.lock = threading.Lock()
        # Next queue offset of every (topic, queue); rebuilt from the ConsumeQueues at start.
        self.queue_offsets: dict[QueueKey, int] = {}
        self.closed = True
        # Offset of the newest record (what a clean stop records in the checkpoint); -1: none.
        self.last_record_offset = -1

    @property
    def min_offset(self) -> int:
        return self.files.min_offset

    @property
    def max_offset(self) -> int:
        return self.files.max_offset

    def check_fits(self, record_size: int) -> None:
        check_fits(record_size, self.file_size)

    def segment_ends(
        self, mapped: MappedFile | None, records: Sequence[EncodedRecord]
    ) -> tuple[int, list[int]]:
        """Where appending ``records`` after ``mapped`` (the last segment) stops writing: the end in
        ``mapped`` (-1 when it takes nothing) and the end in each new segment it rolls to. A record
        that does not fit is preceded by a blank, of which only the size and magic are written."""
        file_size = self.file_size
        ends: list[int] = []
        if mapped is None or mapped.is_full:
            last_end, position = -1, 0
            ends.append(0)
        else:
            last_end = position = mapped.wrote_position
        for record in records:
            size = len(record[0])
            if position + size + BLANK_MIN_SIZE > file_size:
                if ends:
                    ends[-1] = position + BLANK_MIN_SIZE
                else:
                    last_end = position + BLANK_MIN_SIZE
                ends.append(0)
                position = 0
            position += size
            if ends:
                ends[-1] = position
            else:
                last_end = position
        return last_end, ends

    def _reserve(self, last: MappedFile | None, records: Sequence[EncodedRecord], total_size: int) -> None:
        """Prepare every segment the batch rolls to and allocate every byte it writes, before any
        is written: DiskFullError (nothing written) when that does not fit."""
        files = self.files
        if last is not None and last.wrote_position + total_size + BLANK_MIN_SIZE <= self.file_size:
            files.reserve(last, last.wrote_position + total_size + BLANK_MIN_SIZE)
            return
        last_end, ends = self.segment_ends(last, records)
        files.prepare(len(ends))
        if last is not None and last_end > 0:
            files.reserve(last, last_end)
        for spare, end in zip(files.prepared, ends, strict=False):
            files.reserve(spare, end)

    def append(
        self,
        records: Sequence[EncodedRecord],
        total_size: int = -1,
        before_write: Callable[[], None] | None = None,
    ) -> list[AppendResult]:
        """Append records in order under one lock acquisition; returns where each landed.

        ``total_size`` is the records' byte count when the caller knows it. ``before_write`` runs
        under the lock before anything is written: what it raises refuses the whole batch.
        DiskFullError when a segment the batch needs cannot be allocated; nothing is written then.
        """
        if total_size < 0:
            total_size = sum(len(record[0]) for record in records)
        results: list[AppendResult] = []
        if not records:
            return results
        runs: dict[QueueKey, QueueRun] = {}
        store_host = self.store_host
        queue_offsets = self.queue_offsets
        file_size = self.file_size
        limit = file_size - BLANK_MIN_SIZE
        count = len(records)
        with self.lock:
            if self.closed:
                raise StoreClosedError("the CommitLog is closed")
            if before_write is not None:
                before_write()
            last = self.files.last_file
            if last is None or last.wrote_position + total_size + BLANK_MIN_SIZE > last.allocated:
                self._reserve(last, records, total_size)
            now = store_time_ms()
            mapped = self.files.writable_file()
            written = 0
            while True:
                written, mapped.wrote_position = write_records(
                    mapped.mm,
                    mapped.wrote_position,
                    limit,
                    mapped.file_from_offset,
                    records,
                    written,
                    now,
                    queue_offsets,
                    store_host,
                    results,
                    runs,
                )
                if written == count:
                    break
                # The next record does not fit: a blank fills the rest, and it goes to the next segment.
                position = mapped.wrote_position
                SIZE_MAGIC.pack_into(mapped.mm, position, file_size - position, BLANK_MAGIC)
                mapped.wrote_position = file_size
                mapped = self.files.new_file()
            for (topic, queue_id), (queue_offset, entries) in runs.items():
                self.dispatch_run(topic, queue_id, queue_offset, entries)
            mapped.last_store_timestamp = now
            self.last_record_offset = results[-1].physical_offset
            if self.on_batch is not None:
                self.on_batch(records, results)
            if mapped.allocated - mapped.wrote_position < self.chunk_size // 2 and not mapped.is_full:
                wake = self.files.on_new_file
                if wake is not None:
                    wake()  # the allocating thread adds the next chunk
        return results

    def read(self, physical_offset: int, size: int) -> memoryview | None:
        """The record bytes at ``physical_offset`` as a slice of the mapping, or None if gone."""
        mapped = self.files.find(physical_offset)
        if mapped is None:
            return None
        position = physical_offset - mapped.file_from_offset
        if position + size > mapped.wrote_position:
            return None
        # Held while slicing, so retention cannot delete the segment in between; the slice itself
        # keeps its pages mapped afterwards.
        if not mapped.hold():
            return None
        try:
            return mapped.slice(position, size)
        except ValueError:  # destroyed by force under a stuck reader
            return None
        finally:
            mapped.release()

    def collect(
        self,
        entries: bytes | memoryview,
        at: int,
        commitlog_min: int,
        topic: bytes,
        queue_id: int,
        base_offset: int,
        max_messages: int,
        max_bytes: int,
        records: list[memoryview],
        queue_offsets: list[int],
        total: int,
    ) -> tuple[int, int]:
        """:func:`collect_records` within the segment that holds the record of entry ``at``
        (held meanwhile, as :meth:`read` holds it); entry ``at`` itself when that is gone."""
        (physical_offset,) = ENTRY_OFFSET.unpack_from(entries, at * UNIT.size)
        mapped = self.files.find(physical_offset)
        if mapped is None or not mapped.hold():
            return at, total
        try:
            return collect_records(
                entries,
                at,
                mapped.view,
                mapped.file_from_offset,
                mapped.wrote_position,
                commitlog_min,
                topic,
                queue_id,
                base_offset,
                max_messages,
                max_bytes,
                records,
                queue_offsets,
                total,
            )
        except ValueError:  # destroyed by force under a stuck reader
            return at, total
        finally:
            mapped.release()

    def dispatched_offset(self) -> int:
        """The end of the log as far as every record before it has its ConsumeQueue entry."""
        with self.lock:  # an append dispatches each record just after it is written
            return self.files.max_offset

    def last_store_timestamp(self) -> int:
        """Store time of the newest record (0 for an empty log)."""
        last = self.files.last_file
        return last.last_store_timestamp if last is not None else 0

    def open(self) -> None:
        self.closed = False

    def close(self) -> None:
        with self.lock:
            self.closed = True
        self.files.close()
