"""A full disk in the middle of a segment, in a process of its own: ``python -m tests.store.chunk_child
SCENARIO STORE_DIR`` fills the disk once the segment's allocated chunk is nearly used, appends until
the next chunk is refused, frees the disk and appends again, printing one JSON line of what it saw.

It runs apart from the test process because the failure it guards against is not an exception: a
byte written through a mapping past the allocated blocks of a full file system raises SIGBUS, which
kills the process (the test then sees the signal as the exit status).

Scenarios:

* ``commitlog``: 8 MiB CommitLog segments allocated 1 MiB at a time; 20 KiB messages.
* ``consumequeue``: 300,000-entry ConsumeQueue segments (6 MB), whose first chunk is one page
  (204 entries); the CommitLog has room, the queue's next chunk has none.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from app.store import DiskFullError, Message, MessageStore
from app.store.disk_guard import RESERVE_BYTES
from tests.small_disk import fill
from tests.store.conftest import message, tiny_config, wait_until

BODY = 20 * 1024


def state(store: MessageStore) -> tuple[int, dict[str, int]]:
    queues = {f"{k[0]}/{k[1]}": q.max_offset for k, q in store.consume_queues.items() if q.max_offset}
    return store.commitlog.max_offset, queues


def read_all(store: MessageStore) -> list[bytes]:
    bodies: list[bytes] = []
    while found := store.read_messages("orders", 0, len(bodies), 100):
        bodies += [m.body for m in found]
    return bodies


def commitlog(store_dir: Path) -> dict[str, object]:
    store = MessageStore(
        tiny_config(
            store_dir,
            commitlog_file_size=8 << 20,
            commitlog_chunk_size=1 << 20,
            consumequeue_file_entries=1_000,
            disk_refuse_writes_ratio=100,
        )
    ).open()
    files = store.commitlog.files

    def body(n: int) -> Message:
        return message(body=n.to_bytes(4, "big") * (BODY // 4))

    acked = [m.physical_offset for m in store.append([body(n) for n in range(4)])]
    # The allocating thread has the next chunk and the spare ready, then the disk fills up.
    wait_until(lambda: bool(files.prepared))
    fill(store_dir.parent, leave_bytes=RESERVE_BYTES)
    refused = None
    n = 4
    while refused is None:
        before = state(store)
        try:
            acked += [m.physical_offset for m in store.append([body(n + i) for i in range(5)])]
            n += 5
        except DiskFullError as error:
            refused = str(error)
            assert state(store) == before, "a refused batch stored something"
    last = files.last_file
    assert last is not None
    mid_segment = 0 < last.wrote_position < last.file_size - (1 << 20)
    bodies = read_all(store)
    (store_dir.parent / "filler").unlink()
    resumed = store.append([body(n)])
    after = read_all(store)
    store.close()
    return {
        "refused": refused,
        "acked": len(acked),
        "read_back": len(bodies),
        "in_order": bodies == [body(i).body for i in range(len(bodies))],
        "mid_segment": mid_segment,
        "wrote": last.wrote_position,
        "allocated": last.allocated,
        "resumed_at": resumed[0].queue_offset,
        "after": len(after),
    }


def consumequeue(store_dir: Path) -> dict[str, object]:
    store = MessageStore(
        tiny_config(
            store_dir,
            commitlog_file_size=1 << 20,
            consumequeue_file_entries=300_000,
            disk_refuse_writes_ratio=100,
        )
    ).open()
    queue_first_chunk = 4096 // 20  # entries in the first page
    store.append([message(body=b"x") for _ in range(queue_first_chunk)])
    wait_until(lambda: bool(store.commitlog.files.prepared))
    segment = store.consume_queues[("orders", 0)].files.files[0]
    fill(store_dir.parent, leave_bytes=RESERVE_BYTES)
    before = state(store)
    refused = None
    try:
        store.append([message(body=b"z")])  # entry 204 needs the queue's next page
    except DiskFullError as error:
        refused = str(error)
    unchanged = state(store) == before
    (store_dir.parent / "filler").unlink()
    resumed = store.append([message(body=b"z")])
    store.close()
    return {
        "refused": refused,
        "unchanged": unchanged,
        "allocated": segment.allocated,
        "file_size": segment.file_size,
        "resumed_at": resumed[0].queue_offset,
    }


def main() -> None:
    scenario, store_dir = sys.argv[1], Path(sys.argv[2])
    found = {"commitlog": commitlog, "consumequeue": consumequeue}[scenario](store_dir)
    print(json.dumps(found), flush=True)


if __name__ == "__main__":
    main()
