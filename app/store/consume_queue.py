"""ConsumeQueue: the per-(topic, queue) index of CommitLog positions.

Entry ``n`` (the message at queue offset ``n``) lives at byte ``n * 20`` of the queue's segments::

    +--------------------+-----------+----------------------+
    | CommitLog offset 8 |  size 4   |     tag hash 8       |
    +--------------------+-----------+----------------------+

Only the dispatcher writes a ConsumeQueue, and only from records already in the CommitLog, so
recovery can always rebuild it.

Segments are mapped on demand through the store's :class:`~app.store.file_cache.SegmentCache`:
every access holds the segment, and a write batch holds the segments its entries go to from before
the CommitLog append until after dispatch (:meth:`ConsumeQueue.prepare`), so that dispatching never
opens a file. Recovery reads a queue's end with ``pread``: a start maps no queue.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from app.store.mapped_file import PAGE_SIZE, Growth, MappedFile, data_ranges
from app.store.mapped_file_queue import MappedFileQueue

if TYPE_CHECKING:
    from app.store.file_cache import SegmentCache

UNIT = struct.Struct(">qiq")  # CommitLog offset | size | tag hash
assert UNIT.size == 20
UNIT_SIZE = UNIT.size
# The most disk a segment allocates at a time, unless the store says otherwise.
DEFAULT_CHUNK_SIZE = 1024 * 1024
# Recovery reads a segment in chunks of whole entries: a page's worth first, then up to 64 KiB.
READ_CHUNK = (64 * 1024 // UNIT_SIZE) * UNIT_SIZE
FIRST_READ = (4096 // UNIT_SIZE) * UNIT_SIZE


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, files: MappedFileQueue) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.files = files
        # Entries below this queue offset point at CommitLog data that was deleted.
        self.min_logic_offset = 0
        # Global CommitLog offset just past the newest record this queue points at.
        self.max_physical_end = 0
        # The segment :meth:`prepare` held for the batch being appended, which :meth:`put_run`
        # writes to without holding it again (None once used, or when prepare held several).
        self._prepared: MappedFile | None = None

    @classmethod
    def open(
        cls,
        root: Path,
        topic: str,
        queue_id: int,
        file_entries: int,
        cache: SegmentCache | None = None,
        check_room: Callable[[int], None] | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> ConsumeQueue:
        """``check_room`` is called with the size of each allocation before it is made (see
        :class:`MappedFileQueue`); a segment's disk blocks grow from one page, doubling up to
        ``chunk_size`` bytes at a time, each chunk written with zeros so that its pages are in the
        page cache before dispatch touches them (see :class:`Growth`)."""
        files = MappedFileQueue(
            root / topic / str(queue_id),
            file_entries * UNIT_SIZE,
            cache,
            check_room,
            Growth(PAGE_SIZE, max(PAGE_SIZE, chunk_size), fill=True),
        )
        return cls(topic, queue_id, files)

    @property
    def max_offset(self) -> int:
        """Queue offset the next message will get."""
        return self.files.max_offset // UNIT_SIZE

    @property
    def min_offset(self) -> int:
        return max(self.files.min_offset // UNIT_SIZE, self.min_logic_offset)

    def put(self, queue_offset: int, physical_offset: int, size: int, tags_code: int) -> bool:
        """Write the entry for ``queue_offset``. Idempotent: an entry already present is kept.

        Returns False when the entry was already there (a re-dispatch during recovery), and when
        it would leave a hole after the last entry: a queue never holds a run of empty entries
        (recovery rebuilds a queue that fell behind from the CommitLog, in order).
        """
        position = queue_offset * UNIT_SIZE
        files = self.files
        end = files.max_offset
        if position < end:
            return False
        mapped = files.last_file
        if mapped is None:
            # An empty queue starts at its first message's offset (earlier ones went with retention).
            mapped = files.new_file(position)
            mapped.wrote_position = position - mapped.file_from_offset
            if queue_offset:
                self.min_logic_offset = queue_offset
        elif position > end:
            return False
        elif mapped.is_full:
            mapped = files.new_file()
        local = position - mapped.file_from_offset
        files.reserve(mapped, local + UNIT_SIZE)  # done when the batch prepared it
        if not mapped.hold():  # mapped already when the batch prepared it
            return False
        try:
            UNIT.pack_into(mapped.mm, local, physical_offset, size, tags_code)
        finally:
            mapped.release()
        mapped.wrote_position = local + UNIT_SIZE
        self.max_physical_end = physical_offset + size
        return True

    def put_run(self, queue_offset: int, entries: bytes | bytearray) -> bool:
        """Write consecutive entries, packed back to back, the first at ``queue_offset``: as
        :meth:`put` writes each (one already present is kept; none is written past a hole), with
        one hold and one copy per segment. True when any entry was written."""
        count = len(entries) // UNIT_SIZE
        files = self.files
        view = memoryview(entries)
        done = 0
        wrote = False
        while done < count:
            position = (queue_offset + done) * UNIT_SIZE
            end = files.max_offset
            if position < end:  # already there (a re-dispatch during recovery)
                done += min((end - position) // UNIT_SIZE, count - done)
                continue
            mapped = files.last_file
            if mapped is None:
                mapped = files.new_file(position)
                mapped.wrote_position = position - mapped.file_from_offset
                if queue_offset + done:
                    self.min_logic_offset = queue_offset + done
            elif position > end:
                break
            elif mapped.is_full:
                mapped = files.new_file()
            local = position - mapped.file_from_offset
            run = min(count - done, (mapped.file_size - local) // UNIT_SIZE)
            files.reserve(mapped, local + run * UNIT_SIZE)  # done when the batch prepared it
            if mapped is self._prepared:  # held, and mapped, until the batch's end
                self._prepared = None
                mapped.mm[local : local + run * UNIT_SIZE] = view[done * UNIT_SIZE : (done + run) * UNIT_SIZE]
            elif not mapped.hold():  # mapped already when the batch prepared it
                break
            else:
                try:
                    mapped.mm[local : local + run * UNIT_SIZE] = view[
                        done * UNIT_SIZE : (done + run) * UNIT_SIZE
                    ]
                finally:
                    mapped.release()
            mapped.wrote_position = local + run * UNIT_SIZE
            done += run
            physical_offset, size, _ = UNIT.unpack_from(view, (done - 1) * UNIT_SIZE)
            self.max_physical_end = physical_offset + size
            wrote = True
        return wrote

    def prepare(self, queue_offset: int, count: int, held: list[MappedFile]) -> None:
        """Create now every segment the entries ``queue_offset`` to ``queue_offset + count - 1``
        will go to, allocate the disk blocks they will be written to, and hold each segment
        (appended to ``held``, for the caller to release after dispatch), so that :meth:`put` never
        has to open, map or allocate: DiskFullError when the blocks do not fit,
        ResourceExhaustedError when a segment cannot be opened or mapped."""
        start, end = queue_offset * UNIT_SIZE, (queue_offset + count) * UNIT_SIZE
        files = self.files
        last = files.last_file
        self._prepared = None
        if (
            last is not None
            and last.file_from_offset <= start
            and end <= last.file_from_offset + last.file_size
        ):
            # The usual case: the entries go to the segment being written, which exists.
            files.reserve(last, end - last.file_from_offset)
            if last.hold():
                held.append(last)
                self._prepared = last
            return
        files.prepare_range(start, end)
        for mapped in files.segments_for(start, end):
            files.reserve(mapped, min(mapped.file_size, end - mapped.file_from_offset))
            if mapped.hold():
                held.append(mapped)

    def entries(self, queue_offset: int, max_count: int) -> memoryview | None:
        """Up to ``max_count`` raw entries from ``queue_offset``, within one segment, without copying."""
        position = queue_offset * UNIT_SIZE
        mapped = self.files.find(position)
        if mapped is None:
            return None
        local = position - mapped.file_from_offset
        available = mapped.wrote_position - local
        if available <= 0 or not mapped.hold():
            return None
        try:
            return mapped.slice(local, min(available, max_count * UNIT_SIZE))
        except ValueError:  # destroyed by force under a stuck reader
            return None
        finally:
            mapped.release()

    def entry(self, queue_offset: int) -> tuple[int, int, int] | None:
        raw = self.entries(queue_offset, 1)
        if raw is None or len(raw) < UNIT_SIZE:
            return None
        return UNIT.unpack_from(raw)

    def iter_entries(self, queue_offset: int) -> Iterator[tuple[int, int, int, int]]:
        """(queue offset, CommitLog offset, size, tag hash) from ``queue_offset`` to the end."""
        offset = queue_offset
        while True:
            raw = self.entries(offset, 4096)
            if raw is None:
                return
            for physical_offset, size, tags_code in UNIT.iter_unpack(raw):
                yield offset, physical_offset, size, tags_code
                offset += 1

    # -- recovery --------------------------------------------------------------------------------

    def recover(self, clean: bool = True, durable_below: int = 0) -> None:
        """Find the last valid entry and cut what follows it.

        The walk starts at the first segment whose last slot is empty (a segment being filled, or
        one whose name reached the disk before its content did), and no later than the third-last
        segment; the segments before it are full. After a stop that was not clean it starts
        earlier still, at the first segment holding an entry for a CommitLog offset at or past
        ``durable_below`` (the checkpoint's boundary: entries below it were forced to disk): pages
        written after the last forced flush can be torn, with holes anywhere. After a clean stop,
        empty slots at the start of the first segment are kept: a queue that began at a later offset
        starts there (after a crash they may be lost pages: the queue is cut there and rebuilt).

        Reads with ``pread`` and maps nothing. After a stop that was not clean, entries left past
        the first invalid one (a power loss can lose a page in the middle of the last writes) are
        zeroed up to the first whole chunk of zeros, so that later writes cannot join up with them.
        """
        files = self.files.files
        if not files:
            return
        usable = self.files.file_size - self.files.file_size % UNIT_SIZE
        start_index = max(0, len(files) - 3)
        for index, mapped in enumerate(files[:start_index]):
            slot = _read_slot(mapped.path, usable - UNIT_SIZE)
            if slot is None or slot[1] <= 0:
                start_index = index
                break
        if not clean:
            while start_index > 0:
                last = _read_slot(files[start_index - 1].path, usable - UNIT_SIZE)
                if last is not None and last[1] > 0 and last[0] + last[1] <= durable_below:
                    break  # that segment, and every one before it, was forced whole
                start_index -= 1
        end = files[start_index].file_from_offset
        for index in range(start_index, len(files)):
            mapped = files[index]
            valid = _read_valid_prefix(mapped.path, usable, not clean, skip_leading=index == 0 and clean)
            end = mapped.file_from_offset + valid
            if valid < usable:
                break
        self.files.set_end(end, zero_tail=False)
        # The end of the last entry, read from the entry itself: the walk may have found none (it
        # started at a segment whose content was lost).
        self.max_physical_end = 0
        if self.max_offset > self.min_offset:
            position = (self.max_offset - 1) * UNIT_SIZE
            holder = self.files.find(position)
            slot = _read_slot(holder.path, position - holder.file_from_offset) if holder is not None else None
            if slot is not None and slot[1] > 0:
                self.max_physical_end = slot[0] + slot[1]

    def truncate_after(self, physical_end: int) -> None:
        """Drop entries that point at or past CommitLog offset ``physical_end``."""
        files = self.files
        max_offset = self.max_offset
        if max_offset == 0:
            return
        # Walk back from the end: entries past the cut are at the tail.
        offset = max_offset
        new_end_phys = 0
        while offset > self.files.min_offset // UNIT_SIZE:
            entry = self.entry(offset - 1)
            if entry is None:
                break
            physical_offset, size, _ = entry
            if physical_offset + size <= physical_end:
                new_end_phys = physical_offset + size
                break
            offset -= 1
        if offset != max_offset:
            files.truncate(offset * UNIT_SIZE)
        self.max_physical_end = new_end_phys

    def correct_min_offset(self, commitlog_min_offset: int) -> None:
        """Skip entries whose CommitLog data was deleted by retention.

        Entries point at increasing CommitLog offsets, so a binary search finds the first entry
        still in the log; deleting a 1 GiB CommitLog segment can strand millions of entries.
        """
        low, high = self.min_offset, self.max_offset
        while low < high:
            middle = (low + high) // 2
            entry = self.entry(middle)
            if entry is not None and entry[0] >= commitlog_min_offset:
                high = middle
            else:
                low = middle + 1
        self.min_logic_offset = max(self.min_logic_offset, low)

    def flush(self, least_pages: int = 0) -> bool:
        return self.files.flush(least_pages)

    def close(self) -> None:
        self.files.close()


def _read_slot(path: Path, position: int) -> tuple[int, int, int] | None:
    """The entry at byte ``position`` of a segment file, read without mapping it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        raw = os.pread(fd, UNIT_SIZE, position)
    finally:
        os.close(fd)
    return UNIT.unpack(raw) if len(raw) == UNIT_SIZE else None


def _read_valid_prefix(path: Path, usable: int, zero_stale: bool, skip_leading: bool) -> int:
    """Bytes from the segment's start to the end of its last valid entry before the first invalid
    one (empty slots before the first entry are skipped with ``skip_leading``). ``zero_stale``:
    zero the entries that follow the first invalid one, up to a chunk of zeros."""
    valid = position = 0
    # A page first, then twice as much each time: a queue that holds a few entries (most of them,
    # in a store of many queues) is read with one small pread, not 64 KiB of zeros.
    read_size = FIRST_READ
    fd = os.open(path, os.O_RDWR if zero_stale else os.O_RDONLY)
    try:
        while position < usable:
            chunk = os.pread(fd, min(read_size, usable - position), position)
            read_size = min(read_size * 2, READ_CHUNK)
            if not chunk:
                return valid
            for index, (physical_offset, size, _) in enumerate(UNIT.iter_unpack(chunk)):
                if physical_offset < 0 or size <= 0:
                    if skip_leading:
                        continue
                    if zero_stale:
                        _zero_stale(fd, position + index * UNIT_SIZE, usable)
                    return valid
                skip_leading = False
                valid = position + (index + 1) * UNIT_SIZE
            position += len(chunk)
    finally:
        os.close(fd)
    return valid


def _zero_stale(fd: int, position: int, usable: int) -> None:
    """Zero what follows ``position`` chunk by chunk, up to a chunk that holds nothing but zeros.
    Only the parts of a chunk that hold data are read: holes are zeros already (a queue segment is
    mostly holes until it fills), and reading them would only fault zero pages in."""
    while position < usable:
        end = min(usable, position + READ_CHUNK)
        ranges = list(data_ranges(fd, position, end))
        if all(os.pread(fd, stop - start, start).count(0) == stop - start for start, stop in ranges):
            return
        for start, stop in ranges:
            os.pwrite(fd, bytes(stop - start), start)
        position = end
