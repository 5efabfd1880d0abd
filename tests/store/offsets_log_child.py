"""A process that commits consumer offsets one at a time and persists each as a change, until killed.

Run as ``python -m tests.store.offsets_log_child OFFSETS_FILE``. It loads the offsets (snapshot and
log), then forever: commits the next value ``n`` on one entry (entry ``n % ENTRIES``), persists only
what changed, and prints ``n`` once the write returned. The parent kills it with SIGKILL and loads
the offsets back: every entry must hold the last value printed for it, or for the entry of the
first unprinted ``n``, that value.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.store.consumer_offsets import ConsumerOffsetManager

GROUPS = 40
QUEUES = 8
ENTRIES = GROUPS * QUEUES


def entry(n: int) -> tuple[str, str, int]:
    index = n % ENTRIES
    return f"group-{index // QUEUES:03d}", "orders", index % QUEUES


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("path", type=Path)
    manager = ConsumerOffsetManager(parser.parse_args().path)
    manager.load()
    n = max((e.offset for e in manager.all()), default=-1) + 1
    while True:
        manager.commit(*entry(n), n)
        manager.persist(only_if_changed=True)
        sys.stdout.write(f"{n}\n")
        sys.stdout.flush()
        n += 1


if __name__ == "__main__":
    main()
