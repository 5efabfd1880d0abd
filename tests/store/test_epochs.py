"""The epoch log and the point two logs share; a slave's log cut back to it."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.store.epochs import EpochLog, common_point
from tests.store.conftest import StoreFactory, message
from tests.store.test_replica import copy_all, segments


@pytest.mark.parametrize(
    ("master", "master_end", "slave", "slave_end", "expected"),
    [
        # One lineage: the slave is a prefix of the master, or the master of the slave.
        ([(0, 0)], 1000, [(0, 0)], 800, 800),
        ([(0, 0)], 700, [(0, 0)], 800, 700),
        # The slave was the master until 900 and went on alone: it keeps up to the new epoch.
        ([(0, 0), (1, 900)], 1500, [(0, 0)], 1000, 900),
        ([(0, 0), (1, 900)], 1500, [(0, 0)], 850, 850),
        # The slave follows the new master already.
        ([(0, 0), (1, 900)], 1500, [(0, 0), (1, 900)], 1200, 1200),
        # The slave led an epoch the master never knew: back to the last one they share.
        ([(0, 0), (1, 900), (3, 1200)], 2000, [(0, 0), (2, 950)], 1100, 900),
        # Nothing shared.
        ([(1, 0)], 500, [(0, 0)], 300, 0),
    ],
)
def test_the_common_point_is_the_end_of_the_last_shared_epoch(
    master: list[tuple[int, int]],
    master_end: int,
    slave: list[tuple[int, int]],
    slave_end: int,
    expected: int,
) -> None:
    assert common_point(master, master_end, slave, slave_end) == expected


def test_the_epoch_log_survives_a_reopen_and_never_goes_back(tmp_path: Path) -> None:
    path = tmp_path / "epochs.json"
    log = EpochLog(path)
    assert log.entries == [(0, 0)] and log.last == 0
    log.begin(2, 4096)
    assert EpochLog(path).entries == [(0, 0), (2, 4096)]
    with pytest.raises(ValueError, match="older"):
        log.begin(1, 8192)
    log.replace([(0, 0), (3, 100)])
    assert EpochLog(path).last == 3


def test_a_cut_replica_drops_the_tail_from_its_queues_and_takes_the_masters_instead(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    master = make_store(tmp_path / "master")
    slave = make_store(tmp_path / "slave")
    for number in range(10):
        master.append([message(body=f"shared-{number}".encode(), queue_id=number % 2)])
    copy_all(master, slave)
    common = master.commitlog.max_offset
    # The slave's own tail (a former master's), which the master never had.
    for number in range(6):
        slave.append([message(body=f"alone-{number}".encode(), queue_id=number % 2)])
    for number in range(4):
        master.append([message(body=f"new-{number}".encode(), queue_id=number % 2)])

    slave.cut_back(common)
    assert slave.commitlog.max_offset == common
    assert [slave.max_offset("orders", queue_id) for queue_id in (0, 1)] == [5, 5]
    copy_all(master, slave)
    assert segments(slave) == segments(master)
    for queue_id in (0, 1):
        assert [m.body for m in slave.read_messages("orders", queue_id, 0, 64)] == [
            m.body for m in master.read_messages("orders", queue_id, 0, 64)
        ]
    slave.close()
    reopened = make_store(tmp_path / "slave")
    assert reopened.commitlog.max_offset == master.commitlog.max_offset
    assert [reopened.max_offset("orders", queue_id) for queue_id in (0, 1)] == [7, 7]


def test_a_cut_replica_lowers_the_offsets_committed_past_the_cut(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    master = make_store(tmp_path / "master")
    slave = make_store(tmp_path / "slave")
    for number in range(4):
        master.append([message(body=f"shared-{number}".encode())])
    copy_all(master, slave)
    common = master.commitlog.max_offset
    for number in range(3):  # the former master's own tail, consumed by a group there
        slave.append([message(body=f"alone-{number}".encode())])
    slave.consumer_offsets.commit("billing", "orders", 0, 7)
    slave.consumer_offsets.commit("audit", "orders", 0, 2)

    slave.cut_back(common)
    assert slave.consumer_offsets.committed("billing", "orders", 0) == 4
    assert slave.consumer_offsets.committed("audit", "orders", 0) == 2
    master.append([message(body=b"new-0")])
    copy_all(master, slave)
    # The group reads on from offset 4: the new master's message there, not past it.
    offset = slave.consumer_offsets.query("billing", "orders", 0)
    assert [m.body for m in slave.read_messages("orders", 0, offset, 64)] == [b"new-0"]
