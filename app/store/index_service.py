"""The message index (SPEC 1.6): every message is findable by its unique id and by each word of its
KEYS, each indexed as ``topic#key`` in a run of hash index files (:mod:`app.store.index_file`).

Building happens on the index thread, never under the CommitLog lock: the CommitLog hands each
appended batch over in log order (:meth:`IndexService.submit`, one deque append under the lock), and
the thread turns it into entries. A new file starts when the current one cannot take a message's keys.

Durability and recovery: the thread forces the current file every ``flush_interval_ms`` (and a full
file before rolling on) and then records the file's end timestamp as the checkpoint's index
timestamp. After an unclean stop, :meth:`IndexService.load` drops the files whose header is newer than
that timestamp and rolls the last one back to its header (or drops it when it cannot);
:meth:`IndexService.trim` drops files that cover CommitLog bytes recovery cut off; and
:meth:`IndexService.rebuild` indexes the CommitLog again from where the kept files end, on the index
thread before anything appended since (start-up does not wait for it; a lookup does).

A full disk: an index file gets its disk blocks before they are written (its slots when created,
its entries a chunk at a time, see :mod:`app.store.index_file`). When a new file or the next chunk
cannot be allocated, the thread does not stop and neither does the store: it logs, skips indexing
(messages stored meanwhile are not found by key, only by id) and tries a new file again at most every
:data:`RETRY_ALLOCATE_S` (the next chunk with the next batch) until space returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from app.store.atomic_file import fsync_directory, write_atomically
from app.store.checkpoint import Checkpoint
from app.store.commit_log import CommitLog
from app.store.errors import DiskFullError
from app.store.index_file import (
    FORMAT,
    IndexFile,
    KeyedRecord,
    Placement,
    index_file_name,
    index_file_size,
    index_file_time,
    key_hash,
)
from app.store.log_walk import records_from
from app.store.record import CheckedRecord
from app.store.record_format import EncodedRecord
from app.store.results import AppendResult
from app.store.service import ServiceThread

log = logging.getLogger(__name__)

# The thread polls rather than being woken by every append: a wake-up per batch costs a producer
# more than the index thread's work on small batches, and nothing but a query needs the index at
# once (a query wakes the thread and waits, see IndexService.wait_indexed).
POLL_INTERVAL_S = 0.01
REBUILD_CHUNK = 1024
# Small batches that queued one behind the other are indexed together, up to about this many records.
MERGE_RECORDS = 1024
RETRY_ALLOCATE_S = 1.0

Batch = tuple[Sequence[EncodedRecord], list[AppendResult]]


class Placed(NamedTuple):
    """Where recovery found a record."""

    physical_offset: int
    size: int
    store_timestamp: int


def index_key(topic: str, key: str) -> str:
    """The indexed form of a key: ``topic#key``."""
    return f"{topic}#{key}"


class IndexService(ServiceThread):
    """Owns the index files: builds them on its own thread, answers queries from any thread."""

    name = "index"

    def __init__(
        self,
        directory: Path,
        checkpoint: Checkpoint,
        max_hash_slots: int,
        max_index_count: int,
        flush_interval_ms: int = 1_000,
        clock: Callable[[], float] = time.time,
        check_room: Callable[[int], None] | None = None,
        format_path: Path | None = None,
    ) -> None:
        super().__init__(POLL_INTERVAL_S)
        self.directory = directory
        # The key hash the files use (:data:`FORMAT_MARKER`); None: not checked (a bare service).
        self.format_path = format_path
        self.checkpoint = checkpoint
        self.max_hash_slots = max_hash_slots
        self.max_index_count = max_index_count
        self.flush_interval_s = flush_interval_ms / 1000
        self.clock = clock
        # Replaced, never mutated in place: queries walk a snapshot while the thread rolls on.
        self.files: list[IndexFile] = []
        self.doomed: list[IndexFile] = []
        self._files_lock = threading.Lock()
        self._pending: deque[Batch] = deque()
        self._submitted = 0  # batches handed over; written under the CommitLog lock only
        self._done = 0  # batches indexed; written by the index thread only
        self._done_changed = threading.Condition()
        self._dirty = False
        self._key_prefixes: dict[str, int] = {}  # topic -> Java hash of "topic#"
        # What the last start-up did: files dropped as untrustworthy, messages indexed again.
        self.dropped_files: list[str] = []
        self.rebuilt_messages = 0
        self._rebuild_source: tuple[CommitLog, int] | None = None
        self.rebuild_interrupted = False
        self._last_flush_s = time.monotonic()
        # Called with a new file's size before it is allocated: raises DiskFullError to refuse.
        self.check_room = check_room
        # While a new file cannot be allocated: messages not indexed, and when to try again.
        self.skipped_messages = 0
        self._retry_allocate_s = float("-inf")

    @property
    def current(self) -> IndexFile | None:
        files = self.files
        return files[-1] if files else None

    # -- start-up --------------------------------------------------------------------------------

    def load(self, clean: bool) -> list[str]:
        """Map every index file; after an unclean stop drop those that cannot be trusted.

        Returns the names of the dropped files. Every file is dropped when the store's format marker
        says its keys were hashed with CRC-32 (an older Wharf). A file is dropped (with every later
        one) when its header is newer than the checkpoint's index timestamp. The last file kept is rolled back to
        its header (the entries written after its last flush are undone, and indexed again by
        :meth:`rebuild`), or dropped when it cannot be.
        """
        directory = self.directory
        names = (
            sorted(path.name for path in directory.iterdir() if path.name.isdigit())
            if directory.is_dir()
            else []
        )
        rehashed: list[str] = []
        if self.format_path is not None and not self._format_is_current():
            if names:
                log.warning(
                    "dropping %d index files hashed with CRC-32 by an older Wharf; they are rebuilt "
                    "from the CommitLog with RocketMQ's key hash",
                    len(names),
                )
                for name in names:
                    (self.directory / name).unlink()
                fsync_directory(self.directory)
            rehashed, names = names, []
            write_atomically(self.format_path, FORMAT)
        if names and (self.directory / names[-1]).stat().st_size == 0:
            # A file whose creation a crash cut short: nothing in it, and no room may be left for it.
            (self.directory / names.pop()).unlink()
        files: list[IndexFile] = []
        try:
            for name in names:
                files.append(IndexFile.load(self.directory / name, self.max_hash_slots, self.max_index_count))
        except BaseException:
            for index in files:
                index.close()
            raise
        keep = len(files)
        reason = ""
        if not clean:
            for position, index in enumerate(files):
                if index.end_timestamp > self.checkpoint.index_timestamp:
                    keep, reason = position, "newer than the checkpoint"
                    break
            if keep and keep == len(files) and not files[-1].roll_back_to_header():
                keep, reason = keep - 1, "written after its last flush, and not repairable"
        self.files = files[:keep]
        self.dropped_files = rehashed + self._drop(files[keep:], reason)
        return self.dropped_files

    def _format_is_current(self) -> bool:
        assert self.format_path is not None
        try:
            return self.format_path.read_bytes() == FORMAT
        except FileNotFoundError:
            return False

    def trim(self, log_end: int) -> list[str]:
        """Drop the files (and every later one) that cover CommitLog bytes past ``log_end``."""
        files = self.files
        for position, index in enumerate(files):
            if index.end_offset > log_end:
                self.files = files[:position]
                dropped = self._drop(files[position:], f"past the end of the CommitLog at {log_end}")
                self.dropped_files = [*self.dropped_files, *dropped]
                return dropped
        return []

    def _drop(self, doomed: list[IndexFile], reason: str) -> list[str]:
        for index in doomed:
            log.warning("dropping index file %s (%s); it is rebuilt from the CommitLog", index.name, reason)
            index.mapped.destroy()
        return [index.name for index in doomed]

    def schedule_rebuild(self, commitlog: CommitLog, until: int) -> None:
        """Have the index thread index the CommitLog up to ``until`` (the end recovery found) before
        any batch appended since: start-up does not wait for it, and a query waits for it as for
        any batch submitted before the query."""
        self._rebuild_source = (commitlog, until)
        self._submitted += 1

    def rebuild(
        self, commitlog: CommitLog, until: int | None = None, should_stop: Callable[[], bool] = lambda: False
    ) -> int:
        """Index the CommitLog from where the last file's coverage ends (up to ``until``); returns
        messages seen. ``should_stop`` is asked between chunks: a stop interrupts the rebuild (the
        next start goes on from where it got), and :attr:`rebuild_interrupted` says so."""
        current = self.current
        start = current.end_offset if current is not None else commitlog.min_offset
        seen = 0
        records: list[CheckedRecord] = []
        placements: list[Placed] = []
        for offset, record in records_from(commitlog, start):
            if until is not None and offset >= until:
                break
            records.append(record)
            placements.append(Placed(offset, record.size, record.store_timestamp))
            if len(records) >= REBUILD_CHUNK:
                self.index(records, placements)
                seen += len(records)
                records, placements = [], []
                if should_stop():
                    self.rebuild_interrupted = True
                    break
        if records:
            self.index(records, placements)
            seen += len(records)
        if seen:
            self.flush()
            log.info("indexed %d messages from CommitLog offset %d", seen, start)
        self.rebuilt_messages = seen
        return seen

    # -- building --------------------------------------------------------------------------------

    def submit(self, records: Sequence[EncodedRecord], results: list[AppendResult]) -> None:
        """Queue an appended batch. Called under the CommitLog lock, so batches queue in log order."""
        self._pending.append((records, results))
        self._submitted += 1

    def run_once(self) -> None:
        self._drain()
        if self._dirty and time.monotonic() - self._last_flush_s >= self.flush_interval_s:
            self.flush()

    def on_stop(self) -> None:
        self._drain()
        self.flush()

    def _drain(self) -> None:
        pending = self._pending
        drained = False
        try:
            if self._rebuild_source is not None:
                commitlog, until = self._rebuild_source
                self._rebuild_source = None
                drained = True
                try:
                    self.rebuild(commitlog, until, lambda: self.stopping)
                finally:
                    self._done += 1
                if self.rebuild_interrupted:
                    # The store is closing before the rebuild got to the end: what was appended since
                    # is left to the next start's rebuild, which goes on from here in log order.
                    self._done += len(pending)
                    pending.clear()
            while pending:
                records, results = pending.popleft()
                count = 1
                if pending and len(records) < MERGE_RECORDS:
                    # Single appends queue a record each: what queued behind it goes in one call.
                    records, results = list(records), list(results)
                    while pending and len(records) < MERGE_RECORDS:
                        more_records, more_results = pending.popleft()
                        records += more_records
                        results += more_results
                        count += 1
                drained = True
                try:
                    self.index(records, results)
                finally:
                    self._done += count  # even a batch that failed is done: waiters must not hang
        finally:
            if drained:
                with self._done_changed:
                    self._done_changed.notify_all()

    def index(self, records: Sequence[KeyedRecord], placements: Sequence[Placement]) -> None:
        """Index messages in log order, rolling to a new file whenever the current one is full.
        Called by the index thread, and by recovery before the thread starts."""
        if not records:
            return
        current = self.current
        position = 0
        if current is None:
            current = self._try_roll(placements[0])
            if current is None:
                self.skipped_messages += len(records)
                return
        while True:
            position = current.index_messages(
                records, placements, position, self._key_prefixes, self.check_room
            )
            self._dirty = True
            if current.stalled is not None:
                # No room for the file's next chunk: as when a new file does not fit.
                if self._retry_allocate_s == float("-inf"):
                    log.error("indexing paused, no room for more index entries: %s", current.stalled)
                self._retry_allocate_s = time.monotonic() + RETRY_ALLOCATE_S
                self.skipped_messages += len(records) - position
                return
            if position >= len(records):
                return
            # The next message's keys do not fit: it starts a new file (an empty file takes any).
            current = self._try_roll(placements[position])
            if current is None:
                self.skipped_messages += len(records) - position
                return

    def _try_roll(self, placed: Placement) -> IndexFile | None:
        """A new file for ``placed`` on, or None while the disk has no room for one."""
        if time.monotonic() < self._retry_allocate_s:
            return None
        try:
            if self.check_room is not None:
                self.check_room(index_file_size(self.max_hash_slots, self.max_index_count))
            index = self._roll(placed.physical_offset, placed.store_timestamp)
        except DiskFullError as error:
            if self._retry_allocate_s == float("-inf"):
                log.error("indexing paused, no new index file: %s", error)
            self._retry_allocate_s = time.monotonic() + RETRY_ALLOCATE_S
            return None
        if self._retry_allocate_s != float("-inf"):
            log.warning(
                "indexing resumed at CommitLog offset %d; %d messages stored meanwhile are not indexed",
                placed.physical_offset,
                self.skipped_messages,
            )
            self._retry_allocate_s = float("-inf")
        return index

    def _roll(self, offset: int, store_timestamp: int) -> IndexFile:
        previous = self.current
        created_ms = int(self.clock() * 1000)
        if previous is not None:
            self.flush()
            created_ms = max(created_ms, index_file_time(previous.name) + 1)
        index = IndexFile.create(
            self.directory,
            index_file_name(created_ms),
            self.max_hash_slots,
            self.max_index_count,
            offset,
            store_timestamp,
        )
        with self._files_lock:
            self.files = [*self.files, index]
        return index

    def flush(self) -> None:
        """Force the current file, then move the checkpoint's index timestamp up to its end and
        write the checkpoint at once (as RocketMQ does): a checkpoint on disk that lagged the file
        would make recovery drop the file and index it all again."""
        self._last_flush_s = time.monotonic()
        current = self.current
        if current is None or not self._dirty:
            return
        self._dirty = False
        current.flush()
        self.checkpoint.index_timestamp = max(self.checkpoint.index_timestamp, current.end_timestamp)
        self.checkpoint.flush()

    def wait_indexed(self, timeout_s: float = 5.0) -> bool:
        """Wait until every batch submitted before this call is indexed; False on timeout."""
        target = self._submitted
        if self._done >= target:
            return True
        self.wakeup()
        with self._done_changed:
            return self._done_changed.wait_for(lambda: self._done >= target, timeout_s)

    # -- querying --------------------------------------------------------------------------------

    def query(
        self,
        topic: str,
        key: str,
        limit: int,
        begin_ms: int,
        end_ms: int,
        accept: Callable[[int], bool] = lambda offset: True,
    ) -> list[int]:
        """CommitLog offsets of messages indexed under ``topic#key`` stored in [begin_ms, end_ms],
        newest first, at most ``limit``. Offsets are candidates: ``accept`` (the caller's check of
        the message itself) decides which count."""
        hashed = key_hash(index_key(topic, key))
        found: list[int] = []
        for index in reversed(self.files):
            if len(found) >= limit:
                break
            if index.overlaps(begin_ms, end_ms) and index.mapped.hold():
                try:
                    index.select(hashed, begin_ms, end_ms, limit, found, accept)
                except ValueError:  # destroyed by force under this query
                    pass
                finally:
                    index.mapped.release()
            if index.begin_timestamp < begin_ms:
                break  # every older file ends before begin_ms
        return found

    # -- retention -------------------------------------------------------------------------------

    def delete_expired(self, commitlog_min: int, forcibly_after_ms: int, now_ms: int) -> int:
        """Delete files (never the current one) whose messages all lie below ``commitlog_min``."""
        with self._files_lock:
            files = self.files
            count = 0
            while count < len(files) - 1 and files[count].end_offset <= commitlog_min:
                count += 1
            expired = files[:count]
            if expired:
                self.files = files[count:]
                self.doomed = [*self.doomed, *expired]
            doomed = self.doomed
            left = [index for index in doomed if not index.mapped.try_destroy(forcibly_after_ms, now_ms)]
            self.doomed = left
        for index in expired:
            log.info("index file %s expired with CommitLog min offset %d", index.name, commitlog_min)
        return len(doomed) - len(left)

    def close(self) -> None:
        for index in self.doomed:
            index.mapped.destroy()
        self.doomed = []
        for index in self.files:
            index.close()
