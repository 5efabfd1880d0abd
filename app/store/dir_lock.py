"""One process per store directory: an exclusive ``flock`` on ``<store>/lock``, held for the life of
the store.

Two brokers on one directory would both append to the same CommitLog and both acknowledge: the
lock is taken before any file of the store is read or written, and a second process is refused at
once, with the first one's pid, touching nothing. The kernel drops the lock when the holder dies
(SIGKILL included), so a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from app.store.errors import NO_SPACE, StoreLockedError

LOCK_FILE_NAME = "lock"


class StoreDirectoryLock:
    def __init__(self, store_dir: Path) -> None:
        self.store_dir = store_dir
        self.path = store_dir / LOCK_FILE_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`StoreLockedError` naming the process that holds it."""
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise StoreLockedError(
                f"store directory {self.store_dir} is in use by pid {holder if holder else 'unknown'}"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        # The pid is for people and for the refusal message; the lock itself is the flock, so a full
        # disk that cannot take the pid does not keep the store from opening.
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as error:
            if error.errno not in NO_SPACE:
                os.close(fd)
                raise
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the descriptor drops the flock

    @property
    def held(self) -> bool:
        return self._fd is not None


def _read_pid(fd: int) -> int:
    try:
        return int(os.pread(fd, 32, 0).decode().strip() or 0)
    except (OSError, ValueError):
        return 0
