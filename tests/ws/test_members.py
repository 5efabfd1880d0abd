"""Queue allocation among a group's subscribers, and the per-queue ack bookkeeping."""

from __future__ import annotations

import pytest

from app.api.ws.cursor import QueueCursor
from app.api.ws.members import GroupMembers, allocate_averagely


@pytest.mark.parametrize(
    ("queues", "members", "expected"),
    [
        (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
        (4, 2, [[0, 1], [2, 3]]),
        (4, 1, [[0, 1, 2, 3]]),
        (2, 3, [[0], [1], []]),
        (5, 5, [[0], [1], [2], [3], [4]]),
    ],
)
def test_queues_are_allocated_in_contiguous_blocks(
    queues: int, members: int, expected: list[list[int]]
) -> None:
    allocation = [allocate_averagely(list(range(queues)), members, index) for index in range(members)]
    assert allocation == expected


class FakeMember:
    def __init__(self, member_id: int) -> None:
        self.member_id = member_id
        self.assignments: list[list[int]] = []

    def assign(self, queue_ids: list[int]) -> None:
        self.assignments.append(queue_ids)


def test_every_join_and_leave_reallocates_the_group() -> None:
    members = GroupMembers(lambda topic: 4)
    first, second, third = FakeMember(1), FakeMember(2), FakeMember(3)
    members.join("g", "t", first)
    members.join("g", "t", second)
    members.join("g", "t", third)
    members.leave("g", "t", second)
    assert first.assignments == [[0, 1, 2, 3], [0, 1], [0, 1], [0, 1]]
    assert second.assignments == [[2, 3], [2]]
    assert third.assignments == [[3], [2, 3]]
    members.leave("g", "t", first)
    members.leave("g", "t", third)
    assert members.keys() == []


def test_groups_and_topics_are_allocated_separately() -> None:
    members = GroupMembers(lambda topic: 2)
    a, b = FakeMember(1), FakeMember(2)
    members.join("g1", "t", a)
    members.join("g2", "t", b)
    assert (a.assignments, b.assignments) == ([[0, 1]], [[0, 1]])
    assert sorted(members.keys()) == [("g1", "t"), ("g2", "t")]


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
