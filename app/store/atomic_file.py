"""Write a small file so that a crash leaves either the old or the new content, never a torn mix;
append whole to a log; force a directory's names to disk."""

from __future__ import annotations

import contextlib
import os
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
