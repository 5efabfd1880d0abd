"""Queue allocation over a clustering group's members (SPEC 4)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.broker.allocate import STRATEGIES, allocate


def test_averagely_gives_contiguous_blocks_larger_first() -> None:
    assert allocate("averagely", "t", range(8), ["c", "a", "b"]) == {
        "a": [0, 1, 2],
        "b": [3, 4, 5],
        "c": [6, 7],
    }


def test_circle_deals_queues_round_robin() -> None:
    assert allocate("circle", "t", range(8), ["b", "a", "c"]) == {"a": [0, 3, 6], "b": [1, 4, 7], "c": [2, 5]}


def test_more_members_than_queues_leaves_some_idle() -> None:
    allocation = allocate("averagely", "t", range(2), ["a", "b", "c"])
    assert allocation == {"a": [0], "b": [1], "c": []}


@given(
    strategy=st.sampled_from(sorted(STRATEGIES)),
    queues=st.integers(0, 64),
    members=st.sets(st.text("abcdefgh", min_size=1, max_size=6), max_size=12),
)
def test_every_queue_goes_to_exactly_one_member(strategy: str, queues: int, members: set[str]) -> None:
    allocation = allocate(strategy, "orders", range(queues), list(members))
    assert set(allocation) == members
    owned = [queue_id for queue_ids in allocation.values() for queue_id in queue_ids]
    assert sorted(owned) == (list(range(queues)) if members else [])


@pytest.mark.parametrize("queues", [16, 64])
def test_consistent_hash_moves_only_the_queues_of_a_member_that_joins_or_leaves(queues: int) -> None:
    four = allocate("consistent_hash", "orders", range(queues), ["m1", "m2", "m3", "m4"])
    five = allocate("consistent_hash", "orders", range(queues), ["m1", "m2", "m3", "m4", "m5"])
    owner_four = {q: m for m, qs in four.items() for q in qs}
    owner_five = {q: m for m, qs in five.items() for q in qs}
    # m5 joining takes queues only for itself; m5 leaving gives back only its own.
    assert {owner_five[q] for q in range(queues) if owner_four[q] != owner_five[q]} <= {"m5"}
    # averagely, by contrast, moves queues between members that stayed.
    even_four = allocate("averagely", "orders", range(queues), ["m1", "m2", "m3", "m4"])
    even_five = allocate("averagely", "orders", range(queues), ["m1", "m2", "m3", "m4", "m5"])
    assert any(q not in even_four[m] for m in ("m1", "m2", "m3", "m4") for q in even_five[m])
