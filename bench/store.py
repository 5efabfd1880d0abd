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
Every figure is the median of its repeats; MB is 10^6 bytes of CommitLog records, as ``dd`` counts.
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from app.store import FlushMode, Message, MessageStore, PutStatus, StoreConfig, decode_record
from app.store.record import MESSAGE_MAGIC, Limits, encode_host, encode_record
from bench.common import (
    REPOSITORY,
    RESULTS_DIR,
    Result,
    Stopwatch,
    Target,
    print_table,
    scratch_parent,
    select_sections,
    write_json,
)

TOPIC = "bench"
QUEUES = 4
MIB = 1 << 20
GIB = 1 << 30
MB = 1_000_000
SECTIONS = ("disk", "append", "sync", "read", "recovery")

# Targets for this 2-core machine.
APPEND_BATCH_TARGET = 250_000  # msgs/s, 128 B bodies, batched appends
APPEND_SINGLE_TARGET = 150_000  # msgs/s, 128 B bodies, one message per append
DISK_SHARE_TARGET = 0.5  # 4 KiB appends drained to disk, as a share of dd's bandwidth
GROUP_COMMIT_TARGET = 5.0  # group commit over one fsync per message
READ_TARGET = 300_000  # msgs/s through get_message
RECOVERY_TARGET_S_PER_GIB = 10.0


@dataclass(frozen=True, slots=True)
class Plan:
    """How much work each section does; ``--quick`` shrinks everything by about eight."""

    repeats: int
    append_segment: int
    small_messages: int  # 128 B append test
    large_bytes: int  # 4 KiB append test, bytes of CommitLog
    batch_sizes: tuple[int, ...]
    sync_threads: int
    sync_seconds: float
    read_messages: int
    read_repeats: int
    recovery_bytes: int
    recovery_segment: int
    recovery_body_sizes: tuple[int, ...]
    recovery_repeats: int


FULL = Plan(
    repeats=3,
    append_segment=64 * MIB,
    small_messages=500_000,
    large_bytes=512 * MIB,
    batch_sizes=(100, 1000),
    sync_threads=64,
    sync_seconds=3.0,
    read_messages=200_000,
    read_repeats=5,
    recovery_bytes=GIB,
    recovery_segment=128 * MIB,
    recovery_body_sizes=(1024, 128),
    recovery_repeats=2,
)
QUICK = Plan(
    repeats=3,
    append_segment=32 * MIB,
    small_messages=200_000,
    large_bytes=128 * MIB,
    batch_sizes=(100, 1000),
    sync_threads=64,
    sync_seconds=1.0,
    read_messages=100_000,
    read_repeats=3,
    recovery_bytes=128 * MIB,
    recovery_segment=32 * MIB,
    recovery_body_sizes=(1024, 128),
    recovery_repeats=2,
)


# -- helpers ----------------------------------------------------------------------------------------


def make_messages(count: int, body_size: int) -> list[Message]:
    """Prebuilt messages over four queues; a few distinct random bodies, a unique id each."""
    bodies = [os.urandom(body_size) for _ in range(16)]
    return [
        Message(TOPIC, bodies[i % 16], i % QUEUES, {"TAGS": "TagA", "UNIQ_KEY": f"{i:032X}"})
        for i in range(count)
    ]


def record_size(body_size: int) -> int:
    message = make_messages(1, body_size)[0]
    return len(encode_record(message, encode_host("127.0.0.1", 8080), 0, Limits()).data)


class Scratch:
    """Fresh directories under one temporary root, removed as soon as a measurement is done."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._count = 0

    def new(self) -> Path:
        self._count += 1
        path = self.root / f"run-{self._count}"
        path.mkdir()
        return path

    @staticmethod
    def remove(path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)


def append_all(store: MessageStore, messages: list[Message], batch: int) -> None:
    append = store.append
    if batch == 1:
        for message in messages:
            append([message])
    else:
        for start in range(0, len(messages), batch):
            append(messages[start : start + batch])


def mode_name(batch: int) -> str:
    return "single" if batch == 1 else f"batch {batch}"


# -- disk and 4 KiB appends ----------------------------------------------------------------------


def run_dd(path: Path, count_mib: int) -> float:
    """dd's own figure for writing ``count_mib`` MiB and fdatasync-ing them, in MB/s."""
    with Stopwatch() as watch:
        finished = subprocess.run(
            ["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={count_mib}", "conv=fdatasync"],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "LC_ALL": "C"},
        )
    path.unlink()
    found = re.search(r"^(\d+) bytes.* copied, ([\d.]+) s", finished.stderr, re.MULTILINE)
    if found is None:  # an unfamiliar dd: fall back to timing it ourselves
        return count_mib * MIB / watch.seconds / MB
    return int(found[1]) / float(found[2]) / MB


def run_os_write(path: Path, nbytes: int) -> float:
    """Plain ``os.write`` of 4 KiB blocks and one ``fdatasync`` at the end, in MB/s."""
    block = os.urandom(4096)
    blocks = nbytes // len(block)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with Stopwatch() as watch:
            write = os.write
            for _ in range(blocks):
                write(fd, block)
            os.fdatasync(fd)
    finally:
        os.close(fd)
        path.unlink()
    return blocks * len(block) / watch.seconds / MB


def run_store_append(
    directory: Path, messages: list[Message], batch: int, segment: int, index: bool = True
) -> dict[str, float]:
    """Append every message under ASYNC_FLUSH, then close (drain to disk); rates of both phases.

    Also the rate per CPU second of the whole process (every thread), which a busy neighbour
    disturbs less than the wall-clock rate.
    """
    config = StoreConfig(store_dir=directory, commitlog_file_size=segment, message_index_enable=index)
    store = MessageStore(config).open()
    try:
        cpu = time.process_time()
        with Stopwatch() as appending:
            append_all(store, messages, batch)
        cpu = time.process_time() - cpu
        written = store.commitlog.max_offset
    finally:
        with Stopwatch() as draining:
            store.close()
    return {
        "msgs_per_s": len(messages) / appending.seconds,
        "msgs_per_cpu_s": len(messages) / cpu if cpu > 0 else 0.0,
        "mb_per_s": written / appending.seconds / MB,
        "durable_mb_per_s": written / (appending.seconds + draining.seconds) / MB,
        "drain_s": draining.seconds,
        "segments": -(-written // segment),
    }


def run_python_floor(directory: Path, messages: list[Message], segment: int) -> float:
    """The least plain Python does to store the same messages, in msgs/s: encode the record (pack
    the header, CRC the body, join the fields), copy it into a mapped file, patch its offsets and
    write a 20-byte queue entry. No validation, no lock, no rolling (the mapping is reused)."""
    header = struct.Struct(">iiiiiqqiq8sq8siqi")
    offsets = struct.Struct(">qq")
    entry = struct.Struct(">qiq")
    host = encode_host("127.0.0.1", 8080)
    queue_size = 200_000 * 20  # a whole number of entries
    with open(directory / "floor.log", "w+b") as log, open(directory / "floor.cq", "w+b") as queue:
        log.truncate(segment)
        queue.truncate(queue_size)
        with mmap.mmap(log.fileno(), segment) as mm, mmap.mmap(queue.fileno(), queue_size) as cq:
            position = 0
            with Stopwatch() as watch:
                for count, message in enumerate(messages):
                    body = message.body
                    topic = message.topic.encode()
                    props = "".join([f"{k}\x01{v}\x02" for k, v in message.properties.items()]).encode()
                    total = 91 + len(body) + len(topic) + len(props)
                    crc = zlib.crc32(body)
                    head = header.pack(
                        total, MESSAGE_MAGIC, crc - (1 << 32) if crc & 0x80000000 else crc,
                        message.queue_id, 0, -1, -1, 0, 0, host, 0, host, 0, 0, len(body),
                    )  # fmt: skip
                    data = b"".join(
                        (head, body, bytes((len(topic),)), topic, len(props).to_bytes(2, "big"), props)
                    )
                    end = position + total
                    if end > segment:
                        position, end = 0, total
                    mm[position:end] = data
                    offsets.pack_into(mm, position + 20, count, position)
                    entry.pack_into(cq, count * 20 % queue_size, position, total, 0)
                    position = end
    return len(messages) / watch.seconds


def bench_disk(plan: Plan, scratch: Scratch) -> list[Result]:
    size = record_size(4096)
    count = plan.large_bytes // size
    nbytes = count * size
    messages = make_messages(count, 4096)
    modes = (1, plan.batch_sizes[0])
    dd: list[float] = []
    os_write: list[float] = []
    runs: dict[int, list[dict[str, float]]] = {batch: [] for batch in modes}
    for _ in range(plan.repeats):
        # Interleaved, so that a noisy neighbour hurts the baseline and the store alike.
        directory = scratch.new()
        dd.append(run_dd(directory / "dd.bin", -(-nbytes // MIB)))
        os_write.append(run_os_write(directory / "os_write.bin", nbytes))
        scratch.remove(directory)
        for batch in modes:
            directory = scratch.new()
            runs[batch].append(run_store_append(directory, messages, batch, plan.append_segment))
            scratch.remove(directory)
    mb = f"{nbytes / MB:,.0f} MB"
    disk = Result(
        "disk: dd bs=1M conv=fdatasync", "MB/s", dd, note=f"{mb}, the bytes of the 4 KiB test", alias="dd"
    )
    baseline = Result("disk: os.write 4 KiB + fdatasync", "MB/s", os_write).against(disk)
    results = [disk, baseline]
    for batch in modes:
        samples = runs[batch]
        name = f"append 4 KiB {mode_name(batch)}"
        segments = samples[0]["segments"]
        results += [
            Result(name, "msgs/s", [s["msgs_per_s"] for s in samples], note=f"{count:,} messages"),
            Result(f"{name} (in memory)", "MB/s", [s["mb_per_s"] for s in samples]).against(disk),
            Result(
                f"{name} + drain to disk",
                "MB/s",
                [s["durable_mb_per_s"] for s in samples],
                target=Target(DISK_SHARE_TARGET, on_ratio=True),
                note=f"append, then close() until every byte is fdatasync-ed; {segments:.0f} segments",
            ).against(disk),
        ]
    return results


# -- 128 B appends -----------------------------------------------------------------------------------


def bench_append(plan: Plan, scratch: Scratch) -> list[Result]:
    messages = make_messages(plan.small_messages, 128)
    modes = (1, *plan.batch_sizes)
    largest = plan.batch_sizes[-1]
    runs: dict[int, list[dict[str, float]]] = {batch: [] for batch in modes}
    no_index: list[dict[str, float]] = []
    floor: list[float] = []
    for _ in range(plan.repeats):
        # Interleaved, so that a noisy neighbour hurts the floor and the store alike.
        directory = scratch.new()
        floor.append(run_python_floor(directory, messages, plan.append_segment))
        scratch.remove(directory)
        for batch in modes:
            directory = scratch.new()
            runs[batch].append(run_store_append(directory, messages, batch, plan.append_segment))
            scratch.remove(directory)
        directory = scratch.new()
        no_index.append(run_store_append(directory, messages, largest, plan.append_segment, index=False))
        scratch.remove(directory)
    baseline = Result(
        "python floor: encode + copy, 128 B",
        "msgs/s",
        floor,
        alias="floor",
        note="pack, CRC, join, copy into a mapping, patch offsets, queue entry; nothing else",
    )
    results = [baseline]

    def note(samples: list[dict[str, float]]) -> str:
        cpu = statistics.median(s["msgs_per_cpu_s"] for s in samples)
        drain = statistics.median(s["drain_s"] for s in samples)
        return (
            f"{len(messages):,} messages, {samples[0]['segments']:.0f} segments; "
            f"{cpu:,.0f} msgs per CPU second; close() after it took {drain:.2f} s"
        )

    for batch in modes:
        samples = runs[batch]
        target = APPEND_SINGLE_TARGET if batch == 1 else APPEND_BATCH_TARGET
        name = f"append 128 B {mode_name(batch)}"
        results += [
            Result(
                name, "msgs/s", [s["msgs_per_s"] for s in samples], target=Target(target), note=note(samples)
            ).against(baseline),
            Result(name, "MB/s", [s["mb_per_s"] for s in samples]),
        ]
    results.append(
        Result(
            f"append 128 B {mode_name(largest)}, index off",
            "msgs/s",
            [s["msgs_per_s"] for s in no_index],
            note="message_index_enable=False: what the key index costs the writer; " + note(no_index),
        ).against(baseline)
    )
    return results


# -- SYNC_FLUSH group commit ----------------------------------------------------------------------


def run_producers(
    directory: Path, threads: int, seconds: float, flush_mode: FlushMode, own_fsync: bool = False
) -> dict[str, float]:
    """``threads`` producers calling ``put`` for ``seconds``; acknowledged messages per second.

    With ``own_fsync`` each producer appends (ASYNC store) and calls ``fdatasync`` itself.
    """
    config = StoreConfig(store_dir=directory, flush_mode=flush_mode, commitlog_file_size=64 * MIB)
    store = MessageStore(config).open()
    body = os.urandom(128)
    counts = [0] * threads
    latencies: list[list[float]] = [[] for _ in range(threads)]
    failures: list[BaseException] = []
    gate = threading.Barrier(threads + 1)
    deadline = 0.0

    def produce(index: int) -> None:
        message = Message(TOPIC, body, index % QUEUES, {"TAGS": "TagA", "UNIQ_KEY": f"{index:032X}"})
        batch = [message]
        mine = latencies[index]
        clock = time.perf_counter
        gate.wait()
        acked = 0
        try:
            while clock() < deadline:
                started = clock()
                if own_fsync:
                    result = store.append(batch)[0]
                    segment = store.commitlog.files.find(result.physical_offset)
                    assert segment is not None
                    segment.sync()
                else:
                    result = store.put(batch)[0]
                mine.append(clock() - started)
                if result.status is PutStatus.PUT_OK:
                    acked += 1
        except BaseException as error:  # noqa: BLE001 - reported by the caller
            failures.append(error)
        counts[index] = acked

    workers = [threading.Thread(target=produce, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    try:
        deadline = time.perf_counter() + seconds
        gate.wait()
        with Stopwatch() as watch:
            for worker in workers:
                worker.join()
    finally:
        store.close()
    if failures:
        raise failures[0]
    ordered = sorted(latency for mine in latencies for latency in mine)
    return {
        "msgs_per_s": sum(counts) / watch.seconds,
        "p50_ms": ordered[len(ordered) // 2] * 1000,
        "p99_ms": ordered[int(len(ordered) * 0.99)] * 1000,
    }


def run_coroutines(directory: Path, producers: int, seconds: float) -> dict[str, float]:
    """``producers`` coroutines on one event loop awaiting ``put_async`` (the broker's own path)
    under SYNC_FLUSH for ``seconds``; acknowledged messages per second."""
    config = StoreConfig(store_dir=directory, flush_mode=FlushMode.SYNC, commitlog_file_size=64 * MIB)
    store = MessageStore(config).open()
    body = os.urandom(128)
    latencies: list[float] = []
    acked = 0

    async def produce(index: int, deadline: float) -> None:
        nonlocal acked
        batch = [Message(TOPIC, body, index % QUEUES, {"TAGS": "TagA", "UNIQ_KEY": f"{index:032X}"})]
        clock = time.perf_counter
        while clock() < deadline:
            started = clock()
            result = (await store.put_async(batch))[0]
            latencies.append(clock() - started)
            if result.status is PutStatus.PUT_OK:
                acked += 1

    async def run() -> float:
        with Stopwatch() as watch:
            deadline = time.perf_counter() + seconds
            await asyncio.gather(*(produce(i, deadline) for i in range(producers)))
        return watch.seconds

    try:
        elapsed = asyncio.run(run())
    finally:
        store.close()
    latencies.sort()
    return {
        "msgs_per_s": acked / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
    }


def bench_sync(plan: Plan, scratch: Scratch) -> list[Result]:
    threads, seconds = plan.sync_threads, plan.sync_seconds
    variants: dict[str, Callable[[Path], dict[str, float]]] = {
        "one": lambda d: run_producers(d, 1, seconds, FlushMode.SYNC),
        "group": lambda d: run_producers(d, threads, seconds, FlushMode.SYNC),
        "own": lambda d: run_producers(d, threads, seconds, FlushMode.ASYNC, own_fsync=True),
        "async": lambda d: run_coroutines(d, threads, seconds),
    }
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for _ in range(plan.repeats):
        for name, run in variants.items():
            directory = scratch.new()
            runs[name].append(run(directory))
            scratch.remove(directory)

    def latency_note(name: str) -> str:
        p50 = statistics.median(s["p50_ms"] for s in runs[name])
        p99 = statistics.median(s["p99_ms"] for s in runs[name])
        return f"put latency p50 {p50:.2f} ms, p99 {p99:.2f} ms; 128 B bodies"

    one = Result(
        "sync put, 1 producer (fsync per msg)",
        "msgs/s",
        [s["msgs_per_s"] for s in runs["one"]],
        note=latency_note("one"),
        alias="1 producer",
    )
    group = Result(
        f"sync put, {threads} producers (group commit)",
        "msgs/s",
        [s["msgs_per_s"] for s in runs["group"]],
        target=Target(GROUP_COMMIT_TARGET, on_ratio=True),
        note=latency_note("group"),
    ).against(one)
    own = Result(
        f"append + own fdatasync, {threads} threads",
        "msgs/s",
        [s["msgs_per_s"] for s in runs["own"]],
        note="each producer forces the segment itself; the file system may merge concurrent fsyncs",
    ).against(one)
    coroutines = Result(
        f"sync put_async, {threads} coroutines (group commit)",
        "msgs/s",
        [s["msgs_per_s"] for s in runs["async"]],
        target=Target(GROUP_COMMIT_TARGET, on_ratio=True),
        note=latency_note("async") + "; one event loop, as the broker awaits the store",
    ).against(one)
    return [one, group, coroutines, own]


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


# -- main ----------------------------------------------------------------------------------------

BENCHES: dict[str, Callable[[Plan, Scratch], list[Result]]] = {
    "disk": bench_disk,
    "append": bench_append,
    "sync": bench_sync,
    "read": bench_read,
    "recovery": bench_recovery,
}


def needed_bytes(plan: Plan, sections: list[str]) -> int:
    needs = [0]
    if "disk" in sections:
        needs.append(plan.large_bytes + plan.append_segment)
    if "recovery" in sections:
        needs.append(plan.recovery_bytes + plan.recovery_segment)
    if "append" in sections:
        needs.append(plan.small_messages * record_size(128) + plan.append_segment)
    return max(needs)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.store", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="about an eighth of the work")
    parser.add_argument(
        "--json", type=Path, default=RESULTS_DIR / "store.json", help="where to write results"
    )
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="parent of the scratch directory (default: the temporary directory if it is on the "
        "repository's disk, else bench/results)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = QUICK if args.quick else FULL
    sections = select_sections(args.only, SECTIONS)
    if sections is None:
        return 2
    parent = args.dir if args.dir is not None else scratch_parent()
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="wharf-store-bench-", dir=parent))
    try:
        free = shutil.disk_usage(root).free
        need = needed_bytes(plan, sections)
        if free < 2 * need:
            print(f"only {free / GIB:.1f} GiB free under {root}, need {2 * need / GIB:.1f}", file=sys.stderr)
            return 1
        if os.stat(root).st_dev != os.stat(REPOSITORY).st_dev:
            print(f"note: {root} is not on the repository's file system", file=sys.stderr)
        scratch = Scratch(root)
        results: list[Result] = []
        started = time.perf_counter()
        for name in sections:
            with Stopwatch() as watch:
                section = BENCHES[name](plan, scratch)
            print_table(section, f"{name} ({watch.seconds:.0f} s)")
            results += section
    finally:
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.perf_counter() - started
    print(f"\ntotal {elapsed:.0f} s")
    command = " ".join([".venv/bin/python -m bench.store", *(argv if argv is not None else sys.argv[1:])])
    settings = {"plan": asdict(plan), "sections": sections, "elapsed_s": round(elapsed, 1)}
    write_json(args.json, "store", command, results, settings)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
