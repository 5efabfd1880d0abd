"""Message index benchmark: insert rate and lookup latency of ``app.store``'s hash index files.

Run from the repository root::

    .venv/bin/python -m bench.index [--quick] [--json out.json] [--only insert,store]

What it measures, in one run, in a temporary directory on the repository's disk:

* ``insert``: 1,000,000 keys into index files of the default size (5,000,000 slots, 20,000,000
  entries), through the index thread's own path (batches of 100 appended messages handed over as
  the CommitLog does, drained every 25 batches, the periodic flush included), once with one unique
  id per message and once with a unique id and two KEYS words per message (the same key count).
  The baseline is a Python dict filled with the same ``topic#key`` strings in the same loop shape.
  Then lookups of 10,000 random present keys and 10,000 absent ones, one at a time: p50 and p99
  latency, against dict lookups of the same keys.
* ``store``: what the index costs and gives through ``MessageStore``: 128 B appends in batches of
  100, every message with a unique id, with the index on and off (interleaved repeat by repeat),
  then ``query_message_by_unique_id`` latency (index walk plus reading and checking the message).

Every figure is the median of its repeats; a latency figure is the median over repeats of that
repeat's percentile.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from app.store import Message, MessageStore, StoreConfig
from app.store.checkpoint import Checkpoint
from app.store.index_service import IndexService
from app.store.record_format import EncodedRecord, encode_host
from app.store.results import AppendResult, PutStatus
from bench import harness
from bench.harness import RESULTS_DIR, Result, Stopwatch, Target

TOPIC = "bench"
SECTIONS = ("insert", "store")
BATCH = 100
DRAIN_EVERY = 25  # batches per drain: about what the thread finds after 10 ms at 250,000 msgs/s
MAX_TIMESTAMP = (1 << 63) - 1

# Targets for this 2-core machine. The index must keep pace with the append target (250,000
# messages/s, one unique id each) while sharing the interpreter with the producers.
INSERT_TARGET = 250_000  # keys/s
LOOKUP_P99_TARGET_US = 1_000.0
STORE_QUERY_P99_TARGET_US = 2_000.0


@dataclass(frozen=True, slots=True)
class Plan:
    repeats: int
    keys: int
    lookups: int
    store_messages: int
    store_lookups: int


FULL = Plan(repeats=3, keys=1_000_000, lookups=10_000, store_messages=300_000, store_lookups=5_000)
QUICK = Plan(repeats=3, keys=200_000, lookups=5_000, store_messages=100_000, store_lookups=2_000)


# -- helpers ----------------------------------------------------------------------------------------


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def appended_batches(
    keys: int, words_per_message: int
) -> list[tuple[list[EncodedRecord], list[AppendResult]]]:
    """Batches as the CommitLog hands them to the index: ``keys`` keys in all, each message with
    a 32-hex-digit unique id and ``words_per_message - 1`` KEYS words."""
    host = encode_host("127.0.0.1", 8080)
    messages = keys // words_per_message
    now = int(time.time() * 1000)
    batches = []
    for start in range(0, messages, BATCH):
        records, results = [], []
        for i in range(start, min(start + BATCH, messages)):
            words = " ".join(f"order-{i}-{w}" for w in range(words_per_message - 1))
            records.append(EncodedRecord(b"", TOPIC, i % 4, 0, words, f"{i:032X}", 0))
            results.append(
                AppendResult(PutStatus.PUT_OK, TOPIC, i % 4, i // 4, i * 250, 250, now + i // 1000, host)
            )
        batches.append((records, results))
    return batches


def all_keys(batches: list[tuple[list[EncodedRecord], list[AppendResult]]]) -> list[str]:
    keys = []
    for records, _ in batches:
        for record in records:
            keys.append(record.uniq_key)
            keys.extend(record.keys.split())
    return keys


# -- insert and lookup on the index itself ------------------------------------------------------------


def run_index(
    directory: Path,
    batches: list[tuple[list[EncodedRecord], list[AppendResult]]],
    probes: list[str],
    misses: list[str],
) -> dict[str, float]:
    service = IndexService(directory / "index", Checkpoint(directory / "checkpoint"), 5_000_000, 20_000_000)
    keys = sum(sum(len(r.keys.split()) + 1 for r in records) for records, _ in batches)
    cpu = time.thread_time()
    with Stopwatch() as inserting:
        for number, (records, results) in enumerate(batches, 1):
            service.submit(records, results)
            if number % DRAIN_EVERY == 0:
                service.run_once()
        service.run_once()
    cpu = time.thread_time() - cpu
    with Stopwatch() as flushing:
        service.flush()
    hits, _ = lookup_latencies(service, probes, expect_found=True)
    absent, collisions = lookup_latencies(service, misses, expect_found=False)
    service.close()
    return {
        "keys_per_s": keys / inserting.seconds,
        "cpu_keys_per_s": keys / cpu,
        "flush_s": flushing.seconds,
        "hit_p50_us": percentile(hits, 0.5),
        "hit_p99_us": percentile(hits, 0.99),
        "miss_p50_us": percentile(absent, 0.5),
        "miss_p99_us": percentile(absent, 0.99),
        "miss_candidates": collisions,
    }


def lookup_latencies(service: IndexService, keys: list[str], expect_found: bool) -> tuple[list[float], int]:
    """Each lookup's latency, and how many absent keys drew a candidate: an entry whose hash is
    theirs (RocketMQ's hash, Java's String.hashCode, collides often on keys that differ in a few
    characters; the store rejects such a candidate by reading its message)."""
    latencies = []
    candidates = 0
    clock = time.perf_counter_ns
    query = service.query
    for key in keys:
        started = clock()
        found = query(TOPIC, key, 1, 0, MAX_TIMESTAMP)
        latencies.append((clock() - started) / 1000)
        if expect_found and not found:
            raise AssertionError(f"key {key!r} was not found")
        candidates += bool(found) and not expect_found
    return latencies, candidates


def run_dict(
    batches: list[tuple[list[EncodedRecord], list[AppendResult]]], probes: list[str], misses: list[str]
) -> dict[str, float]:
    table: dict[str, int] = {}
    keys = 0
    with Stopwatch() as inserting:
        for records, results in batches:
            for record, result in zip(records, results, strict=True):
                table[f"{record.topic}#{record.uniq_key}"] = result.physical_offset
                keys += 1
                for word in record.keys.split():
                    table[f"{record.topic}#{word}"] = result.physical_offset
                    keys += 1
    clock = time.perf_counter_ns
    hits, absent = [], []
    for key in probes:
        started = clock()
        table.get(f"{TOPIC}#{key}")
        hits.append((clock() - started) / 1000)
    for key in misses:
        started = clock()
        table.get(f"{TOPIC}#{key}")
        absent.append((clock() - started) / 1000)
    return {
        "keys_per_s": keys / inserting.seconds,
        "hit_p50_us": percentile(hits, 0.5),
        "hit_p99_us": percentile(hits, 0.99),
        "miss_p50_us": percentile(absent, 0.5),
        "miss_p99_us": percentile(absent, 0.99),
    }


def bench_insert(plan: Plan, scratch: Path) -> list[Result]:
    rng = random.Random(1)
    results: list[Result] = []
    for words, label in ((1, "unique ids"), (3, "unique id + 2 KEYS words")):
        batches = appended_batches(plan.keys, words)
        keys = all_keys(batches)
        probes = rng.sample(keys, plan.lookups)
        misses = [f"absent-{i}" for i in range(plan.lookups)]
        index_runs, dict_runs = [], []
        for _ in range(plan.repeats):
            dict_runs.append(run_dict(batches, probes, misses))
            directory = Path(tempfile.mkdtemp(dir=scratch))
            index_runs.append(run_index(directory, batches, probes, misses))
            shutil.rmtree(directory, ignore_errors=True)
        del batches

        def samples(runs: list[dict[str, float]], name: str) -> list[float]:
            return [run[name] for run in runs]

        baseline = Result(f"dict insert, {label}", "keys/s", samples(dict_runs, "keys_per_s"))
        insert = Result(
            f"index insert, {label}",
            "keys/s",
            samples(index_runs, "keys_per_s"),
            target=Target(INSERT_TARGET),
            note=(
                f"{len(keys):,} keys; index thread CPU time alone: "
                f"{statistics.median(samples(index_runs, 'cpu_keys_per_s')):,.0f} keys/s; final flush "
                f"{statistics.median(samples(index_runs, 'flush_s')):.2f} s"
            ),
        ).against(baseline)
        results += [baseline, insert]
        for kind in ("hit", "miss"):
            what = "present key" if kind == "hit" else "absent key"
            for quantile, target in (("p50", None), ("p99", LOOKUP_P99_TARGET_US)):
                field = f"{kind}_{quantile}_us"
                base = Result(f"dict lookup {quantile}, {what}, {label}", "us", samples(dict_runs, field))
                result = Result(
                    f"index lookup {quantile}, {what}, {label}",
                    "us",
                    samples(index_runs, field),
                    target=Target(target, at_least=False) if target and kind == "hit" else None,
                    note=(
                        f"{statistics.median(samples(index_runs, 'miss_candidates')):,.0f} of "
                        f"{plan.lookups:,} absent keys share a present key's hash"
                    )
                    if kind == "miss"
                    else "",
                ).against(base)
                results += [base, result]
    return results


# -- through the store --------------------------------------------------------------------------------


def run_store(directory: Path, messages: list[Message], enable: bool, lookups: list[str]) -> dict[str, float]:
    config = StoreConfig(store_dir=directory, commitlog_file_size=64 << 20, message_index_enable=enable)
    store = MessageStore(config).open()
    try:
        cpu = time.process_time()
        with Stopwatch() as appending:
            for start in range(0, len(messages), BATCH):
                store.append(messages[start : start + BATCH])
        cpu = time.process_time() - cpu
        run = {"msgs_per_s": len(messages) / appending.seconds, "cpu_msgs_per_s": len(messages) / cpu}
        if enable:
            assert store.index_service is not None
            with Stopwatch() as catching_up:
                store.index_service.wait_indexed(600)
            latencies = []
            clock = time.perf_counter_ns
            for unique_id in lookups:
                started = clock()
                found = store.query_message_by_unique_id(TOPIC, unique_id)
                latencies.append((clock() - started) / 1000)
                if found is None or found.unique_id != unique_id:
                    raise AssertionError(f"{unique_id} not found")
            run.update(
                catch_up_s=catching_up.seconds,
                query_p50_us=percentile(latencies, 0.5),
                query_p99_us=percentile(latencies, 0.99),
            )
    finally:
        store.close()
    return run


def bench_store(plan: Plan, scratch: Path) -> list[Result]:
    bodies = [os.urandom(128) for _ in range(16)]
    messages = [
        Message(TOPIC, bodies[i % 16], i % 4, {"TAGS": "TagA", "UNIQ_KEY": f"{i:032X}"})
        for i in range(plan.store_messages)
    ]
    lookups = [f"{i:032X}" for i in random.Random(2).sample(range(plan.store_messages), plan.store_lookups)]
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for _ in range(plan.repeats):
        for enable in (False, True):
            directory = Path(tempfile.mkdtemp(dir=scratch))
            runs[enable].append(run_store(directory, messages, enable, lookups))
            shutil.rmtree(directory, ignore_errors=True)

    def values(enable: bool, name: str) -> list[float]:
        return [run[name] for run in runs[enable]]

    off = Result(
        "append 128 B batch 100, index off",
        "msgs/s",
        values(False, "msgs_per_s"),
        note=f"{len(messages):,} messages; process CPU time: {statistics.median(values(False, 'cpu_msgs_per_s')):,.0f} msgs/s",
    )
    on = Result(
        "append 128 B batch 100, index on",
        "msgs/s",
        values(True, "msgs_per_s"),
        note=(
            f"process CPU time (index thread included): {statistics.median(values(True, 'cpu_msgs_per_s')):,.0f} "
            f"msgs/s; index caught up {statistics.median(values(True, 'catch_up_s')):.2f} s after the last append"
        ),
    ).against(off)
    return [
        off,
        on,
        Result(
            "query_message_by_unique_id p50", "us", values(True, "query_p50_us"), note=f"{len(lookups):,} ids"
        ),
        Result(
            "query_message_by_unique_id p99",
            "us",
            values(True, "query_p99_us"),
            target=Target(STORE_QUERY_P99_TARGET_US, at_least=False),
        ),
    ]


# -- main ----------------------------------------------------------------------------------------------

BENCHES: dict[str, Callable[[Plan, Path], list[Result]]] = {"insert": bench_insert, "store": bench_store}


def make_parser() -> argparse.ArgumentParser:
    parser = harness.arguments(
        "index", __doc__.splitlines()[0], "a fifth of the keys, a third of the messages", SECTIONS
    )
    parser.add_argument(
        "--dir", type=Path, default=RESULTS_DIR, help="parent of the scratch directory (must be a real disk)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args, plan, sections = harness.parse(make_parser(), argv, FULL, QUICK, SECTIONS)
    started = time.perf_counter()
    with harness.scratch_dir("index-bench-", args.dir) as root:
        results = harness.run_sections(sections, lambda name: BENCHES[name](plan, root))
    settings = {"plan": asdict(plan), "sections": sections, "batch": BATCH, "drain_every": DRAIN_EVERY}
    harness.report("index", args.json, argv, results, settings, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
