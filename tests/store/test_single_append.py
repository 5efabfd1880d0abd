"""One message's append (app/store/single_append.py): the same bytes as a batch of one, in one step.

The single path writes what the batch path would have written, byte for byte, in the CommitLog and
in the ConsumeQueues; it leaves every case it does not take (a segment's end, a new queue or
segment, a half transaction, a delay level) to the batch path before writing anything; and the
bookkeeping around it (arrival listeners, the message index, the dirty queues the flush visits,
the CommitLog's newest record) is the batch path's.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.store import Message, MessageStore, StoredMessage
from app.store import commit_log as commit_log_module
from app.store.record_format import (
    BLANK_MAGIC,
    BLANK_MIN_SIZE,
    SCHEDULE_TOPIC,
    SIZE_MAGIC,
    SYSFLAG_TRANSACTION_PREPARED,
    EncodedRecord,
)
from app.store.results import AppendResult
from app.store.single_append import SingleAppend
from tests.store.conftest import TINY_COMMITLOG_FILE_SIZE, StoreFactory, message
from tests.store.test_recovery import SteppingClock

BORN_MS = 1_600_000_000_000


class _FixedTime:
    """Stands in for the CommitLog's ``time`` module: every append is stored at the same instant."""

    @staticmethod
    def time() -> float:
        return 1_700_000_000.0


class CountingSingle(SingleAppend):
    """The store's own single path, counting the messages it took and those it left to a batch."""

    def __init__(self, single: SingleAppend) -> None:
        super().__init__(single.commitlog, single.dispatcher)
        self.taken = 0
        self.left = 0

    def append(self, record: EncodedRecord) -> AppendResult | None:
        result = super().append(record)
        if result is None:
            self.left += 1
        else:
            self.taken += 1
        return result


def count_single(store: MessageStore) -> CountingSingle:
    assert store.writer.single is not None
    counting = CountingSingle(store.writer.single)
    store.writer.single = counting
    return counting


def stored_files(root: Path) -> dict[str, bytes]:
    """Every CommitLog and ConsumeQueue file under a store, by its path inside it."""
    found: dict[str, bytes] = {}
    for part in ("commitlog", "consumequeue"):
        for directory, _, names in os.walk(root / part):
            for name in names:
                path = Path(directory) / name
                found[str(path.relative_to(root))] = path.read_bytes()
    return found


def read_all(store: MessageStore, queue_id: int) -> list[StoredMessage]:
    found: list[StoredMessage] = []
    while more := store.read_messages("orders", queue_id, len(found), 100):
        found += more
    return found


def varied_messages() -> list[Message]:
    """Singles to several queues of two topics, of sizes that end segments anywhere, some with
    properties, a few half transactions and delay-level messages (which the single path leaves)."""
    messages = []
    for n in range(160):
        props: dict[str, str] = {"UNIQ_KEY": f"{n:032X}"}
        if n % 3:
            props["TAGS"] = "TagA" if n % 2 else "TagB"
        if n % 7 == 0:
            props["KEYS"] = f"k{n}"
        sysflag = SYSFLAG_TRANSACTION_PREPARED if n % 29 == 5 else 0
        topic = "orders" if n % 5 else "audit"
        if n % 31 == 9:
            topic = SCHEDULE_TOPIC
        messages.append(
            Message(
                topic,
                bytes([n % 251]) * (20 + n * 37 % 700),
                queue_id=n % 3,
                properties=props,
                sysflag=sysflag,
                born_timestamp=BORN_MS,
            )
        )
    return messages


def test_single_appends_write_the_bytes_a_batch_of_one_writes(
    make_store: StoreFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commit_log_module, "time", _FixedTime())
    single = make_store(tmp_path / "single")
    batch = make_store(tmp_path / "batch")
    batch.writer.single = None  # every message a batch of one
    counting = count_single(single)
    for one in varied_messages():
        assert single.append([one]) == batch.append([one])
    assert counting.taken > 100 and counting.left > 10  # both paths were taken
    assert single.commitlog.last_record_offset == batch.commitlog.last_record_offset
    assert {key: q.max_physical_end for key, q in single.consume_queues.items()} == {
        key: q.max_physical_end for key, q in batch.consume_queues.items()
    }
    single.close()
    batch.close()
    found, expected = stored_files(tmp_path / "single"), stored_files(tmp_path / "batch")
    assert len(found) > 8 and found == expected


def test_a_single_message_that_does_not_fit_its_segment_goes_to_the_next_after_a_blank(
    store: MessageStore,
) -> None:
    counting = count_single(store)
    results = [store.append([message(body=b"x" * 300)])[0] for _ in range(40)]
    rolled = [r for r in results if r.physical_offset % TINY_COMMITLOG_FILE_SIZE == 0][1:]
    assert len(rolled) >= 3
    for first in rolled:
        before = results[results.index(first) - 1]
        end = before.physical_offset + before.size
        size, magic = SIZE_MAGIC.unpack_from(store.commitlog.read(end, 8) or b"")
        assert magic == BLANK_MAGIC and end + size == first.physical_offset
    # Every roll-over went the batch way; the queue's first entry and its segments' too.
    assert counting.left >= len(rolled) and counting.taken >= 40 - 3 * len(rolled) - 8
    bodies = [m.body for m in read_all(store, 0)]
    assert bodies == [b"x" * 300] * 40


def test_a_single_message_that_would_leave_no_room_for_a_blank_goes_to_the_next_segment(
    store: MessageStore,
) -> None:
    """A record must leave room for a blank after it (BLANK_MIN_SIZE bytes), else the segment
    could not be closed: one that fits only without that room goes to the next segment."""
    first = store.append([message(body=b"a")])[0]
    overhead = first.size - 1
    store.append([message(body=b"b" * 1000)])
    position = first.size + overhead + 1000
    room = TINY_COMMITLOG_FILE_SIZE - position
    # Room for the next record, but not for it and a blank.
    counting = count_single(store)
    last = store.append([message(body=b"c" * (room - BLANK_MIN_SIZE // 2 - overhead))])[0]
    assert last.physical_offset == TINY_COMMITLOG_FILE_SIZE
    assert counting.left == 1
    size, magic = SIZE_MAGIC.unpack_from(store.commitlog.read(position, BLANK_MIN_SIZE) or b"")
    assert (size, magic) == (room, BLANK_MAGIC)


def test_the_single_path_leaves_a_new_queue_and_a_full_queue_segment_to_the_batch_path(
    store: MessageStore,
) -> None:
    counting = count_single(store)
    store.append([message(queue_id=1)])  # the queue does not exist yet
    assert (counting.taken, counting.left) == (0, 1)
    for _ in range(7):  # fills the queue's first segment of 8 entries
        store.append([message(queue_id=1)])
    assert (counting.taken, counting.left) == (7, 1)
    store.append([message(queue_id=1)])  # its entry starts the queue's second segment
    assert (counting.taken, counting.left) == (7, 2)
    assert [m.queue_offset for m in read_all(store, 1)] == list(range(9))


def test_single_appends_tell_the_listeners_the_index_and_the_flush(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commit_log_module, "time", SteppingClock(1_700_000_000.0))
    arrivals: list[tuple[str, int, int, int]] = []
    store = make_store(on_arrival=lambda *arrival: arrivals.append(arrival))
    counting = count_single(store)
    store.append([message(tags="TagA")])
    store.dirty_queues.take()
    results = [store.append([message(tags="TagB", KEYS=f"key-{n}")])[0] for n in range(3)]
    assert counting.taken == 3
    tag_b = arrivals[-1][3]
    assert arrivals[1:] == [("orders", 0, offset, tag_b) for offset in (2, 3, 4)]
    queue = store.consume_queues[("orders", 0)]
    assert [files is queue.files for files in store.dirty_queues.take()] == [True]
    assert store.commitlog.last_record_offset == results[-1].physical_offset
    assert store.commitlog.last_store_timestamp() == results[-1].store_timestamp
    assert queue.max_physical_end == results[-1].end_offset
    assert store.index_service is not None and store.index_service.wait_indexed()
    found = store.query_message_by_key("orders", "key-2")
    assert [m.physical_offset for m in found] == [results[-1].physical_offset]
