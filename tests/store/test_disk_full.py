"""A full disk, store by store: files are allocated before they are mapped, a write that does not
fit is refused whole with DiskFullError, the index and the small files survive it, and a store
opens on a full disk. Most tests run on a real small file system (a size-limited tmpfs)."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.store import DiskFullError, Message, MessageStore, index_file
from app.store.atomic_file import write_atomically
from app.store.consumer_offsets import OffsetPersistService
from app.store.disk_guard import RESERVE_BYTES
from app.store.mapped_file import MappedFile, allocate
from tests.small_disk import fill, free_bytes, mounted_tmpfs, run_apart
from tests.store.conftest import message, tiny_config, wait_until

DISK_MIB = 16
SEGMENT = 256 * 1024
BODY = 20 * 1024


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", DISK_MIB) as mount_point:
        yield mount_point


@pytest.fixture
def open_store(disk: Path) -> Iterator[Any]:
    stores: list[MessageStore] = []

    def factory(**overrides: Any) -> MessageStore:
        values: dict[str, Any] = {"commitlog_file_size": SEGMENT, "disk_refuse_writes_ratio": 100}
        values.update(overrides)
        store = MessageStore(tiny_config(disk / "store", **values)).open()
        stores.append(store)
        return store

    yield factory
    for store in stores:
        store.close()


def blocks_allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def read_all(store: MessageStore, queue_id: int = 0) -> list[bytes]:
    bodies: list[bytes] = []
    while found := store.read_messages("orders", queue_id, len(bodies), 100):
        bodies += [m.body for m in found]
    return bodies


def batch(start: int, count: int, queue_id: int = 0) -> list[Message]:
    return [
        message(body=n.to_bytes(4, "big") * (BODY // 4), queue_id=queue_id)
        for n in range(start, start + count)
    ]


def spare_ready(store: MessageStore) -> bool:
    return bool(store.commitlog.files.prepared)


def state(store: MessageStore) -> tuple[int, dict[tuple[str, int], int]]:
    """What a reader can see: the end of the CommitLog and of every queue that holds anything."""
    queues = {key: queue.max_offset for key, queue in store.consume_queues.items() if queue.max_offset}
    return store.commitlog.max_offset, queues


# -- allocation ----------------------------------------------------------------------------------


def test_a_new_file_costs_its_first_chunk_and_every_written_byte_is_allocated(make_store: Any) -> None:
    store = make_store(
        commitlog_file_size=64 << 20,
        commitlog_chunk_size=1 << 20,
        consumequeue_file_entries=300_000,
        max_hash_slots=1024,
        max_index_count=1_000_000,
    )
    store.append([message(KEYS="k")])
    assert store.index_service is not None and store.index_service.wait_indexed()
    wait_until(lambda: spare_ready(store), what="the next segment prepared ahead")
    segment, spare = store.commitlog.files.files[0], store.commitlog.files.prepared[0]
    queue = store.consume_queues[("orders", 0)].files.files[0]
    index = store.index_service.files[0].mapped
    for mapped, allocated in (
        (segment, 1 << 20),
        (spare, 1 << 20),
        (queue, 4096),  # one page: 204 entries
        (index, 40 + 1024 * 4 + (2 << 20)),  # header, slots and the first chunk of entries
    ):
        assert os.stat(mapped.path).st_size == mapped.file_size, mapped.path  # the logical size
        assert mapped.allocated == min(allocated + 4095 - (allocated + 4095) % 4096, mapped.file_size)
        assert mapped.allocated >= mapped.wrote_position
        assert mapped.allocated <= blocks_allocated(mapped.path) < mapped.allocated + (64 << 10), mapped.path
    # The next segment is prepared apart: the CommitLog's directory holds only 20-digit segments.
    assert [p.name for p in store.config.commitlog_dir.iterdir()] == [segment.path.name]
    assert spare.path.parent == store.config.spare_dir and spare.path.name.isdigit()


def test_a_queue_allocates_a_chunk_ahead_of_its_entries_doubling_up_to_the_chunk_size(
    make_store: Any,
) -> None:
    store = make_store(consumequeue_file_entries=300_000, consumequeue_chunk_size=16 << 10)
    files = store.consume_queues
    seen = []
    for _ in range(10):
        store.append([message(body=b"x") for _ in range(250)])
        segment = files[("orders", 0)].files.files[0]
        seen.append(segment.allocated)
        assert segment.wrote_position <= segment.allocated <= blocks_allocated(segment.path)
    # 4 KiB, then 8 KiB, 16 KiB, then 16 KiB at a time.
    assert sorted(set(seen)) == [8 << 10, 16 << 10, 32 << 10, 48 << 10, 64 << 10]


def test_a_file_that_does_not_fit_raises_disk_full_and_leaves_nothing(disk: Path) -> None:
    fill(disk, leave_bytes=1 << 20)
    free = free_bytes(disk)
    with pytest.raises(DiskFullError, match="no room"):
        MappedFile.create(disk / "segments", 0, 2 << 20)
    assert list((disk / "segments").iterdir()) == []
    assert free_bytes(disk) == free


def test_without_posix_fallocate_zeros_fill_the_holes_and_never_overwrite_data(
    disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unsupported(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    # The file systems at hand all support posix_fallocate: this one pretends not to.
    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    path = disk / "zeros"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.ftruncate(fd, 8 << 20)
        os.pwrite(fd, b"data" * 1024, 1 << 20)  # a page of data inside the range
        allocate(fd, 0, 3 << 20, path)
        assert os.pread(fd, 4096, 1 << 20) == b"data" * 1024
    finally:
        os.close(fd)
    assert (3 << 20) <= blocks_allocated(path) < (4 << 20)
    fill(disk, leave_bytes=1 << 20)
    with pytest.raises(DiskFullError):
        MappedFile.create(disk, 1 << 30, 2 << 20)
    assert not (disk / "00000000001073741824").exists()


def run_chunk_child(scenario: str, disk: Path) -> dict[str, Any]:
    """Run :mod:`tests.store.chunk_child` on ``disk``; a SIGBUS there is a byte written past the
    allocated blocks."""
    out = run_apart(["tests.store.chunk_child", scenario, str(disk / "store")], 120)
    found: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return found


def test_a_commitlog_chunk_that_does_not_fit_mid_segment_refuses_the_batch_whole(disk: Path) -> None:
    found = run_chunk_child("commitlog", disk)
    assert found["refused"] and "allocating 1048576 more" in found["refused"], found
    assert found["mid_segment"] and found["wrote"] <= found["allocated"], found
    assert found["read_back"] == found["acked"] and found["in_order"], found
    # Writes resume once space returns, without a restart, after what was stored.
    assert found["resumed_at"] == found["acked"] and found["after"] == found["acked"] + 1


def test_a_consume_queue_chunk_that_does_not_fit_refuses_the_batch_whole(disk: Path) -> None:
    found = run_chunk_child("consumequeue", disk)
    assert found["refused"] and found["unchanged"], found
    assert found["allocated"] == 2 * 4096 < found["file_size"], found  # the next page, once freed
    assert found["resumed_at"] == 4096 // 20


# -- a batch is refused whole --------------------------------------------------------------------


def test_a_batch_is_refused_whole_when_a_commitlog_segment_it_needs_does_not_fit(
    open_store: Any, disk: Path
) -> None:
    store = open_store()
    acked = store.append(batch(0, 4))
    wait_until(lambda: spare_ready(store), what="the next segment allocated ahead")
    # Room for one more segment: the batch needs the spare and two more.
    fill(disk, leave_bytes=RESERVE_BYTES + SEGMENT + SEGMENT // 2)
    before = state(store)
    with pytest.raises(DiskFullError):
        store.append(batch(100, 3 * SEGMENT // BODY + 4))
    assert state(store) == before
    # What fits still goes in, and everything acknowledged reads back.
    acked += store.append(batch(200, 4))
    assert read_all(store) == [m.body for m in batch(0, 4) + batch(200, 4)]
    assert [store.look_message(r.physical_offset) is not None for r in acked] == [True] * 8


def test_a_batch_is_refused_whole_when_a_consume_queue_segment_it_needs_does_not_fit(
    open_store: Any, disk: Path
) -> None:
    store = open_store(commitlog_file_size=1 << 20)
    store.append(batch(0, 8))  # the queue's first segment (8 entries) is full
    wait_until(lambda: spare_ready(store), what="the next segment allocated ahead")
    filler = fill(disk, leave_bytes=RESERVE_BYTES)  # the CommitLog segment has room, the disk none
    before = state(store)
    with pytest.raises(DiskFullError):
        store.append([*batch(8, 1, queue_id=1), *batch(9, 1, queue_id=0)])
    assert state(store) == before
    assert read_all(store) == [m.body for m in batch(0, 8)]

    filler.unlink()
    results = store.append(batch(10, 1, queue_id=0))
    assert results[0].queue_offset == 8


def test_a_single_message_is_refused_whole_when_its_consume_queue_segment_does_not_fit(
    open_store: Any, disk: Path
) -> None:
    """One message at a time takes the single path (app.store.single_append) while its segments
    have room; the one whose entry needs a new ConsumeQueue segment is refused whole."""
    store = open_store(commitlog_file_size=1 << 20)
    for one in batch(0, 8):  # the queue's first segment (8 entries) is full
        store.append([one])
    wait_until(lambda: spare_ready(store), what="the next segment allocated ahead")
    filler = fill(disk, leave_bytes=RESERVE_BYTES)  # the CommitLog segment has room, the disk none
    before = state(store)
    with pytest.raises(DiskFullError):
        store.append(batch(8, 1))
    assert state(store) == before
    assert read_all(store) == [m.body for m in batch(0, 8)]

    filler.unlink()
    results = store.append(batch(9, 1))
    assert results[0].queue_offset == 8
    assert read_all(store) == [m.body for m in batch(0, 8) + batch(9, 1)]


# -- the message index ----------------------------------------------------------------------------


def wait_until_indexed_again(store: MessageStore) -> None:
    """Append a keyed message until one is found by its key: indexing resumed."""
    index = store.index_service
    assert index is not None

    def indexed_again() -> bool:
        store.append([message(body=b"c", KEYS="again")])
        return bool(index.wait_indexed() and store.query_message_by_key("orders", "again"))

    wait_until(indexed_again, what="indexing to resume")


def test_the_index_skips_while_no_index_file_fits_and_resumes_when_space_returns(
    open_store: Any, disk: Path
) -> None:
    store = open_store(
        max_hash_slots=16, max_index_count=8, commitlog_file_size=1 << 20, consumequeue_file_entries=64
    )
    index = store.index_service
    assert index is not None
    store.append([message(body=b"a", KEYS=f"early{i}") for i in range(6)])  # 6 of the file's 7 entries
    assert index.wait_indexed()
    filler = fill(disk, leave_bytes=RESERVE_BYTES)
    store.append([message(body=b"b", KEYS=f"late{i}") for i in range(3)])  # the file is full: skipped
    assert index.wait_indexed() and index.skipped_messages > 0
    assert index._thread is not None and index._thread.is_alive()
    assert [m.body for m in store.query_message_by_key("orders", "early1")] == [b"a"]

    filler.unlink()
    wait_until_indexed_again(store)


def test_the_index_pauses_when_its_next_chunk_does_not_fit_and_resumes_when_space_returns(
    open_store: Any, disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_file, "ENTRY_CHUNK", 64 << 10)
    monkeypatch.setattr(index_file, "ROOM_ENTRIES", 16)
    store = open_store(
        max_hash_slots=16,
        max_index_count=100_000,
        commitlog_file_size=1 << 20,
        consumequeue_file_entries=1_000,
    )
    index = store.index_service
    assert index is not None
    # The header and slots (104 bytes) and a chunk, in pages: 3,476 entries. Two keys a message.
    store.append([message(body=b"a", KEYS=f"early{i} also{i}") for i in range(1720)])
    assert index.wait_indexed() and index.skipped_messages == 0
    mapped = index.files[0].mapped
    allocated = mapped.allocated
    filler = fill(disk, leave_bytes=RESERVE_BYTES + (16 << 10))  # room for no index chunk
    store.append([message(body=b"b", KEYS=f"late{i} also{i}") for i in range(30)])  # stored, not all indexed
    assert index.wait_indexed() and index.skipped_messages > 0
    assert mapped.allocated == allocated and index.files[0].next_entry * 20 <= allocated
    assert index._thread is not None and index._thread.is_alive()
    assert [m.body for m in store.query_message_by_key("orders", "early1")] == [b"a"]

    filler.unlink()
    wait_until_indexed_again(store)
    assert mapped.allocated > allocated and len(index.files) == 1


def test_a_store_opens_on_a_full_disk_even_when_the_index_needs_a_new_file(
    open_store: Any, disk: Path
) -> None:
    store = open_store(commitlog_file_size=1 << 20)
    store.append(batch(0, 3))
    store.close()
    for path in (disk / "store" / "index").iterdir():
        path.unlink()  # lost: the index is rebuilt from the CommitLog at start, into a new file
    fill(disk)
    reopened = open_store(commitlog_file_size=1 << 20)
    assert reopened.index_service is not None and reopened.index_service.wait_indexed()
    assert reopened.index_service.skipped_messages == 3
    assert read_all(reopened) == [m.body for m in batch(0, 3)]


# -- starting on a full disk ------------------------------------------------------------------------


def test_a_store_opens_on_a_full_disk_serves_reads_and_refuses_writes_until_space_returns(
    open_store: Any, disk: Path
) -> None:
    store = open_store()
    acked = store.append(batch(0, 30))
    store.close()
    # A crash cut the creation of the next segments short: empty files, which need room to size.
    commitlog = disk / "store" / "commitlog"
    (commitlog / f"{(acked[-1].physical_offset // SEGMENT + 1) * SEGMENT:020d}").touch()
    (disk / "store" / "consumequeue" / "orders" / "0" / f"{4 * 8 * 20:020d}").touch()
    filler = fill(disk)  # not a byte left

    reopened = open_store()
    assert read_all(reopened) == [m.body for m in batch(0, 30)]
    with pytest.raises(DiskFullError):
        for start in range(100, 1000, 10):  # into the allocated rest of the segment, then refused
            reopened.append(batch(start, 10))

    filler.unlink()
    wait_until(lambda: bool(reopened.append(batch(2000, 1))), what="writes accepted again")


def test_a_store_closes_cleanly_on_a_full_disk(open_store: Any, disk: Path) -> None:
    # No background flush writes the checkpoint before the close: it is a new file then.
    store = open_store(flush_interval_consumequeue_ms=3_600_000, flush_interval_index_ms=3_600_000)
    store.append(batch(0, 3))
    fill(disk)
    store.close()
    assert not store.is_open and not (disk / "store" / "abort").exists()
    assert read_all(open_store()) == [m.body for m in batch(0, 3)]


# -- the disk guard ---------------------------------------------------------------------------------


def test_the_guard_is_asked_before_each_new_segment_not_only_on_its_timer(tmp_path: Path) -> None:
    usage = [50.0]
    frozen = 1_000_000.0  # the guard's interval never elapses: only a new segment re-reads the disk
    store = MessageStore(tiny_config(tmp_path / "store"), clock=lambda: frozen, disk_usage=lambda: usage[0])
    store.open()
    try:
        store.append([message()])
        wait_until(lambda: spare_ready(store), what="the next segment allocated ahead")
        usage[0] = 95.0
        assert store.disk_guard.writable
        for _ in range(200):  # roll onto the spare: the next one is refused
            if not store.disk_guard.writable:
                break
            store.append([message(body=bytes(512))])
            wait_until(
                lambda: spare_ready(store) or not store.disk_guard.writable, what="a spare or a refusal"
            )
        with pytest.raises(DiskFullError, match="95.0 % full"):
            store.append([message()])
    finally:
        store.close()


# -- small files ----------------------------------------------------------------------------------


def test_a_small_file_that_does_not_fit_keeps_the_old_content(disk: Path) -> None:
    path = disk / "config" / "topics.json"
    write_atomically(path, b"old")
    filler = fill(disk)
    with pytest.raises(DiskFullError):
        write_atomically(path, bytes(64 * 1024))
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in path.parent.iterdir()) == ["topics.json"]
    filler.unlink()
    write_atomically(path, b"new")
    assert path.read_bytes() == b"new"


def test_consumer_offsets_are_persisted_on_the_next_pass_once_space_returns(
    open_store: Any, disk: Path
) -> None:
    store = open_store()
    offsets = store.consumer_offsets
    offsets.commit("billing", "orders", 0, 7)
    filler = fill(disk)
    service = OffsetPersistService(offsets, 3_600_000)
    service.run_once()  # logs, does not raise: the offsets stay in memory
    assert not offsets.path.exists() and offsets.committed("billing", "orders", 0) == 7
    filler.unlink()
    service.run_once()
    assert b'"0": 7' in offsets.path.read_bytes()
