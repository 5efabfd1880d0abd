"""The queue lock table of ordered consumption (RocketMQ's RebalanceLockManager), on a fake clock."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from app.broker.queue_locks import QueueLocks

EXPIRY_MS = 60_000
Q0, Q1, Q2 = ("orders", 0), ("orders", 1), ("orders", 2)


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now_s

    def advance_ms(self, ms: int) -> None:
        self.now_s += ms / 1000


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def locks(tmp_path: Path, clock: Clock) -> QueueLocks:
    return QueueLocks(tmp_path / "queueLocks.json", EXPIRY_MS, clock)


def saved(locks: QueueLocks) -> None:
    locks.write(*locks.snapshot())


def test_a_free_queue_is_locked_and_a_held_one_is_not_given_to_another(locks: QueueLocks) -> None:
    assert locks.lock("g", "a", [Q0, Q1]) == [Q0, Q1]
    assert locks.lock("g", "b", [Q1, Q2]) == [Q2]
    assert (locks.holder("g", *Q0), locks.holder("g", *Q1), locks.holder("g", *Q2)) == ("a", "a", "b")
    assert locks.holder("other-group", *Q0) is None  # locks are per group


def test_a_lock_lives_expiry_after_its_last_renewal(locks: QueueLocks, clock: Clock) -> None:
    locks.lock("g", "a", [Q0])
    clock.advance_ms(40_000)
    assert locks.lock("g", "a", [Q0]) == [Q0]  # renewed
    clock.advance_ms(40_000)  # 80 s after the first lock, 40 s after the renewal
    assert locks.lock("g", "b", [Q0]) == []
    assert locks.holds("g", "a", *Q0)
    clock.advance_ms(20_001)
    assert locks.holder("g", *Q0) is None
    assert locks.held_by("g", "a") == []
    assert locks.lock("g", "b", [Q0]) == [Q0]


def test_unlock_releases_only_the_clients_own_locks(locks: QueueLocks) -> None:
    locks.lock("g", "a", [Q0])
    locks.lock("g", "b", [Q1])
    assert locks.unlock("g", "a", [Q0, Q1]) == [Q0]
    assert locks.holder("g", *Q1) == "b"
    assert locks.lock("g", "c", [Q0]) == [Q0]
    assert locks.unlock("g", "b") == [Q1]  # every lock of b


def test_live_locks_and_reconsume_counts_survive_a_reload(
    tmp_path: Path, locks: QueueLocks, clock: Clock
) -> None:
    locks.lock("g", "a", [Q0])
    clock.advance_ms(50_000)
    locks.lock("g", "b", [Q1])
    locks.failed("g", *Q1, 7, 1000, 3)
    saved(locks)
    clock.advance_ms(5_000)
    again = QueueLocks(locks.path, EXPIRY_MS, clock)
    assert (again.holder("g", *Q0), again.holder("g", *Q1)) == ("a", "b")
    assert again.lock("g", "c", [Q0, Q1]) == []
    assert again.reconsume_times("g", *Q1, 7) == 3
    assert again.reconsume_times("g", *Q1, 8) == 0
    assert again.suspended_until("g", *Q1) is None  # suspensions are not kept
    # 61 s after a's lock, 11 s after b's: a's is gone, not written again.
    clock.advance_ms(6_000)
    later = QueueLocks(locks.path, EXPIRY_MS, clock)
    assert (later.holder("g", *Q0), later.holder("g", *Q1)) == (None, "b")
    later.lock("g", "c", [Q2])
    saved(later)  # the next write keeps live locks only
    written = json.loads(locks.path.read_text())["groups"]["g"]["locks"]
    assert [item["client_id"] for item in written] == ["b", "c"]


def test_an_older_snapshot_never_overwrites_a_newer_one(locks: QueueLocks) -> None:
    locks.lock("g", "a", [Q0])
    old = locks.snapshot()
    locks.unlock("g", "a")
    saved(locks)
    locks.write(*old)  # a slower writer of the earlier state
    assert QueueLocks(locks.path, EXPIRY_MS, locks.clock).holder("g", *Q0) is None
    assert not locks.dirty


def test_a_failure_suspends_the_queue_and_counts_in_place(locks: QueueLocks, clock: Clock) -> None:
    locks.lock("g", "a", [Q0])
    assert locks.failed("g", *Q0, 4, 1000, 1) == 1
    assert locks.suspended_until("g", *Q0) == locks.now_ms() + 1000
    clock.advance_ms(1000)
    assert locks.suspended_until("g", *Q0) is None
    assert locks.reconsume_times("g", *Q0, 4) == 1
    locks.passed("g", *Q0)
    assert locks.reconsume_times("g", *Q0, 4) == 0


def test_concurrent_changes_share_their_writes(locks: QueueLocks) -> None:
    writes: list[int] = []
    write = locks.write

    def counted(version: int, data: bytes) -> None:
        writes.append(version)
        write(version, data)

    locks.write = counted  # type: ignore[method-assign]

    async def change(index: int) -> None:
        locks.lock("g", f"client-{index}", [("orders", index)])
        await locks.flush()

    async def all_changes() -> None:
        await asyncio.gather(*(change(index) for index in range(50)))

    asyncio.run(all_changes())
    assert 1 <= len(writes) <= 2
    again = QueueLocks(locks.path, EXPIRY_MS, locks.clock)
    assert [again.holder("g", "orders", index) for index in range(50)] == [f"client-{i}" for i in range(50)]
    assert not locks.dirty


def test_a_refused_lock_writes_nothing(locks: QueueLocks) -> None:
    locks.lock("g", "a", [Q0])
    saved(locks)
    assert locks.lock("g", "b", [Q0]) == []
    assert locks.lock("other", "b", []) == []
    assert not locks.dirty
