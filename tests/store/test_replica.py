"""Replicated appends: a slave's store takes a master's CommitLog bytes at the same
offsets, dispatches them as its own, and refuses bytes that do not belong where they are sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.store import MessageStore
from app.store.log_replica import ReplicaError
from tests.store.conftest import TINY_COMMITLOG_FILE_SIZE, StoreFactory, message


def copy_all(master: MessageStore, slave: MessageStore, chunk: int = 1000) -> int:
    """Copy the master's log to the slave as a stream would; how many chunks it took."""
    chunks = 0
    while data := master.read_replica(slave.commitlog.max_offset, chunk):
        slave.append_replica(slave.commitlog.max_offset, data)
        chunks += 1
    return chunks


def segments(store: MessageStore) -> list[bytes]:
    return [bytes(mapped.view[: mapped.wrote_position]) for mapped in store.commitlog.files.files]


def test_a_replica_is_byte_identical_and_serves_reads_and_lookups(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    master = make_store(tmp_path / "master")
    slave = make_store(tmp_path / "slave")
    arrivals: list[tuple[str, int, int]] = []
    slave.writer.dispatchers = (
        lambda topic, queue_id, offset, tags: arrivals.append((topic, queue_id, offset)),
    )
    for number in range(60):
        master.append(
            [message(body=f"body-{number}".encode() * 10, queue_id=number % 2, KEYS=f"key-{number}")]
        )
    assert copy_all(master, slave) > 1
    assert len(master.commitlog.files.files) > 2  # the copy crossed blank END_OF_FILE records
    assert segments(slave) == segments(master)
    assert slave.commitlog.max_offset == master.commitlog.max_offset
    for queue_id in range(2):
        assert slave.max_offset("orders", queue_id) == 30
        assert [m.body for m in slave.read_messages("orders", queue_id, 0, 64)] == [
            m.body for m in master.read_messages("orders", queue_id, 0, 64)
        ]
    assert ("orders", 1, 30) in arrivals
    assert [m.body for m in slave.query_message_by_key("orders", "key-7")] == [b"body-7" * 10]
    # The slave's own queue offsets follow: were it to take writes of its own, they would go on.
    assert slave.commitlog.queue_offsets[("orders", 0)] == 30


def test_a_replica_survives_a_restart(make_store: StoreFactory, tmp_path: Path) -> None:
    master = make_store(tmp_path / "master")
    slave = make_store(tmp_path / "slave")
    for number in range(20):
        master.append([message(body=b"x" * 300, queue_id=number % 2)])
    copy_all(master, slave)
    slave.close()
    reopened = make_store(tmp_path / "slave")
    assert reopened.commitlog.max_offset == master.commitlog.max_offset
    assert reopened.max_offset("orders", 1) == 10


def test_bytes_sent_to_the_wrong_offset_are_refused(make_store: StoreFactory, tmp_path: Path) -> None:
    master = make_store(tmp_path / "master")
    slave = make_store(tmp_path / "slave")
    master.append([message(), message()])
    first = master.read_replica(0, 1)  # one whole record even past max_bytes
    rest = master.read_replica(len(first), 10_000)
    with pytest.raises(ReplicaError):
        slave.append_replica(len(first), rest)  # a gap
    slave.append_replica(0, first)
    with pytest.raises(ReplicaError):
        slave.append_replica(0, first)  # again
    assert slave.commitlog.max_offset == len(first)


def test_bytes_that_are_not_whole_records_are_refused(make_store: StoreFactory, tmp_path: Path) -> None:
    master = make_store(tmp_path / "master")
    slave = make_store(tmp_path / "slave")
    master.append([message(), message()])
    data = master.read_replica(0, 10_000)
    with pytest.raises(ReplicaError):
        slave.append_replica(0, data[:-1])  # torn
    damaged = bytearray(data)
    damaged[-1] ^= 0xFF
    with pytest.raises(ReplicaError):
        slave.append_replica(0, bytes(damaged))  # a CRC mismatch
    assert slave.commitlog.max_offset == 0
    assert slave.max_offset("orders", 0) == 0


def test_reads_stop_at_the_end_of_a_segment(make_store: StoreFactory, tmp_path: Path) -> None:
    master = make_store(tmp_path / "master")
    for _ in range(30):
        master.append([message(body=b"y" * 200)])
    records = master.read_replica(0, 1 << 20)  # the segment's records, not the next segment's
    blank = master.read_replica(len(records), 1 << 20)  # then the blank that ends it, alone
    assert 0 < len(blank) < 300
    assert len(records) + len(blank) == TINY_COMMITLOG_FILE_SIZE
    assert master.read_replica(TINY_COMMITLOG_FILE_SIZE, 1 << 20)  # the next segment
    assert master.read_replica(master.commitlog.max_offset, 1 << 20) == b""
