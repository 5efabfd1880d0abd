"""The CommitLog's spare segment is faulted in before the writer reaches it: in memory, clean (its
flushes write nothing but what the writer writes) and unchanged."""

from __future__ import annotations

import re
import time
from pathlib import Path

from app.store import Message
from tests.store.conftest import StoreFactory

SEGMENT = 8 << 20


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


def resident(path: Path) -> dict[str, int]:
    """The mapping of ``path`` once all of it is in memory, or as it is after 20 s."""
    deadline = time.monotonic() + 20
    while True:
        fields = mapping_of(path)
        if fields.get("Rss", 0) * 1024 >= SEGMENT or time.monotonic() > deadline:
            return fields
        time.sleep(0.05)


def test_the_spare_segment_is_in_memory_clean_and_unchanged_before_the_writer_takes_it(
    make_store: StoreFactory,
) -> None:
    store = make_store(commitlog_file_size=SEGMENT)
    store.put([Message("warm", b"first", queue_id=0)])
    files = store.commitlog.files
    deadline = time.monotonic() + 20
    while not files.prepared and time.monotonic() < deadline:
        time.sleep(0.05)
    spare = files.prepared[0]
    fields = resident(spare.path)
    assert fields["Rss"] * 1024 == SEGMENT, fields
    assert fields["Shared_Dirty"] == fields["Private_Dirty"] == 0, fields
    assert spare.view[:] == bytes(SEGMENT)
