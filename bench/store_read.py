"""The store benchmark's read sections: ``read`` (get_message through a queue) and ``recovery``
(``open`` after clean and unclean stops). See bench/store.py."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from app.store import Message, MessageStore, StoreConfig, decode_record
from bench.harness import Result, Stopwatch, Target
from bench.store_plan import (
    GIB,
    MB,
    MIB,
    READ_TARGET,
    RECOVERY_TARGET_S_PER_GIB,
    TOPIC,
    Plan,
    Scratch,
    append_all,
    make_messages,
    record_size,
)

# -- reads ---------------------------------------------------------------------------------------


def bench_read(plan: Plan, scratch: Scratch) -> list[Result]:
    count = plan.read_messages
    directory = scratch.new()
    config = StoreConfig(
        store_dir=directory,
        commitlog_file_size=plan.append_segment,
        max_scan_bytes_per_pull=1000 * 20,
        max_transfer_bytes_per_pull=256 * MIB,
    )
    with MessageStore(config) as store:  # one queue holds them all
        append_all(store, [Message(TOPIC, m.body, 0, m.properties) for m in make_messages(count, 128)], 1000)
    # Reopened, so that no background work left over from the appends competes with the reads.
    store = MessageStore(config).open()
    try:
        samples: dict[int, list[tuple[float, float]]] = {32: [], 1000: []}
        for _ in range(plan.read_repeats):
            for max_messages in samples:
                samples[max_messages].append(read_queue(store, count, max_messages))
        records = []
        offset = 0
        while offset < count:
            found = store.get_message(TOPIC, 0, offset, 1000)
            records.extend(found.records)
            offset = found.next_offset
        decode: list[float] = []
        for _ in range(plan.read_repeats):
            with Stopwatch() as watch:
                for record in records:
                    decode_record(record)
            decode.append(len(records) / watch.seconds)
        del records, found
    finally:
        store.close()
        scratch.remove(directory)
    note = f"{count:,} messages of 128 B in one queue, page cache warm, len() of every record; "
    return [
        *(
            Result(
                f"get_message max {max_messages}",
                "msgs/s",
                [wall for wall, _ in runs],
                target=Target(READ_TARGET),
                note=(note if max_messages == 32 else "")
                + f"{statistics.median(cpu for _, cpu in runs):,.0f} msgs per CPU second",
            )
            for max_messages, runs in samples.items()
        ),
        Result("decode_record", "msgs/s", decode, note="StoredMessage with body and properties"),
    ]


def read_queue(store: MessageStore, count: int, max_messages: int) -> tuple[float, float]:
    """Read queue 0 from offset 0 to its end; messages per second and per CPU second."""
    get_message = store.get_message
    offset = touched = read = 0
    cpu = time.process_time()
    with Stopwatch() as watch:
        while offset < count:
            found = get_message(TOPIC, 0, offset, max_messages)
            for record in found.records:
                touched += len(record)
            read += len(found.records)
            offset = found.next_offset
    cpu = time.process_time() - cpu
    assert read == count and touched > 0
    return read / watch.seconds, read / cpu if cpu > 0 else 0.0


# -- recovery ------------------------------------------------------------------------------------


def fill_commitlog(directory: Path, plan: Plan, body_size: int) -> int:
    """A closed store whose CommitLog holds about ``plan.recovery_bytes``; returns how many."""
    config = StoreConfig(store_dir=directory, commitlog_file_size=plan.recovery_segment)
    pool = make_messages(100_000, body_size)
    batch = 1000
    stop = plan.recovery_bytes - batch * record_size(body_size)
    with MessageStore(config) as store:
        start = 0
        while store.commitlog.max_offset < stop:
            store.append(pool[start : start + batch])
            start = (start + batch) % len(pool)
        return store.commitlog.max_offset


def drop_page_cache(directory: Path) -> None:
    """Evict the store's files (and only them) from the page cache; they are flushed already."""
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def time_open(directory: Path, segment: int, prepare: Callable[[], None]) -> dict[str, float]:
    prepare()
    config = StoreConfig(store_dir=directory, commitlog_file_size=segment)
    store = MessageStore(config)
    cpu = time.process_time()
    with Stopwatch() as watch:
        store.open()
    cpu = time.process_time() - cpu
    report = store.recovery
    store.close()
    assert report is not None
    walked = report.end_offset - report.start_offset
    return {
        "seconds": watch.seconds,
        "cpu_seconds": cpu,
        "walk_mb_per_s": walked / watch.seconds / MB,
        "walked_mb": walked / MB,
        "records": report.records_checked,
        "clean": float(report.clean),
    }


def bench_recovery(plan: Plan, scratch: Scratch) -> list[Result]:
    results = []
    gib = plan.recovery_bytes / GIB
    limit = RECOVERY_TARGET_S_PER_GIB * gib
    for body_size in plan.recovery_body_sizes:
        directory = scratch.new()
        try:
            written = fill_commitlog(directory, plan, body_size)
            abort = directory / "abort"
            checkpoint = directory / "checkpoint"

            def unclean(abort: Path = abort) -> None:
                abort.touch()

            def unclean_no_checkpoint(abort: Path = abort, checkpoint: Path = checkpoint) -> None:
                abort.touch()
                checkpoint.unlink(missing_ok=True)

            def unclean_cold(directory: Path = directory) -> None:
                unclean_no_checkpoint()
                drop_page_cache(directory)

            # (prepare, repeats): the full walks of the smallest messages are the heaviest cases by
            # far, so they run once, and their cold-cache variant is left to the larger messages.
            light = body_size == min(plan.recovery_body_sizes) and len(plan.recovery_body_sizes) > 1
            heavy_repeats = 1 if light else plan.recovery_repeats
            cases: dict[str, tuple[Callable[[], None], int]] = {
                "clean": (lambda: None, plan.recovery_repeats),
                "unclean, from checkpoint": (unclean, plan.recovery_repeats),
                "unclean, full walk": (unclean_no_checkpoint, heavy_repeats),
            }
            if not light:
                cases["unclean, full walk, cold cache"] = (unclean_cold, heavy_repeats)
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
            for repeat in range(plan.recovery_repeats):
                for name, (prepare, repeats) in cases.items():
                    if repeat < repeats:
                        runs[name].append(time_open(directory, plan.recovery_segment, prepare))
        finally:
            scratch.remove(directory)
        size = f"{written / GIB:.2f} GiB" if gib >= 1 else f"{written / MIB:.0f} MiB"
        label = f"recover {size} of {body_size} B msgs"
        for name, samples in runs.items():
            first = samples[0]
            results.append(
                Result(
                    f"{label}: {name}",
                    "s",
                    [s["seconds"] for s in samples],
                    target=Target(limit, at_least=False),
                    note=(
                        f"walked {first['walked_mb']:,.0f} MB, {first['records']:,.0f} records, "
                        f"{statistics.median(s['walk_mb_per_s'] for s in samples):,.0f} MB/s; "
                        f"{statistics.median(s['cpu_seconds'] for s in samples):.2f} CPU seconds"
                    ),
                    extra={
                        "walk_mb_per_s": statistics.median(s["walk_mb_per_s"] for s in samples),
                        "walked_mb": first["walked_mb"],
                        "records": first["records"],
                        "cpu_seconds": statistics.median(s["cpu_seconds"] for s in samples),
                    },
                )
            )
    return results
