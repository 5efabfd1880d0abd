"""CommitLog: the one append-only log every message goes to, across fixed-size segments.

Records are encoded outside the lock (:func:`app.store.record.encode_record`); under the lock the
CommitLog only assigns the queue offsets, copies the bytes into the mapped segment and patches three
fields per record (:func:`write_records`, one compiled call per batch), then hands the batch's
ConsumeQueue entries to the dispatcher as one run per queue. A record that does not fit in the rest of a segment
(with room for an 8-byte blank) is preceded by a blank END_OF_FILE record and goes to the next one.

A batch is stored whole or not at all: every segment it will roll to is prepared, and every byte it
will write is allocated on disk (:meth:`MappedFileQueue.reserve`), before its first byte is
written, so a full disk refuses it with :class:`DiskFullError` up front. Segments get their disk
blocks a chunk (``chunk_size``) at a time; the next chunk and the next segment are normally
allocated already (:class:`app.store.allocate.AllocateSegmentService`), and the writer wakes that
service once less than half a chunk is left ahead of it.
"""

from __future__ import annotations

import mmap
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from app.store import record_format
from app.store.consume_queue import UNIT
from app.store.errors import MessageTooLargeError, StoreClosedError
from app.store.kernel import compiled
from app.store.mapped_file import Growth, MappedFile
from app.store.mapped_file_queue import MappedFileQueue
from app.store.record import CheckedRecord, check_record, message_size, record_is, store_timestamp
from app.store.record_format import (
    BLANK_MAGIC,
    BLANK_MIN_SIZE,
    FIXED_SIZE,
    LEVEL_DELAYS_MS,
    OFFSETS,
    POS_QUEUEOFFSET,
    POS_STORETIMESTAMP,
    SCHEDULE_TOPIC,
    SIZE_MAGIC,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    TIMESTAMP,
    EncodedRecord,
    queue_tags_code,
)
from app.store.results import AppendResult, PutStatus

PUT_OK = PutStatus.PUT_OK
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

QueueKey = tuple[str, int]
# A batch's new entries in one queue: (the first one's queue offset, the entries packed back to back).
QueueRun = tuple[int, bytearray]


def python_write_records(
    mm: mmap.mmap,
    position: int,
    limit: int,
    base: int,
    records: Sequence[EncodedRecord],
    start: int,
    now: int,
    queue_offsets: dict[QueueKey, int],
    store_host: bytes,
    results: list[AppendResult],
    runs: dict[QueueKey, QueueRun],
) -> tuple[int, int]:
    """Copy ``records`` from ``start`` into the segment mapped as ``mm`` (at CommitLog offset
    ``base``) from ``position``, while each ends by ``limit``. Each gets its store timestamp
    ``now``, its physical offset and its queue's next offset (``queue_offsets``), written last: a
    record whose offsets are still placeholders is not valid. Appends each one's AppendResult to
    ``results`` and its ConsumeQueue entry to its queue's run in ``runs``. Returns (the index of
    the first record not written, the position after the last one written). The pure-Python twin
    of the kernel's loop."""
    pack_timestamp, pack_offsets, pack_unit = TIMESTAMP.pack_into, OFFSETS.pack_into, UNIT.pack
    add_result = results.append
    new_result = tuple.__new__
    for index in range(start, len(records)):
        data, topic, queue_id, tags_code, _, _, sysflag = records[index]
        size = len(data)
        end = position + size
        if end > limit:
            return index, position
        physical_offset = base + position
        kind = sysflag & SYSFLAG_TRANSACTION_MASK
        if kind != SYSFLAG_TRANSACTION_PREPARED and kind != SYSFLAG_TRANSACTION_ROLLBACK:
            key = (topic, queue_id)
            queue_offset = queue_offsets.get(key, 0)
            queue_offsets[key] = queue_offset + 1
            run = runs.get(key)
            if run is None:
                run = runs[key] = (queue_offset, bytearray())
            if topic == SCHEDULE_TOPIC:
                tags_code = queue_tags_code(topic, queue_id, tags_code, now)
            run[1].extend(pack_unit(physical_offset, size, tags_code))
        else:
            queue_offset = 0
        mm[position:end] = data
        pack_timestamp(mm, position + POS_STORETIMESTAMP, now)
        pack_offsets(mm, position + POS_QUEUEOFFSET, queue_offset, physical_offset)
        add_result(
            new_result(
                AppendResult, (PUT_OK, topic, queue_id, queue_offset, physical_offset, size, now, store_host)
            )
        )
        position = end
    return len(records), position


def store_time_ms() -> int:
    """The store timestamp a record written now gets: the one clock of every append path."""
    return int(time.time() * 1000)


# The compiled kernel's loop when it is loaded (app.store.kernel), else its twin.
write_records = python_write_records
if compiled is not None:
    compiled.bind_writer(AppendResult, PUT_OK)
    compiled.bind_schedule(SCHEDULE_TOPIC, LEVEL_DELAYS_MS)
    write_records = compiled.write_records


def bind_level_delays(delays_ms: tuple[int, ...]) -> None:
    """Make ``delays_ms`` the delay levels of this process (WHARF_MESSAGE_DELAY_LEVEL): the due times
    written into SCHEDULE_TOPIC's queue entries, by the Python writer and the compiled one."""
    record_format.LEVEL_DELAYS_MS = delays_ms
    if compiled is not None:
        compiled.bind_schedule(SCHEDULE_TOPIC, delays_ms)


def python_collect_records(
    entries: bytes | memoryview,
    at: int,
    segment: memoryview,
    segment_from: int,
    readable: int,
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
    """Take the records that ConsumeQueue ``entries`` (entry ``i`` is queue offset ``base_offset +
    i``) name from entry ``at`` on, as long as each lies in one CommitLog segment: ``segment``, its
    mapping, begins at CommitLog offset ``segment_from`` and holds ``readable`` written bytes.
    Appends each record's slice of ``segment`` to ``records`` and its queue offset to
    ``queue_offsets`` and adds its size to ``total``, as :meth:`MessageReader.get_message` reads:
    an entry of no size or before ``commitlog_min`` is passed over, and nothing more is taken once
    ``records`` holds ``max_messages`` or the next record would bring ``total`` past ``max_bytes``.
    Stops at an entry it cannot decide alone: a record outside the segment, or one that is not the
    message its entry names (:func:`record_is`). Returns (the index of the first entry not passed,
    ``total``). The pure-Python twin of the kernel's loop."""
    index = at
    count = len(entries) // UNIT.size
    limit = min(readable, len(segment))
    while index < count:
        physical, size, _tags_code = UNIT.unpack_from(entries, index * UNIT.size)
        if records and (len(records) >= max_messages or total + size > max_bytes):
            break
        if size <= 0 or physical < commitlog_min:
            index += 1
            continue
        position = physical - segment_from
        if position < 0 or position + size > limit:
            break
        data = segment[position : position + size]
        if not record_is(data, topic, queue_id, base_offset + index, physical):
            break
        records.append(data)
        queue_offsets.append(base_offset + index)
        total += size
        index += 1
    return index, total


collect_records = python_collect_records if compiled is None else compiled.collect_records


def skips_consume_queue(sysflag: int) -> bool:
    """Half (prepared) and rolled-back transaction messages get no queue offset."""
    kind = sysflag & SYSFLAG_TRANSACTION_MASK
    return kind in (SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK)


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
        if record_size + BLANK_MIN_SIZE > self.file_size:
            raise MessageTooLargeError(
                f"record of {record_size} bytes does not fit a CommitLog segment of {self.file_size} bytes"
            )

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

    def append_replica(
        self,
        offset: int,
        data: bytes,
        checked: Sequence[tuple[int, CheckedRecord]],
        before_write: Callable[[], None] | None = None,
    ) -> list[AppendResult]:
        """Write a master's bytes at the same offset here (``offset`` must be this log's end) and
        dispatch the messages among them, ``checked`` by :func:`check_replica`. The bytes are
        copied as they are: the log stays byte-identical to the master's."""
        results: list[AppendResult] = []
        with self.lock:
            if self.closed:
                raise StoreClosedError("the CommitLog is closed")
            # An empty log starts wherever its master's starts: at a segment boundary.
            starts_empty = not self.files.files and offset % self.file_size == 0
            if offset != self.files.max_offset and not starts_empty:
                raise ReplicaError(
                    f"replicated bytes start at {offset}, this CommitLog ends at {self.files.max_offset}"
                )
            if not data:
                return results
            if before_write is not None:
                before_write()
            last = self.files.last_file
            mapped = self.files.new_file(offset) if last is None or last.is_full else last
            position = mapped.wrote_position
            self.files.reserve(mapped, position + len(data))
            mapped.mm[position : position + len(data)] = data
            for physical_offset, record in checked:
                if not skips_consume_queue(record.sysflag):
                    key = (record.topic, record.queue_id)
                    self.queue_offsets[key] = record.queue_offset + 1
                    self.dispatch(
                        record.topic,
                        record.queue_id,
                        record.queue_offset,
                        physical_offset,
                        record.size,
                        record.tags_code,
                        record.store_timestamp,
                        record.keys,
                        record.uniq_key,
                    )
                results.append(
                    AppendResult(
                        PUT_OK,
                        record.topic,
                        record.queue_id,
                        record.queue_offset,
                        physical_offset,
                        record.size,
                        record.store_timestamp,
                        self.store_host,
                    )
                )
            mapped.wrote_position = position + len(data)
            if checked:
                mapped.last_store_timestamp = checked[-1][1].store_timestamp
                self.last_record_offset = checked[-1][0]
                if self.on_batch is not None:
                    start = offset
                    records = [
                        EncodedRecord(
                            data[at - start : at - start + record.size],
                            record.topic,
                            record.queue_id,
                            record.tags_code,
                            record.keys,
                            record.uniq_key,
                            record.sysflag,
                        )
                        for at, record in checked
                    ]
                    self.on_batch(records, results)
        return results

    def read_replica(self, offset: int, max_bytes: int) -> bytes:
        """Whole records from ``offset`` for a slave (:meth:`MessageStore.read_replica`)."""
        mapped = self.files.find(offset)
        if mapped is None:
            if offset < self.files.min_offset:
                raise ReplicaError(
                    f"CommitLog offset {offset} is no longer stored (it starts at {self.min_offset})"
                )
            return b""
        if not mapped.hold():
            return b""
        try:
            view, base = mapped.view, mapped.file_from_offset
            start = position = offset - base
            wrote = mapped.wrote_position
            while position + BLANK_MIN_SIZE <= wrote:
                size, magic = SIZE_MAGIC.unpack_from(view, position)
                if magic == BLANK_MAGIC:
                    if position == start:
                        position = self.file_size  # only the blank: send it alone
                    break
                if position + size > wrote or (position > start and position + size - start > max_bytes):
                    break
                position += size
            return bytes(view[start:position])
        finally:
            mapped.release()

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

    # -- recovery --------------------------------------------------------------------------------

    def walk(self, start_index: int, start_position: int = 0, with_properties: bool = True) -> LogWalk:
        """Validate records from segment ``start_index`` (at ``start_position``, a record boundary)
        on: iterate the walk for (offset, record) of each message (see :func:`check_record` for
        ``with_properties``). It stops at the first record that is not valid; its ``end`` is then
        the end of the log, and :attr:`last_record_offset` the offset of the last valid record
        walked."""
        return LogWalk(self, start_index, start_position, with_properties)

    def records_from(self, offset: int) -> Iterator[tuple[int, CheckedRecord]]:
        """Validate and yield (offset, record) for each message from ``offset`` (a record boundary)
        to the end of the log, crossing blank END_OF_FILE records; stops at the first invalid one."""
        offset = max(offset, self.files.min_offset)
        while True:
            mapped = self.files.find(offset)
            if mapped is None:
                return
            base = mapped.file_from_offset
            position = offset - base
            while position < mapped.wrote_position:
                checked = check_record(mapped.view, position, base + position)
                if checked is None:
                    return
                if checked.size == 0:
                    break
                yield base + position, checked
                position += checked.size
            else:
                if mapped.wrote_position < mapped.file_size:
                    return  # the end of the log
            offset = base + mapped.file_size

    def records_since(self, timestamp_ms: int) -> Iterator[tuple[int, CheckedRecord]]:
        """Validate and yield (offset, record) for each message stored at or after ``timestamp_ms``,
        in log order. The walk starts at the last segment whose first record is older, so it reads
        little more than the records it yields."""
        files = self.files.files
        start = 0
        for index in range(len(files) - 1, -1, -1):
            first = self.first_store_timestamp(files[index])
            if first is not None and first <= timestamp_ms:
                start = index
                break
        if not files:
            return
        for offset, record in self.records_from(self._first_stored_since(start, timestamp_ms)):
            if record.store_timestamp >= timestamp_ms:
                yield offset, record

    def _first_stored_since(self, start_index: int, timestamp_ms: int) -> int:
        """The offset of the first record stored at or after ``timestamp_ms``, from segment
        ``start_index`` on, hopping from record to record by their sizes: the records before it are
        not validated (recovery did), so the hop costs a fraction of a full walk."""
        files = self.files.files
        offset = files[start_index].file_from_offset
        for mapped in files[start_index:]:
            view, base, wrote = mapped.view, mapped.file_from_offset, mapped.wrote_position
            position = 0
            while position + FIXED_SIZE <= wrote:
                size = message_size(view, position)
                if size is None or position + size > wrote:
                    break  # a blank END_OF_FILE (the next segment goes on) or the end of the log
                if store_timestamp(view, position) >= timestamp_ms:
                    return base + position
                position += size
            offset = base + position
            if wrote < mapped.file_size:
                break
        return offset

    def first_store_timestamp(self, mapped: MappedFile) -> int | None:
        checked = check_record(mapped.view, 0, mapped.file_from_offset)
        if checked is None or checked.size == 0:
            return None
        return checked.store_timestamp

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


class LogWalk:
    """One validating walk of the CommitLog (:meth:`CommitLog.walk`)."""

    def __init__(self, commitlog: CommitLog, start_index: int, start_position: int, with_properties: bool):
        self.commitlog = commitlog
        self.start_index = start_index
        self.start_position = start_position
        self.with_properties = with_properties
        files = commitlog.files.files
        # Where the walk stopped: the end of the log once it has run out.
        self.end = files[start_index].file_from_offset + start_position if files else 0

    def __iter__(self) -> Iterator[tuple[int, CheckedRecord]]:
        start_position, with_properties = self.start_position, self.with_properties
        last = -1
        try:
            for mapped in self.commitlog.files.files[self.start_index :]:
                view = mapped.view
                base = mapped.file_from_offset
                position = start_position
                start_position = 0
                while True:
                    checked = check_record(view, position, base + position, with_properties)
                    if checked is None:
                        self.end = base + position
                        return
                    if checked.size == 0:  # blank END_OF_FILE: the log continues in the next segment
                        break
                    last = base + position
                    yield last, checked
                    position += checked.size
                    mapped.last_store_timestamp = checked.store_timestamp
                self.end = base + mapped.file_size
        finally:
            if last >= 0:
                self.commitlog.last_record_offset = last


def check_replica(data: bytes, offset: int, file_size: int) -> list[tuple[int, CheckedRecord]]:
    """Validate bytes a master's CommitLog holds at ``offset`` before a slave writes them there:
    whole records inside one segment, the last of which may be a blank END_OF_FILE that fills it.
    Returns (offset, record) of each message; ReplicaError names the first thing wrong."""
    position = offset % file_size
    if position + len(data) > file_size:
        raise ReplicaError(f"{len(data)} bytes at {offset} cross the end of a CommitLog segment")
    view = memoryview(data)
    checked: list[tuple[int, CheckedRecord]] = []
    at = 0
    while at < len(data):
        record = check_record(view, at, offset + at)
        if record is None:
            raise ReplicaError(f"no valid record at CommitLog offset {offset + at}")
        if record.size == 0:  # the blank runs to the end of the chunk, which is the segment's
            if position + len(data) != file_size:
                raise ReplicaError(f"the blank record at {offset + at} does not fill its segment")
            break
        checked.append((offset + at, record))
        at += record.size
    return checked


class ReplicaError(ValueError):
    """Replicated bytes that cannot go where they are sent: the wrong offset or not whole records."""
