"""Appending to the CommitLog (SPEC 1.2-1.4): offsets, roll-over across tiny segments, rejection,
lookups by offset and message id, reopening, and transaction half messages."""

from __future__ import annotations

import random
import struct
import time
from pathlib import Path

import pytest

from app.store import (
    EmptyBodyError,
    GetMessageStatus,
    InvalidQueueError,
    InvalidTopicError,
    Message,
    MessageStore,
    MessageTooLargeError,
    PutStatus,
    parse_message_id,
)
from app.store.log_walk import records_since
from app.store.record_format import FIXED_SIZE, SYSFLAG_PROPERTIES_END, encode_host, tags_hash
from tests.store.conftest import TINY_COMMITLOG_FILE_SIZE, StoreFactory, message

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
SEGMENT_NAME_DIGITS = 20


def record_size(msg: Message) -> int:
    properties = sum(len(f"{k}\x01{v}\x02".encode()) for k, v in msg.properties.items())
    return FIXED_SIZE + len(msg.body) + len(msg.topic) + properties


def segment_files(store: MessageStore) -> list[Path]:
    """The segments on disk (not the spare allocated ahead, named ``<offset>.spare``)."""
    return sorted(path for path in store.config.commitlog_dir.iterdir() if path.name.isdigit())


def walk_segment(data: bytes) -> list[tuple[int, int, int]]:
    """(position, size, magic) of every record in a segment, read straight from its bytes."""
    found = []
    position = 0
    while position + 8 <= len(data):
        size, magic = struct.unpack_from(">iI", data, position)
        if size <= 0:
            break
        found.append((position, size, magic))
        if magic == BLANK_MAGIC:
            break
        position += size
    return found


def random_messages(count: int, seed: int = 7) -> list[Message]:
    rng = random.Random(seed)
    return [
        message(
            topic=rng.choice(["orders", "payments"]),
            queue_id=rng.randrange(3),
            body=rng.randbytes(rng.randrange(1, 600)),
            tags=rng.choice(["TagA", "TagB"]),
            KEYS=f"k{i}",
        )
        for i in range(count)
    ]


# -- appending ------------------------------------------------------------------------------------


def test_a_single_append_reports_where_the_message_landed(store: MessageStore) -> None:
    msg = message(body=b"hello", tags="TagA", UNIQ_KEY="u-1")
    before_ms = int(time.time() * 1000)

    [result] = store.append([msg])

    assert result.status is PutStatus.PUT_OK
    assert (result.topic, result.queue_id, result.queue_offset) == ("orders", 0, 0)
    assert result.physical_offset == 0
    assert result.size == record_size(msg)
    assert result.end_offset == result.size
    assert before_ms <= result.store_timestamp <= int(time.time() * 1000)
    assert result.store_host == encode_host("127.0.0.1", 8080)
    assert store.max_offset("orders", 0) == 1
    assert store.commitlog.max_offset == result.end_offset


def test_a_batch_is_laid_out_back_to_back(store: MessageStore) -> None:
    batch = [message(body=bytes([i]) * 10) for i in range(5)]

    results = store.append(batch)

    assert [r.queue_offset for r in results] == [0, 1, 2, 3, 4]
    assert results[0].physical_offset == 0
    for previous, current in zip(results, results[1:], strict=False):
        assert current.physical_offset == previous.end_offset
    assert len({r.store_timestamp for r in results}) == 1  # one lock acquisition, one timestamp
    assert [m.body for m in store.read_messages("orders", 0, 0)] == [bytes([i]) * 10 for i in range(5)]


def test_queue_offsets_count_messages_per_topic_and_queue(store: MessageStore) -> None:
    messages = random_messages(120)

    results = []
    for start in range(0, len(messages), 7):  # single appends and batches of several queues
        results += store.append(messages[start : start + 7])

    by_queue: dict[tuple[str, int], list[int]] = {}
    for result in results:
        by_queue.setdefault((result.topic, result.queue_id), []).append(result.queue_offset)
    assert len(by_queue) == 6
    for (topic, queue_id), offsets in by_queue.items():
        assert offsets == list(range(len(offsets))), (topic, queue_id)
        assert store.max_offset(topic, queue_id) == len(offsets)
    assert store.topics() == {"orders": [0, 1, 2], "payments": [0, 1, 2]}


def test_physical_offsets_increase_and_the_log_ends_after_the_last_record(store: MessageStore) -> None:
    results = store.append(random_messages(60))

    offsets = [r.physical_offset for r in results]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert store.commitlog.max_offset == results[-1].end_offset
    for result in results:
        found = store.look_message(result.physical_offset)
        assert found is not None and found.physical_offset == result.physical_offset
        assert (found.queue_id, found.queue_offset, found.size) == (
            result.queue_id,
            result.queue_offset,
            result.size,
        )


# -- roll-over ------------------------------------------------------------------------------------


def test_rolling_over_many_tiny_segments(store: MessageStore) -> None:
    file_size = TINY_COMMITLOG_FILE_SIZE
    results = []
    for msg in random_messages(300):
        results += store.append([msg])

    files = segment_files(store)
    assert len(files) > 10
    # Named by the global offset of their first byte, 20 digits, one after the other.
    assert [f.name for f in files] == [
        str(i * file_size).zfill(SEGMENT_NAME_DIGITS) for i in range(len(files))
    ]
    assert all(len(f.name) == SEGMENT_NAME_DIGITS for f in files)
    # Every segment has exactly the configured size, the last one included.
    assert {f.stat().st_size for f in files} == {file_size}
    # No record crosses a segment boundary.
    for result in results:
        assert result.physical_offset // file_size == (result.end_offset - 1) // file_size
    # Every full segment is messages then one blank END_OF_FILE record filling the rest of it.
    starts = {r.physical_offset for r in results}
    for index, path in enumerate(files[:-1]):
        records = walk_segment(path.read_bytes())
        *messages_in_file, (blank_at, blank_size, blank_magic) = records
        assert blank_magic == BLANK_MAGIC, path.name
        assert blank_at + blank_size == file_size
        assert blank_size >= 8
        assert all(magic == MESSAGE_MAGIC for _, _, magic in messages_in_file)
        assert {index * file_size + position for position, _, _ in messages_in_file} <= starts
        # The next segment starts with the message that did not fit here.
        assert index * file_size + file_size in starts
    last = walk_segment(files[-1].read_bytes())
    assert all(magic == MESSAGE_MAGIC for _, _, magic in last)
    assert len(files) * file_size - file_size + sum(size for _, size, _ in last) == store.commitlog.max_offset


def test_a_batch_can_roll_over_in_the_middle(store: MessageStore) -> None:
    batch = [message(body=b"x" * 500, queue_id=i % 2) for i in range(30)]  # about 15 KiB

    results = store.append(batch)

    assert len(segment_files(store)) >= 4
    assert [r.queue_offset for r in results] == [i // 2 for i in range(30)]
    found = [store.look_message(r.physical_offset) for r in results]
    assert [m.body if m is not None else None for m in found] == [b"x" * 500] * 30


def test_the_largest_record_that_fits_a_segment_is_accepted(store: MessageStore) -> None:
    # A segment keeps 8 bytes for the END_OF_FILE blank.
    largest = message(body=b"L" * (TINY_COMMITLOG_FILE_SIZE - 8 - FIXED_SIZE - len("orders")))
    assert record_size(largest) == TINY_COMMITLOG_FILE_SIZE - 8
    store.append([message(body=b"first")])

    [result] = store.append([largest])
    [after] = store.append([message(body=b"after")])

    assert result.physical_offset == TINY_COMMITLOG_FILE_SIZE  # moved to a fresh segment
    assert after.physical_offset == 2 * TINY_COMMITLOG_FILE_SIZE  # only the 8-byte blank was left
    assert walk_segment(segment_files(store)[1].read_bytes())[-1] == (
        TINY_COMMITLOG_FILE_SIZE - 8,
        8,
        BLANK_MAGIC,
    )


def test_a_message_too_large_for_a_segment_is_rejected_and_nothing_stored(store: MessageStore) -> None:
    [first] = store.append([message(body=b"first")])
    too_large = message(body=b"L" * (TINY_COMMITLOG_FILE_SIZE - 8 - FIXED_SIZE - len("orders") + 1))

    with pytest.raises(MessageTooLargeError):
        store.append([too_large])

    assert store.commitlog.max_offset == first.end_offset
    assert store.max_offset("orders", 0) == 1
    [second] = store.append([message(body=b"second")])
    assert (second.queue_offset, second.physical_offset) == (1, first.end_offset)


def test_a_message_over_max_message_size_is_rejected(make_store: StoreFactory) -> None:
    store = make_store(max_message_size=100)
    with pytest.raises(MessageTooLargeError):
        store.append([message(body=b"x" * 101)])
    assert store.commitlog.max_offset == 0
    store.append([message(body=b"x" * 100)])


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (message(body=b""), EmptyBodyError),
        (message(topic="bad topic"), InvalidTopicError),
        (message(body=b"x" * TINY_COMMITLOG_FILE_SIZE), MessageTooLargeError),
        (message(queue_id=-1), InvalidQueueError),
        (message(queue_id=1 << 16), InvalidQueueError),
    ],
    ids=["empty-body", "bad-topic", "too-large", "negative-queue", "queue-out-of-range"],
)
def test_a_batch_with_one_invalid_message_stores_nothing(
    store: MessageStore, bad: Message, error: type[Exception]
) -> None:
    [first] = store.append([message(body=b"first")])

    with pytest.raises(error):
        store.append([message(body=b"a"), message(topic="other", body=b"b"), bad, message(body=b"c")])

    assert store.commitlog.max_offset == first.end_offset
    assert store.max_offset("orders", 0) == 1
    assert "other" not in store.topics()
    [next_result] = store.append([message(body=b"next")])
    assert (next_result.queue_offset, next_result.physical_offset) == (1, first.end_offset)


# -- lookups --------------------------------------------------------------------------------------


def test_look_message_by_physical_offset_and_by_message_id(store: MessageStore) -> None:
    results = store.append(random_messages(80))

    for result, original in zip(results, random_messages(80), strict=True):
        host, port, physical_offset = parse_message_id(result.msg_id)
        assert (host, port) == ("127.0.0.1", 8080)
        found = store.look_message(physical_offset)
        assert found is not None
        assert found.msg_id == result.msg_id
        assert (found.topic, found.body, found.tags, found.keys) == (
            original.topic,
            original.body,
            original.tags,
            original.keys,
        )


def test_look_message_finds_nothing_where_no_record_starts(store: MessageStore) -> None:
    results = store.append([message(body=b"x" * 300) for _ in range(20)])
    assert store.look_message(results[3].physical_offset + 1) is None
    assert store.look_message(results[3].physical_offset + 91) is None
    assert store.look_message(store.commitlog.max_offset) is None
    assert store.look_message(10 * TINY_COMMITLOG_FILE_SIZE) is None
    # The END_OF_FILE blank that closes the first segment is not a message.
    blank_at = max(r.end_offset for r in results if r.physical_offset < TINY_COMMITLOG_FILE_SIZE)
    assert store.look_message(blank_at) is None


def test_message_ids_carry_the_configured_store_address(make_store: StoreFactory) -> None:
    store = make_store(store_host="10.0.0.9", store_port=10911)
    [result] = store.append([message()])
    assert parse_message_id(result.msg_id) == ("10.0.0.9", 10911, 0)
    assert result.msg_id.startswith("0A000009" + "00002A9F")


# -- reopening ------------------------------------------------------------------------------------


def test_reopening_after_a_clean_close_gives_the_same_data(make_store: StoreFactory) -> None:
    store = make_store()
    messages = random_messages(150)
    results = store.append(messages)
    files_before = [f.name for f in segment_files(store)]
    store.close()

    reopened = make_store()

    assert [f.name for f in segment_files(reopened)] == files_before
    assert reopened.commitlog.max_offset == results[-1].end_offset
    for result, original in zip(results, messages, strict=True):
        found = reopened.look_message(result.physical_offset)
        assert found is not None
        assert (found.topic, found.queue_id, found.queue_offset, found.body, found.properties) == (
            original.topic,
            original.queue_id,
            result.queue_offset,
            original.body,
            original.properties,
        )
        assert found.store_timestamp == result.store_timestamp
    for topic in ("orders", "payments"):
        for queue_id in range(3):
            expected = [r.queue_offset for r in results if (r.topic, r.queue_id) == (topic, queue_id)]
            assert reopened.max_offset(topic, queue_id) == len(expected)
    # Appending carries on where the log and every queue ended.
    [after] = reopened.append([message(topic="orders", queue_id=1, body=b"after")])
    assert after.physical_offset == results[-1].end_offset
    assert after.queue_offset == sum(1 for r in results if (r.topic, r.queue_id) == ("orders", 1))


def test_reopening_an_empty_store(make_store: StoreFactory) -> None:
    make_store().close()
    store = make_store()
    assert store.commitlog.max_offset == 0
    assert store.append([message()])[0].physical_offset == 0


# -- transactions ---------------------------------------------------------------------------------

PREPARED = 0x4
COMMIT = 0x8
ROLLBACK = 0xC


@pytest.mark.parametrize("sysflag", [PREPARED, ROLLBACK], ids=["prepared", "rollback"])
def test_half_and_rolled_back_messages_get_no_consume_queue_entry(store: MessageStore, sysflag: int) -> None:
    [half] = store.append([Message("orders", b"half", sysflag=sysflag)])

    assert store.max_offset("orders", 0) == 0
    assert store.get_message("orders", 0, 0).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    stored = store.look_message(half.physical_offset)
    assert (
        stored is not None and stored.sysflag == sysflag | SYSFLAG_PROPERTIES_END and stored.body == b"half"
    )
    # The next ordinary message is the queue's first.
    [normal] = store.append([Message("orders", b"normal")])
    assert normal.queue_offset == 0
    assert [m.body for m in store.read_messages("orders", 0, 0)] == [b"normal"]


def test_committed_transaction_messages_are_dispatched(store: MessageStore) -> None:
    [committed] = store.append([Message("orders", b"commit", sysflag=COMMIT)])
    assert committed.queue_offset == 0
    assert [m.body for m in store.read_messages("orders", 0, 0)] == [b"commit"]


def test_half_messages_stay_out_of_the_queue_after_a_clean_reopen(make_store: StoreFactory) -> None:
    store = make_store()
    store.append([Message("orders", b"half", sysflag=PREPARED), Message("orders", b"normal")])
    store.close()
    reopened = make_store()
    assert reopened.max_offset("orders", 0) == 1
    assert [m.body for m in reopened.read_messages("orders", 0, 0)] == [b"normal"]


def test_the_arrival_listener_hears_the_next_queue_offset_and_tag_code(make_store: StoreFactory) -> None:
    arrivals: list[tuple[str, int, int, int]] = []
    store = make_store(on_arrival=lambda *args: arrivals.append(args))

    store.append([message(body=b"a", tags="TagA"), message(queue_id=2, body=b"b")])
    store.append([message(body=b"c", tags="TagB")])

    assert arrivals == [
        ("orders", 0, 1, tags_hash("TagA")),
        ("orders", 2, 1, 0),
        ("orders", 0, 2, tags_hash("TagB")),
    ]


class _SteppingTime:
    """Stands in for the CommitLog's ``time`` module: each append is stored one second later."""

    def __init__(self) -> None:
        self.now_s = 1_700_000_000.0

    def time(self) -> float:
        self.now_s += 1.0
        return self.now_s


@pytest.mark.parametrize("since", [0, 1, 17, 39, 40])
def test_records_since_starts_at_the_first_record_stored_at_or_after_the_time(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, since: int
) -> None:
    from app.store import commit_log as commit_log_module

    monkeypatch.setattr(commit_log_module, "time", _SteppingTime())
    store = make_store()
    results = [store.append([message(body=b"m%03d" % n * 40)])[0] for n in range(40)]
    assert len(segment_files(store)) >= 3  # the hop crosses segments and their blank fillers
    timestamp = results[since].store_timestamp if since < len(results) else results[-1].store_timestamp + 1
    found = [offset for offset, _ in records_since(store.commitlog, timestamp)]
    assert found == [r.physical_offset for r in results[since:]]
