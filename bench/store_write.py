"""The store benchmark's write sections: ``disk`` (4 KiB appends against ``dd``), ``append`` (128 B
appends against a plain-Python floor) and ``sync`` (SYNC_FLUSH group commit). See bench/store.py."""

from __future__ import annotations

import asyncio
import mmap
import os
import re
import statistics
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from app.store import FlushMode, Message, MessageStore, PutStatus, StoreConfig
from app.store.record_format import MESSAGE_MAGIC, encode_host
from bench.harness import Result, Stopwatch, Target
from bench.store_plan import (
    APPEND_BATCH_TARGET,
    APPEND_SINGLE_TARGET,
    DISK_SHARE_TARGET,
    GROUP_COMMIT_TARGET,
    MB,
    MIB,
    QUEUES,
    TOPIC,
    Plan,
    Scratch,
    append_all,
    make_messages,
    mode_name,
    record_size,
)

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


def run_coroutines(
    directory: Path, producers: int, seconds: float, wrapped: bool = False
) -> dict[str, float]:
    """``producers`` coroutines on one event loop awaiting ``put_async`` (the broker's own path)
    under SYNC_FLUSH for ``seconds``; acknowledged messages per second. ``wrapped``: each awaits
    ``asyncio.wrap_future(store.durable(...))`` instead, one wake-up of the loop per producer."""
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
            if wrapped:
                appended = store.append(batch)
                ok = await asyncio.wrap_future(store.durable(appended))
            else:
                ok = (await store.put_async(batch))[0].status is PutStatus.PUT_OK
            latencies.append(clock() - started)
            acked += ok

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
        "wrapped": lambda d: run_coroutines(d, threads, seconds, wrapped=True),
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
    wrapped = Result(
        f"sync append + wrap_future, {threads} coroutines",
        "msgs/s",
        [s["msgs_per_s"] for s in runs["wrapped"]],
        note=latency_note("wrapped")
        + "; each producer's answer its own wake-up of the loop (asyncio.wrap_future), where"
        " put_async's are handed over together, one per flush",
    ).against(coroutines)
    return [one, group, coroutines, wrapped, own]
