"""What a subscriber without a group skips when it reads a queue again: the same stored records,
not other messages stored at the same queue offsets, and only what it remembers."""

from __future__ import annotations

from wharf_client.codec import Message
from wharf_client.handed_out import REMEMBERED_BYTES, REMEMBERED_MESSAGES, HandedOut


def record(
    queue_offset: int, physical_offset: int | None = None, stored_ms: int = 1_000, size: int = 100
) -> Message:
    return Message(
        topic="orders", queue_id=0, queue_offset=queue_offset,
        physical_offset=queue_offset * size if physical_offset is None else physical_offset, size=size,
        body=b"x", properties={}, flag=0, sysflag=0, body_crc=7, born_timestamp=stored_ms,
        born_host=b"", store_timestamp=stored_ms, store_host=b"", reconsume_times=0,
        prepared_transaction_offset=0,
    )  # fmt: skip


def offsets(records: list[Message]) -> list[int]:
    return [message.queue_offset for message in records]


def test_the_same_records_read_again_are_skipped_and_what_follows_is_not() -> None:
    handed = HandedOut()
    handed.remember(0, [record(n) for n in range(8)])
    handed.read_again(0, 4, 8)
    assert offsets(handed.fresh(0, [record(n) for n in range(4, 10)])) == [8, 9]
    # Past the guard: a later read of those offsets is not filtered any more on its own.
    assert offsets(handed.fresh(0, [record(n) for n in range(4, 6)])) == [4, 5]


def test_other_messages_stored_at_the_same_queue_offsets_are_handed_out() -> None:
    handed = HandedOut()
    handed.remember(0, [record(n) for n in range(8)])
    handed.read_again(0, 4, 8)
    # A new master's: another CommitLog offset, or the same one stored later.
    others = [record(4, physical_offset=9_999), record(5, stored_ms=2_000), record(6), record(7)]
    assert offsets(handed.fresh(0, others)) == [4, 5]


def test_only_what_was_handed_out_before_the_read_again_is_skipped() -> None:
    handed = HandedOut()
    handed.remember(0, [record(n) for n in range(8)])  # 6 and 7 arrived but were not handed out
    handed.read_again(0, 4, 6)
    assert offsets(handed.fresh(0, [record(n) for n in range(4, 8)])) == [6, 7]


def test_a_second_read_again_before_the_first_passed_keeps_its_end() -> None:
    handed = HandedOut()
    handed.remember(0, [record(n) for n in range(8)])
    handed.read_again(0, 4, 8)
    handed.read_again(0, 3, 4)  # the subscriber's own mark stayed at 4; it had handed out to 8
    assert offsets(handed.fresh(0, [record(n) for n in range(3, 9)])) == [8]


def test_what_it_remembers_is_bounded_in_messages_and_bytes() -> None:
    handed = HandedOut()
    for start in range(0, 3 * REMEMBERED_MESSAGES, 64):
        handed.remember(0, [record(n) for n in range(start, start + 64)])
    end = 3 * REMEMBERED_MESSAGES
    handed.read_again(0, 0, end)
    kept = offsets(handed.fresh(0, [record(n) for n in range(end)]))
    assert kept == list(range(end - REMEMBERED_MESSAGES))  # only the last frames are remembered

    big = REMEMBERED_BYTES // 4
    handed = HandedOut()
    for n in range(8):
        handed.remember(0, [record(n, size=big)])
    handed.read_again(0, 0, 8)
    assert offsets(handed.fresh(0, [record(n, size=big) for n in range(8)])) == [0, 1, 2, 3]
