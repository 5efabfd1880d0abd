"""Which WebSocket subscriber of a consumer group reads which queue (clustering).

The subscribers of one (group, topic) on this broker share the topic's read queues: each queue goes
to exactly one of them, allocated the way RocketMQ's AllocateMessageQueueAveragely does (sorted
members, contiguous blocks: 8 queues over 3 members -> 3, 3, 2). Whenever a subscriber joins or
leaves, the queues are allocated again at once and every member is told its new set; a member that
loses a queue stops reading it and forgets its unacknowledged messages, which the new owner reads
again from the group's committed offset (at-least-once).

Subscribers that name their queues explicitly, or have no group, take no part in this.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from fastapi import WebSocket

    from app.broker import Broker

GroupKey = tuple[str, str]  # (group, topic)


class Member(Protocol):
    member_id: int

    def assign(self, queue_ids: list[int]) -> None:
        """Read exactly these queues from now on."""


def allocate_averagely(queue_ids: list[int], members: int, index: int) -> list[int]:
    """The queues member ``index`` of ``members`` reads (RocketMQ's average allocation)."""
    count = len(queue_ids)
    if index >= count:
        return []  # more members than queues: some stay idle
    mod = count % members
    size = count // members + (1 if index < mod else 0)
    start = index * size if index < mod else index * size + mod
    return queue_ids[start : start + size]


class GroupMembers:
    """Members of each (group, topic) on this broker, reallocated on every change."""

    def __init__(self, read_queues: Callable[[str], int]) -> None:
        self._read_queues = read_queues
        self._members: dict[GroupKey, list[Member]] = {}
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        return next(self._ids)

    def keys(self) -> list[GroupKey]:
        """Every (group, topic) with a subscriber now."""
        return list(self._members)

    def members(self, group: str, topic: str) -> list[Member]:
        return list(self._members.get((group, topic), ()))

    def join(self, group: str, topic: str, member: Member) -> None:
        self._members.setdefault((group, topic), []).append(member)
        self.rebalance(group, topic)

    def leave(self, group: str, topic: str, member: Member) -> None:
        members = self._members.get((group, topic))
        if members is None or member not in members:
            return
        members.remove(member)
        if members:
            self.rebalance(group, topic)
        else:
            del self._members[(group, topic)]

    def rebalance(self, group: str, topic: str) -> None:
        members = sorted(self._members.get((group, topic), ()), key=lambda member: member.member_id)
        queue_ids = list(range(self._read_queues(topic)))
        allocation = [allocate_averagely(queue_ids, len(members), index) for index in range(len(members))]
        # One synchronous pass: no other task runs between a queue's revocation from one member
        # and its assignment to another, so the new owner reads the offset the old one left.
        for member, queues in zip(members, allocation, strict=True):
            member.assign(queues)


def group_members(websocket: WebSocket, broker: Broker) -> GroupMembers:
    """The app's registry of grouped subscribers, made on first use."""
    state = websocket.app.state
    members: GroupMembers | None = getattr(state, "ws_group_members", None)
    if members is None:

        def read_queues(topic: str) -> int:
            config = broker.topics.get(topic)
            return config.read_queue_nums if config is not None else 0

        members = state.ws_group_members = GroupMembers(read_queues)
    return members
