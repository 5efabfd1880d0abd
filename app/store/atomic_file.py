"""Write a small file so that a crash leaves either the old or the new content, never a torn mix;
append whole to a log; force a directory's names to disk; force a whole file system at once."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from collections.abc import Callable
from pathlib import Path

from app.store.errors import NO_SPACE, DiskFullError


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file, force it, rename it over ``path``, force the directory.

    On a full disk the old file stays as it was, the temporary file goes, and DiskFullError says so.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as error:
        with contextlib.suppress(OSError):
            temporary.unlink()
        if error.errno in NO_SPACE:
            raise DiskFullError(f"no room on the disk to write {path}: {error.strerror}") from error
        raise
    os.replace(temporary, path)
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Force a directory's entries (a new, renamed or deleted name) to disk."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_whole(fd: int, data: bytes, path: Path, force: bool = True) -> int:
    """Append ``data`` to the log open as ``fd`` (O_APPEND) and, with ``force``, fsync it; the
    log's new size. A failed write is cut back off, so the log never ends in a part of ``data``;
    on a full disk DiskFullError names ``path``."""
    size = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if force:
            os.fsync(fd)
    except OSError as error:
        os.ftruncate(fd, size)
        if error.errno in NO_SPACE:
            raise DiskFullError(f"no room on the disk to append to {path}") from error
        raise
    return size + len(data)


def _find_libc_syncfs() -> Callable[[int], int] | None:
    """libc's ``syncfs``, or None where there is none (not Linux, or a libc older than 2.14)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_LIBC_SYNCFS = _find_libc_syncfs()


def _libc_syncfs(fd: int) -> None:
    """``syncfs(fd)``: write back every dirty page and inode of the file system holding ``fd`` and
    wait for it. ctypes releases the GIL for the call, as ``os.fsync`` does. Without ``syncfs``
    (or on a kernel that lacks it) ``sync()`` does the same for every file system: more work, but
    never less durability."""
    if _LIBC_SYNCFS is None:
        os.sync()
        return
    if _LIBC_SYNCFS(fd) == 0:
        return
    number = ctypes.get_errno()
    if number == errno.ENOSYS:
        os.sync()
        return
    raise OSError(number, os.strerror(number))


# Looked up at every call, so that a test harness can wrap it as it wraps ``os.fsync``.
syncfs = _libc_syncfs


def sync_file_system(path: Path) -> None:
    """Make everything written so far to the file system holding ``path`` (a directory) durable:
    the content of every file, mapped pages included, and every directory entry made or removed.

    One call instead of one ``fdatasync`` per file: each of those waits for the disk in turn (and a
    new file's directory wants an ``fsync`` of its own), which makes flushing tens of thousands of
    files written a little each take tens of seconds, while the file system writes them all back
    in one pass. The cost is that it forces everything else dirty on that file system too, so it
    pays only when many files are dirty. Raises OSError when the write-back failed (Linux 5.8 and
    later report it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        syncfs(fd)
    finally:
        os.close(fd)
