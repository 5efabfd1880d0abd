"""Many queues on one broker: the cost per queue from 8 to 80,000 ConsumeQueues.

For each size, a fresh broker process (``python -m app`` under :mod:`tests.api.low_nofile`: an
open-file limit of 1,024, soft and hard; the default ``vm.max_map_count``) on a temporary store on the
repository's disk, with ConsumeQueue segments of 1,000 entries (the default 300,000-entry segment is
6 MB, allocated whole). Then:

* topics of 8 queues are created in lists of 1,000 (``POST /v1/topics`` with ``{"topics": [...]}``);
* every queue gets one message a round, ROUNDS rounds, each request one topic's 8 messages
  (the JSON batch, ``queue_id`` set), CONCURRENCY requests at a time;
* every queue is pulled from offset 0 (each answer must hold the queue's ROUNDS messages in order);
* the broker's RSS, descriptors and mappings are read from /proc (all, and those of store files);
* it is stopped (SIGTERM) and started again, then killed (SIGKILL) and started again: the time until
  ``/readyz`` answers 200, against the first start of the same broker on an empty store; a sample
  of queues is pulled after each restart.

A row fails (printed as a miss) on any 5xx. What grew from the smallest size of the run to each larger
one (RSS, start and recovery times) is also given per 1,000 queues, so that flatness shows.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench import harness
from bench.harness import Result, Target, print_table, scratch_parent
from bench.http_load import rss_bytes
from bench.queues_load import (
    CONCURRENCY,
    ROUNDS,
    create_topics,
    mappings,
    open_files,
    produce_all,
    pull_all,
)
from bench.topics import BULK, QUEUES, QUICK_SIZES, SIZES
from tests.api.low_nofile import NOFILE
from tests.api.server import BrokerProcess

SAMPLE = 500  # queues pulled after each restart
SETTINGS = {
    "consumequeue_file_entries": 1_000,
    "commitlog_file_size": 64 * 1024 * 1024,
    "max_hash_slots": 262_144,
    "max_index_count": 1_000_000,
    "log_level": "warning",
}
# Targets of the 80,000-queue row.
TARGET_STORE_FILES = 1_000
TARGET_RSS_MIB = 1_024.0
TARGET_START_S = 30.0


START_TIMEOUT_S = 120.0


def timed_start(broker: BrokerProcess) -> float:
    """Start ``broker``; the time until /readyz answered 200 (RuntimeError past START_TIMEOUT_S)."""
    start = time.perf_counter()
    broker.start(START_TIMEOUT_S)
    return time.perf_counter() - start


def broker_pid(broker: BrokerProcess) -> int:
    assert broker.process is not None
    return broker.process.pid


def sample_queues(count: int) -> list[tuple[int, int]]:
    queues = [(t, q) for t in range(count) for q in range(QUEUES)]
    step = max(1, len(queues) // SAMPLE)
    return queues[::step]


@dataclass(slots=True)
class Row:
    """The figures of one size."""

    topics: int
    figures: dict[str, float] = field(default_factory=dict)
    server_errors: list[str] = field(default_factory=list)
    failure: str = ""  # a restart that did not answer /readyz in time; the figures after it are missing

    @property
    def queues(self) -> int:
        return self.topics * QUEUES


def run_size(count: int, root: Path) -> Row:
    row = Row(count)
    store = root / f"store-{count}"
    broker = BrokerProcess(store, module="tests.api.low_nofile", **SETTINGS)
    figures = row.figures
    stage = "empty-store start"
    try:
        figures["empty_start_s"] = timed_start(broker)
        figures["rss_empty_mib"] = rss_bytes(broker_pid(broker)) / 2**20
        figures["create_s"] = create_topics(broker.url, count)
        produce = produce_all(broker.port, count)
        pull = pull_all(broker.port, [(t, q) for t in range(count) for q in range(QUEUES)])
        row.server_errors += produce.server_errors + pull.server_errors
        figures.update(
            produce_s=produce.seconds,
            produce_msgs_per_s=count * QUEUES * ROUNDS / produce.seconds,
            produce_p99_ms=produce.p99_ms,
            pull_s=pull.seconds,
            pulls_per_s=len(pull.latencies) / pull.seconds,
            pull_p50_ms=pull.p50_ms,
            pull_p99_ms=pull.p99_ms,
        )
        pid = broker_pid(broker)
        figures["rss_mib"] = rss_bytes(pid) / 2**20
        figures["fds"], figures["store_fds"] = open_files(pid, store)
        figures["maps"], figures["store_maps"] = mappings(pid, store)
        broker.stop()
        stage = "start"
        figures["start_s"] = timed_start(broker)
        pid = broker_pid(broker)
        figures["store_fds_after_start"] = open_files(pid, store)[1]
        figures["store_maps_after_start"] = mappings(pid, store)[1]
        figures["rss_after_start_mib"] = rss_bytes(pid) / 2**20
        row.server_errors += pull_all(broker.port, sample_queues(count)).server_errors
        broker.kill()
        stage = "recovery start"
        figures["recovery_start_s"] = timed_start(broker)
        row.server_errors += pull_all(broker.port, sample_queues(count)).server_errors
        figures["store_fds_after_recovery"] = open_files(broker_pid(broker), store)[1]
    except RuntimeError as error:
        if not str(error).startswith("broker did not become ready"):
            raise
        row.failure = f"{stage}: no 200 from /readyz in {START_TIMEOUT_S:.0f} s"
    finally:
        broker.stop()
        shutil.rmtree(store, ignore_errors=True)
    return row


def increment(row: Row, base: Row, key: str) -> float:
    """What figure ``key`` grew by from the smallest size ``base`` to ``row``, per 1,000 queues
    (NaN when either lacks it)."""
    grown = row.figures.get(key, math.nan) - base.figures.get(key, math.nan)
    return grown * 1000 / (row.queues - base.queues)


def results_of(row: Row, base: Row) -> list[Result]:
    """``base``: the smallest size of the run, whose start times the others' are compared with."""
    f = defaultdict(lambda: math.nan, row.figures)
    queues = row.queues
    size = f"{row.topics:,} x {QUEUES} = {queues:,} queues"
    failed = Target(0, at_least=False)  # 5xx answers: none
    largest = row.topics >= 10_000

    def capped(name: str, unit: str, value: float, limit: float, note: str = "") -> Result:
        """A figure held to at most ``limit`` at the largest size."""
        target = Target(limit, at_least=False) if largest else None
        return Result(f"{size}: {name}", unit, [value], target=target, note=note)

    results = [
        Result(
            f"{size}: 5xx answers",
            "",
            [float(len(row.server_errors))],
            target=failed,
            note="; ".join(row.server_errors[:3]),
        ),
        Result(
            f"{size}: create time per topic",
            "ms",
            [f["create_s"] / row.topics * 1000],
            note=f"{f['create_s']:.2f} s in all",
        ),
        Result(
            f"{size}: produce",
            "msgs/s",
            [f["produce_msgs_per_s"]],
            note=f"batches of {QUEUES}, p99 {f['produce_p99_ms']:.1f} ms",
            extra={"p99_ms": f["produce_p99_ms"]},
        ),
        Result(f"{size}: pull", "pulls/s", [f["pulls_per_s"]]),
        Result(f"{size}: pull p99", "ms", [f["pull_p99_ms"]], note=f"p50 {f['pull_p50_ms']:.1f} ms"),
        capped(
            "RSS",
            "MiB",
            f["rss_mib"],
            TARGET_RSS_MIB,
            f"{f['rss_empty_mib']:.1f} MiB on the empty store, {f['rss_after_start_mib']:.1f} after restart",
        ),
        capped(
            "descriptors of store files",
            "",
            f["store_fds"],
            TARGET_STORE_FILES,
            f"{f['fds']:.0f} in all (limit {NOFILE}); {f['store_fds_after_start']:.0f} after restart",
        ),
        capped(
            "mappings of store files",
            "",
            f["store_maps"],
            TARGET_STORE_FILES,
            f"{f['maps']:.0f} in all; {f['store_maps_after_start']:.0f} after restart",
        ),
        capped(
            "start",
            "s",
            f["start_s"],
            TARGET_START_S,
            f"empty store: {f['empty_start_s']:.2f} s" + (f"; {row.failure}" if row.failure else ""),
        ),
        capped("recovery start (SIGKILL)", "s", f["recovery_start_s"], TARGET_START_S),
    ]
    if row.queues > base.queues:
        per_queue = "over the smallest size's, per 1,000 queues"
        results += [
            Result(f"{size}: RSS {per_queue}", "MiB", [increment(row, base, "rss_mib")]),
            Result(f"{size}: start {per_queue}", "s", [increment(row, base, "start_s")]),
            Result(f"{size}: recovery start {per_queue}", "s", [increment(row, base, "recovery_start_s")]),
        ]
    return results


def growth_table(rows: list[Row]) -> str:
    """The sizes as columns, one figure a line (Markdown), for BENCHMARKS.md."""
    lines = [
        "| topics of 8 queues | " + " | ".join(f"{r.topics:,}" for r in rows) + " |",
        "|---" * (len(rows) + 1) + "|",
    ]

    def line(label: str, cell: Callable[[Row], str]) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(r) for r in full) + " |")

    full = [Row(r.topics, defaultdict(lambda: math.nan, r.figures), r.server_errors, r.failure) for r in rows]

    line("queues", lambda r: f"{r.queues:,}")
    line("5xx answers", lambda r: str(len(r.server_errors)))
    line(
        "create time per topic (lists of 1,000)",
        lambda r: f"{r.figures['create_s'] / r.topics * 1000:.2f} ms",
    )
    line("produce, msgs/s (batches of 8)", lambda r: f"{r.figures['produce_msgs_per_s']:,.0f}")
    line("produce p99", lambda r: f"{r.figures['produce_p99_ms']:.1f} ms")
    line("pull, pulls/s", lambda r: f"{r.figures['pulls_per_s']:,.0f}")
    line("pull p50 / p99", lambda r: f"{r.figures['pull_p50_ms']:.1f} / {r.figures['pull_p99_ms']:.1f} ms")
    line("RSS (empty store)", lambda r: f"{r.figures['rss_mib']:.0f} MiB ({r.figures['rss_empty_mib']:.0f})")
    line("descriptors: all / store files", lambda r: f"{r.figures['fds']:.0f} / {r.figures['store_fds']:.0f}")
    line("mappings: all / store files", lambda r: f"{r.figures['maps']:.0f} / {r.figures['store_maps']:.0f}")
    line("start (empty store)", lambda r: f"{r.figures['start_s']:.2f} s ({r.figures['empty_start_s']:.2f})")
    line("recovery start after SIGKILL", lambda r: f"{r.figures['recovery_start_s']:.2f} s")
    line("failure", lambda r: r.failure or "-")
    base = min(rows, key=lambda r: r.queues)

    def per_1000(key: str, unit: str, digits: int) -> Callable[[Row], str]:
        return lambda r: f"{increment(r, base, key):.{digits}f} {unit}" if r.queues > base.queues else "-"

    line("RSS over the smallest size, per 1,000 queues", per_1000("rss_mib", "MiB", 2))
    line("start over the smallest size, per 1,000 queues", per_1000("start_s", "s", 3))
    line("recovery over the smallest size, per 1,000 queues", per_1000("recovery_start_s", "s", 3))
    return "\n".join(lines)


def make_parser() -> argparse.ArgumentParser:
    parser = harness.arguments("queues", __doc__.splitlines()[0], "up to 1,000 topics (8,000 queues)")
    parser.add_argument("--sizes", help="comma-separated numbers of topics of 8 queues, e.g. 1,100,10000")
    return parser


def main(argv: list[str] | None = None) -> int:
    args, sizes, _ = harness.parse(make_parser(), argv, SIZES, QUICK_SIZES)
    if args.sizes:
        try:
            sizes = tuple(int(size) for size in args.sizes.split(",") if size.strip())
        except ValueError:
            print(f"--sizes takes numbers of topics, got {args.sizes!r}", file=sys.stderr)
            return 2
        if not sizes or min(sizes) < 1:
            print("--sizes needs at least one number of topics, each 1 or more", file=sys.stderr)
            return 2
    rows: list[Row] = []
    with harness.scratch_dir("wharf-bench-queues-", scratch_parent()) as root:
        for count in sizes:
            load = os.getloadavg()[0]
            rows.append(run_size(count, root))
            rows[-1].figures["load_average"] = load
            print(
                f"  {count:,} topics done (load {load:.1f}): {rows[-1].figures}", file=sys.stderr, flush=True
            )
    base = min(rows, key=lambda r: r.queues)
    results = [result for row in rows for result in results_of(row, base)]
    print_table(results, f"Many queues: topics of {QUEUES} queues, open-file limit {NOFILE}")
    print()
    print(growth_table(rows))
    settings: dict[str, object] = {
        "sizes": sizes,
        "queues_per_topic": QUEUES,
        "rounds": ROUNDS,
        "bulk": BULK,
        "concurrency": CONCURRENCY,
        "nofile": NOFILE,
        "max_map_count": Path("/proc/sys/vm/max_map_count").read_text().strip(),
        "broker": SETTINGS,
        "rows": [
            {"topics": r.topics, **r.figures, "server_errors": r.server_errors, "failure": r.failure}
            for r in rows
        ],
    }
    harness.report("queues", args.json, argv, results, settings)
    return 1 if any(row.server_errors or row.failure for row in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
