"""The idempotency window on its own, with a fake clock: expiry, eviction, restore, its hash table
against a plain dict, and the memory it costs per remembered id."""

from __future__ import annotations

import random
import tracemalloc
from collections import OrderedDict

from app.broker.idempotency import IdempotencyWindow, Key


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def window(window_s: float = 10, max_entries: int = 100) -> tuple[IdempotencyWindow, FakeClock]:
    clock = FakeClock()
    return IdempotencyWindow(window_s, max_entries, clock), clock


def test_an_id_is_remembered_until_its_window_ends() -> None:
    ids, clock = window(window_s=10)
    ids.put(("orders", "a"), 100)
    clock.now += 5
    ids.put(("orders", "b"), 200)
    clock.now += 5  # exactly the end of a's window: still in it
    assert ids.find(("orders", "a")) == 100
    clock.now += 0.001
    assert ids.find(("orders", "a")) is None
    assert ids.find(("orders", "b")) == 200
    clock.now += 5
    assert ids.find(("orders", "b")) is None
    assert len(ids) == 0


def test_the_topic_is_part_of_the_key() -> None:
    ids, _ = window()
    ids.put(("orders", "a"), 100)
    assert ids.find(("refunds", "a")) is None


def test_beyond_max_entries_the_oldest_id_is_forgotten() -> None:
    ids, clock = window(max_entries=3)
    for n in range(5):
        ids.put(("orders", f"id-{n}"), n * 100)
        clock.now += 1
    assert len(ids) == 3
    assert [ids.find(("orders", f"id-{n}")) for n in range(5)] == [None, None, 200, 300, 400]


def test_a_window_of_zero_seconds_or_entries_is_off() -> None:
    assert not IdempotencyWindow(0, 100).enabled
    assert not IdempotencyWindow(300, 0).enabled
    assert IdempotencyWindow(300, 100).enabled


def test_an_id_put_again_keeps_its_new_offset_when_the_old_entry_expires() -> None:
    ids, clock = window(window_s=10)
    ids.put(("orders", "a"), 100)
    clock.now += 6
    ids.put(("orders", "a"), 900)  # its first message was gone, so it was stored again
    clock.now += 6  # the first entry's time is over, the second's is not
    assert ids.find(("orders", "a")) == 900
    assert len(ids) == 1


def test_restore_keeps_each_id_for_what_is_left_of_its_window() -> None:
    ids, clock = window(window_s=10)
    restored = ids.restore(
        [(("orders", "too-old"), 100, 10.0), (("orders", "old"), 200, 8.0), (("orders", "new"), 300, 1.0)]
    )
    assert restored == 2
    assert ids.find(("orders", "too-old")) is None
    clock.now += 2
    assert ids.find(("orders", "old")) == 200
    clock.now += 0.5
    assert ids.find(("orders", "old")) is None
    assert ids.find(("orders", "new")) == 300


def test_restore_keeps_only_the_newest_max_entries() -> None:
    ids, _ = window(max_entries=2)
    ids.restore([(("orders", f"id-{n}"), n, 5.0 - n) for n in range(4)])
    assert [ids.find(("orders", f"id-{n}")) for n in range(4)] == [None, None, 2, 3]


def test_the_table_agrees_with_a_plain_dict_through_growth_expiry_and_eviction() -> None:
    rng = random.Random(7)
    ids, clock = window(window_s=20, max_entries=2500)
    model: OrderedDict[Key, tuple[int, float]] = OrderedDict()  # key -> (offset, expiry)
    offset = 0
    for step in range(20_000):
        # Fast at first, so that the size bound evicts ids; slower later, so that ids expire.
        clock.now += rng.random() * (0.002 if step < 10_000 else 0.02)
        while model and next(iter(model.values()))[1] < clock.now:
            model.popitem(last=False)
        key = ("orders", f"id-{rng.randrange(40_000)}")
        if step % 3:
            offset += 1
            ids.put(key, offset)
            model.pop(key, None)
            model[key] = (offset, clock.now + 20)
            while len(model) > 2500:
                model.popitem(last=False)
        expected = model.get(key)
        assert ids.find(key) == (None if expected is None else expected[0]), step
    assert len(ids) == len(model)
    assert all(ids.find(key) == value[0] for key, value in model.items())


def test_a_remembered_id_costs_less_than_100_bytes() -> None:
    count = 50_000
    keys = [("orders", f"payment-{n:09d}") for n in range(count)]
    clock = FakeClock()
    ids = IdempotencyWindow(300, count, clock)
    tracemalloc.start()
    try:
        for n, key in enumerate(keys):
            ids.put(key, 1_000_000_000 + n * 250)
        used, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(ids) == count
    assert used / count <= 100, f"{used / count:.1f} bytes per remembered id"
