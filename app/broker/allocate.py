"""Allocating a topic's queues over the members of a clustering group (RocketMQ's
AllocateMessageQueueStrategy, SPEC 4).

Each strategy takes the sorted queue ids and the sorted member ids and answers member -> queues, so
that every queue goes to exactly one member. More members than queues leave some with none.

    averagely        contiguous blocks, the first ``count % members`` one larger: 8 over 3 -> 3, 3, 2
    circle           round robin: queue i to member i % members
    consistent_hash  each member owns the arcs of a hash ring that end at its virtual nodes, so a
                     member joining or leaving moves only about 1/members of the queues
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Sequence

Allocation = dict[str, list[int]]

VIRTUAL_NODES = 10  # RocketMQ's default for AllocateMessageQueueConsistentHash


def allocate_averagely(queue_ids: Sequence[int], members: Sequence[str]) -> Allocation:
    allocation: Allocation = {member: [] for member in members}
    count, n = len(queue_ids), len(members)
    if n == 0:
        return allocation
    for index, member in enumerate(members):
        if index >= count:
            break
        mod = count % n
        size = count // n + (1 if index < mod else 0)
        start = index * size if index < mod else index * size + mod
        allocation[member] = list(queue_ids[start : start + size])
    return allocation


def allocate_by_circle(queue_ids: Sequence[int], members: Sequence[str]) -> Allocation:
    allocation: Allocation = {member: [] for member in members}
    for position, queue_id in enumerate(queue_ids):
        if members:
            allocation[members[position % len(members)]].append(queue_id)
    return allocation


def _ring_hash(key: str) -> int:
    return int.from_bytes(hashlib.md5(key.encode(), usedforsecurity=False).digest()[:8], "big")


def allocate_by_consistent_hash(
    queue_ids: Sequence[int], members: Sequence[str], topic: str = ""
) -> Allocation:
    allocation: Allocation = {member: [] for member in members}
    if not members:
        return allocation
    ring = sorted(
        (_ring_hash(f"{member}#{node}"), member) for member in members for node in range(VIRTUAL_NODES)
    )
    points = [point for point, _ in ring]
    for queue_id in queue_ids:
        position = bisect.bisect_left(points, _ring_hash(f"{topic}@{queue_id}")) % len(ring)
        allocation[ring[position][1]].append(queue_id)
    return allocation


STRATEGIES: dict[str, Callable[[Sequence[int], Sequence[str], str], Allocation]] = {
    "averagely": lambda queue_ids, members, _topic: allocate_averagely(queue_ids, members),
    "circle": lambda queue_ids, members, _topic: allocate_by_circle(queue_ids, members),
    "consistent_hash": allocate_by_consistent_hash,
}


def allocate(strategy: str, topic: str, queue_ids: Sequence[int], members: Sequence[str]) -> Allocation:
    """``members`` -> their queues of ``topic`` under ``strategy`` (sorted inputs, sorted queues out)."""
    return STRATEGIES[strategy](sorted(queue_ids), sorted(members), topic)
