"""Replication: how fast a slave copies its master's CommitLog, how far behind it stays under the
produce load, and what SYNC_MASTER costs a producer against ASYNC_MASTER.

Every section runs real broker processes (``python -m app``) on the repository's disk: a master
and a slave that copies it over the replication WebSocket, on this one machine (so the slave's
copy competes with the master and the producers for the same two cores and the same disk).
Messages of 1 KiB are produced over HTTP in binary batches of 100.

* ``throughput``: 4 producer threads store N messages (100,000; ``--quick`` 10,000) on a master
  alone (the baseline), then on a master with a connected slave. Reported: the produce rate of
  each; the replication rate in MB/s (the CommitLog bytes over the time from the first produce to
  the slave holding the last byte); the slave's lag in bytes, sampled every 50 ms from
  ``GET /v1/admin/ha`` while the producers run (median and maximum); and how long after the last
  answer the slave held everything.
* ``sync``: the same master and slave as ``SYNC_MASTER`` against ``ASYNC_MASTER``: one producer
  sending batches one after another (the latency of each request: p50 and p99), then 4 producer
  threads (the rate). Each ratio is SYNC_MASTER's over ASYNC_MASTER's.
"""

from __future__ import annotations

import shutil
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from wharf_client.codec import BATCH_MEDIA_TYPE, IncomingMessage, encode_batch

from bench import harness
from bench.harness import Result, scratch_parent
from tests.api.server import BrokerProcess

SECTIONS = ("throughput", "sync")
TOPIC = "replicated"
QUEUES = 8
BODY = b"x" * 1024
BATCH = 100
PRODUCERS = 4
LAG_SAMPLE_S = 0.05
BROKER_SETTINGS: dict[str, Any] = {
    "commitlog_file_size": 256 << 20,
    "consumequeue_file_entries": 300_000,
    "max_hash_slots": 1 << 20,
    "max_index_count": 4 << 20,
}


@dataclass(frozen=True)
class Plan:
    messages: int  # per produce run
    latency_batches: int  # one producer, one batch after another
    repeats: int  # runs of each figure; medians are quoted


FULL = Plan(messages=100_000, latency_batches=1_000, repeats=3)
QUICK = Plan(messages=10_000, latency_batches=200, repeats=1)


def batch_body(first: int) -> bytes:
    return encode_batch(IncomingMessage(BODY, queue_id=(first + n) % QUEUES) for n in range(BATCH))


def produce(url: str, messages: int) -> list[str]:
    """Store ``messages`` from PRODUCERS threads; the statuses answered."""
    statuses: list[str] = []
    lock = threading.Lock()
    batches = iter(range(0, messages, BATCH))

    def run() -> None:
        with httpx.Client(timeout=60) as client:
            for first in batches:  # shared: each batch goes to one thread
                response = client.post(
                    f"{url}/v1/topics/{TOPIC}/messages",
                    content=batch_body(first),
                    headers={"Content-Type": BATCH_MEDIA_TYPE},
                )
                response.raise_for_status()
                with lock:
                    statuses.extend(result["status"] for result in response.json()["results"])

    threads = [threading.Thread(target=run) for _ in range(PRODUCERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return statuses


def ha(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/v1/admin/ha", timeout=10)
    response.raise_for_status()
    return dict(response.json())


@contextmanager
def brokers(root: Path, role: str, with_slave: bool) -> Iterator[tuple[BrokerProcess, BrokerProcess | None]]:
    master = BrokerProcess(root / "master", broker_role=role, **BROKER_SETTINGS).start()
    slave = None
    try:
        response = httpx.post(f"{master.url}/v1/topics", json={"name": TOPIC, "queues": QUEUES})
        response.raise_for_status()
        if with_slave:
            slave = BrokerProcess(
                root / "slave", broker_role="SLAVE", broker_id=1, ha_master_url=master.url, **BROKER_SETTINGS
            ).start()
            deadline = time.monotonic() + 30
            while not ha(master.url)["slaves"]:
                if time.monotonic() > deadline:
                    raise RuntimeError("the slave did not connect")
                time.sleep(0.05)
        yield master, slave
    finally:
        if slave is not None:
            slave.kill()
        master.kill()
        for name in ("master", "slave"):
            shutil.rmtree(root / name, ignore_errors=True)


def sample_lag(url: str, lags: list[int], done: threading.Event) -> None:
    """Add the slaves' lag in bytes to ``lags`` every LAG_SAMPLE_S until ``done``."""
    while not done.is_set():
        lags.extend(link["lag_bytes"] for link in ha(url)["slaves"])
        time.sleep(LAG_SAMPLE_S)


def run_throughput(plan: Plan, root: Path) -> list[Result]:
    alone: list[float] = []
    paired: list[float] = []
    mb_s: list[float] = []
    lag_median: list[float] = []
    lag_max: list[float] = []
    settle: list[float] = []
    for _ in range(plan.repeats):
        with brokers(root, "ASYNC_MASTER", with_slave=False) as (master, _slave):
            started = time.perf_counter()
            produce(master.url, plan.messages)
            alone.append(plan.messages / (time.perf_counter() - started))
        with brokers(root, "ASYNC_MASTER", with_slave=True) as (master, slave):
            assert slave is not None
            lags: list[int] = []
            done = threading.Event()
            sampler = threading.Thread(target=sample_lag, args=(master.url, lags, done))
            sampler.start()
            started = time.perf_counter()
            produce(master.url, plan.messages)
            answered = time.perf_counter()
            done.set()
            sampler.join()
            end = ha(master.url)["commitlog_max_offset"]
            while ha(slave.url)["commitlog_max_offset"] < end:
                time.sleep(0.005)
            held = time.perf_counter()
            paired.append(plan.messages / (answered - started))
            mb_s.append(end / (held - started) / 1e6)
            lag_median.append(statistics.median(lags) if lags else 0.0)
            lag_max.append(max(lags, default=0))
            settle.append((held - answered) * 1000)
    baseline = Result("produce, master alone", "msgs/s", alone, alias="alone")
    return [
        baseline,
        Result("produce, master with a slave", "msgs/s", paired).against(baseline),
        Result(
            "replication rate", "MB/s", mb_s, note="CommitLog bytes over first produce to slave holding all"
        ),
        Result("slave lag under load, median", "bytes", lag_median),
        Result("slave lag under load, max", "bytes", lag_max),
        Result("slave holds all, after the last answer", "ms", settle),
    ]


def latencies(url: str, batches: int) -> list[float]:
    """Milliseconds of each of ``batches`` requests sent one after another."""
    times = []
    with httpx.Client(timeout=60) as client:
        for number in range(batches):
            started = time.perf_counter()
            response = client.post(
                f"{url}/v1/topics/{TOPIC}/messages",
                content=batch_body(number * BATCH),
                headers={"Content-Type": BATCH_MEDIA_TYPE},
            )
            response.raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
    return times


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def run_sync(plan: Plan, root: Path) -> list[Result]:
    figures: dict[str, dict[str, list[float]]] = {}
    for _ in range(plan.repeats):
        for role in ("ASYNC_MASTER", "SYNC_MASTER"):
            with brokers(root, role, with_slave=True) as (master, _slave):
                times = latencies(master.url, plan.latency_batches)
                started = time.perf_counter()
                statuses = produce(master.url, plan.messages)
                rate = plan.messages / (time.perf_counter() - started)
                if set(statuses) != {"SEND_OK"}:
                    raise RuntimeError(f"{role}: answers other than SEND_OK: {set(statuses)}")
                own = figures.setdefault(role, {"p50": [], "p99": [], "rate": []})
                own["p50"].append(percentile(times, 0.5))
                own["p99"].append(percentile(times, 0.99))
                own["rate"].append(rate)
    results = []
    for key, name, unit in (
        ("p50", "produce latency p50", "ms"),
        ("p99", "produce latency p99", "ms"),
        ("rate", "produce rate", "msgs/s"),
    ):
        baseline = Result(f"{name}, ASYNC_MASTER", unit, figures["ASYNC_MASTER"][key], alias=f"async {key}")
        results += [
            baseline,
            Result(f"{name}, SYNC_MASTER", unit, figures["SYNC_MASTER"][key]).against(baseline),
        ]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments(
        "replication",
        __doc__.splitlines()[0],
        "10,000 messages a run, 200 latency batches, one run",
        SECTIONS,
    )
    args, plan, sections = harness.parse(parser, argv, FULL, QUICK, SECTIONS)
    started = time.perf_counter()
    runs = {"throughput": run_throughput, "sync": run_sync}
    with harness.scratch_dir("wharf-bench-replication-", scratch_parent()) as root:
        results = harness.run_sections(sections, lambda name: runs[name](plan, root))
    settings: dict[str, Any] = {"quick": args.quick, **asdict(plan), "broker": BROKER_SETTINGS}
    harness.report("replication", args.json, argv, results, settings, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
