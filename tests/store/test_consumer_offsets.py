"""Consumer offsets (SPEC 4): the offset table, queryConsumerOffset's rules (seed 002), the start
policies of a new group, and a JSON file that survives SIGKILL whole."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.store import MessageStore, StoreConfigError, consumer_offsets
from app.store.consumer_offsets import (
    NOT_FOUND,
    ConsumeFromWhere,
    ConsumerOffsetManager,
    OffsetEntry,
    OffsetPersistService,
)
from tests.store import offsets_log_child
from tests.store.conftest import TINY_COMMITLOG_FILE_SIZE, StoreFactory, message

REPOSITORY = Path(__file__).resolve().parents[2]


class FakeQueues:
    """A queue with chosen min and max offsets, a time index and an in-memory flag."""

    def __init__(self, min_offset: int = 0, max_offset: int = 100, in_disk: bool = False) -> None:
        self.min = min_offset
        self.max = max_offset
        self.in_disk = in_disk
        self.searched: list[int] = []

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self.min

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.max

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        self.searched.append(timestamp_ms)
        return 42

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, offset: int) -> bool:
        return self.in_disk


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "consumerOffset.json"


def manager_with(path: Path, queues: FakeQueues | None = None) -> ConsumerOffsetManager:
    return ConsumerOffsetManager(path, queues if queues is not None else FakeQueues())


# -- the table --------------------------------------------------------------------------------------


def test_a_group_without_a_commit_has_no_offset(path: Path) -> None:
    assert manager_with(path).query("billing", "orders", 0) == NOT_FOUND == -1


def test_offsets_are_kept_per_group_topic_and_queue(path: Path) -> None:
    manager = manager_with(path)
    manager.commit("billing", "orders", 0, 10)
    manager.commit("billing", "orders", 1, 11)
    manager.commit("audit", "orders", 0, 20)
    manager.commit("billing", "payments", 0, 30)
    assert manager.query("billing", "orders", 0) == 10
    assert manager.query("billing", "orders", 1) == 11
    assert manager.query("audit", "orders", 0) == 20
    assert manager.query("billing", "payments", 0) == 30
    assert manager.query("audit", "orders", 1) == NOT_FOUND
    assert manager.offsets("billing", "orders") == {0: 10, 1: 11}


def test_a_commit_may_move_an_offset_back(path: Path) -> None:
    manager = manager_with(path)
    manager.commit("billing", "orders", 0, 10)
    manager.commit("billing", "orders", 0, 4)  # a reset
    assert manager.query("billing", "orders", 0) == 4


def test_an_offset_below_the_queues_min_is_raised_on_read(path: Path) -> None:
    queues = FakeQueues(min_offset=50)
    manager = manager_with(path, queues)
    manager.commit("billing", "orders", 0, 10)
    assert manager.query("billing", "orders", 0) == 50
    assert manager.committed("billing", "orders", 0) == 10  # the table keeps what was committed
    queues.min = 5
    assert manager.query("billing", "orders", 0) == 10


def test_listing_and_removing(path: Path) -> None:
    manager = manager_with(path)
    manager.commit("billing", "orders", 1, 5)
    manager.commit("billing", "orders", 0, 4)
    manager.commit("audit", "orders", 0, 3)
    manager.commit("billing", "payments", 0, 2)
    assert manager.all() == [
        OffsetEntry("audit", "orders", 0, 3),
        OffsetEntry("billing", "orders", 0, 4),
        OffsetEntry("billing", "orders", 1, 5),
        OffsetEntry("billing", "payments", 0, 2),
    ]
    assert manager.groups_of_topic("orders") == {"audit", "billing"}
    assert manager.topics_of_group("billing") == {"orders", "payments"}
    assert manager.remove("billing", "orders") == 2
    assert manager.remove("billing") == 1
    assert manager.remove("nobody") == 0
    assert manager.all() == [OffsetEntry("audit", "orders", 0, 3)]


# -- queryConsumerOffset and the start policies -------------------------------------------------------


def test_query_consumer_offset_answers_0_for_a_young_queue_and_not_found_otherwise(path: Path) -> None:
    queues = FakeQueues(min_offset=0, in_disk=False)
    manager = manager_with(path, queues)
    assert manager.query_consumer_offset("billing", "orders", 0) == 0  # first message still in memory
    queues.in_disk = True
    assert manager.query_consumer_offset("billing", "orders", 0) == NOT_FOUND
    queues.in_disk, queues.min = False, 7
    assert manager.query_consumer_offset("billing", "orders", 0) == NOT_FOUND  # retention took the start
    manager.commit("billing", "orders", 0, 9)
    assert manager.query_consumer_offset("billing", "orders", 0) == 9


@pytest.mark.parametrize(
    ("topic", "policy", "expected"),
    [
        ("orders", ConsumeFromWhere.LAST_OFFSET, 100),
        ("orders", ConsumeFromWhere.FIRST_OFFSET, 7),
        ("orders", ConsumeFromWhere.TIMESTAMP, 42),
        ("%RETRY%billing", ConsumeFromWhere.LAST_OFFSET, 7),
        ("%RETRY%billing", ConsumeFromWhere.FIRST_OFFSET, 7),
        ("%RETRY%billing", ConsumeFromWhere.TIMESTAMP, 100),
    ],
)
def test_a_new_group_starts_where_its_policy_says(
    path: Path, topic: str, policy: ConsumeFromWhere, expected: int
) -> None:
    queues = FakeQueues(min_offset=7, max_offset=100, in_disk=True)
    manager = manager_with(path, queues)
    assert manager.start_offset("billing", topic, 0, policy, timestamp_ms=1_234) == expected
    assert queues.searched == ([1_234] if expected == 42 else [])


def test_a_committed_offset_wins_over_every_policy(path: Path) -> None:
    manager = manager_with(path, FakeQueues(min_offset=7, max_offset=100, in_disk=True))
    manager.commit("billing", "orders", 0, 33)
    for policy in ConsumeFromWhere:
        assert manager.start_offset("billing", "orders", 0, policy, timestamp_ms=1) == 33


def test_a_young_queue_is_read_from_its_start_whatever_the_policy(path: Path) -> None:
    # RocketMQ's broker answers 0 for a queue whose first message is still in memory, so even a
    # CONSUME_FROM_LAST_OFFSET group starts at the beginning of a new queue.
    manager = manager_with(path, FakeQueues(min_offset=0, max_offset=100, in_disk=False))
    assert manager.start_offset("billing", "orders", 0, ConsumeFromWhere.LAST_OFFSET) == 0


def test_the_timestamp_policy_needs_a_timestamp(path: Path) -> None:
    manager = manager_with(path, FakeQueues(in_disk=True))
    with pytest.raises(ValueError, match="timestamp"):
        manager.start_offset("billing", "orders", 0, ConsumeFromWhere.TIMESTAMP)


# -- the file ---------------------------------------------------------------------------------------


def test_the_table_is_written_as_rocketmqs_json_and_read_back(path: Path) -> None:
    manager = manager_with(path)
    manager.commit("billing", "orders", 0, 12)
    manager.commit("billing", "orders", 1, 7)
    manager.commit("audit", "payments", 3, 1)
    assert manager.persist()
    assert json.loads(path.read_text()) == {
        "offsetTable": {"orders@billing": {"0": 12, "1": 7}, "payments@audit": {"3": 1}}
    }
    again = manager_with(path)
    again.load()
    assert again.all() == manager.all()


def test_an_unchanged_table_is_not_written_again(path: Path) -> None:
    manager = manager_with(path)
    manager.commit("billing", "orders", 0, 1)
    assert manager.persist(only_if_changed=True)
    assert not manager.persist(only_if_changed=True)
    manager.commit("billing", "orders", 0, 2)
    assert manager.persist(only_if_changed=True)
    assert manager.persist()  # a forced write always writes


def test_the_persist_service_writes_changes_each_pass(path: Path) -> None:
    manager = manager_with(path)
    service = OffsetPersistService(manager, interval_ms=5_000)
    service.run_once()
    assert not path.exists()  # nothing to write yet
    manager.commit("billing", "orders", 0, 3)
    service.run_once()
    assert json.loads(path.read_text())["offsetTable"] == {"orders@billing": {"0": 3}}


def test_a_file_that_is_not_an_offset_table_is_refused(path: Path) -> None:
    path.parent.mkdir(parents=True)
    for content in ("{", '{"offsetTable": {"orders@billing": {"zero": 1}}}', "[]"):
        path.write_text(content)
        with pytest.raises(StoreConfigError, match="consumer offset table"):
            manager_with(path).load()


def test_a_temporary_file_left_by_a_crash_is_ignored(path: Path) -> None:
    manager = manager_with(path)
    manager.commit("billing", "orders", 0, 5)
    manager.persist()
    (path.parent / f".{path.name}.tmp").write_text('{"offsetTable": {"orders@billing": {"0"')
    again = manager_with(path)
    again.load()
    assert again.query("billing", "orders", 0) == 5


# -- in the store -----------------------------------------------------------------------------------


def test_the_store_persists_offsets_at_close_and_loads_them_at_open(make_store: StoreFactory) -> None:
    store = make_store(consumer_offset_persist_interval_ms=3_600_000)
    store.append([message()])
    store.consumer_offsets.commit("billing", "orders", 0, 1)
    store.close()
    assert store.config.consumer_offset_path == store.config.store_dir / "config" / "consumerOffset.json"
    store = make_store()
    assert store.consumer_offsets.query("billing", "orders", 0) == 1


def test_offsets_are_clamped_to_what_retention_left(make_store: StoreFactory) -> None:
    store = make_store()
    results = store.append([message(body=bytes([i]) * 400) for i in range(20)])
    store.consumer_offsets.commit("billing", "orders", 0, 2)
    store.close()
    (store.config.commitlog_dir / "0".zfill(20)).unlink()  # retention took the first segment
    store = make_store()
    first_kept = next(r.queue_offset for r in results if r.physical_offset >= TINY_COMMITLOG_FILE_SIZE)
    assert store.consumer_offsets.query("billing", "orders", 0) == first_kept


def test_offsets_past_a_queues_end_are_lowered_to_it_at_open(make_store: StoreFactory) -> None:
    # What recovery leaves when it cut a torn tail the group had consumed: the messages stored
    # next at those queue offsets are others, and an offset past them would skip them.
    store = make_store()
    store.append([message(queue_id=0) for _ in range(6)])
    store.consumer_offsets.commit("billing", "orders", 0, 9)
    store.consumer_offsets.commit("billing", "orders", 1, 3)  # a queue that holds nothing
    store.consumer_offsets.commit("audit", "orders", 0, 4)
    store.close()
    store = make_store()
    offsets = store.consumer_offsets
    assert [offsets.committed(*key) for key in [("billing", "orders", 0), ("billing", "orders", 1)]] == [6, 0]
    assert offsets.committed("audit", "orders", 0) == 4
    store.close()
    assert make_store().consumer_offsets.committed("billing", "orders", 0) == 6  # and persisted


def test_the_store_answers_whether_a_message_is_out_of_memory(make_store: StoreFactory) -> None:
    store: MessageStore = make_store()
    store.append([message(body=b"x" * 1000) for _ in range(3)])
    assert not store.check_in_disk_by_consume_offset("orders", 0, 0)  # memory is far bigger
    store.reader.in_memory_bytes = 1500
    assert store.check_in_disk_by_consume_offset("orders", 0, 0)  # two records come after it
    assert not store.check_in_disk_by_consume_offset("orders", 0, 2)
    assert not store.check_in_disk_by_consume_offset("orders", 0, 3)  # no such message
    assert store.consumer_offsets.start_offset("billing", "orders", 0) == 3  # last offset
    store.reader.in_memory_bytes = 1 << 40
    assert store.consumer_offsets.start_offset("billing", "orders", 0) == 0  # young queue: from 0


# -- crash safety -----------------------------------------------------------------------------------


def table_offsets(path: Path) -> set[int]:
    """Every offset in the file, which must parse as a whole table."""
    document = json.loads(path.read_text())
    return {offset for queues in document["offsetTable"].values() for offset in queues.values()}


def printed_before_sigkill(module: str, path: Path, lines: int) -> list[int]:
    """Run ``module`` as a child writing offsets to ``path``, SIGKILL it after it printed ``lines``
    lines (each printed once its write returned); returns every whole line it printed, which are
    consecutive numbers."""
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    child = subprocess.Popen(
        [sys.executable, "-m", module, str(path)],
        cwd=REPOSITORY,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    read: list[str] = []
    try:
        for _ in range(lines):
            line = child.stdout.readline()
            if not line:
                pytest.fail(f"the child died: {child.stderr.read()}")
            read.append(line)
    finally:
        child.send_signal(signal.SIGKILL)
        # Read the rest through the same buffered reader: readline() may already hold lines the
        # child printed after those it returned, which communicate() (reading the pipe itself)
        # would drop.
        rest = child.stdout.read()
        child.stderr.read()
        child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL
    # A line cut at the very end counts not.
    printed = [int(line) for line in (*read, *rest.splitlines(keepends=True)) if line.endswith("\n")]
    assert printed == list(range(printed[0], printed[0] + len(printed))), "a printed line was lost"
    return printed


@pytest.mark.crash
def test_offsets_survive_sigkill_whole_at_the_last_persisted_value(path: Path) -> None:
    rng = random.Random(7)
    for _round in range(5):
        printed = printed_before_sigkill("tests.store.offsets_child", path, rng.randint(3, 40))
        offsets = table_offsets(path)
        assert len(offsets) == 1, f"a mix of two writes: {sorted(offsets)}"
        assert offsets.pop() in (printed[-1], printed[-1] + 1)


# -- the log of changes -------------------------------------------------------------------------------


def many_groups(manager: ConsumerOffsetManager, groups: int = 10_000, queues: int = 8) -> None:
    for group in range(groups):
        for queue_id in range(queues):
            manager.commit(f"group-{group:05d}", "orders", queue_id, group + queue_id)


def test_one_commit_among_10000_groups_persists_as_one_line(path: Path) -> None:
    manager = manager_with(path)
    many_groups(manager)
    assert manager.persist(only_if_changed=True)  # the first write makes the snapshot
    snapshot = path.stat()
    log_size = manager.log_path.stat().st_size if manager.log_path.exists() else 0
    manager.commit("group-04242", "orders", 3, 99_999)
    assert manager.persist(only_if_changed=True)
    assert path.stat().st_mtime_ns == snapshot.st_mtime_ns and path.stat().st_ino == snapshot.st_ino
    appended = manager.log_path.read_bytes()[log_size:]
    assert appended.count(b"\n") == 1 and len(appended) < 100
    assert json.loads(appended) == {"k": "orders@group-04242", "q": 3, "o": 99_999}
    again = manager_with(path)
    again.load()
    assert again.committed("group-04242", "orders", 3) == 99_999
    assert again.committed("group-09999", "orders", 7) == 9_999 + 7
    assert len(again.all()) == 80_000


def test_changes_and_removals_are_replayed_over_the_snapshot(path: Path) -> None:
    manager = manager_with(path)
    manager.commit("billing", "orders", 0, 1)
    manager.commit("audit", "orders", 0, 1)
    manager.persist()
    manager.commit("billing", "orders", 0, 5)
    manager.commit("billing", "orders", 1, 6)
    manager.remove("audit")
    assert manager.persist(only_if_changed=True)
    assert json.loads(path.read_text())["offsetTable"] == {
        "orders@audit": {"0": 1},
        "orders@billing": {"0": 1},
    }
    again = manager_with(path)
    again.load()
    assert again.all() == [OffsetEntry("billing", "orders", 0, 5), OffsetEntry("billing", "orders", 1, 6)]
    # Loading folded the log into the snapshot.
    assert json.loads(path.read_text())["offsetTable"] == {"orders@billing": {"0": 5, "1": 6}}
    assert again.log_path.stat().st_size == 0


def test_a_crash_between_the_snapshot_and_emptying_the_log_loses_nothing(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = manager_with(path)
    manager.commit("billing", "orders", 0, 1)
    manager.persist()
    manager.commit("billing", "orders", 0, 2)
    manager.persist(only_if_changed=True)  # the log says 2
    manager.commit("billing", "orders", 0, 3)

    def crash() -> None:
        raise OSError("killed before the log was emptied")

    monkeypatch.setattr(manager, "_truncate_log", crash)
    with pytest.raises(OSError, match="killed"):
        manager.persist()  # the snapshot says 3; the log, replayed over it, must too
    assert json.loads(path.read_text())["offsetTable"] == {"orders@billing": {"0": 3}}
    again = manager_with(path)
    again.load()
    assert again.committed("billing", "orders", 0) == 3


def test_a_torn_last_line_of_the_log_is_dropped(path: Path) -> None:
    manager = manager_with(path)
    manager.commit("billing", "orders", 0, 1)
    manager.persist()
    manager.commit("billing", "orders", 0, 2)
    manager.persist(only_if_changed=True)
    with manager.log_path.open("ab") as log:
        log.write(b'{"k": "orders@billing", "q": 0, "o": 3')  # cut by a crash
    again = manager_with(path)
    again.load()
    assert again.committed("billing", "orders", 0) == 2
    again.commit("billing", "orders", 1, 7)
    again.persist(only_if_changed=True)
    third = manager_with(path)
    third.load()
    assert third.offsets("billing", "orders") == {0: 2, 1: 7}


def test_the_log_is_compacted_once_it_outgrows_the_snapshot(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(consumer_offsets, "COMPACT_MIN_LOG_BYTES", 0)
    manager = manager_with(path)
    manager.commit("billing", "orders", 0, 0)
    manager.persist()
    snapshot_writes = 0
    for offset in range(1, 200):
        before = path.stat().st_mtime_ns, path.stat().st_ino
        manager.commit("billing", "orders", 0, offset)
        manager.persist(only_if_changed=True)
        snapshot_writes += (path.stat().st_mtime_ns, path.stat().st_ino) != before
        assert manager.log_path.stat().st_size <= 2 * path.stat().st_size + 100
    assert 0 < snapshot_writes < 100
    again = manager_with(path)
    again.load()
    assert again.committed("billing", "orders", 0) == 199


@pytest.mark.crash
def test_offsets_persisted_as_changes_survive_sigkill(path: Path) -> None:
    rng = random.Random(11)
    last: dict[tuple[str, str, int], int] = {}
    for _round in range(4):
        printed = printed_before_sigkill("tests.store.offsets_log_child", path, rng.randint(50, 700))
        for n in printed:
            last[offsets_log_child.entry(n)] = n
        unprinted = printed[-1] + 1
        loaded = manager_with(path)
        loaded.load()
        found = {(e.group, e.topic, e.queue_id): e.offset for e in loaded.all()}
        expected = dict(last)
        if found.get(offsets_log_child.entry(unprinted)) == unprinted:  # written, not yet printed
            expected[offsets_log_child.entry(unprinted)] = last[offsets_log_child.entry(unprinted)] = (
                unprinted
            )
        assert found == expected
