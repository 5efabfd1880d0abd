r"""One fixed-size segment file, memory-mapped, named by the global offset of its first byte.

A segment has two positions: ``wrote`` (bytes appended and visible to readers) and ``flushed``
(bytes forced to disk). Readers get ``memoryview`` slices of the mapping, so a read copies nothing;
Python's buffer reference counting keeps a mapping alive while any slice of it is held, which is
what makes deleting a segment under a reader safe.

Retention adds RocketMQ's explicit reference count on top (SPEC 1.3): a reader :meth:`hold`\ s a
segment while it works on it, and :meth:`try_destroy` deletes a segment only when nobody holds it, or
once a forced interval has passed since the first attempt (a stuck reader must not pin the disk).
From the first attempt on, :meth:`hold` refuses new readers.

A new segment has all its disk blocks allocated before it is mapped (:func:`allocate`): a write
through a mapping onto a page the file system cannot back raises SIGBUS and kills the process,
whereas an allocation that finds no room raises :class:`DiskFullError` when the segment is created,
where the caller can refuse the write cleanly.

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
import logging
import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from app.store.atomic_file import fsync_directory
from app.store.errors import NO_RESOURCES, NO_SPACE, DiskFullError, ResourceExhaustedError, StoreConfigError
from app.store.kernel import compiled

log = logging.getLogger(__name__)


class SegmentCache(Protocol):
    """What a lazily mapped segment asks of its cache (:class:`app.store.file_cache.SegmentCache`)."""

    def add(self, mapped: MappedFile) -> None: ...

    def hold(self, mapped: MappedFile) -> bool: ...

    def forget(self, mapped: MappedFile) -> None: ...


PAGE_SIZE = 4096
OFFSET_NAME_DIGITS = 20
BLOCK_SIZE = 512  # the unit of st_blocks
ZERO_CHUNK = 1 << 20
# posix_fallocate is not supported here: fall back to writing zeros.
NO_FALLOCATE = frozenset({errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS})

MADV_POPULATE_READ = 22  # Linux 5.14 and later
WARM_CHUNK = 4 << 20  # how much of a segment is faulted in between looks at the service's stop


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


def allocate(fd: int, size: int, path: Path) -> None:
    """Give the file ``size`` bytes of allocated disk blocks (``posix_fallocate``, or zeros written
    where the file system does not support it); DiskFullError when they do not fit."""
    try:
        try:
            os.posix_fallocate(fd, 0, size)
            return
        except OSError as error:
            if error.errno not in NO_FALLOCATE:
                raise
        os.ftruncate(fd, size)
        zeros = memoryview(bytes(min(ZERO_CHUNK, size)))
        position = 0
        while position < size:
            position += os.pwrite(fd, zeros[: size - position], position)
    except OSError as error:
        if error.errno in NO_SPACE:
            raise DiskFullError(f"no room on the disk for {path} ({size} bytes): {error.strerror}") from error
        raise


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
        "last_store_timestamp",
        "directory_synced",
        "new_directories",
        "available",
        "first_shutdown_ms",
        "_holders",
        "_closed",
    )

    def __init__(
        self, path: Path, file_size: int, cache: SegmentCache | None = None, *, lazy: bool = False
    ) -> None:
        """Open (or create and allocate) the segment at ``path`` and map it; ``lazy``: only
        describe it, it is mapped by the first :meth:`hold` (which needs a ``cache``)."""
        self.path = path
        self.file_size = file_size
        self.file_from_offset = int(path.name.partition(".")[0])
        self.mm = CLOSED_MAP
        self.view = RELEASED_VIEW
        self.cache = cache
        self.wrote_position = 0
        self.flushed_position = 0
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
            self.map(create=True)
            if cache is not None:
                cache.add(self)

    @classmethod
    def lazy(cls, path: Path, file_size: int, cache: SegmentCache) -> MappedFile:
        """A segment known by name only: nothing is opened or mapped until it is held."""
        return cls(path, file_size, cache, lazy=True)

    @property
    def is_mapped(self) -> bool:
        return self.mm is not CLOSED_MAP

    def map(self, create: bool = False) -> None:
        """Open and map the file, keeping one descriptor (the mapping's own); ``create``: create and
        allocate it if it is missing or empty. ResourceExhaustedError when the process is out of
        descriptors or mappings, DiskFullError when an allocation does not fit."""
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
                allocate(fd, file_size, path)
            elif stat.st_blocks * BLOCK_SIZE < file_size:
                _allocate_holes(fd, file_size, path)
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

    def warm(self, stopping: Callable[[], bool]) -> None:
        """Fault the segment's pages in for reading ahead of the writer (SPEC 1.3's warming;
        RocketMQ's warmMappedFile), a chunk at a time until ``stopping()``. Nothing is written, so
        nothing is dirtied: the flushes of the segment write only what the writer writes. The
        writer's first touch of each page then finds it in memory instead of allocating it. (The
        segment a store opens with needs none: recovery reads its tail, checking it is zero.)"""
        position = 0
        while position < self.file_size and not stopping() and not self._closed:
            try:
                populate(self.mm, position, WARM_CHUNK)
            except (ValueError, BufferError):  # unmapped meanwhile: nothing left to warm
                return
            position += WARM_CHUNK

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
        cls, directory: Path, offset: int, file_size: int, suffix: str = "", cache: SegmentCache | None = None
    ) -> MappedFile:
        """A new segment, allocated; ``suffix`` names a spare until :meth:`rename` drops it."""
        new_directories = _make_directories(directory)
        mapped = cls(directory / (segment_name(offset) + suffix), file_size, cache)
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
        zero and a record torn by a later crash cannot borrow stale bytes that look valid.
        """
        chunk = 1 << 20
        zeros = bytes(chunk)
        view = self.view
        start = position
        while start < self.file_size:
            end = min(start + chunk, self.file_size)
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


def _make_directories(directory: Path) -> tuple[Path, ...]:
    """Make ``directory`` and its missing parents; returns those it made, outermost first."""
    missing = []
    current = directory
    while not current.is_dir():
        missing.append(current)
        current = current.parent
    directory.mkdir(parents=True, exist_ok=True)
    return tuple(reversed(missing))


def _allocate_holes(fd: int, file_size: int, path: Path) -> None:
    """Allocate the holes of a sparse file (one written by an older version). A start on a full
    disk must not fail: a failure is only logged."""
    try:
        os.posix_fallocate(fd, 0, file_size)
    except OSError as error:
        log.warning("%s stays sparse (%s): writes into it may fault if the disk fills", path, error)


def _translated(error: OSError, path: Path) -> OSError | ResourceExhaustedError:
    if error.errno in NO_RESOURCES:
        return ResourceExhaustedError(f"cannot open or map {path}: {error.strerror}")
    return error
