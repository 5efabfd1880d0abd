"""The checkpoint file: store timestamps of the last flushed CommitLog, ConsumeQueue and index data.

Layout (big-endian)::

    +----------------------+------------------------+---------------------+
    | CommitLog ts (8)     | ConsumeQueue ts (8)    | index ts (8)        |
    +----------------------+------------------------+---------------------+
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from app.store.errors import NO_SPACE, DiskFullError

LAYOUT = struct.Struct(">qqq")  # commitlog | consumequeue | index store timestamps, ms
assert LAYOUT.size == 24

# Unclean recovery starts this far before the checkpoint, as RocketMQ does, to cover clock jitter.
RECOVERY_MARGIN_MS = 3_000


class Checkpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.commitlog_timestamp = 0
        self.consumequeue_timestamp = 0
        self.index_timestamp = 0
        if path.exists():
            raw = path.read_bytes()
            if len(raw) >= LAYOUT.size:
                (
                    self.commitlog_timestamp,
                    self.consumequeue_timestamp,
                    self.index_timestamp,
                ) = LAYOUT.unpack_from(raw)

    def min_timestamp(self) -> int:
        """Where unclean recovery of the CommitLog and ConsumeQueues starts looking."""
        return max(0, min(self.commitlog_timestamp, self.consumequeue_timestamp) - RECOVERY_MARGIN_MS)

    def flush(self) -> None:
        """Write all three timestamps and force them to disk in one 24-byte write (in place: once
        the file exists this needs no new space); DiskFullError when the disk has no room."""
        data = LAYOUT.pack(self.commitlog_timestamp, self.consumequeue_timestamp, self.index_timestamp)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, data, 0)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as error:
            if error.errno in NO_SPACE:
                raise DiskFullError(f"no room on the disk to write {self.path}: {error.strerror}") from error
            raise
