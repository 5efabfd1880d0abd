"""Many dirty ConsumeQueues are forced with one ``syncfs``, not one ``fdatasync`` per file.

A store with tens of thousands of queues written a little each would wait for the disk once per
segment (and once per new directory) at every thorough flush and at a graceful stop. Past
``SYNCFS_AT_QUEUES`` dirty queues the flush syncs their file system once and marks what was written
before the sync as flushed; below it, each file is flushed as before. The counts of syncs are
asserted, never times. The sync journal of the power-loss tests must see such a sync as a sync of
every file under the synced directory, or a power-loss test would lose every queue it carries.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.store import MessageStore, atomic_file
from app.store.consume_queue import UNIT_SIZE
from app.store.flush import SYNCFS_AT_QUEUES, flush_together
from tests.store.conftest import StoreFactory, message
from tests.store.crash_states import CrashStates
from tests.store.sync_journal import (
    PAGE_SIZE,
    DirectorySync,
    FileSync,
    SyncRecorder,
    path_identity,
    read_journal,
)

# The ConsumeQueue flush waits for the test: no periodic pass runs while it counts.
QUIET = {
    "message_index_enable": False,
    "flush_interval_consumequeue_ms": 600_000,
    "flush_consumequeue_thorough_interval_ms": 600_000,
}


class SyncCounter:
    """Wraps ``os.fdatasync``, ``os.fsync`` and the store's ``syncfs`` to note the path each syncs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fdatasyncs: list[str] = []
        self.fsyncs: list[str] = []
        self.syncfs: list[str] = []
        self.during_syncfs: list[Callable[[], object]] = []  # run inside syncfs, before the real one
        for owner, name, calls in (
            (os, "fdatasync", self.fdatasyncs),
            (os, "fsync", self.fsyncs),
            (atomic_file, "syncfs", self.syncfs),
        ):
            monkeypatch.setattr(owner, name, self._counting(getattr(owner, name), calls))

    def _counting(self, real: Any, calls: list[str]) -> Any:
        def counted(fd: int) -> None:
            calls.append(os.readlink(f"/proc/self/fd/{fd}"))
            if calls is self.syncfs:
                for action in self.during_syncfs:
                    action()
            real(fd)

        return counted

    @staticmethod
    def under(paths: list[str], root: Path) -> list[str]:
        return [path for path in paths if Path(path).is_relative_to(root.resolve())]


def write_once(store: MessageStore, queues: int, body: bytes = b"once") -> None:
    """One message to each of ``queues`` queues (topic ``t<n>``, queue 0)."""
    for start in range(0, queues, 50):
        store.append([message(f"t{n}", body) for n in range(start, min(start + 50, queues))])


def test_a_thorough_flush_of_many_dirty_queues_is_one_syncfs(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(**QUIET)
    write_once(store, SYNCFS_AT_QUEUES + 8)
    consumequeue_dir = store.config.consumequeue_dir
    assert store.consumequeue_flush is not None
    counter = SyncCounter(monkeypatch)
    store.consumequeue_flush.flush_all(0)
    assert counter.syncfs == [str(consumequeue_dir.resolve())]
    assert counter.under(counter.fdatasyncs, consumequeue_dir) == []
    assert counter.under(counter.fsyncs, consumequeue_dir) == []  # nor their directories
    queues = store.queues.all()
    assert len(queues) == SYNCFS_AT_QUEUES + 8
    for queue in queues:
        files = queue.files
        assert files.flushed_where == files.max_offset == UNIT_SIZE
        for mapped in files.files:
            assert mapped.flushed_position == mapped.wrote_position
            assert mapped.directory_synced  # the sync wrote the new names back
    assert len(store.dirty_queues) == 0
    # The checkpoint, written after the sync, vouches for the queues.
    assert store.checkpoint.consumequeue_offset == store.commitlog.max_offset


def test_a_thorough_flush_of_few_dirty_queues_syncs_each_file(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(**QUIET)
    write_once(store, SYNCFS_AT_QUEUES - 1)
    assert store.consumequeue_flush is not None
    counter = SyncCounter(monkeypatch)
    store.consumequeue_flush.flush_all(0)
    assert counter.syncfs == []
    segments = sorted(str(q.files.files[0].path.resolve()) for q in store.queues.all())
    assert sorted(counter.under(counter.fdatasyncs, store.config.consumequeue_dir)) == segments
    assert all(q.files.flushed_where == q.files.max_offset for q in store.queues.all())
    assert len(store.dirty_queues) == 0


def test_bytes_written_during_the_syncfs_stay_dirty(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only what was written before the sync began counts as flushed: an entry written while the
    file system is being synced may not have been written back, so it waits for the next flush."""
    store = make_store(**QUIET)
    write_once(store, SYNCFS_AT_QUEUES)
    assert store.consumequeue_flush is not None
    counter = SyncCounter(monkeypatch)
    counter.during_syncfs.append(lambda: store.append([message("t0", b"late")]))
    store.consumequeue_flush.flush_all(0)
    assert len(counter.syncfs) == 1
    late = store.queues.queues[("t0", 0)].files
    assert late.max_offset == 2 * UNIT_SIZE
    assert late.flushed_where == UNIT_SIZE
    assert late.files[0].flushed_position == UNIT_SIZE
    assert store.dirty_queues.take() == [late]  # left for the next pass; every other queue is clean


def test_a_graceful_stop_of_2000_queues_makes_one_syncfs(
    make_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_dir = tmp_path / "store"
    store = make_store(store_dir, **QUIET)
    write_once(store, 2000)
    queues = [queue.files for queue in store.queues.all()]
    consumequeue_dir = store.config.consumequeue_dir
    counter = SyncCounter(monkeypatch)
    store.close()
    assert counter.syncfs == [str(consumequeue_dir.resolve())]
    assert counter.under(counter.fdatasyncs, consumequeue_dir) == []
    assert counter.under(counter.fsyncs, consumequeue_dir) == []
    assert all(files.flushed_where == files.max_offset == UNIT_SIZE for files in queues)

    store = make_store(store_dir, **QUIET)
    assert store.recovery is not None and store.recovery.clean
    for number in range(2000):
        assert [m.body for m in store.read_messages(f"t{number}", 0, 0)] == [b"once"]


@pytest.mark.parametrize("queues", [SYNCFS_AT_QUEUES, SYNCFS_AT_QUEUES - 1])
def test_close_flushes_what_the_consumequeue_flush_left(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, queues: int
) -> None:
    """The ConsumeQueue flush's drain failed (here: did nothing): the stop flushes every queue left,
    with one syncfs when they are many, file by file when they are few."""
    store = make_store(**QUIET)
    write_once(store, queues)
    assert store.consumequeue_flush is not None
    monkeypatch.setattr(store.consumequeue_flush, "on_stop", lambda: None)
    every = [queue.files for queue in store.queues.all()]
    consumequeue_dir = store.config.consumequeue_dir
    counter = SyncCounter(monkeypatch)
    store.close()
    if queues >= SYNCFS_AT_QUEUES:
        assert len(counter.syncfs) == 1
        assert counter.under(counter.fdatasyncs, consumequeue_dir) == []
    else:
        assert counter.syncfs == []
        assert len(counter.under(counter.fdatasyncs, consumequeue_dir)) == queues
    assert all(files.flushed_where == files.max_offset == UNIT_SIZE for files in every)


def _rebuilt(event: FileSync) -> bytes:
    """A file's content from its first journaled sync (every page of it differs from nothing)."""
    content = bytearray(event.size)
    for number, page in event.pages.items():
        content[number * PAGE_SIZE : (number + 1) * PAGE_SIZE] = page
    return bytes(content[: event.size])


def test_the_sync_journal_sees_a_syncfs_as_a_sync_of_every_file_under_the_directory(
    make_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for owner, name in ((os, "fsync"), (os, "fdatasync"), (atomic_file, "syncfs")):
        monkeypatch.setattr(owner, name, getattr(owner, name))  # put back by undo() below
    journal = tmp_path / "journal"
    recorder = SyncRecorder(journal)
    recorder.install()
    try:
        store_dir = tmp_path / "store"
        store_dir.mkdir()
        store = make_store(store_dir, **QUIET)
        for topic in ("a", "b", "c"):
            for queue_id in range(2):
                # Ten entries: a full segment of eight and two in the next.
                store.append(
                    [message(topic, b"%s%d-%d" % (topic.encode(), queue_id, n), queue_id) for n in range(10)]
                )
        segments = {
            mapped.path.resolve(): mapped.path.read_bytes()
            for queue in store.queues.all()
            for mapped in queue.files.files
        }
        assert len(segments) == 12
        before = len(read_journal(journal))
        flush_together([queue.files for queue in store.queues.all()], store.config.consumequeue_dir)
        events = read_journal(journal)
        synced = events[before:]

        files = {event.path: event for event in synced if isinstance(event, FileSync)}
        for path, content in segments.items():
            assert str(path) in files, f"no sync of {path} journaled"
            assert _rebuilt(files[str(path)]) == content
        directories = {event.path: event for event in synced if isinstance(event, DirectorySync)}
        consumequeue_dir = store.config.consumequeue_dir.resolve()
        assert set(directories[str(consumequeue_dir)].entries) == {"a", "b", "c"}
        for path in segments:
            assert path.name in directories[str(path.parent)].entries

        # The disk after a power loss right after the sync holds every ConsumeQueue file as written.
        state = tmp_path / "state"
        CrashStates(events, path_identity(store_dir), time.monotonic()).build(len(events), state)
        for path, content in segments.items():
            assert (state / path.relative_to(store_dir.resolve())).read_bytes() == content
        store.close()
    finally:
        monkeypatch.undo()
        recorder.close()
