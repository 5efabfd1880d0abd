"""The per-queue ack bookkeeping of a grouped subscriber."""

from __future__ import annotations

from app.api.ws.cursor import QueueCursor


def cursor(offset: int = 0) -> QueueCursor:
    return QueueCursor(0, offset, offset)


def test_the_commit_point_is_the_oldest_unacknowledged_offset() -> None:
    queue = cursor()
    queue.delivered([0, 1, 2])
    queue.offset = 3
    assert queue.commit_point() == 0
    assert queue.ack(1) and queue.ack(2)
    assert queue.advance_commit() is None
    assert queue.ack(0)
    assert queue.advance_commit() == 3
    assert not queue.ack(0)  # a repeat is ignored


def test_the_commit_point_includes_filtered_messages_once_nothing_is_in_flight() -> None:
    queue = cursor(10)
    queue.delivered([12])
    queue.offset = 20  # 10, 11 and 13..19 did not match the filter
    queue.ack(12)
    assert queue.advance_commit() == 20


def test_a_nack_queues_one_redelivery_and_counts_every_nack() -> None:
    queue = cursor()
    queue.delivered([0])
    assert queue.nack(0) and queue.nack(0)
    assert list(queue.redeliver) == [0]
    assert queue.nacks == {0: 2}
    assert not queue.nack(7)
    queue.ack(0)
    assert queue.nacks == {}
