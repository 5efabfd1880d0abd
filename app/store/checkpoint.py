"""The checkpoint file: how far the CommitLog, the ConsumeQueues and the index are known to be on disk.

Layout (big-endian, 48 bytes; a 24-byte file of an older version reads with the offsets unknown)::

    +------------------+--------------------+-----------------+
    | CommitLog ts (8) | ConsumeQueue ts (8)| index ts (8)    |   store timestamps, ms
    +------------------+--------------------+-----------------+
    | CommitLog off (8)| ConsumeQueue off(8)| clean last (8)  |   CommitLog offsets
    +------------------+--------------------+-----------------+

* CommitLog offset: a record boundary up to which the CommitLog was forced to disk.
* ConsumeQueue offset: a record boundary up to which every record's ConsumeQueue entry was forced.
* clean last: after a clean stop, the offset of the log's last record (the log ends right after
  it); -1 while the store runs. Normal recovery trusts the end it names once that record checks out.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

from app.store.errors import NO_SPACE, DiskFullError

log = logging.getLogger(__name__)

LAYOUT = struct.Struct(">qqqqqq")
assert LAYOUT.size == 48
TIMESTAMPS = struct.Struct(">qqq")  # the first version of the file
assert TIMESTAMPS.size == 24

NO_CLEAN_END = -1
FIELDS = (
    "commitlog_timestamp",
    "consumequeue_timestamp",
    "index_timestamp",
    "commitlog_offset",
    "consumequeue_offset",
    "clean_last_record",
)

# Unclean recovery starts this far before the checkpoint, as RocketMQ does, to cover clock jitter.
RECOVERY_MARGIN_MS = 3_000


class Checkpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.commitlog_timestamp = 0
        self.consumequeue_timestamp = 0
        self.index_timestamp = 0
        self.commitlog_offset = 0
        self.consumequeue_offset = 0
        self.clean_last_record = NO_CLEAN_END
        if path.exists():
            raw = path.read_bytes()
            # A 24-byte file of the first version holds the timestamps only.
            layout = (
                LAYOUT if len(raw) >= LAYOUT.size else TIMESTAMPS if len(raw) >= TIMESTAMPS.size else None
            )
            if layout is not None:
                for name, value in zip(FIELDS, layout.unpack_from(raw), strict=False):
                    setattr(self, name, value)

    def min_timestamp(self) -> int:
        """Where unclean recovery of the CommitLog and ConsumeQueues starts looking."""
        return max(0, min(self.commitlog_timestamp, self.consumequeue_timestamp) - RECOVERY_MARGIN_MS)

    def min_offset(self) -> int:
        """A record boundary from which unclean recovery can walk (0: not known)."""
        return min(self.commitlog_offset, self.consumequeue_offset)

    def forget_clean_end(self) -> None:
        """From here on a crash must not look like a clean stop: clear the clean end (before the
        abort file exists). A checkpoint that cannot be written is removed instead (unlinking needs
        no space): the next start then walks the log rather than trust an end that moved on."""
        self.clean_last_record = NO_CLEAN_END
        try:
            self.flush()
        except DiskFullError as error:
            log.error("%s; removing the checkpoint so that a crash cannot pass for a clean stop", error)
            self.path.unlink(missing_ok=True)

    def flush(self) -> None:
        """Write every field and force them to disk in one 48-byte write (in place: once the file
        exists this needs no new space); DiskFullError when the disk has no room."""
        data = LAYOUT.pack(*(getattr(self, name) for name in FIELDS))
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
