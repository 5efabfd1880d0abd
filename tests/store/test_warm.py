"""The CommitLog's disk ahead of the writer is faulted in before the writer reaches it: in memory,
clean (its flushes write nothing but what the writer writes) and unchanged; and nothing more than
what is allocated ahead (the next chunk, the spare segment's first chunk) is."""

from __future__ import annotations

import re
import time
from pathlib import Path

from app.store import Message
from tests.store.conftest import StoreFactory

SEGMENT = 64 << 20
CHUNK = 4 << 20


def mapping_of(path: Path) -> dict[str, int]:
    """The sizes (kB) /proc/self/smaps gives this process's mapping of ``path``; {} if it has none."""
    fields: dict[str, int] = {}
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            inside = line.endswith(" " + str(path))
            continue
        name, _, value = line.partition(":")
        if inside and value.strip().endswith("kB"):
            fields[name] = int(value.split()[0])
    return fields


def resident(path: Path, size: int) -> dict[str, int]:
    """The mapping of ``path`` once ``size`` bytes of it are in memory, or as it is after 20 s."""
    deadline = time.monotonic() + 20
    while True:
        fields = mapping_of(path)
        if fields.get("Rss", 0) * 1024 >= size or time.monotonic() > deadline:
            return fields
        time.sleep(0.05)


def test_the_spare_segments_first_chunk_is_in_memory_clean_and_unchanged_and_no_more(
    make_store: StoreFactory,
) -> None:
    store = make_store(commitlog_file_size=SEGMENT, commitlog_chunk_size=CHUNK)
    store.put([Message("warm", b"first", queue_id=0)])
    files = store.commitlog.files
    deadline = time.monotonic() + 20
    while not files.prepared and time.monotonic() < deadline:
        time.sleep(0.05)
    spare = files.prepared[0]
    fields = resident(spare.path, CHUNK)
    time.sleep(0.2)  # nothing more is faulted in later
    fields = mapping_of(spare.path)
    assert fields["Rss"] * 1024 == CHUNK == spare.allocated, fields
    assert fields["Shared_Dirty"] == fields["Private_Dirty"] == 0, fields
    assert spare.view[:] == bytes(SEGMENT)


def test_the_chunk_ahead_of_the_writer_is_warmed_and_memory_stays_within_a_chunk_and_a_half_of_it(
    make_store: StoreFactory,
) -> None:
    store = make_store(commitlog_file_size=SEGMENT, commitlog_chunk_size=CHUNK)
    segment = None
    for _ in range(5):  # 2.5 chunks, one batch at a time
        store.put([Message("warm", bytes(1000), queue_id=0) for _ in range(CHUNK // 2 // 1100)])
        segment = store.commitlog.files.files[0]
        ahead = segment.allocated - segment.wrote_position
        assert ahead <= CHUNK + CHUNK // 2, (segment.allocated, segment.wrote_position)
    assert segment is not None
    # The allocating thread took the next chunk and faulted it in: the writer finds it in memory.
    fields = resident(segment.path, segment.allocated)
    assert segment.allocated - segment.wrote_position >= CHUNK // 2
    assert fields["Rss"] * 1024 == segment.allocated < SEGMENT, (fields, segment)


def test_a_restart_reads_the_last_segments_data_and_not_its_holes(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    store_dir = tmp_path / "store"
    store = make_store(store_dir, commitlog_file_size=SEGMENT, commitlog_chunk_size=CHUNK)
    store.put([Message("warm", bytes(1000), queue_id=0) for _ in range(10)])
    store.close()
    store.config.abort_path.touch()  # as a crash leaves it: recovery cuts the log's tail
    reopened = make_store(store_dir, commitlog_file_size=SEGMENT, commitlog_chunk_size=CHUNK)
    segment = reopened.commitlog.files.files[0]
    bodies: list[bytes] = []
    while found := reopened.read_messages("warm", 0, len(bodies), 100):
        bodies += [m.body for m in found]
    assert bodies == [bytes(1000)] * 10
    # Only what holds data (written, or allocated and warmed) was read: not the 60 MiB of holes.
    assert mapping_of(segment.path)["Rss"] * 1024 <= CHUNK + CHUNK // 2
