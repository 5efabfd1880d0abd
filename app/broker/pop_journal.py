"""The pop journal: the pop state's changes, appended to a file before a pop, an ack, a nack or a
change of invisibility is answered, so that a restart neither loses a message in flight nor
hands it out before its invisible time.

Files under ``config/pop/``: ``snapshot`` (the whole state as records, replaced atomically at each
compaction) and ``journal.log`` (the records appended since), with ``journal.old`` between them
while a compaction is under way. They hold the same records::

    crc u32 | length u16 | kind u8 | queue_id u32 | offset i64 | deadline_ms i64
            | reconsume_times i32 | nonce u64 | group u8+ascii | topic u8+ascii

``length`` counts the bytes after it, the CRC32 covers them. Loading reads the snapshot, the old
log and the log, each up to its first record that is cut or does not check (a write cut by a
crash), and cuts the log there.

Each request's records go in one append. Without ``sync`` an append is written at once, from the
event loop (into the page cache: a killed process loses nothing), and a thread forces the log
within ``flush_interval_s``. With ``sync`` (WHARF_FLUSH_MODE=SYNC) the thread writes and forces
each append before its future resolves, and appends that queue up meanwhile go together in the
next write, so the event loop never waits on the disk.

A compaction renames the log to ``journal.old`` and starts a new one where the appends stand (at
once, or in the thread with ``sync``); the thread then writes the snapshot and removes the old
log. A crash in between leaves the old log, replayed after the snapshot: a log replayed over a
snapshot that already holds it ends in the same state, as every record sets what it names.
"""

from __future__ import annotations

import enum
import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path

from app.broker.pop_state import PopRecord, RecordKind
from app.store.atomic_file import append_whole, fsync_directory, write_atomically
from app.store.service import ServiceThread

log = logging.getLogger(__name__)

_FRAME = struct.Struct(">IH")  # crc | length of what follows
_FIXED = struct.Struct(">BIqqiQ")  # kind | queue id | offset | deadline ms | reconsume times | nonce
assert (_FRAME.size, _FIXED.size) == (6, 33)

SNAPSHOT_NAME = "snapshot"
LOG_NAME = "journal.log"
OLD_LOG_NAME = "journal.old"


class _Task(enum.Enum):
    APPEND = "append"  # with sync: write and force
    COMPACT = "compact"  # with sync: start the log over, write the snapshot, drop the old log
    SNAPSHOT = "snapshot"  # without sync (the log was started over already): the rest


def encode_records(records: Iterable[PopRecord]) -> bytes:
    parts = []
    names: dict[tuple[str, str], bytes] = {}  # (group, topic) -> their encoding, once per call
    pack, frame, crc32 = _FIXED.pack, _FRAME.pack, zlib.crc32
    for record in records:
        suffix = names.get((record.group, record.topic))
        if suffix is None:
            group, topic = record.group.encode("ascii"), record.topic.encode("ascii")
            suffix = names[record.group, record.topic] = (
                bytes((len(group),)) + group + bytes((len(topic),)) + topic
            )
        body = (
            pack(
                record.kind,
                record.queue_id,
                record.offset,
                record.deadline_ms,
                record.reconsume_times,
                record.nonce,
            )
            + suffix
        )
        parts.append(frame(crc32(body), len(body)))
        parts.append(body)
    return b"".join(parts)


def decode_records(data: bytes) -> tuple[list[PopRecord], int]:
    """The records of ``data`` up to the first one that is cut or does not check, and the length
    of the good part."""
    records: list[PopRecord] = []
    position = 0
    view = memoryview(data)
    while position + _FRAME.size <= len(data):
        crc, length = _FRAME.unpack_from(data, position)
        start = position + _FRAME.size
        body = view[start : start + length]
        if len(body) != length or zlib.crc32(body) != crc or length < _FIXED.size + 2:
            break
        kind, queue_id, offset, deadline_ms, reconsume_times, nonce = _FIXED.unpack_from(body, 0)
        try:
            names = []
            cursor = _FIXED.size
            for _ in range(2):
                size = body[cursor]
                names.append(str(body[cursor + 1 : cursor + 1 + size], "ascii"))
                cursor += 1 + size
            if cursor != length:
                break
            records.append(
                PopRecord(
                    RecordKind(kind),
                    names[0],
                    names[1],
                    queue_id,
                    offset,
                    deadline_ms,
                    reconsume_times,
                    nonce,
                )
            )
        except (IndexError, ValueError):
            break
        position = start + length
    return records, position


class PopJournal(ServiceThread):
    """The journal's files and the thread that forces, compacts and (with ``sync``) appends."""

    name = "pop-journal"

    def __init__(self, directory: Path, sync: bool, flush_interval_s: float) -> None:
        super().__init__(flush_interval_s)
        self.directory = directory
        self.snapshot_path = directory / SNAPSHOT_NAME
        self.log_path = directory / LOG_NAME
        self.old_path = directory / OLD_LOG_NAME
        self.sync = sync
        self._fd: int | None = None
        self._old_fd: int | None = None  # the old log's, closed by the thread once it is replaced
        self._lock = threading.Lock()
        # What the thread has to do, in order: appends (with ``sync``) and compactions.
        self._pending: list[tuple[_Task, bytes, Future[None]]] = []
        self._compacting = False
        self._closed = False
        self._unforced = False
        self._forced_at = time.monotonic()

    # -- start and stop --------------------------------------------------------------------------

    def load(self) -> list[PopRecord]:
        """The records of the snapshot, the old log and the log, in that order; the log is cut
        after its last good record. Reads the disk: call it off the event loop, before :meth:`open`."""
        records: list[PopRecord] = []
        for path in (self.snapshot_path, self.old_path, self.log_path):
            if not path.exists():
                continue
            data = path.read_bytes()
            found, good = decode_records(data)
            records.extend(found)
            if good != len(data):
                log.warning(
                    "%s: %d bytes from offset %d do not decode (a write cut short)",
                    path,
                    len(data) - good,
                    good,
                )
                if path == self.log_path:
                    os.truncate(path, good)
        return records

    def open(self, snapshot: bytes) -> None:
        """Write ``snapshot`` (the state just loaded), empty the logs and start the thread."""
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomically(self.snapshot_path, snapshot)
        self.old_path.unlink(missing_ok=True)
        self._fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.ftruncate(self._fd, 0)
        os.fsync(self._fd)
        fsync_directory(self.directory)
        self.start()

    def close(self) -> None:
        """Do and force what is pending, stop the thread, close the log."""
        self.stop()
        self._close_old()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- writing ---------------------------------------------------------------------------------

    def append(self, data: bytes) -> Future[None]:
        """Append encoded records; the future resolves once they are written (and forced, with
        ``sync``), or with the error (DiskFullError) that stopped them."""
        if self.sync:
            return self._submit(_Task.APPEND, data)
        future: Future[None] = Future()
        try:
            if self._closed:
                raise RuntimeError("the pop journal is closed")
            self._write(data)
        except Exception as error:
            future.set_exception(error)
        else:
            future.set_result(None)
        return future

    @property
    def compacting(self) -> bool:
        """A compaction is under way (or failed: then none is done until the next start)."""
        return self._compacting

    def compact(self, snapshot: bytes) -> Future[None] | None:
        """Replace the snapshot with ``snapshot`` and start the log over, after every append asked
        for before: ``snapshot`` must hold the state those appends lead to. None (nothing done)
        while the last compaction is under way."""
        if self._compacting or self._closed:
            return None
        self._compacting = True
        if self.sync:
            return self._submit(_Task.COMPACT, snapshot)
        try:
            self._rotate()
        except Exception as error:
            self._compacting = False
            future: Future[None] = Future()
            future.set_exception(error)
            return future
        return self._submit(_Task.SNAPSHOT, snapshot)

    def _submit(self, task: _Task, data: bytes) -> Future[None]:
        future: Future[None] = Future()
        with self._lock:
            if self._closed:
                future.set_exception(RuntimeError("the pop journal is closed"))
                return future
            self._pending.append((task, data, future))
        self.wakeup()
        return future

    # -- the thread ------------------------------------------------------------------------------

    def run_once(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        appends: list[tuple[bytes, Future[None]]] = []
        for task, data, future in pending:
            if task is _Task.APPEND:
                appends.append((data, future))
                continue
            self._append_together(appends)
            appends = []
            self._settle([future], self._compact_now if task is _Task.COMPACT else self._snapshot, data)
        self._append_together(appends)
        if self._unforced and time.monotonic() - self._forced_at >= self.interval_s:
            self._force()

    def on_stop(self) -> None:
        with self._lock:
            self._closed = True
        self.run_once()
        if self._unforced:
            self._force()

    def _append_together(self, appends: list[tuple[bytes, Future[None]]]) -> None:
        if appends:
            self._settle(
                [future for _, future in appends], self._write, b"".join(data for data, _ in appends)
            )

    @staticmethod
    def _settle(futures: list[Future[None]], write: Callable[[bytes], None], data: bytes) -> None:
        try:
            write(data)
        except Exception as error:
            for future in futures:
                future.set_exception(error)
            return
        for future in futures:
            future.set_result(None)

    def _write(self, data: bytes) -> None:
        assert self._fd is not None, "the pop journal is not open"
        append_whole(self._fd, data, self.log_path, force=self.sync)
        self._unforced = not self.sync

    def _force(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
        self._unforced = False
        self._forced_at = time.monotonic()

    def _rotate(self) -> None:
        """Rename the log to the old log and start a new one: later appends go there."""
        os.rename(self.log_path, self.old_path)
        self._old_fd, self._fd = (
            self._fd,
            os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644),
        )
        if self.sync:  # the new log's name must be on disk before anything is forced into it
            fsync_directory(self.directory)

    def _compact_now(self, snapshot: bytes) -> None:
        self._rotate()
        self._snapshot(snapshot)

    def _snapshot(self, snapshot: bytes) -> None:
        """Write the snapshot, then drop the old log it replaces. On a failure the old log stays
        (loading replays it) and no compaction is done until the next start."""
        write_atomically(self.snapshot_path, snapshot)
        self._close_old()
        self.old_path.unlink()
        fsync_directory(self.directory)
        self._compacting = False

    def _close_old(self) -> None:
        if self._old_fd is not None:
            os.close(self._old_fd)
            self._old_fd = None
