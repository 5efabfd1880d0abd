r"""An ordered run of equally sized segments that together form one logical file.

Offsets are global: segment ``k`` covers ``[from_k, from_k + file_size)`` and is named ``from_k``.
The list of segments is replaced, never mutated in place, so a flush thread can walk a snapshot of it
while the writer rolls to a new segment.

Disk blocks are allocated a chunk at a time (the queue's :class:`~app.store.mapped_file.Growth`):
a new segment gets its first chunk, and a writer :meth:`MappedFileQueue.reserve`\ s the bytes it is
about to write before writing any of them, so that a full disk refuses a write whole
(:class:`DiskFullError`) instead of faulting in the middle of it.

Segments can be prepared ahead (:meth:`MappedFileQueue.prepare`): created with their first chunk and
mapped under a spare name, not yet part of the queue (no reader, flusher or recovery sees them) until
:meth:`MappedFileQueue.new_file` takes the next one and renames it. A spare is named ``<offset>.spare``
in the queue's directory, or, for a queue given a ``spare_directory`` (the CommitLog's), by its
offset in that directory, so that the queue's own directory holds nothing but its segments (as
RocketMQ's MappedFileQueue, which loads every file it finds there, expects). A writer that prepares
every segment a write needs before writing any of it either writes all of it or, on a full disk,
nothing. Spares are deleted at close, and at load when a crash left them.

A queue given a :class:`~app.store.file_cache.SegmentCache` (a ConsumeQueue's) maps nothing at load:
its segments are known by name and mapped when held (see :mod:`app.store.file_cache`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from app.store.errors import StoreConfigError
from app.store.mapped_file import PAGE_SIZE, Growth, MappedFile, make_directories, segment_name

if TYPE_CHECKING:
    from app.store.file_cache import SegmentCache

SPARE_SUFFIX = ".spare"


class MappedFileQueue:
    def __init__(
        self,
        directory: Path,
        file_size: int,
        cache: SegmentCache | None = None,
        check_room: Callable[[int], None] | None = None,
        growth: Growth | None = None,
        spare_directory: Path | None = None,
    ) -> None:
        self.directory = directory
        self.file_size = file_size
        self.cache = cache
        # How segments get their disk blocks (None: whole at creation).
        self.growth = growth or Growth(file_size, file_size)
        self.spare_directory = spare_directory
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        # Segments taken off the queue by retention whose deletion waits for their readers.
        self.doomed: list[MappedFile] = []
        # Allocated segments that follow the last one, in order, not yet part of the queue.
        self.prepared: list[MappedFile] = []
        # Called with the size of each allocation before it is made: raises DiskFullError to refuse.
        self.check_room = check_room
        # Wakes the allocating thread: called when a segment joined the queue (to have the next one
        # prepared), and by the writer when it runs short of allocated bytes (to have the next chunk).
        self.on_new_file: Callable[[], None] | None = None
        # One allocation at a time; the short lock guards ``prepared`` and the end of ``files``.
        self._allocate_lock = threading.Lock()
        self._spares_lock = threading.Lock()

    def load(self) -> None:
        """Map every existing segment (with a cache: only name them); positions are set later by
        recovery."""
        if self.spare_directory is not None and self.spare_directory.is_dir():
            for spare in self.spare_directory.iterdir():  # prepared, never written
                spare.unlink()
        try:
            with os.scandir(self.directory) as entries:
                listed = [entry.name for entry in entries]
        except FileNotFoundError:
            return
        for name in listed:
            if name.endswith(SPARE_SUFFIX):
                (self.directory / name).unlink()  # prepared, never written
        names = sorted(name for name in listed if name.isdigit())
        if names and (self.directory / names[-1]).stat().st_size == 0:
            # The last segment's creation was cut short by a crash: it holds nothing, and a start
            # on a full disk could not allocate it.
            (self.directory / names.pop()).unlink()
        files: list[MappedFile] = []
        try:
            cache = self.cache
            for name in names:
                path = self.directory / name
                if cache is not None:
                    actual = path.stat().st_size
                    if actual not in (0, self.file_size):  # as mapping it would find
                        raise StoreConfigError(
                            f"{path} is {actual} bytes but segments are configured as {self.file_size} bytes"
                        )
                    mapped = MappedFile.lazy(path, self.file_size, cache)
                else:
                    mapped = MappedFile(path, self.file_size, first_chunk=self.growth.first)
                files.append(mapped)
                mapped.wrote_position = mapped.flushed_position = self.file_size
            for previous, current in zip(files, files[1:], strict=False):
                if current.file_from_offset != previous.file_from_offset + self.file_size:
                    raise StoreConfigError(f"gap between segments {previous.path} and {current.path}")
        except BaseException:
            for mapped in files:
                mapped.close()
            raise
        self.files = files

    # -- lookups ---------------------------------------------------------------------------------

    @property
    def last_file(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    @property
    def min_offset(self) -> int:
        files = self.files
        return files[0].file_from_offset if files else 0

    @property
    def max_offset(self) -> int:
        """Global offset just past the last readable byte."""
        files = self.files
        return files[-1].end_offset if files else 0

    def find(self, offset: int) -> MappedFile | None:
        """The segment holding global ``offset``, or None if no segment does."""
        files = self.files
        if not files:
            return None
        first = files[0].file_from_offset
        index = (offset - first) // self.file_size
        if 0 <= index < len(files):
            mapped = files[index]
            if mapped.file_from_offset <= offset < mapped.file_from_offset + self.file_size:
                return mapped
        for mapped in files:  # the index guess can only miss if the list changed under us
            if mapped.file_from_offset <= offset < mapped.file_from_offset + self.file_size:
                return mapped
        return None

    def find_by_timestamp(self, timestamp_ms: int) -> MappedFile | None:
        """The first segment modified at or after ``timestamp_ms``, else the last one."""
        files = self.files
        for mapped in files:
            if os.stat(mapped.path).st_mtime * 1000 >= timestamp_ms:
                return mapped
        return files[-1] if files else None

    # -- writing ---------------------------------------------------------------------------------

    def new_file(self, offset: int | None = None) -> MappedFile:
        """Add the segment after the last one (or at ``offset``, the start of an empty queue):
        the next prepared one, else one allocated now (DiskFullError when it does not fit)."""
        last = self.last_file
        if last is not None:
            start = last.file_from_offset + self.file_size
        else:
            start = offset - offset % self.file_size if offset else 0
        first = last is None
        mapped = self._take_prepared(start, first)
        if mapped is not None:
            return mapped
        with self._allocate_lock:
            # Prepared meanwhile by the allocating thread?
            mapped = self._take_prepared(start, first)
            if mapped is not None:
                return mapped
            self._drop_prepared()  # spares that do not follow the last segment are of no use
            mapped = self._create(start, "")
            with self._spares_lock:
                return self._add(mapped, first)

    def _take_prepared(self, start: int, first: bool) -> MappedFile | None:
        with self._spares_lock:
            prepared = self.prepared
            if not prepared or prepared[0].file_from_offset != start:
                return None
            self.prepared = prepared[1:]
            mapped = prepared[0]
            if self.spare_directory is not None:
                # The spare directory's are of no account; the queue's may not exist yet.
                mapped.new_directories = make_directories(self.directory)
            mapped.rename(self.directory / segment_name(start))
            return self._add(mapped, first)

    def _add(self, mapped: MappedFile, first: bool) -> MappedFile:
        if first:
            self.flushed_where = mapped.file_from_offset
        self.files = [*self.files, mapped]
        if self.on_new_file is not None:
            self.on_new_file()
        return mapped

    def prepare(self, count: int, start: int = 0) -> None:
        """Make sure ``count`` segments are prepared after the last one (an empty queue starts at
        ``start``), allocating the missing ones now; DiskFullError when one does not fit (those
        allocated before it stay prepared)."""
        with self._allocate_lock:
            while True:
                with self._spares_lock:
                    if len(self.prepared) >= count:
                        return
                    following = self.prepared[-1] if self.prepared else self.last_file
                next_start = (
                    following.file_from_offset + self.file_size
                    if following is not None
                    else start - start % self.file_size
                )
                mapped = self._create(next_start, SPARE_SUFFIX)
                with self._spares_lock:
                    self.prepared = [*self.prepared, mapped]

    def prepare_range(self, start: int, end: int) -> None:
        """Make sure the bytes ``[start, end)`` have segments, in the queue or prepared."""
        with self._spares_lock:
            following = self.prepared[-1] if self.prepared else self.last_file
            count = len(self.prepared)
        if following is not None:
            covered = following.file_from_offset + self.file_size
        else:
            covered = start - start % self.file_size
        if covered >= end:
            return
        self.prepare(count + -(-(end - covered) // self.file_size), start)

    def segments_for(self, start: int, end: int) -> list[MappedFile]:
        """The segments, in the queue or prepared, that hold bytes of ``[start, end)``."""
        with self._spares_lock:
            candidates = [*self.files[-1:], *self.prepared]
        size = self.file_size
        return [m for m in candidates if m.file_from_offset < end and start < m.file_from_offset + size]

    def _create(self, start: int, suffix: str) -> MappedFile:
        first = min(self.file_size, self.growth.first)
        if self.check_room is not None:
            self.check_room(first)
        directory = self.directory
        if suffix and self.spare_directory is not None:
            directory, suffix = self.spare_directory, ""
        return MappedFile.create(
            directory, start, self.file_size, suffix, self.cache, first, self.growth.fill
        )

    def reserve(self, mapped: MappedFile, end: int) -> None:
        """Make sure ``mapped``'s bytes ``[0, end)`` have disk blocks before they are written
        (:meth:`MappedFile.reserve`); DiskFullError when the next chunk does not fit."""
        if end > mapped.allocated:
            mapped.reserve(end, self.growth, self.check_room)

    def reserve_ahead(self, ahead: int) -> None:
        """Once less than half of ``ahead`` is allocated past the writer's position in the last
        segment, allocate up to ``ahead`` past it (or up to the segment's end), so that the writer
        rarely waits for an allocation and no more than one and a half times ``ahead`` is allocated
        ahead of it."""
        last = self.last_file
        if last is not None and not last.is_full and last.allocated - last.wrote_position < ahead // 2:
            self.reserve(last, min(self.file_size, last.wrote_position + ahead))

    def _drop_prepared(self) -> None:
        with self._spares_lock:
            prepared, self.prepared = self.prepared, []
        for mapped in prepared:
            mapped.destroy()

    def writable_file(self) -> MappedFile:
        last = self.last_file
        if last is None or last.is_full:
            return self.new_file()
        return last

    # -- flushing --------------------------------------------------------------------------------

    def dirty_pages(self) -> int:
        return max(0, self.max_offset // PAGE_SIZE - self.flushed_where // PAGE_SIZE)

    def flush(self, least_pages: int = 0) -> bool:
        """Force one segment's dirty bytes to disk, starting where the last flush ended.

        Flushes only when at least ``least_pages`` pages are dirty (0: whenever anything is).
        Returns True when nothing was left to flush.
        """
        mapped = self.find(self.flushed_where)
        if mapped is None:
            return True
        dirty = mapped.wrote_position - mapped.flushed_position
        if dirty <= 0:
            if mapped.is_full and mapped is not self.last_file:
                # Full and flushed: the next segment is where flushing continues.
                self.flushed_where = mapped.file_from_offset + self.file_size
            return self.flushed_where >= self.max_offset
        if least_pages > 0 and mapped.dirty_pages() < least_pages and not mapped.is_full:
            return False
        position = mapped.flush()
        self.flushed_where = mapped.file_from_offset + position
        return self.flushed_where >= self.max_offset

    def flush_all(self) -> None:
        """Flush segment after segment until everything appended so far is on disk."""
        for _ in range(len(self.files) + 1):
            if self.flush(0):
                return

    # -- recovery and removal -------------------------------------------------------------------

    def truncate(self, offset: int, zero_tail: bool = True) -> None:
        """Make ``offset`` the end: cut the segment that holds it, delete every later segment.

        Later segments go newest first, so a crash part-way leaves a run of segments without a gap.
        ``zero_tail=False``: the caller made sure the bytes past ``offset`` are zero.
        """
        self._drop_prepared()
        keep = [mapped for mapped in self.files if mapped.file_from_offset <= offset]
        for mapped in reversed(self.files[len(keep) :]):
            mapped.destroy()
        if keep:
            last = keep[-1]
            position = offset - last.file_from_offset
            if position < self.file_size:
                if zero_tail and last.hold():
                    try:
                        last.zero_from(position)
                    finally:
                        last.release()
                last.wrote_position = last.flushed_position = position
        self.files = keep
        self.flushed_where = min(self.flushed_where, offset) if keep else offset

    def clear(self) -> None:
        """Delete every segment, newest first: the queue starts again empty."""
        self._drop_prepared()
        for mapped in reversed(self.files):
            mapped.destroy()
        self.files = []
        self.flushed_where = 0

    def set_end(self, offset: int, zero_tail: bool = True) -> None:
        """After recovery: every segment before ``offset`` is full and flushed, the rest is cut."""
        self.truncate(offset, zero_tail)
        for mapped in self.files:
            if mapped.file_from_offset + self.file_size <= offset:
                mapped.wrote_position = mapped.flushed_position = self.file_size
        self.flushed_where = offset

    def detach(self, segments: Sequence[MappedFile]) -> None:
        """Take ``segments`` (the oldest ones) off the queue and queue them for deletion.

        The min offset moves past them at once, so no new read is answered from them; the files
        themselves go in :meth:`destroy_doomed` once their readers let go. The caller holds the
        writer's lock: the writer replaces the list too.
        """
        gone = {id(mapped) for mapped in segments}
        self.files = [mapped for mapped in self.files if id(mapped) not in gone]
        self.doomed = [*self.doomed, *segments]
        self.flushed_where = max(self.flushed_where, self.min_offset)

    def destroy_doomed(
        self, forcibly_after_ms: int, now_ms: int, pause: Callable[[], None] | None = None
    ) -> int:
        """Delete detached segments nobody holds (or held past the forced interval); how many went.

        ``pause`` runs between two deletions, to spread the disk work of deleting big files.
        """
        left = []
        destroyed = 0
        for mapped in self.doomed:
            if destroyed and pause is not None:
                pause()
            if mapped.try_destroy(forcibly_after_ms, now_ms):
                destroyed += 1
            else:
                left.append(mapped)
        self.doomed = left
        return destroyed

    def remove_first(self, count: int) -> list[MappedFile]:
        removed, self.files = self.files[:count], self.files[count:]
        for mapped in removed:
            mapped.destroy()
        if not self.files:
            self._drop_prepared()  # nothing left for them to follow
        return removed

    def close(self) -> None:
        for mapped in self.doomed:  # retention already decided these go
            mapped.destroy()
        self.doomed = []
        self._drop_prepared()
        for mapped in self.files:
            mapped.close()

    def __repr__(self) -> str:
        return f"MappedFileQueue({self.directory}, {[segment_name(m.file_from_offset) for m in self.files]})"
