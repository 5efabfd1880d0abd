"""Group membership in the broker core: allocation on every change, generations, expiry, and the
members of this process (WebSocket subscribers) told their queues in the same pass."""

from __future__ import annotations

import pytest

from app.broker.errors import GroupConflictError, GroupFullError, MemberNotFoundError
from app.broker.groups import ConsumerGroups, Member


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Listener:
    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.assignments: list[list[int]] = []

    def __call__(self, assignment: dict[str, list[int]]) -> None:
        self.assignments.append(assignment.get(self.topic, []))


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
def test_members_get_contiguous_blocks_in_client_id_order(
    queues: int, members: int, expected: list[list[int]]
) -> None:
    groups = ConsumerGroups(lambda topic: queues, expiry_s=30)
    for index in range(members):
        groups.heartbeat("g", Member(f"c{index}", {"t": "*"}))
    group = groups.get("g")
    assert group is not None
    assert [group.members[f"c{index}"].assignment.get("t", []) for index in range(members)] == expected


def test_every_join_and_leave_tells_the_local_members_their_queues() -> None:
    groups = ConsumerGroups(lambda topic: 4, expiry_s=30)
    first, second, third = Listener("t"), Listener("t"), Listener("t")
    groups.attach("g", "ws#1", "t", "*", first)
    groups.attach("g", "ws#2", "t", "*", second)
    groups.attach("g", "ws#3", "t", "*", third)
    groups.leave("g", "ws#2")
    assert first.assignments == [[0, 1, 2, 3], [0, 1], [0, 1], [0, 1]]
    assert second.assignments == [[2, 3], [2]]
    assert third.assignments == [[3], [2, 3]]
    groups.leave("g", "ws#1")
    groups.leave("g", "ws#3")
    assert groups.names() == []


def test_groups_are_allocated_separately_and_local_members_share_with_http_members() -> None:
    groups = ConsumerGroups(lambda topic: 2, expiry_s=30)
    a, b = Listener("t"), Listener("t")
    groups.attach("g1", "ws#1", "t", "*", a)
    groups.attach("g2", "ws#2", "t", "*", b)
    assert (a.assignments, b.assignments) == ([[0, 1]], [[0, 1]])
    groups.heartbeat("g1", Member("http-1", {"t": "*"}))
    assert a.assignments[-1] == [1]  # "http-1" sorts before "ws#1" and takes queue 0
    assert b.assignments == [[0, 1]]


def test_generations_grow_on_changes_only_and_a_silent_member_expires() -> None:
    clock = Clock()
    queues = {"t": 4}
    groups = ConsumerGroups(lambda topic: queues[topic], expiry_s=30, clock=clock, first_generation=100)
    first = groups.heartbeat("g", Member("a", {"t": "*"})).generation
    second = groups.heartbeat("g", Member("b", {"t": "*"})).generation
    assert first < second
    clock.now += 20
    assert groups.heartbeat("g", Member("a", {"t": "*"})).generation == second  # a renewal
    queues["t"] = 6
    group = groups.get("g")
    assert group is not None and group.generation > second  # the topic grew: allocated again
    clock.now += 15  # "b" silent for 35 s, "a" for 15 s
    group = groups.get("g")
    assert group is not None and list(group.members) == ["a"]
    assert group.members["a"].assignment == {"t": [0, 1, 2, 3, 4, 5]}
    with pytest.raises(MemberNotFoundError):
        groups.touch("g", "b")


def test_local_members_never_expire_and_take_the_group_strategy() -> None:
    clock = Clock()
    groups = ConsumerGroups(lambda topic: 3, expiry_s=30, clock=clock)
    groups.heartbeat("g", Member("a", {"t": "*"}, strategy="circle"))
    listener = Listener("t")
    groups.attach("g", "ws#1", "t", "*", listener)
    assert listener.assignments[-1] == [1]  # circle: a gets 0 and 2
    clock.now += 60
    group = groups.get("g")
    assert group is not None and list(group.members) == ["ws#1"]
    assert listener.assignments[-1] == [0, 1, 2]


def test_a_member_with_another_model_or_strategy_is_refused() -> None:
    groups = ConsumerGroups(lambda topic: 2, expiry_s=30)
    groups.heartbeat("g", Member("a", {"t": "*"}))
    with pytest.raises(GroupConflictError):
        groups.heartbeat("g", Member("b", {"t": "*"}, strategy="consistent_hash"))
    with pytest.raises(GroupConflictError):
        groups.heartbeat("g", Member("b", {"t": "*"}, model="broadcasting"))


def test_a_group_nobody_looks_at_again_is_dropped_once_its_members_expired() -> None:
    clock = Clock()
    groups = ConsumerGroups(lambda topic: 2, expiry_s=30, clock=clock)
    for index in range(100):
        groups.heartbeat(f"gone-{index}", Member("a", {"t": "*"}))
    clock.now += 31
    # Any other group's heartbeat sweeps: the silent groups leave memory without being looked at.
    groups.heartbeat("alive", Member("b", {"t": "*"}))
    assert groups.names() == ["alive"]


def test_a_new_member_past_the_cap_is_refused_while_members_in_keep_renewing() -> None:
    clock = Clock()
    groups = ConsumerGroups(lambda topic: 4, expiry_s=30, clock=clock, max_members=2)
    groups.heartbeat("g", Member("a", {"t": "*"}))
    groups.heartbeat("g", Member("b", {"t": "*"}))
    generation = groups.get("g").generation  # type: ignore[union-attr]
    with pytest.raises(GroupFullError, match="2 members"):
        groups.heartbeat("g", Member("c", {"t": "*"}))
    clock.now += 20
    groups.heartbeat("g", Member("a", {"t": "*"}))  # renewing: still in
    group = groups.get("g")
    assert group is not None and sorted(group.members) == ["a", "b"] and group.generation == generation
    groups.heartbeat("other", Member("c", {"t": "*"}))  # the cap is per group
    assert groups.leave("g", "b")
    groups.heartbeat("g", Member("c", {"t": "*"}))  # room again
    assert sorted(groups.get("g").members) == ["a", "c"]  # type: ignore[union-attr]
