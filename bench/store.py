"""Store benchmark: appends against the disk, group commit, reads and recovery of ``app.store``.

Run from the repository root::

    .venv/bin/python -m bench.store [--quick] [--json out.json] [--only disk,append,sync,read,recovery]

What it measures, in one run, in a temporary directory on the repository's disk (never tmpfs):

* ``disk``: the disk's sequential write bandwidth (``dd ... conv=fdatasync``) and a Python baseline
  (``os.write`` of 4 KiB blocks, one ``fdatasync``), over the byte count of the 4 KiB append test,
  interleaved repeat by repeat with that test, which is judged against ``dd``: appending 4 KiB
  messages and draining them to disk (``close``) should reach half the disk's bandwidth.
* ``append``: ASYNC_FLUSH appends of 128 B bodies, one message per ``append`` call and in batches,
  with the message index on (the default) and, for the largest batches, off; judged against a
  plain-Python loop that writes the same bytes (the floor), measured in the same run.
* ``sync``: SYNC_FLUSH acknowledged messages per second with 64 producer threads calling ``put``
  and 64 coroutines awaiting ``put_async`` (group commit), against one producer thread, which gets
  one fsync per message; and 64 threads that each append and ``fdatasync`` themselves.
* ``read``: ``get_message`` from offset 0 to the end of a queue, 32 and 1,000 per call, touching
  every record, and ``decode_record`` on its own.
* ``recovery``: ``open`` of a 1 GiB CommitLog of 1 KiB and of 128 B messages after a clean stop
  (last three segments), after an unclean stop (abort file; walk from the checkpoint's segment) and
  after an unclean stop without a checkpoint (walk everything, rebuild the index), the last one also
  with the store's files evicted from the page cache.

Messages carry what the HTTP API gives every message: a TAGS and a 32-hex-digit UNIQ_KEY property.
The garbage collector is settled as the broker settles it after start-up (``settle_garbage_collector``:
what exists is frozen, the broker's thresholds), at the start and again once a section's messages are
built (before the clock starts), so that prebuilt messages, which no broker holds all at once, are
not walked by every collection.
Every figure is the median of its repeats; MB is 10^6 bytes of CommitLog records, as ``dd`` counts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from app.api.app import settle_garbage_collector
from bench import harness
from bench.harness import REPOSITORY, Result, scratch_parent
from bench.store_plan import (
    FULL,
    GIB,
    QUICK,
    SECTIONS,
    Plan,
    Scratch,
    needed_bytes,
)
from bench.store_read import bench_read, bench_recovery
from bench.store_write import bench_append, bench_disk, bench_sync

BENCHES: dict[str, Callable[[Plan, Scratch], list[Result]]] = {
    "disk": bench_disk,
    "append": bench_append,
    "sync": bench_sync,
    "read": bench_read,
    "recovery": bench_recovery,
}


def make_parser() -> argparse.ArgumentParser:
    parser = harness.arguments("store", __doc__.splitlines()[0], "about an eighth of the work", SECTIONS)
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="parent of the scratch directory (default: the temporary directory if it is on the "
        "repository's disk, else bench/results)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args, plan, sections = harness.parse(make_parser(), argv, FULL, QUICK, SECTIONS)
    settle_garbage_collector()  # every section as the broker runs the store (make_messages again)
    started = time.perf_counter()
    with harness.scratch_dir(
        "wharf-store-bench-", args.dir if args.dir is not None else scratch_parent()
    ) as root:
        free = shutil.disk_usage(root).free
        need = needed_bytes(plan, sections)
        if free < 2 * need:
            print(f"only {free / GIB:.1f} GiB free under {root}, need {2 * need / GIB:.1f}", file=sys.stderr)
            return 1
        if os.stat(root).st_dev != os.stat(REPOSITORY).st_dev:
            print(f"note: {root} is not on the repository's file system", file=sys.stderr)
        scratch = Scratch(root)
        results = harness.run_sections(sections, lambda name: BENCHES[name](plan, scratch))
    harness.report("store", args.json, argv, results, {"plan": asdict(plan), "sections": sections}, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
