"""A process that commits and persists consumer offsets until it is killed.

Run as ``python -m tests.store.offsets_child OFFSETS_FILE``. It loads the file (if any), then
forever: commits offset ``n`` for every queue of a few groups, persists the table, and prints ``n``
on a line once the write returned. The parent kills it with SIGKILL and checks that the file holds
a whole table whose offsets are the last printed ``n`` or the next one (a write that completed but
whose line was not printed yet), never anything torn.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.store.consumer_offsets import ConsumerOffsetManager

GROUPS = ("billing", "audit", "search")
TOPICS = ("orders", "payments")
QUEUES = 64  # a table of about 10 KB: a plain rewrite of it could be cut by the kill


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path", type=Path)
    path = parser.parse_args().path
    manager = ConsumerOffsetManager(path)
    manager.load()
    offset = max((entry.offset for entry in manager.all()), default=-1) + 1
    while True:
        for group in GROUPS:
            for topic in TOPICS:
                for queue_id in range(QUEUES):
                    manager.commit(group, topic, queue_id, offset)
        manager.persist()
        sys.stdout.write(f"{offset}\n")
        sys.stdout.flush()
        offset += 1


if __name__ == "__main__":
    main()
