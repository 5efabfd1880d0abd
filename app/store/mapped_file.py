r"""One fixed-size segment file, memory-mapped, named by the global offset of its first byte.

A segment has two positions: ``wrote`` (bytes appended and visible to readers) and ``flushed``
(bytes forced to disk). Readers get ``memoryview`` slices of the mapping, so a read copies nothing;
Python's buffer reference counting keeps a mapping alive while any slice of it is held, which is
what makes deleting a segment under a reader safe.

Retention adds RocketMQ's explicit reference count on top (SPEC 1.3): a reader :meth:`hold`\ s a
segment while it works on it, and :meth:`try_destroy` deletes a segment only when nobody holds it, or
once a forced interval has passed since the first attempt (a stuck reader must not pin the disk).
From the first attempt on, :meth:`hold` refuses new readers.

A segment file has its full logical size from the start, but disk blocks only where they were
allocated: a prefix ``[0, allocated)`` that grows a chunk at a time (:class:`Growth`), always ahead
of the writer. A write through a mapping onto a page the file system cannot back raises SIGBUS and
kills the process, so no byte past ``allocated`` is ever written: a writer first :meth:`reserve`\ s
the bytes it is about to write, and an allocation that finds no room raises :class:`DiskFullError`
there, where the caller can refuse the write cleanly (nothing written yet). Disk use thus grows
with what is stored, not with the configured file sizes; pages past ``allocated`` are holes, read
as zeros and never faulted in on purpose.

A mapping holds one file descriptor: the file is opened, mapped and closed again, and the
mapping keeps the duplicate ``mmap`` makes of it. :meth:`MappedFile.flush` opens the file for the
time of one ``fdatasync`` (the page cache is the file's, whichever descriptor names it), which
flushes the pages written through the mapping and, unlike ``mmap.flush``, releases the GIL.

A segment given a :class:`~app.store.file_cache.SegmentCache` is mapped on demand: it starts
unmapped (:meth:`MappedFile.lazy`), :meth:`MappedFile.hold` maps it through the cache, and the cache
unmaps it again once it is the least recently used one nobody holds. An unmapped segment's
``mm`` and ``view`` are closed placeholders: using them raises ValueError, which readers already
treat as "the segment is gone".
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from app.store.atomic_file import fsync_directory
from app.store.errors import NO_RESOURCES, NO_SPACE, DiskFullError, ResourceExhaustedError, StoreConfigError
from app.store.kernel import compiled


class SegmentCache(Protocol):
    """What a lazily mapped segment asks of its cache (:class:`app.store.file_cache.SegmentCache`)."""

    def add(self, mapped: MappedFile) -> None: ...

    def hold(self, mapped: MappedFile) -> bool: ...

    def forget(self, mapped: MappedFile) -> None: ...


PAGE_SIZE = 4096
OFFSET_NAME_DIGITS = 20
ZERO_CHUNK = 1 << 20
# posix_fallocate is not supported here: fall back to writing zeros.
NO_FALLOCATE = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})

MADV_POPULATE_READ = 22  # Linux 5.14 and later
WARM_CHUNK = 4 << 20  # how much of a segment is faulted in between looks at the service's stop

# One allocation at a time, store-wide: a writer and the allocating thread may both reserve the
# same file, and the zero-writing fallback must never write over bytes the other one allocated.
_RESERVE_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class Growth:
    """How a file's disk blocks grow: ``first`` bytes when it is created, then chunks as large as
    what is allocated already (the allocation doubles), at most ``most`` bytes at a time, and never
    past the file's size. A queue that holds one message thus costs ``first`` bytes of disk, and a
    busy one allocates rarely.

    ``fill``: write zeros into each new chunk too (:func:`allocate`), which brings its pages into
    the page cache. Where nothing warms a file ahead of its writer (a ConsumeQueue), the writer's
    first touch of an uncached page through the mapping is a page fault that reads it in: about
    2 ms on this project's virtual machines, against microseconds for a ``pwrite`` of the page."""

    first: int
    most: int
    fill: bool = False

    def target(self, allocated: int, end: int, file_size: int) -> int:
        """Where an allocation that must cover ``[0, end)`` stops, ``allocated`` bytes being there."""
        step = min(self.most, max(self.first, allocated))
        target = max(end, allocated + step)
        return min(file_size, -(-target // PAGE_SIZE) * PAGE_SIZE)


def python_populate(mm: mmap.mmap, start: int, length: int) -> int:
    """Fault in the pages of ``mm[start:start + length]`` for reading (``MADV_POPULATE_READ``, else
    a byte of each page read), changing no byte. The pure-Python twin of the kernel's, which does
    the same with the GIL released."""
    end = min(start + length, len(mm))
    if start < 0 or start >= end:
        return 0
    at = start - start % PAGE_SIZE
    try:
        mm.madvise(MADV_POPULATE_READ, at, end - at)
    except OSError:
        return sum(mm[position] for position in range(at, end, PAGE_SIZE))
    return 0


populate = python_populate if compiled is None else compiled.populate

# What an unmapped segment's ``mm`` and ``view`` are: any use raises ValueError.
CLOSED_MAP = mmap.mmap(-1, PAGE_SIZE)
CLOSED_MAP.close()
RELEASED_VIEW = memoryview(b"")
RELEASED_VIEW.release()


def allocate(fd: int, start: int, end: int, path: Path, fill: bool = False) -> None:
    """Give bytes ``[start, end)`` of the file disk blocks (``posix_fallocate``; where the file
    system does not support it, zeros written into its holes, never over data); DiskFullError when
    they do not fit. ``fill``: write zeros into the holes in any case (what ``posix_fallocate``
    allocated reads as a hole until it is written or cached)."""
    if end <= start:
        return
    try:
        try:
            os.posix_fallocate(fd, start, end - start)
            if not fill:
                return
        except OSError as error:
            if error.errno not in NO_FALLOCATE:
                raise
        zeros = memoryview(bytes(min(ZERO_CHUNK, end - start)))
        for hole_start, hole_end in _holes(fd, start, end):
            position = hole_start
            while position < hole_end:
                position += os.pwrite(fd, zeros[: min(len(zeros), hole_end - position)], position)
    except OSError as error:
        if error.errno in NO_SPACE:
            raise DiskFullError(
                f"no room on the disk for {end - start} more bytes of {path}: {error.strerror}"
            ) from error
        raise


def _holes(fd: int, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The holes of the file within ``[start, end)`` (SEEK_HOLE / SEEK_DATA); none where the file
    system cannot tell (it then reports the whole file as data)."""
    position = start
    while position < end:
        try:
            hole = os.lseek(fd, position, os.SEEK_HOLE)
        except OSError as error:
            if error.errno in (errno.ENXIO, errno.EINVAL):
                return
            raise
        if hole >= end:
            return
        try:
            data = os.lseek(fd, hole, os.SEEK_DATA)
        except OSError as error:
            if error.errno != errno.ENXIO:
                raise
            data = end  # nothing but a hole from there on
        yield hole, min(data, end)
        position = data


def unbacked_bytes(fd: int, start: int, end: int, file_size: int) -> int:
    """How many bytes of ``[start, end)`` have no disk blocks yet: the holes', or all of them when
    the file has no hole before its end (a file system that cannot tell says so of every file)."""
    try:
        if os.lseek(fd, start, os.SEEK_HOLE) >= file_size:
            return end - start
    except OSError:
        return end - start
    return sum(hole_end - hole_start for hole_start, hole_end in _holes(fd, start, end))


def data_ranges(fd: int, start: int, end: int) -> Iterator[tuple[int, int]]:
    """The parts of ``[start, end)`` that may hold anything but zeros: everything but the holes."""
    position = start
    for hole_start, hole_end in _holes(fd, start, end):
        if hole_start > position:
            yield position, hole_start
        position = hole_end
    if position < end:
        yield position, end


def segment_name(offset: int) -> str:
    return str(offset).zfill(OFFSET_NAME_DIGITS)


class MappedFile:
    __slots__ = (
        "path",
        "file_size",
        "file_from_offset",
        "mm",
        "view",
        "cache",
        "wrote_position",
        "flushed_position",
        "allocated",
        "last_store_timestamp",
        "directory_synced",
        "new_directories",
        "available",
        "first_shutdown_ms",
        "_holders",
        "_closed",
    )

    def __init__(
        self,
        path: Path,
        file_size: int,
        cache: SegmentCache | None = None,
        *,
        lazy: bool = False,
        first_chunk: int | None = None,
        fill: bool = False,
    ) -> None:
        """Open (or create) the segment at ``path`` and map it; ``lazy``: only describe it, it is
        mapped by the first :meth:`hold` (which needs a ``cache``). A file created now gets disk
        blocks for its first ``first_chunk`` bytes (None: all of it), zeros written with ``fill``."""
        self.path = path
        self.file_size = file_size
        self.file_from_offset = int(path.name.partition(".")[0])
        self.mm = CLOSED_MAP
        self.view = RELEASED_VIEW
        self.cache = cache
        self.wrote_position = 0
        self.flushed_position = 0
        # Bytes from the start known to have disk blocks. A file found on disk starts at 0: its first
        # reservation allocates its whole prefix again, which costs nothing where blocks exist (and
        # the disk guard is asked only for the holes).
        self.allocated = 0
        self.last_store_timestamp = 0
        self.directory_synced = True
        self.new_directories: tuple[Path, ...] = ()
        self.available = True
        self.first_shutdown_ms = 0
        # One item per reader holding the segment: list append and pop are atomic under the GIL,
        # which makes this a lock-free reference count.
        self._holders: list[None] = []
        self._closed = False
        if not lazy:
            self.map(True, file_size if first_chunk is None else first_chunk, fill)
            if cache is not None:
                cache.add(self)

    @classmethod
    def lazy(cls, path: Path, file_size: int, cache: SegmentCache) -> MappedFile:
        """A segment known by name only: nothing is opened or mapped until it is held."""
        return cls(path, file_size, cache, lazy=True)

    @property
    def is_mapped(self) -> bool:
        return self.mm is not CLOSED_MAP

    def map(self, create: bool = False, first_chunk: int = 0, fill: bool = False) -> None:
        """Open and map the file, keeping one descriptor (the mapping's own); ``create``: create it
        if it is missing or empty, at its full size with disk blocks for its first ``first_chunk``
        bytes. ResourceExhaustedError when the process is out of descriptors or mappings,
        DiskFullError when the allocation does not fit."""
        path, file_size = self.path, self.file_size
        existed = path.exists() if create else True
        actual = -1
        try:
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        except OSError as error:
            raise _translated(error, path) from error
        try:
            stat = os.fstat(fd)
            actual = stat.st_size
            # An empty file is a segment whose creation a crash cut short: allocate it now.
            if existed and actual not in (0, file_size):
                raise StoreConfigError(
                    f"{path} is {actual} bytes but segments are configured as {file_size} bytes"
                )
            if not existed or actual == 0:
                os.ftruncate(fd, file_size)  # its logical size, sparse
                first = min(file_size, -(-first_chunk // PAGE_SIZE) * PAGE_SIZE)
                allocate(fd, 0, first, path, fill)
                self.allocated = first
            try:
                mm = mmap.mmap(fd, file_size)
            except OSError as error:
                raise _translated(error, path) from error
        except BaseException:
            if create and (not existed or actual == 0):
                # Holds nothing yet: a file left half-allocated would only take room.
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            raise
        finally:
            os.close(fd)  # the mapping keeps its own duplicate
        self.mm = mm
        self.view = memoryview(mm)

    def warm(self, start: int, end: int, stopping: Callable[[], bool]) -> None:
        """Fault the pages of ``[start, end)`` in for reading ahead of the writer (SPEC 1.3's
        warming; RocketMQ's warmMappedFile), a chunk at a time until ``stopping()``. Only allocated
        bytes are warmed (a hole faulted in would be a page of memory the disk cannot back).
        Nothing is written, so nothing is dirtied: the flushes of the segment write only what the
        writer writes. The writer's first touch of each page then finds it in memory instead of
        allocating it."""
        position = start
        end = min(end, self.allocated)
        while position < end and not stopping() and not self._closed:
            try:
                populate(self.mm, position, min(WARM_CHUNK, end - position))
            except (ValueError, BufferError):  # unmapped meanwhile: nothing left to warm
                return
            position += WARM_CHUNK

    def reserve(self, end: int, growth: Growth, check_room: Callable[[int], None] | None = None) -> None:
        """Make sure bytes ``[0, end)`` have disk blocks before any of them is written through the
        mapping, allocating the next chunk (``growth``) when they do not: ``check_room`` first
        vets the bytes of it that have no blocks yet (:func:`unbacked_bytes`). DiskFullError when
        it does not fit (nothing is written then, and the bytes already allocated stay so)."""
        if end <= self.allocated:
            return
        with _RESERVE_LOCK:
            allocated = self.allocated
            if end <= allocated:
                return
            target = growth.target(allocated, end, self.file_size)
            try:
                fd = os.open(self.path, os.O_RDWR)
            except OSError as error:
                raise _translated(error, self.path) from error
            try:
                if check_room is not None:
                    # Only what has no blocks yet takes room: a file found on disk starts with
                    # nothing known allocated, and vetting its written bytes again would refuse
                    # a restarted store's next chunk on a disk that has room for it.
                    missing = unbacked_bytes(fd, allocated, target, self.file_size)
                    if missing:
                        check_room(missing)
                allocate(fd, allocated, target, self.path, growth.fill)
            finally:
                os.close(fd)
            self.allocated = target

    def unmap(self) -> None:
        """Drop the mapping and its descriptor. A reader still holding a slice keeps the pages
        mapped until it lets go of the slice (Python closes the mapping then)."""
        if not self.is_mapped:
            return
        view, mm = self.view, self.mm
        self.view, self.mm = RELEASED_VIEW, CLOSED_MAP
        view.release()
        with contextlib.suppress(BufferError):
            mm.close()

    @classmethod
    def create(
        cls,
        directory: Path,
        offset: int,
        file_size: int,
        suffix: str = "",
        cache: SegmentCache | None = None,
        first_chunk: int | None = None,
        fill: bool = False,
    ) -> MappedFile:
        """A new segment with disk blocks for its first ``first_chunk`` bytes (None: all of it),
        zeros written with ``fill``; ``suffix`` names a spare until :meth:`rename` drops it."""
        new_directories = make_directories(directory)
        path = directory / (segment_name(offset) + suffix)
        mapped = cls(path, file_size, cache, first_chunk=first_chunk, fill=fill)
        # The new name reaches the disk with the segment's first flush, off the append path; so do
        # the names of the directories made for it (a new ConsumeQueue's topic and queue directory).
        mapped.directory_synced = False
        mapped.new_directories = new_directories
        return mapped

    def rename(self, path: Path) -> None:
        """Give the file its final name; the new name reaches the disk with the first flush."""
        os.rename(self.path, path)
        self.path = path
        self.directory_synced = False

    @property
    def end_offset(self) -> int:
        """Global offset just past the last appended byte."""
        return self.file_from_offset + self.wrote_position

    @property
    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def dirty_pages(self) -> int:
        return self.wrote_position // PAGE_SIZE - self.flushed_position // PAGE_SIZE

    def flush(self) -> int:
        """Force appended bytes to disk; returns the flushed position.

        ``fdatasync`` on the file flushes the mapping's dirty pages (they are the page cache) and,
        unlike ``mmap.flush``, releases the GIL while the disk works.
        """
        wrote = self.wrote_position
        if wrote > self.flushed_position and not self._closed:
            if not self.directory_synced:
                for directory in self.new_directories:
                    fsync_directory(directory.parent)
                fsync_directory(self.path.parent)
                self.directory_synced = True
            with contextlib.suppress(FileNotFoundError):  # deleted meanwhile: nothing to keep
                self.sync()
            self.flushed_position = wrote
        return self.flushed_position

    def sync(self) -> None:
        """``fdatasync`` the file through a descriptor opened for that call only."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def slice(self, position: int, size: int) -> memoryview:
        return self.view[position : position + size]

    def zero_from(self, position: int) -> None:
        """Zero the bytes from ``position`` to the end, skipping pages that are zero already.

        Recovery cuts a torn tail with this, so that the bytes past the end of the log are always
        zero and a record torn by a later crash cannot borrow stale bytes that look valid. Only the
        parts of the file that hold data are read: its holes are zeros without a page in memory.
        """
        chunk = 1 << 20
        zeros = bytes(chunk)
        view = self.view
        fd = os.open(self.path, os.O_RDONLY)
        try:
            ranges = list(data_ranges(fd, position, self.file_size))
        finally:
            os.close(fd)
        for first, last in ranges:
            start = first
            while start < last:
                end = min(start + chunk, last)
                if view[start:end] != zeros[: end - start]:
                    view[start:end] = zeros[: end - start]
                start = end

    def last_modified_ms(self) -> int:
        """The file's modification time in ms (0 if it is gone): what retention ages a segment by."""
        try:
            return int(os.stat(self.path).st_mtime * 1000)
        except FileNotFoundError:
            return 0

    # -- reference counting ----------------------------------------------------------------------

    def hold(self) -> bool:
        """Take a reference for a reader (the segment stays mapped until :meth:`release`); False once
        destruction has begun (the data is going). A cached segment is mapped now if it is not:
        ResourceExhaustedError when that fails for want of descriptors or mappings."""
        if self.cache is not None:
            return self.cache.hold(self)
        if not self.available:
            return False
        self._holders.append(None)
        # Checked again: a destroyer that began in between either saw this reference (and waits)
        # or did not, in which case this reader backs off.
        if self.available:
            return True
        self._holders.pop()
        return False

    def release(self) -> None:
        """Drop a reference taken by :meth:`hold`."""
        self._holders.pop()

    @property
    def ref_count(self) -> int:
        return len(self._holders)

    def try_destroy(self, forcibly_after_ms: int, now_ms: int) -> bool:
        """Delete the segment unless a reader holds it; True when it is gone.

        The first call refuses new readers. A segment still held ``forcibly_after_ms`` after that
        first call is deleted anyway; readers keep their slices (Python keeps those pages mapped).
        """
        if self.available:
            self.available = False
            self.first_shutdown_ms = now_ms
        if self._holders and now_ms - self.first_shutdown_ms < forcibly_after_ms:
            return False
        self.destroy()
        return True

    def take_holder(self) -> None:
        """Count a reader; the cache calls it under its lock, once the segment is mapped."""
        self._holders.append(None)

    @property
    def is_closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        if self.cache is not None:
            self.cache.forget(self)
        self._closed = True
        self.available = False
        self.unmap()

    def destroy(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def __repr__(self) -> str:
        return f"MappedFile({self.path.name}, wrote={self.wrote_position}, flushed={self.flushed_position})"


def make_directories(directory: Path) -> tuple[Path, ...]:
    """Make ``directory`` and its missing parents; returns those it made, outermost first."""
    missing = []
    current = directory
    while not current.is_dir():
        missing.append(current)
        current = current.parent
    directory.mkdir(parents=True, exist_ok=True)
    return tuple(reversed(missing))


def _translated(error: OSError, path: Path) -> OSError | ResourceExhaustedError:
    if error.errno in NO_RESOURCES:
        return ResourceExhaustedError(f"cannot open or map {path}: {error.strerror}")
    return error
