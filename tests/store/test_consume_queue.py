"""A batch's ConsumeQueue entries are written as one run per queue (ConsumeQueue.put_run): the
same file and the same state as writing them one by one (put), wherever the run starts, whatever
the queue already holds, across segment ends."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.store.consume_queue import UNIT, UNIT_SIZE, ConsumeQueue

ENTRIES_PER_SEGMENT = 4


def state(queue: ConsumeQueue) -> tuple[object, ...]:
    files = [
        (mapped.file_from_offset, mapped.wrote_position, bytes(mapped.mm)) for mapped in queue.files.files
    ]
    return queue.max_offset, queue.min_offset, queue.max_physical_end, files


# (first queue offset, entries): runs that start at the end, before it (partly written already) or past it.
runs = st.lists(st.tuples(st.integers(0, 14), st.integers(1, 9)), min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(runs)
def test_a_run_is_written_as_its_entries_one_by_one(
    tmp_path_factory: pytest.TempPathFactory, batches: list[tuple[int, int]]
) -> None:
    root = tmp_path_factory.mktemp("queues")
    by_entry = ConsumeQueue.open(root / "a", "orders", 0, ENTRIES_PER_SEGMENT)
    by_run = ConsumeQueue.open(root / "b", "orders", 0, ENTRIES_PER_SEGMENT)
    try:
        for first, count in batches:
            entries = [(1000 * (first + i), 100 + i, first + i) for i in range(count)]
            wrote = [by_entry.put(first + i, *entry) for i, entry in enumerate(entries)]
            packed = bytearray(b"".join(UNIT.pack(*entry) for entry in entries))
            assert by_run.put_run(first, packed) == any(wrote)
            assert state(by_run) == state(by_entry)
    finally:
        by_entry.files.close()
        by_run.files.close()


def test_a_run_rolls_to_the_next_segment(tmp_path: Path) -> None:
    queue = ConsumeQueue.open(tmp_path, "orders", 0, ENTRIES_PER_SEGMENT)
    try:
        entries = [(1000 * i, 100, i) for i in range(10)]
        assert queue.put_run(0, bytearray(b"".join(UNIT.pack(*entry) for entry in entries)))
        assert [mapped.file_from_offset // UNIT_SIZE for mapped in queue.files.files] == [0, 4, 8]
        assert [queue.entry(i) for i in range(10)] == entries
        assert queue.max_physical_end == 9000 + 100
    finally:
        queue.files.close()
