"""A slave whose disk fills: the replicated bytes it cannot store are refused whole, it asks again
from its own end once space returns, and its CommitLog ends up byte for byte its master's.

The nemesis run found slave 2 (the one whose tmpfs it fills) "differing from its master byte for
byte" at the same end offset (RELIABILITY.md, Open 2). The replica path does not write other bytes
than the master's (the tests below fill the disk mid-segment, at a segment roll, by the guard's
ratio and its reserve, restart the slave and cut it back while the disk is full). What differs is
where the logs *start*: over 85 % used (``disk_force_clean_ratio``), retention deletes the slave's
oldest segments, as SPEC 1.9 says it must, and the run's comparison joined each replica's segment
files from its own first one, so the slave's bytes began further on than the master's. Nor can a
segment file be shorter than the others: it has its full logical size from its creation (sparse,
its disk blocks grow a chunk at a time), which every comparison below checks.

How replicas should be compared (what tests/chaos/run.py's ``commitlog()`` should do, see
:func:`commitlog_bytes`): from the first offset every replica still stores, ``start = max(first
segment name)``, up to the common end, reading each segment file at the offset its name gives and
only the bytes below ``end``; the bytes before ``start`` (what retention deleted on one of them) are
not compared.

Each scenario runs in a child process (``python -m tests.store.test_replica_disk_full SCENARIO ROOT
DISK``): a byte written through a mapping past the allocated blocks of a full tmpfs is a SIGBUS,
which would kill the test process rather than fail one test.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.store import AppendResult, DiskFullError, MessageStore
from app.store.disk_guard import RESERVE_BYTES
from tests.small_disk import fill, free_bytes, mounted_tmpfs, run_apart
from tests.store.conftest import message, tiny_config

DISK_MIB = 16
SEGMENT = 256 * 1024
CHUNK = 16 * 1024  # a replicated frame (FRAME) needs more than one: the next chunk is allocated for it
FRAME = 48 * 1024  # what the master sends at a time (the broker's HA stream: 256 KiB)
FULL_LEFT = 64 * 1024  # what the nemesis leaves free: the guard refuses writes, as in the chaos run
LARGEST_BODY = 4000

Scenario = Callable[[Path, Path], None]


# -- the stores and the stream ---------------------------------------------------------------------


def open_store(store_dir: Path, *, replica: bool = False, **overrides: Any) -> MessageStore:
    values: dict[str, Any] = {
        "commitlog_file_size": SEGMENT,
        "commitlog_chunk_size": CHUNK,
        "consumequeue_file_entries": 1_000,
        "disk_refuse_writes_ratio": 91,  # as in the chaos run
        "disk_check_interval_ms": 50,
        "clean_first_delay_ms": 3_600_000,  # no retention pass but the ones a test runs
    }
    values.update(overrides)
    store = MessageStore(tiny_config(store_dir, **values)).open()
    store.replica = replica
    return store


class Producer:
    """Appends messages of varied sizes to a master, a few per batch, so that the blanks ending its
    segments vary; each body says which message it is."""

    def __init__(self, master: MessageStore, seed: int) -> None:
        self.master = master
        self.random = random.Random(seed)
        self.sent = 0

    def batch(self) -> list[AppendResult]:
        messages = []
        for number in range(self.sent, self.sent + self.random.randint(1, 5)):
            body = f"{number}:".encode() + bytes([number % 251]) * self.random.randint(100, LARGEST_BODY)
            messages.append(message(body=body, queue_id=number % 3, KEYS=f"key-{number}"))
        self.sent += len(messages)
        return self.master.append(messages)

    def until(self, done: Callable[[int], bool]) -> None:
        """Append batches until ``done(the master's CommitLog end)``."""
        while not done(self.master.commitlog.max_offset):
            self.batch()


def visible(store: MessageStore) -> tuple[int, dict[tuple[str, int], int]]:
    """What a reader of the store can see: the end of the CommitLog and of every queue."""
    return store.commitlog.max_offset, {key: queue.max_offset for key, queue in store.consume_queues.items()}


def replicate(
    master: MessageStore, slave: MessageStore, until: int | None = None, max_bytes: int = FRAME
) -> DiskFullError | None:
    """Copy the master's CommitLog to the slave as HaSlave does: from the slave's own end, whole
    records at most ``max_bytes`` at a time, each chunk written with ``append_replica``. A refused
    chunk (DiskFullError) ends the stream as it ends HaSlave's connection: it is returned, once
    checked to have stored nothing, and the slave asks again from its own end later. None once the
    slave holds everything (or everything up to ``until``)."""
    while until is None or slave.commitlog.max_offset < until:
        offset = slave.commitlog.max_offset
        data = master.read_replica(offset, max_bytes)
        if not data:
            return None
        before = visible(slave)
        try:
            slave.append_replica(offset, data)
        except DiskFullError as refusal:
            after = visible(slave)
            assert after == before, f"a chunk refused at {offset} changed the slave: {before} -> {after}"
            return refusal
    return None


def catch_up(
    master: MessageStore, slave: MessageStore, max_bytes: int = FRAME, timeout_s: float = 15
) -> None:
    """Space is back: the slave asks again (HaSlave's backoff) until it holds all the master has."""
    deadline = time.monotonic() + timeout_s
    while (refusal := replicate(master, slave, max_bytes=max_bytes)) is not None:
        assert time.monotonic() < deadline, f"the slave still refused after {timeout_s} s: {refusal}"
        time.sleep(0.05)


# -- comparing replicas ----------------------------------------------------------------------------


def commitlog_bytes(store_dir: Path, start: int, end: int) -> bytes:
    """The CommitLog's bytes ``[start, end)`` from its files: each segment file read at the offset
    its name gives, only its bytes inside the range. How two replicas are compared: ``start`` is the
    first offset both still store (the larger first segment name), ``end`` the end they agree on."""
    data = bytearray()
    for path in sorted(p for p in (store_dir / "commitlog").iterdir() if p.name.isdigit()):
        base = int(path.name)
        with path.open("rb") as segment:
            size = os.fstat(segment.fileno()).st_size
            if base + size <= start or base >= end:
                continue
            segment.seek(max(start, base) - base)
            data += segment.read(min(end, base + size) - max(start, base))
    assert len(data) == end - start, f"{store_dir} does not hold [{start}, {end}) in its files"
    return bytes(data)


def joined_from_first_segment(store_dir: Path, end: int) -> bytes:
    """The chaos run's comparison as it was: every segment file joined in name order, cut at ``end``
    minus the first one's offset. Two replicas whose first segments differ never compare equal."""
    segments = sorted(path for path in (store_dir / "commitlog").iterdir() if path.name.isdigit())
    data = b"".join(path.read_bytes() for path in segments)
    return data[: end - int(segments[0].name)]


def first_difference(left: bytes, right: bytes) -> int:
    return next(
        (i for i, (a, b) in enumerate(zip(left, right, strict=False)) if a != b), min(len(left), len(right))
    )


def assert_same_log(master: MessageStore, slave: MessageStore) -> None:
    """The slave's CommitLog is the master's: the same end and, from the first segment both still
    hold, the same segments, each with the same written position and the same bytes up to it, in
    memory and in the files. No segment file is shorter than its full size on either."""
    end = master.commitlog.max_offset
    assert slave.commitlog.max_offset == end, f"ends differ: master {end}, slave {slave.commitlog.max_offset}"
    start = max(master.commitlog.min_offset, slave.commitlog.min_offset)
    theirs = {m.file_from_offset: m for m in master.commitlog.files.files if m.file_from_offset >= start}
    ours = {m.file_from_offset: m for m in slave.commitlog.files.files if m.file_from_offset >= start}
    assert sorted(ours) == sorted(theirs), f"segments differ: master {sorted(theirs)}, slave {sorted(ours)}"
    for offset, mapped in ours.items():
        master_segment = theirs[offset]
        assert mapped.wrote_position == master_segment.wrote_position, (
            f"segment {offset}: written to {mapped.wrote_position} on the slave, "
            f"{master_segment.wrote_position} on the master"
        )
        left = bytes(master_segment.view[: master_segment.wrote_position])
        right = bytes(mapped.view[: mapped.wrote_position])
        assert left == right, (
            f"segment {offset}: the bytes differ from offset {offset + first_difference(left, right)}"
        )
    for store in (master, slave):
        sizes = {path.name: path.stat().st_size for path in store.config.commitlog_dir.iterdir()}
        assert set(sizes.values()) == {store.config.commitlog_file_size}, (
            f"segment files not full size: {sizes}"
        )
    master_bytes = commitlog_bytes(master.config.store_dir, start, end)
    slave_bytes = commitlog_bytes(slave.config.store_dir, start, end)
    assert master_bytes == slave_bytes, (
        f"the files differ from offset {start + first_difference(master_bytes, slave_bytes)}"
    )


# -- the scenarios (each runs in a child process) ---------------------------------------------------


def fills_mid_segment_and_at_a_roll(root: Path, disk: Path) -> None:
    master = open_store(root / "master")
    slave = open_store(disk / "slave", replica=True)
    producer = Producer(master, seed=1)
    producer.until(lambda end: end >= 2 * SEGMENT + SEGMENT // 8)
    assert replicate(master, slave) is None
    assert_same_log(master, slave)

    # Mid-segment: no room for the next chunk (the guard keeps its reserve), the master goes on across
    # two segment rolls; the slave stops in the middle of its segment.
    producer.until(lambda end: SEGMENT // 8 <= end % SEGMENT <= SEGMENT // 2)
    assert replicate(master, slave) is None
    filler = fill(disk, leave_bytes=RESERVE_BYTES + CHUNK // 2)
    producer.until(lambda end: end >= slave.commitlog.max_offset + 2 * SEGMENT)
    refusal = replicate(master, slave)
    assert refusal is not None, "the slave stored everything on a full disk"
    last = slave.commitlog.files.last_file
    assert last is not None and 0 < last.wrote_position < SEGMENT - CHUNK, last
    assert last.wrote_position <= last.allocated, last
    filler.unlink()
    catch_up(master, slave)
    assert_same_log(master, slave)

    # At a roll: the slave holds its segment to the end (blank included), then the next segment's
    # first frame needs more disk than the spare segment's first chunk, and there is none.
    boundary = slave.commitlog.max_offset - slave.commitlog.max_offset % SEGMENT + SEGMENT
    producer.until(lambda end: end >= boundary + 3 * FRAME)
    assert replicate(master, slave, until=boundary) is None and slave.commitlog.max_offset == boundary
    filler = fill(disk, leave_bytes=RESERVE_BYTES + CHUNK // 2)
    producer.until(lambda end: end >= boundary + SEGMENT + SEGMENT // 4)
    assert replicate(master, slave) is not None and slave.commitlog.max_offset == boundary

    # Restarted there, on the full disk: it opens at the same end, serves reads, still refuses.
    slave.close()
    slave = open_store(disk / "slave", replica=True)
    assert slave.commitlog.max_offset == boundary
    assert slave.read_messages("orders", 0, 0, 1)[0].body.startswith(b"0:")
    assert replicate(master, slave) is not None and slave.commitlog.max_offset == boundary
    filler.unlink()
    catch_up(master, slave)
    assert_same_log(master, slave)

    # Refused by the guard's ratio (91 %), as the nemesis fills the disk: mid-segment and across a roll.
    filler = fill(disk, leave_bytes=FULL_LEFT)
    producer.until(lambda end: end >= slave.commitlog.max_offset + SEGMENT + SEGMENT // 3)
    refusal = replicate(master, slave)
    assert refusal is not None and "% full" in str(refusal), refusal
    filler.unlink()
    catch_up(master, slave)
    assert_same_log(master, slave)
    slave.close()
    master.close()


BIG_SEGMENT = 6 << 20
BIG_CHUNK = 256 << 10


def restarts_on_a_full_disk(root: Path, disk: Path) -> None:
    """A slave restarted on a full disk, its last segment well written: once the filler goes there
    is room for the next chunk, though not for the segment's written bytes again. Those have their
    disk blocks: asking the guard for them again would keep the slave refused for good."""
    sizes: dict[str, Any] = {"commitlog_file_size": BIG_SEGMENT, "commitlog_chunk_size": BIG_CHUNK}
    master = open_store(root / "master", **sizes)
    slave = open_store(disk / "slave", replica=True, **sizes)
    producer = Producer(master, seed=2)
    producer.until(lambda end: end >= BIG_SEGMENT + 3_600_000)
    assert replicate(master, slave, max_bytes=BIG_CHUNK) is None
    filler = fill(disk, leave_bytes=FULL_LEFT)
    slave.disk_guard.refresh()  # its next probe: writes refused, even into blocks allocated before
    producer.until(lambda end: end >= slave.commitlog.max_offset + 100_000)
    assert replicate(master, slave, max_bytes=BIG_CHUNK) is not None
    end = slave.commitlog.max_offset

    slave.close()  # on the full disk
    slave = open_store(disk / "slave", replica=True, **sizes)
    assert slave.commitlog.max_offset == end
    assert slave.read_messages("orders", 1, 0, 1)[0].body.startswith(b"1:")
    assert replicate(master, slave, max_bytes=BIG_CHUNK) is not None
    assert slave.commitlog.max_offset == end

    filler.unlink()
    last = slave.commitlog.files.last_file
    assert last is not None
    assert free_bytes(disk) - BIG_CHUNK >= RESERVE_BYTES > free_bytes(disk) - last.wrote_position
    catch_up(master, slave, max_bytes=BIG_CHUNK)
    assert_same_log(master, slave)
    slave.close()
    master.close()


def deletes_its_oldest_segments_on_a_full_disk(root: Path, disk: Path) -> None:
    """Over 85 % used, retention deletes the slave's oldest segments whatever their age: its log
    then starts later than its master's, and is the master's from there on."""
    master = open_store(root / "master")
    slave = open_store(disk / "slave", replica=True)
    producer = Producer(master, seed=3)
    producer.until(lambda end: end >= 4 * SEGMENT + SEGMENT // 3)
    assert replicate(master, slave) is None
    filler = fill(disk, leave_bytes=FULL_LEFT)
    producer.until(lambda end: end >= slave.commitlog.max_offset + SEGMENT)
    assert replicate(master, slave) is not None
    report = slave.clean_service.clean()  # the pass the clean service runs every 10 s
    assert report.forced and report.commitlog_segments >= 2, report
    filler.unlink()
    catch_up(master, slave)

    end, start = master.commitlog.max_offset, slave.commitlog.min_offset
    assert master.commitlog.min_offset == 0 < start, f"the slave's log starts at {start}"
    assert_same_log(master, slave)  # from the slave's first segment on
    master_dir, slave_dir = master.config.store_dir, slave.config.store_dir
    assert commitlog_bytes(master_dir, start, end) == commitlog_bytes(slave_dir, start, end)
    # The chaos run's comparison, from each replica's own first segment, calls this a divergence.
    assert joined_from_first_segment(master_dir, end) != joined_from_first_segment(slave_dir, end), (
        "the replicas compare equal from their own first segments"
    )
    slave.close()
    master.close()


def is_cut_back_on_a_full_disk(root: Path, disk: Path) -> None:
    """A failover: the new master never had the old master's tail, and the slave, its disk full,
    cuts its log back to where the two agree (HaSlave's ``truncate_to``), then takes the new
    master's bytes. The old master's records past the new end go with the cut: zeros, so that a
    recovery walking past the end finds nothing."""
    old_master = open_store(root / "old-master")
    new_master = open_store(root / "new-master")
    slave = open_store(disk / "slave", replica=True)
    old = Producer(old_master, seed=4)
    records: list[int] = []  # where each of the old master's records starts
    while old_master.commitlog.max_offset < 3 * SEGMENT + SEGMENT // 8:
        records += [result.physical_offset for result in old.batch()]
    cut = next(offset for offset in records if offset >= 2 * SEGMENT + SEGMENT // 2)
    assert replicate(old_master, new_master, until=cut, max_bytes=1) is None  # a record at a time
    assert new_master.commitlog.max_offset == cut
    assert replicate(old_master, slave) is None

    filler = fill(disk, leave_bytes=FULL_LEFT)
    slave.disk_guard.refresh()  # its next probe: writes refused, even into blocks allocated before
    slave.cut_back(cut)
    assert slave.commitlog.max_offset == cut and len(slave.commitlog.files.files) == 3
    Producer(new_master, seed=5).until(lambda end: end >= cut + 8_000)
    assert new_master.commitlog.max_offset < 3 * SEGMENT - SEGMENT // 4  # short of the old tail
    assert replicate(new_master, slave) is not None
    filler.unlink()
    catch_up(new_master, slave)
    assert_same_log(new_master, slave)
    last = slave.commitlog.files.last_file
    assert last is not None
    tail = bytes(last.view[last.wrote_position :])
    assert tail == bytes(len(tail)), (
        f"the old master's bytes are left past the end, from {last.end_offset + first_difference(tail, bytes(len(tail)))}"
    )
    for store in (slave, new_master, old_master):
        store.close()


SCENARIOS: dict[str, Scenario] = {
    scenario.__name__: scenario
    for scenario in (
        fills_mid_segment_and_at_a_roll,
        restarts_on_a_full_disk,
        deletes_its_oldest_segments_on_a_full_disk,
        is_cut_back_on_a_full_disk,
    )
}


# -- the tests -------------------------------------------------------------------------------------


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with mounted_tmpfs(tmp_path / "disk", DISK_MIB) as mount_point:
        yield mount_point


def run_scenario(scenario: Scenario, root: Path, disk: Path) -> None:
    run_apart(["tests.store.test_replica_disk_full", scenario.__name__, str(root), str(disk)], 240)


def test_a_slave_refused_mid_segment_and_at_a_roll_catches_up_byte_for_byte(
    tmp_path: Path, disk: Path
) -> None:
    run_scenario(fills_mid_segment_and_at_a_roll, tmp_path, disk)


def test_a_slave_restarted_on_a_full_disk_catches_up_once_space_returns(tmp_path: Path, disk: Path) -> None:
    run_scenario(restarts_on_a_full_disk, tmp_path, disk)


def test_a_slave_whose_retention_deleted_segments_is_its_master_from_its_first_segment_on(
    tmp_path: Path, disk: Path
) -> None:
    run_scenario(deletes_its_oldest_segments_on_a_full_disk, tmp_path, disk)


def test_a_slave_cut_back_on_a_full_disk_follows_the_new_master_byte_for_byte(
    tmp_path: Path, disk: Path
) -> None:
    run_scenario(is_cut_back_on_a_full_disk, tmp_path, disk)


if __name__ == "__main__":
    name, root_dir, disk_dir = sys.argv[1:4]
    SCENARIOS[name](Path(root_dir), Path(disk_dir))
