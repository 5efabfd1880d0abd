"""The pop journal: the pop state's changes, appended to a file before a pop, an ack, a nack or a
change of invisibility is answered, so that a restart neither loses a message in flight nor
hands it out before its invisible time.

Two files under ``config/pop/``: ``snapshot`` (the whole state as records, replaced atomically at
each compaction) and ``journal.log`` (the records appended since). Both hold the same records::

    crc u32 | length u16 | kind u8 | queue_id u32 | offset i64 | deadline_ms i64
            | reconsume_times i32 | nonce u64 | group u8+ascii | topic u8+ascii

``length`` counts the bytes after it, the CRC32 covers them. Loading reads the snapshot, then the
log up to its first record that is cut or does not check (a write cut by a crash), and cuts the
log there. Replaying the log over a snapshot that already holds it (a crash between the snapshot's
rename and the log's truncation) ends in the same state, as every record sets what it names.

A thread does the writing, so the event loop never waits on the disk: each request's records go
in one append, and appends that queue up while one is written go together in the next. With
``sync`` (WHARF_FLUSH_MODE=SYNC) every append is forced before its future resolves; otherwise it
is written (a killed process loses nothing) and forced within ``flush_interval_s``.
"""

from __future__ import annotations

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
    """The journal's files and the thread that appends to them."""

    name = "pop-journal"

    def __init__(self, directory: Path, sync: bool, flush_interval_s: float) -> None:
        super().__init__(flush_interval_s)
        self.directory = directory
        self.snapshot_path = directory / SNAPSHOT_NAME
        self.log_path = directory / LOG_NAME
        self.sync = sync
        self._fd: int | None = None
        self._lock = threading.Lock()
        # (bytes, is a snapshot, future): appends and compactions, in the order they were asked for.
        self._pending: list[tuple[bytes, bool, Future[None]]] = []
        self._closed = False
        self._unforced = False
        self._forced_at = time.monotonic()

    # -- start and stop --------------------------------------------------------------------------

    def load(self) -> list[PopRecord]:
        """The snapshot's records, then the log's; the log is cut after its last good record.
        Reads the disk: call it off the event loop, before :meth:`open`."""
        records: list[PopRecord] = []
        if self.snapshot_path.exists():
            data = self.snapshot_path.read_bytes()
            records, good = decode_records(data)
            if good != len(data):
                log.warning(
                    "%s: %d bytes after offset %d do not decode", self.snapshot_path, len(data) - good, good
                )
        if self.log_path.exists():
            data = self.log_path.read_bytes()
            replayed, good = decode_records(data)
            records.extend(replayed)
            if good != len(data):
                log.warning(
                    "%s: cutting %d bytes from offset %d (a write cut short)",
                    self.log_path,
                    len(data) - good,
                    good,
                )
                os.truncate(self.log_path, good)
        return records

    def open(self, snapshot: bytes) -> None:
        """Write ``snapshot`` (the state just loaded), empty the log and start the thread."""
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomically(self.snapshot_path, snapshot)
        self._fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.ftruncate(self._fd, 0)
        os.fsync(self._fd)
        fsync_directory(self.directory)
        self.start()

    def close(self) -> None:
        """Write and force what is pending, stop the thread, close the log."""
        self.stop()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- writing ---------------------------------------------------------------------------------

    def append(self, data: bytes) -> Future[None]:
        """Append encoded records; the future resolves once they are written (forced with ``sync``)."""
        return self._submit(data, False)

    def compact(self, snapshot: bytes) -> Future[None]:
        """Replace the snapshot with ``snapshot`` and empty the log, after every append asked for
        before: ``snapshot`` must hold the state those appends lead to."""
        return self._submit(snapshot, True)

    def _submit(self, data: bytes, is_snapshot: bool) -> Future[None]:
        future: Future[None] = Future()
        with self._lock:
            if self._closed:
                future.set_exception(RuntimeError("the pop journal is closed"))
                return future
            self._pending.append((data, is_snapshot, future))
        self.wakeup()
        return future

    def run_once(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        appends: list[tuple[bytes, Future[None]]] = []
        for data, is_snapshot, future in pending:
            if not is_snapshot:
                appends.append((data, future))
                continue
            self._write(appends)
            appends = []
            self._settle([future], self._replace_snapshot, data)
        self._write(appends)
        if self._unforced and time.monotonic() - self._forced_at >= self.interval_s:
            self._force()

    def on_stop(self) -> None:
        with self._lock:
            self._closed = True
        self.run_once()
        if self._unforced:
            self._force()

    def _write(self, appends: list[tuple[bytes, Future[None]]]) -> None:
        if appends:
            self._settle(
                [future for _, future in appends], self._append, b"".join(data for data, _ in appends)
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

    def _append(self, data: bytes) -> None:
        assert self._fd is not None, "the pop journal is not open"
        append_whole(self._fd, data, self.log_path, force=self.sync)
        self._unforced = not self.sync

    def _force(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)
        self._unforced = False
        self._forced_at = time.monotonic()

    def _replace_snapshot(self, data: bytes) -> None:
        write_atomically(self.snapshot_path, data)
        fd = self._fd
        assert fd is not None, "the pop journal is not open"
        os.ftruncate(fd, 0)
        os.fsync(fd)
        self._unforced = False
