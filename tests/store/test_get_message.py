"""Reading a queue (SPEC 1.10): every status with its next, min and max offsets, the per-call limits,
tag filtering, and zero-copy records."""

from __future__ import annotations

import mmap
from collections.abc import Sequence

import pytest

from app.store import GetMessageResult, GetMessageStatus, MessageStore, TagFilter, decode_record
from app.store.record_format import FIXED_SIZE, tags_hash
from tests.store.conftest import (
    TINY_COMMITLOG_FILE_SIZE,
    TINY_CONSUMEQUEUE_FILE_ENTRIES,
    StoreFactory,
    message,
)

Status = GetMessageStatus


def put_bodies(
    store: MessageStore, count: int, queue_id: int = 0, size: int = 20, **kwargs: str
) -> list[bytes]:
    bodies = [f"{queue_id}-{i}-".encode().ljust(size, b".") for i in range(count)]
    store.append([message(queue_id=queue_id, body=body, **kwargs) for body in bodies])
    return bodies


def summary(result: GetMessageResult) -> tuple[GetMessageStatus, int, int, int]:
    """(status, next offset, min offset, max offset): what every answer carries."""
    return result.status, result.next_offset, result.min_offset, result.max_offset


def bodies_of(result_records: list[memoryview]) -> list[bytes]:
    return [decode_record(record).body for record in result_records]


@pytest.fixture
def trimmed_store(make_store: StoreFactory) -> tuple[MessageStore, int]:
    """A store whose first CommitLog segment was deleted while it was closed: the queue's first
    entries point at data that is gone, so its min offset is above 0. Returns (store, min offset)."""
    store = make_store()
    results = store.append([message(body=bytes([i]) * 400) for i in range(40)])
    gone = sum(1 for r in results if r.physical_offset < TINY_COMMITLOG_FILE_SIZE)
    store.close()
    (store.config.commitlog_dir / "0".zfill(20)).unlink()
    return make_store(), gone


# -- statuses -------------------------------------------------------------------------------------


def test_an_empty_store_has_no_message_in_any_queue(store: MessageStore) -> None:
    result = store.get_message("orders", 0, 0)
    assert summary(result) == (Status.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
    assert result.records == [] and result.total_bytes == 0


@pytest.mark.parametrize(
    ("topic", "queue_id", "offset"), [("orders", 1, 0), ("orders", 7, 3), ("unknown", 0, 0)]
)
def test_an_unknown_queue_has_no_message(store: MessageStore, topic: str, queue_id: int, offset: int) -> None:
    put_bodies(store, 3, queue_id=0)
    result = store.get_message(topic, queue_id, offset)
    assert summary(result) == (Status.NO_MESSAGE_IN_QUEUE, 0, 0, 0)


def test_reading_at_the_end_is_overflow_one(store: MessageStore) -> None:
    put_bodies(store, 3)
    result = store.get_message("orders", 0, 3)
    assert summary(result) == (Status.OFFSET_OVERFLOW_ONE, 3, 0, 3)
    assert result.records == []


@pytest.mark.parametrize("offset", [4, 100, 2**40])
def test_reading_past_the_end_is_overflow_badly_and_restarts_at_min_zero(
    store: MessageStore, offset: int
) -> None:
    put_bodies(store, 3)
    result = store.get_message("orders", 0, offset)
    assert summary(result) == (Status.OFFSET_OVERFLOW_BADLY, 0, 0, 3)


def test_reading_below_min_is_offset_too_small(trimmed_store: tuple[MessageStore, int]) -> None:
    store, min_offset = trimmed_store
    assert min_offset > 0
    for offset in (0, min_offset - 1, -1):
        result = store.get_message("orders", 0, offset)
        assert summary(result) == (Status.OFFSET_TOO_SMALL, min_offset, min_offset, 40)
        assert result.records == []


def test_reading_from_min_finds_the_oldest_message_still_stored(
    trimmed_store: tuple[MessageStore, int],
) -> None:
    store, min_offset = trimmed_store
    result = store.get_message("orders", 0, min_offset, max_messages=1)
    assert result.status is Status.FOUND
    assert result.queue_offsets == [min_offset]
    assert bodies_of(result.records) == [bytes([min_offset]) * 400]
    assert (result.min_offset, result.max_offset) == (min_offset, 40)


def test_past_the_end_with_min_above_zero_is_overflow_badly_to_max(
    trimmed_store: tuple[MessageStore, int],
) -> None:
    store, min_offset = trimmed_store
    result = store.get_message("orders", 0, 41)
    assert summary(result) == (Status.OFFSET_OVERFLOW_BADLY, 40, min_offset, 40)
    assert store.get_message("orders", 0, 40).status is Status.OFFSET_OVERFLOW_ONE


def test_a_deleted_consume_queue_segment_raises_the_min_offset(make_store: StoreFactory) -> None:
    store = make_store()
    put_bodies(store, 20)
    store.close()
    queue_dir = store.config.consumequeue_dir / "orders" / "0"
    (queue_dir / "0".zfill(20)).unlink()

    reopened = make_store()

    entries = TINY_CONSUMEQUEUE_FILE_ENTRIES
    assert reopened.min_offset("orders", 0) == entries
    too_small = reopened.get_message("orders", 0, 0)
    assert (too_small.status, too_small.next_offset) == (Status.OFFSET_TOO_SMALL, entries)
    found = reopened.get_message("orders", 0, entries)
    assert found.status is Status.FOUND and found.queue_offsets[0] == entries


def test_found_returns_messages_and_the_offset_after_the_last(store: MessageStore) -> None:
    bodies = put_bodies(store, 5)
    result = store.get_message("orders", 0, 1)
    assert result.status is Status.FOUND
    assert result.queue_offsets == [1, 2, 3, 4]
    assert bodies_of(result.records) == bodies[1:]
    assert (result.next_offset, result.min_offset, result.max_offset) == (5, 0, 5)
    assert result.message_count == 4
    assert result.total_bytes == sum(len(record) for record in result.records)


def test_no_matched_message_moves_past_what_was_scanned(store: MessageStore) -> None:
    put_bodies(store, 5, tags="TagA")
    result = store.get_message("orders", 0, 0, message_filter=TagFilter.parse("TagB"))
    assert summary(result) == (Status.NO_MATCHED_MESSAGE, 5, 0, 5)
    assert result.records == [] and result.total_bytes == 0


def test_no_matched_message_scans_one_consume_queue_segment_at_a_time(store: MessageStore) -> None:
    put_bodies(store, 20, tags="TagA")
    tag_b = TagFilter.parse("TagB")
    entries = TINY_CONSUMEQUEUE_FILE_ENTRIES
    nexts = []
    offset = 0
    while (
        result := store.get_message("orders", 0, offset, message_filter=tag_b)
    ).status is Status.NO_MATCHED_MESSAGE:
        nexts.append(result.next_offset)
        offset = result.next_offset
    assert nexts == [entries, 2 * entries, 20]
    assert result.status is Status.OFFSET_OVERFLOW_ONE
    # Starting in the middle of a segment scans to its end.
    assert store.get_message("orders", 0, 3, message_filter=tag_b).next_offset == entries


@pytest.mark.parametrize(("max_messages", "scanned"), [(1, 5), (8, 8), (30, 30)])
def test_a_read_scans_at_most_max_scan_bytes_or_max_messages_entries(
    make_store: StoreFactory, max_messages: int, scanned: int
) -> None:
    # 100 bytes of ConsumeQueue are 5 entries; asking for more messages scans 20 bytes per message.
    store = make_store(max_scan_bytes_per_pull=100, consumequeue_file_entries=64)
    put_bodies(store, 40, tags="TagA")
    result = store.get_message(
        "orders", 0, 2, max_messages=max_messages, message_filter=TagFilter.parse("TagB")
    )
    assert (result.status, result.next_offset) == (Status.NO_MATCHED_MESSAGE, 2 + scanned)


# -- limits per call ------------------------------------------------------------------------------


@pytest.mark.parametrize("max_messages", [1, 3, 7])
def test_max_messages_is_respected(store: MessageStore, max_messages: int) -> None:
    bodies = put_bodies(store, 8)
    result = store.get_message("orders", 0, 0, max_messages=max_messages)
    assert result.queue_offsets == list(range(max_messages))
    assert bodies_of(result.records) == bodies[:max_messages]
    assert result.next_offset == max_messages


def test_a_read_stops_before_max_transfer_bytes(make_store: StoreFactory) -> None:
    record_size = FIXED_SIZE + len("orders") + 100
    store = make_store(max_transfer_bytes_per_pull=record_size * 5 // 2)
    put_bodies(store, 6, size=100)

    result = store.get_message("orders", 0, 0)

    assert [len(record) for record in result.records] == [record_size, record_size]
    assert result.queue_offsets == [0, 1]
    assert result.total_bytes == 2 * record_size <= store.config.max_transfer_bytes_per_pull
    assert result.next_offset == 2


def test_at_least_one_message_is_returned_however_small_the_transfer_limit(make_store: StoreFactory) -> None:
    store = make_store(max_transfer_bytes_per_pull=10)
    bodies = put_bodies(store, 3, size=200)
    result = store.get_message("orders", 0, 1)
    assert result.status is Status.FOUND
    assert bodies_of(result.records) == [bodies[1]]
    assert result.next_offset == 2


# -- tag filtering --------------------------------------------------------------------------------


def put_tagged(store: MessageStore, tags: Sequence[str | None]) -> None:
    store.append([message(body=f"m{i}".encode(), tags=tag) for i, tag in enumerate(tags)])


def read_tags(store: MessageStore, expression: str | None, max_messages: int = 32) -> list[str]:
    result = store.get_message("orders", 0, 0, max_messages, TagFilter.parse(expression))
    return [decode_record(record).tags for record in result.records]


def test_a_filter_keeps_only_the_listed_tags(store: MessageStore) -> None:
    put_tagged(store, ["TagA", "TagB", "TagC", None, "TagA", "TagB"])
    assert read_tags(store, "TagA || TagB") == ["TagA", "TagB", "TagA", "TagB"]
    assert read_tags(store, "TagC") == ["TagC"]
    assert read_tags(store, " TagB ||TagC ") == ["TagB", "TagC", "TagB"]


@pytest.mark.parametrize("expression", [None, "*", "", "TagA || *"])
def test_no_filter_or_star_matches_everything(store: MessageStore, expression: str | None) -> None:
    put_tagged(store, ["TagA", "TagB", None])
    assert read_tags(store, expression) == ["TagA", "TagB", ""]


def test_tags_with_the_same_hash_code_are_told_apart(store: MessageStore) -> None:
    assert tags_hash("Aa") == tags_hash("BB")  # the ConsumeQueue cannot tell these apart
    put_tagged(store, ["Aa", "BB", "Aa", "BB", "Cc"])
    assert read_tags(store, "Aa") == ["Aa", "Aa"]
    assert read_tags(store, "BB") == ["BB", "BB"]
    assert read_tags(store, "Aa || BB") == ["Aa", "BB", "Aa", "BB"]


def test_a_colliding_tag_alone_is_no_match(store: MessageStore) -> None:
    put_tagged(store, ["BB", "BB", "BB"])
    result = store.get_message("orders", 0, 0, message_filter=TagFilter.parse("Aa"))
    assert (result.status, result.next_offset) == (Status.NO_MATCHED_MESSAGE, 3)


def test_a_filtered_read_skips_no_matching_message(store: MessageStore) -> None:
    tags = ["TagA", "TagB", "TagB", "TagA", "TagB", "TagA", "TagB", "TagB"]
    put_tagged(store, tags)
    tag_a = TagFilter.parse("TagA")
    seen = []
    offset = 0
    while (
        result := store.get_message("orders", 0, offset, max_messages=1, message_filter=tag_a)
    ).status is Status.FOUND:
        [queue_offset] = result.queue_offsets
        assert offset <= queue_offset < result.next_offset
        # Whatever the read moved past without returning did not match.
        assert all(
            tags[skipped] != "TagA"
            for skipped in range(offset, result.next_offset)
            if skipped != queue_offset
        )
        seen.append(queue_offset)
        offset = result.next_offset
    assert seen == [0, 3, 5]


# -- records --------------------------------------------------------------------------------------


def test_records_are_zero_copy_views_of_the_commit_log(store: MessageStore) -> None:
    results = store.append([message(body=f"body-{i}".encode() * 20, tags="TagA") for i in range(30)])
    read = store.get_message("orders", 0, 0)

    for record, queue_offset in zip(read.records, read.queue_offsets, strict=True):
        assert isinstance(record, memoryview)
        assert isinstance(record.obj, mmap.mmap)  # a slice of the mapped segment, not a copy
        result = results[queue_offset]
        position = result.physical_offset % TINY_COMMITLOG_FILE_SIZE
        segment = store.config.commitlog_dir / str(result.physical_offset - position).zfill(20)
        assert bytes(record) == segment.read_bytes()[position : position + result.size]
        decoded = decode_record(record)
        assert (decoded.queue_offset, decoded.physical_offset) == (queue_offset, result.physical_offset)
        assert decoded.body == f"body-{queue_offset}".encode() * 20
        assert decoded.tags == "TagA"
    # Two reads of one message share the mapping.
    again = store.get_message("orders", 0, 0, max_messages=1)
    assert again.records[0].obj is read.records[0].obj


def test_reading_a_whole_queue_across_consume_queue_segments(store: MessageStore) -> None:
    expected = []
    for i in range(37):
        # Interleave another queue so that queue 0's records are not adjacent in the CommitLog.
        store.append([message(queue_id=1, body=b"noise"), message(queue_id=0, body=f"q0-{i}".encode() * 9)])
        expected.append(f"q0-{i}".encode() * 9)

    entries = TINY_CONSUMEQUEUE_FILE_ENTRIES
    seen: list[bytes] = []
    offset = 0
    reads = 0
    while (result := store.get_message("orders", 0, offset, max_messages=32)).status is Status.FOUND:
        reads += 1
        # One read never crosses a ConsumeQueue segment.
        assert len({queue_offset // entries for queue_offset in result.queue_offsets}) == 1
        assert result.queue_offsets == list(range(offset, result.next_offset))
        seen += bodies_of(result.records)
        offset = result.next_offset
    assert result.status is Status.OFFSET_OVERFLOW_ONE
    assert offset == 37
    assert seen == expected
    assert reads == -(-37 // entries)


# -- entries that do not resolve to their message -------------------------------------------------


@pytest.mark.parametrize(
    "wrong",
    [
        "another queue's record",
        "the middle of a record",
        "a record of another offset",
        "another topic's record",
    ],
)
def test_an_entry_that_does_not_point_at_its_message_is_skipped_not_served(
    store: MessageStore, wrong: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A stale entry (a crash kept it, the bytes it names now hold something else) is never served."""
    put_bodies(store, 3, queue_id=0)
    put_bodies(store, 2, queue_id=1)
    store.append([message(topic="audit", body=b"audit-0".ljust(20, b"."))])
    queue = store.queue("orders", 0)
    assert queue is not None
    entry = {offset: (physical, size) for offset, physical, size, _ in queue.iter_entries(0)}
    other = store.queue("orders", 1)
    audit = store.queue("audit", 0)
    assert other is not None and audit is not None
    other_physical, other_size, _ = other.entry(0) or (0, 0, 0)
    audit_physical, audit_size, _ = audit.entry(0) or (0, 0, 0)
    target = {
        "another queue's record": (other_physical, other_size),
        "the middle of a record": (entry[1][0] + 8, entry[1][1]),
        "a record of another offset": entry[2],
        "another topic's record": (audit_physical, audit_size),
    }[wrong]
    mapped = queue.files.find(20)
    assert mapped is not None
    mapped.mm[20:32] = target[0].to_bytes(8, "big") + target[1].to_bytes(4, "big")

    result = store.get_message("orders", 0, 0, 32)
    assert result.status is Status.FOUND
    assert result.queue_offsets == [0, 2]
    assert bodies_of(result.records) == [b"0-0-".ljust(20, b"."), b"0-2-".ljust(20, b".")]
    assert "skipping orders/0 offset 1" in caplog.text
