"""What the broker costs in disk and memory at its default settings.

Each scenario runs a fresh broker process (``python -m app``) on a fresh store directory on the
repository's disk (:func:`bench.harness.scratch_parent`), removed afterwards, also on failure. No
storage setting is passed: the environment the broker gets holds no ``WHARF_*`` variable but its
address, its store directory and its log level, so the CommitLog segment, the ConsumeQueue segment,
the index file and whatever else sizes the store are the broker's defaults (the test helper's small
ones are taken out). What those defaults cost is the point.

* ``idle``: one topic of 8 queues, one message produced (a JSON POST), then 3 s of quiet.
* ``bulk``: 1 GiB of 1 KiB messages into one topic of 8 queues: binary batches
  (``application/vnd.wharf.batch``) of 1,000 messages, 8 requests in flight; the produce rate is
  given for information. The store is measured once its disk usage has stopped changing (the flush).
* ``queues``: 10,000 topics of 8 queues (80,000 queues), one message each, on a broker under an
  open-file limit of 1,024 (:mod:`tests.api.low_nofile`). Every produce must answer SEND_OK and every
  queue must give its message back; then the broker is stopped (SIGTERM, timed until the process has
  exited), started again, killed (SIGKILL) and started again (timed until ``/readyz`` answers 200),
  and every queue must still give its message back.

Disk usage is what ``du`` counts: st_blocks x 512 of every file and directory under the store (hard
links once), in all and per top-level part (commitlog, consumequeue, index, config, and the rest); the
apparent size is the sum of st_size over the same entries. Memory is VmRSS, RssAnon and RssFile from
/proc/<pid>/status, in MB (10^6 bytes).

A scaled-down run (``--quick``: 64 MiB instead of 1 GiB, 1,000 topics instead of 10,000) is judged
against targets interpolated between the idle store's target (at no data) and the full run's target
(at its size); the full run's targets are exactly those below.

The disk is shared, so a watchdog ends a scenario (SIGKILL to its broker, the scenario reported as a
miss with the store's size at that moment) when the disk's free space falls by more than
``--disk-cap-gib`` while it runs, or below FREE_FLOOR.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import shutil
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import orjson
from wharf_client.codec import BATCH_MEDIA_TYPE, IncomingMessage, encode_batch

from bench import harness
from bench.harness import Result, Target, print_table, scratch_parent
from bench.http_load import request_bytes
from bench.queues import timed_start
from bench.queues_load import Calls, create_topics, produce_requests, run_calls, topic_name
from bench.topics import QUEUES
from tests.api.low_nofile import NOFILE
from tests.api.server import BrokerProcess

SECTIONS = ("idle", "bulk", "queues")
KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB
MB = 1_000_000

# -- targets ---------------------------------------------------------------------------------------

IDLE_DISK = 64 * MIB  # the store after one message
IDLE_RSS = 200 * MB  # VmRSS after one message
BULK_DISK = int(1.15 * GIB)  # the store after 1 GiB of 1 KiB messages (FULL.bulk_bytes)
QUEUES_DISK = 2 * GIB  # the store of 80,000 queues of one message (FULL.topics)
STOP_S = 5.0  # SIGTERM until the process has exited, 80,000 queues
RECOVERY_S = 30.0  # SIGKILL, then a start until /readyz answers 200, 80,000 queues

# -- the anchors' documented defaults, for comparison (not measured here) --------------------------

# RocketMQ, MessageStoreConfig (store/src/main/java/org/apache/rocketmq/store/config/
# MessageStoreConfig.java): mapedFileSizeCommitLog (mappedFileSizeCommitLog since 4.4) = 1 GiB;
# mapedFileSizeConsumeQueue = 300,000 x ConsumeQueue.CQ_STORE_UNIT_SIZE (20 B). A MappedFile is
# created by mapping a new file through FileChannel.map, which extends it sparse: its disk blocks
# come as data is written (warmMapedFileEnable, which writes a new CommitLog file through, is off by
# default). So a RocketMQ store's disk grows with its data.
ROCKETMQ_COMMITLOG_FILE_SIZE = 1024 * 1024 * 1024
ROCKETMQ_CONSUMEQUEUE_FILE_SIZE = 300_000 * 20  # 5.72 MiB
# IndexFile (store/src/main/java/org/apache/rocketmq/store/index/IndexFile.java): a 40-byte header,
# maxHashSlotNum (5,000,000) slots of 4 B and maxIndexNum (5,000,000 x 4) entries of 20 B, mapped
# the same way (sparse).
ROCKETMQ_INDEX_FILE_SIZE = 40 + 5_000_000 * 4 + 5_000_000 * 4 * 20
# Kafka, broker and topic configuration (https://kafka.apache.org/documentation/#brokerconfigs):
# log.segment.bytes (segment.bytes) = 1073741824, a log segment grows with its data
# (log.preallocate is false by default); log.index.size.max.bytes (segment.index.bytes) = 10485760,
# each segment's offset and time index is set to that length when the segment is created and trimmed
# to its entries when it rolls.
KAFKA_LOG_SEGMENT_BYTES = 1073741824
KAFKA_SEGMENT_INDEX_BYTES = 10485760

# -- the load --------------------------------------------------------------------------------------

BODY_SIZE = KIB
BULK_BATCH = 1_000
IDLE_WAIT_S = 3.0
SETTLE_MIN_S = 3.0  # the flush: the store's disk usage is read once a second until two readings agree
SETTLE_MAX_S = 15.0  # (the CommitLog's thorough flush runs every 10 s)
STOP_WAIT_S = 30.0  # a stop that takes longer ends with SIGKILL
FREE_FLOOR = 20 * GIB  # the watchdog: the disk's free space never goes below this
DISK_CAP_GIB = 8.0  # the watchdog's default: no scenario takes more of the disk than this
WATCH_INTERVAL_S = 0.2
PARTS = ("commitlog", "consumequeue", "index", "config")
OTHER = "other"
# The only WHARF_* settings the brokers get: everything else is at its default.
KEPT_SETTINGS = ("WHARF_HOST", "WHARF_PORT", "WHARF_STORE_DIR", "WHARF_LOG_LEVEL")


@dataclass(frozen=True, slots=True)
class Plan:
    bulk_bytes: int  # message bodies produced by ``bulk``
    topics: int  # topics of QUEUES queues made by ``queues``


FULL = Plan(bulk_bytes=GIB, topics=10_000)
QUICK = Plan(bulk_bytes=64 * MIB, topics=1_000)


def scaled(full_target: float, share: float) -> float:
    """The target of a run of ``share`` of the full run's size: from the idle store's target at no
    data to the full run's target at its size."""
    return IDLE_DISK + (full_target - IDLE_DISK) * share


# -- what is measured ------------------------------------------------------------------------------


@dataclass(slots=True)
class Usage:
    """What ``du`` counts under a store, by top-level entry (``""``: the store directory itself)."""

    disk: dict[str, int] = field(default_factory=dict)  # st_blocks x 512
    apparent: dict[str, int] = field(default_factory=dict)  # st_size
    files: int = 0
    directories: int = 0

    @property
    def total_disk(self) -> int:
        return sum(self.disk.values())

    @property
    def total_apparent(self) -> int:
        return sum(self.apparent.values())

    def part(self, name: str, apparent: bool = False) -> int:
        """The bytes of one of PARTS, or of every other entry (OTHER)."""
        sizes = self.apparent if apparent else self.disk
        if name != OTHER:
            return sizes.get(name, 0)
        return sum(size for entry, size in sizes.items() if entry not in PARTS)

    def others(self) -> str:
        """The entries OTHER sums, each with its disk usage."""
        named = sorted((entry or ".", size) for entry, size in self.disk.items() if entry not in PARTS)
        return ", ".join(f"{entry} {size / MIB:.2f}" for entry, size in named) + " MiB"


def disk_usage(store: Path) -> Usage:
    """Every file and directory under ``store`` (not following links), as ``du`` counts them."""
    usage = Usage()
    seen: set[tuple[int, int]] = set()

    def add(top: str, stat: os.stat_result) -> None:
        if stat.st_nlink > 1 and not _is_dir(stat):
            key = (stat.st_dev, stat.st_ino)
            if key in seen:
                return
            seen.add(key)
        usage.disk[top] = usage.disk.get(top, 0) + stat.st_blocks * 512
        usage.apparent[top] = usage.apparent.get(top, 0) + stat.st_size

    add("", os.lstat(store))
    usage.directories += 1
    stack: list[tuple[str, str]] = [("", str(store))]
    while stack:
        top, directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:  # removed while walked
            continue
        for entry in entries:
            try:
                stat = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            part = top or entry.name
            add(part, stat)
            if _is_dir(stat):
                usage.directories += 1
                stack.append((part, entry.path))
            else:
                usage.files += 1
    return usage


def _is_dir(stat: os.stat_result) -> bool:
    return (stat.st_mode & 0o170000) == 0o040000


def settle(store: Path) -> tuple[Usage, float]:
    """Wait for the flush: the store's usage once two readings a second apart agree (at least
    SETTLE_MIN_S, at most SETTLE_MAX_S); the usage and the seconds waited."""
    start = time.perf_counter()
    last = disk_usage(store)
    while True:
        time.sleep(1.0)
        usage = disk_usage(store)
        waited = time.perf_counter() - start
        steady = usage.disk == last.disk and usage.apparent == last.apparent
        if (steady and waited >= SETTLE_MIN_S) or waited >= SETTLE_MAX_S:
            return usage, waited
        last = usage


def memory(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile and RssShmem of ``pid`` (/proc/<pid>/status), in bytes."""
    wanted = {"VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM"}
    figures = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in wanted:
            figures[name] = int(value.split()[0]) * 1024
    return figures


# -- the broker and the watchdog -------------------------------------------------------------------


def default_broker(store: Path, module: str = "app") -> BrokerProcess:
    """A broker on ``store`` with every setting at its default but its address, store and log level."""
    broker = BrokerProcess(store, module=module, log_level="warning")
    for name in [name for name in broker.env if name.startswith("WHARF_")]:
        if name not in KEPT_SETTINGS:
            del broker.env[name]
    return broker


def broker_environment() -> dict[str, str]:
    """The WHARF_* environment the brokers run with (the port and store dir vary)."""
    env = default_broker(Path("/nonexistent/store")).env
    return {name: value for name, value in env.items() if name.startswith("WHARF_")}


class Aborted(RuntimeError):
    """The watchdog ended the scenario."""


class DiskWatch:
    """Reads the free space of the store's disk every WATCH_INTERVAL_S while a scenario runs; when
    it has fallen by more than ``cap`` since the start, or below FREE_FLOOR, SIGKILLs the broker (and
    any it is started again as) and says why in :attr:`tripped`."""

    def __init__(self, path: Path, cap: int, broker: BrokerProcess) -> None:
        self.path = path
        self.cap = cap
        self.broker = broker
        self.free_at_start = shutil.disk_usage(path).free
        self.lowest_free = self.free_at_start
        self.tripped = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disk-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL_S):
            free = shutil.disk_usage(self.path).free
            self.lowest_free = min(self.lowest_free, free)
            if not self.tripped:
                taken = self.free_at_start - free
                if taken > self.cap:
                    self.tripped = (
                        f"stopped by the watchdog: the disk's free space fell by {taken / GIB:.1f} GiB "
                        f"(cap {self.cap / GIB:g} GiB, --disk-cap-gib)"
                    )
                elif free < FREE_FLOOR:
                    self.tripped = (
                        f"stopped by the watchdog: {free / GIB:.1f} GiB left on the disk "
                        f"(floor {FREE_FLOOR / GIB:.0f} GiB)"
                    )
            if self.tripped:
                process = self.broker.process
                if process is not None and process.poll() is None:
                    process.kill()

    def check(self) -> None:
        if self.tripped:
            raise Aborted(self.tripped)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


@dataclass(slots=True)
class Run:
    """One scenario's broker, store and watchdog, and what it measured."""

    name: str
    store: Path
    broker: BrokerProcess
    watch: DiskWatch
    figures: dict[str, float] = field(default_factory=dict)
    usage: Usage | None = None
    partial: bool = False  # ``usage`` was read when the scenario failed, not once it had settled
    failure: str = ""

    @property
    def pid(self) -> int:
        self.watch.check()
        assert self.broker.process is not None
        return self.broker.process.pid

    def start(self) -> float:
        """Start the broker (refused once the watchdog tripped); the seconds until /readyz said 200."""
        self.watch.check()
        return timed_start(self.broker)

    def measure_memory(self, prefix: str = "") -> None:
        for name, value in memory(self.pid).items():
            self.figures[f"{prefix}{name}"] = value

    def settled(self) -> None:
        self.watch.check()
        self.usage, self.figures["settle_s"] = settle(self.store)
        self.watch.check()


@contextmanager
def scenario(name: str, cap: int, module: str = "app") -> Iterator[Run]:
    """A fresh store under the scratch parent and a broker (not started) with every default; the
    broker stopped and the store removed afterwards, whatever happened. An error inside is recorded
    in ``failure`` (with what the store held at that moment) rather than raised."""
    with harness.scratch_dir(f"wharf-bench-footprint-{name}-", scratch_parent()) as root:
        store = root / "store"
        broker = default_broker(store, module)
        free = shutil.disk_usage(root).free
        watch = DiskWatch(root, cap, broker)
        run = Run(name, store, broker, watch)
        if free < FREE_FLOOR + cap:
            watch.tripped = f"only {free / GIB:.1f} GiB free under {root}, not run: needs {(FREE_FLOOR + cap) / GIB:.1f} GiB"
        try:
            yield run
        except (Aborted, RuntimeError, OSError, EOFError, httpx.HTTPError, KeyError, ValueError) as error:
            run.failure = watch.tripped or f"{type(error).__name__}: {error}".splitlines()[0][:300]
            print(f"  {name}: {run.failure}", file=sys.stderr, flush=True)
            if not watch.tripped and not isinstance(error, Aborted):
                traceback.print_exc(file=sys.stderr)
                print(broker.log()[-3000:], file=sys.stderr)
            if run.usage is None and store.exists():
                run.usage, run.partial = disk_usage(store), True  # what it held when it stopped
        finally:
            try:
                broker.stop(STOP_WAIT_S)
            finally:
                watch.close()
                run.figures["disk_taken_max_gib"] = (watch.free_at_start - watch.lowest_free) / GIB


# -- the load --------------------------------------------------------------------------------------


def create_topic(client: httpx.Client, name: str) -> None:
    answer = client.post("/v1/topics", json={"name": name, "queues": QUEUES})
    if answer.status_code not in (200, 201):
        raise RuntimeError(f"create {name}: {answer.status_code} {answer.text[:300]}")


def body_of(size: int) -> bytes:
    """Printable bytes (one line of the alphabet over and over)."""
    line = b"abcdefghijklmnopqrstuvwxyz0123456789"
    return (line * (size // len(line) + 1))[:size]


def send_ok_check(wanted: Callable[[int], int], failures: list[str]) -> Callable[[int, int, bytes], None]:
    """A check for :func:`bench.queues_load.run_calls`: answer ``index`` must be 200 with
    ``wanted(index)`` results, each SEND_OK; what is not is added to ``failures`` (5xx are counted by
    run_calls)."""

    def check(index: int, status: int, body: bytes) -> None:
        if status != 200:
            failures.append(f"produce {index}: {status} {body[:200]!r}")
            return
        results = orjson.loads(body)["results"]
        bad = [r.get("status") for r in results if r.get("status") != "SEND_OK"]
        if len(results) != wanted(index) or bad:
            failures.append(f"produce {index}: {len(results)} results, not SEND_OK: {bad[:3]}")

    return check


def produce_one_round(port: int, topics: int) -> tuple[Calls, list[str]]:
    """One message to every queue of the topics of bench.queues_load (one request per topic)."""
    failures: list[str] = []
    calls = asyncio.run(
        run_calls(port, produce_requests(topics, 0), send_ok_check(lambda _: QUEUES, failures))
    )
    return calls, failures


def pull_every_queue(port: int, topics: int) -> tuple[Calls, list[str]]:
    """Every queue pulled from offset 0: it must hold exactly the message of round 0."""
    queues = [(t, q) for t in range(topics) for q in range(QUEUES)]
    path = "/v1/topics/{}/queues/{}/messages?offset=0"
    requests = [request_bytes("GET", path.format(topic_name(t), q)) for t, q in queues]
    wrong: list[str] = []

    def check(index: int, status: int, body: bytes) -> None:
        topic, queue_id = queues[index]
        if status != 200:
            wrong.append(f"{topic_name(topic)}/{queue_id}: {status} {body[:200]!r}")
            return
        bodies = [m["body"] for m in orjson.loads(body)["messages"]]
        if bodies != [f"{topic}/{queue_id}/0"]:
            wrong.append(f"{topic_name(topic)}/{queue_id}: {bodies[:3]}")

    return asyncio.run(run_calls(port, requests, check)), wrong


# -- the scenarios ---------------------------------------------------------------------------------


def run_idle(plan: Plan, cap: int) -> Run:
    with scenario("idle", cap) as run:
        run.figures["start_s"] = run.start()
        run.measure_memory("start_")
        with httpx.Client(base_url=run.broker.url, timeout=60.0) as client:
            create_topic(client, "footprint")
            answer = client.post(
                "/v1/topics/footprint/messages", json={"messages": [{"body": "hello", "queue_id": 0}]}
            )
            if answer.status_code != 200 or answer.json()["results"][0]["status"] != "SEND_OK":
                raise RuntimeError(f"produce: {answer.status_code} {answer.text[:300]}")
        time.sleep(IDLE_WAIT_S)
        run.watch.check()
        run.usage = disk_usage(run.store)
        run.measure_memory()
    return run


def run_bulk(plan: Plan, cap: int) -> Run:
    messages = plan.bulk_bytes // BODY_SIZE
    with scenario("bulk", cap) as run:
        run.figures["start_s"] = run.start()
        with httpx.Client(base_url=run.broker.url, timeout=60.0) as client:
            create_topic(client, "footprint-bulk")
        body = body_of(BODY_SIZE)
        path = "/v1/topics/footprint-bulk/messages"
        headers = {"Content-Type": BATCH_MEDIA_TYPE}

        def request(count: int) -> bytes:
            batch = encode_batch(IncomingMessage(body=body, queue_id=i % QUEUES) for i in range(count))
            return request_bytes("POST", path, batch, headers)

        full, last = divmod(messages, BULK_BATCH)
        requests = [request(BULK_BATCH)] * full + ([request(last)] if last else [])
        sizes = [BULK_BATCH] * full + ([last] if last else [])
        failures: list[str] = []
        calls = asyncio.run(run_calls(run.broker.port, requests, send_ok_check(sizes.__getitem__, failures)))
        run.figures.update(
            messages=messages,
            produce_s=calls.seconds,
            produce_msgs_per_s=messages / calls.seconds,
            produce_mib_per_s=plan.bulk_bytes / MIB / calls.seconds,
            produce_p99_ms=calls.p99_ms,
            server_errors=len(calls.server_errors),
            not_send_ok=len(failures),
        )
        if calls.server_errors or failures:
            raise RuntimeError(f"produce: {(calls.server_errors + failures)[:3]}")
        run.settled()
        run.measure_memory()
        with httpx.Client(base_url=run.broker.url, timeout=60.0) as client:
            stats = client.get("/v1/stats").json()
        run.figures["records_bytes"] = stats["commitlog_max_offset"] - stats["commitlog_min_offset"]
    return run


def run_queues(plan: Plan, cap: int) -> Run:
    topics = plan.topics
    with scenario("queues", cap, module="tests.api.low_nofile") as run:
        figures = run.figures
        broker = run.broker
        figures["empty_start_s"] = run.start()
        figures["create_s"] = create_topics(broker.url, topics)
        produce, failures = produce_one_round(broker.port, topics)
        figures.update(
            produce_s=produce.seconds,
            produce_msgs_per_s=topics * QUEUES / produce.seconds,
            server_errors=len(produce.server_errors),
            not_send_ok=len(failures),
        )
        run.watch.check()
        pull, wrong = pull_every_queue(broker.port, topics)
        figures.update(
            pull_s=pull.seconds,
            server_errors=figures["server_errors"] + len(pull.server_errors),
            not_read_back=len(wrong),
        )
        for problem in (produce.server_errors + failures + pull.server_errors + wrong)[:5]:
            print(f"  queues: {problem}", file=sys.stderr)
        run.settled()
        run.measure_memory()
        pid = run.pid
        started = time.perf_counter()
        code = broker.stop(STOP_WAIT_S)
        figures["stop_s"] = time.perf_counter() - started
        figures["stop_exit_status"] = math.nan if code is None else code
        figures["stop_killed"] = float(figures["stop_s"] >= STOP_WAIT_S)
        print(f"  queues: pid {pid} stopped in {figures['stop_s']:.2f} s, status {code}", file=sys.stderr)
        figures["start_s"] = run.start()
        run.watch.check()
        broker.kill()
        figures["recovery_start_s"] = run.start()
        after, wrong_after = pull_every_queue(broker.port, topics)
        figures.update(
            server_errors_after_kill=len(after.server_errors),
            not_read_back_after_kill=len(wrong_after) + len(after.server_errors),
        )
        for problem in (after.server_errors + wrong_after)[:5]:
            print(f"  queues after SIGKILL: {problem}", file=sys.stderr)
        run.measure_memory("recovered_")
        run.watch.check()
    return run


# -- the report ------------------------------------------------------------------------------------


def figure(run: Run, key: str, scale: float = 1.0) -> float:
    value = run.figures.get(key)
    return math.nan if value is None else value / scale


def disk_rows(run: Run, label: str, unit: str, scale: int, target: float) -> list[Result]:
    """The store's disk usage (judged), its apparent size and each part's usage."""
    usage = run.usage
    judged: Target | None = Target(target / scale, at_least=False)
    if usage is None:
        return [Result(f"{label}: store on disk", unit, [math.nan], target=judged)]
    lower = ""
    if run.partial:
        # What the store held when the scenario stopped: a lower bound, a miss only when over.
        lower = " (when the scenario stopped: a lower bound)"
        judged = judged if usage.total_disk > target else None
    parts = ", ".join(f"{part} {usage.part(part) / MIB:.1f}" for part in (*PARTS, OTHER))
    rows = [
        Result(
            f"{label}: store on disk",
            unit,
            [usage.total_disk / scale],
            target=judged,
            note=f"{parts} MiB; {usage.files:,} files, {usage.directories:,} directories{lower}",
            extra={"bytes": usage.total_disk, "files": usage.files, "directories": usage.directories},
        ),
        Result(
            f"{label}: store apparent size",
            unit,
            [usage.total_apparent / scale],
            note="sum of st_size",
            extra={"bytes": usage.total_apparent},
        ),
    ]
    for part in (*PARTS, OTHER):
        rows.append(
            Result(
                f"{label}: {part} on disk",
                "MiB",
                [usage.part(part) / MIB],
                note=(f"apparent {usage.part(part, apparent=True) / MIB:,.1f} MiB")
                + (f"; {usage.others()}" if part == OTHER else ""),
                extra={"bytes": usage.part(part), "apparent_bytes": usage.part(part, apparent=True)},
            )
        )
    return rows


def memory_rows(run: Run, label: str, target: float | None = None, note: str = "") -> list[Result]:
    judged = Target(target / MB, at_least=False) if target is not None else None
    return [
        Result(f"{label}: VmRSS", "MB", [figure(run, "VmRSS", MB)], target=judged, note=note),
        Result(f"{label}: RssAnon", "MB", [figure(run, "RssAnon", MB)]),
        Result(f"{label}: RssFile", "MB", [figure(run, "RssFile", MB)]),
    ]


def failure_row(run: Run, label: str) -> list[Result]:
    """A judged row for a scenario that did not run to its end (none when it did)."""
    if not run.failure:
        return []
    return [Result(f"{label}: ran to the end", "", [0.0], target=Target(1.0), note=run.failure)]


def idle_results(run: Run, plan: Plan) -> list[Result]:
    label = "idle, 1 message"
    note = (
        f"{figure(run, 'start_VmRSS', MB):.1f} MB right after the start; start {figure(run, 'start_s'):.2f} s"
    )
    return [
        *failure_row(run, label),
        *disk_rows(run, label, "MiB", MIB, IDLE_DISK),
        *memory_rows(run, label, IDLE_RSS, note),
    ]


def bulk_results(run: Run, plan: Plan) -> list[Result]:
    label = f"bulk, {plan.bulk_bytes / MIB:,.0f} MiB of {BODY_SIZE} B messages in {QUEUES} queues"
    target = scaled(BULK_DISK, plan.bulk_bytes / FULL.bulk_bytes)
    return [
        *failure_row(run, label),
        *disk_rows(run, label, "GiB", GIB, target),
        Result(
            f"{label}: produce",
            "msgs/s",
            [figure(run, "produce_msgs_per_s")],
            note=f"binary batches of {BULK_BATCH:,}, {figure(run, 'produce_mib_per_s'):.1f} MiB/s of bodies, "
            f"p99 {figure(run, 'produce_p99_ms'):.0f} ms; flush waited {figure(run, 'settle_s'):.0f} s",
        ),
        *held_rows(run, label, messages=plan.bulk_bytes // BODY_SIZE),
        *memory_rows(run, label),
    ]


def held_rows(run: Run, label: str, messages: int) -> list[Result]:
    """What the store holds against what it takes: the CommitLog's records (RocketMQ's layout: a
    1 KiB body with its unique id is a 1,181-byte record), one 20-byte ConsumeQueue entry and one
    20-byte index entry (its unique id) per message; the rest of the disk is what is allocated
    beyond them (chunks ahead, the spare, the index's slots, directories), judged against the idle
    store's target."""
    records = run.figures.get("records_bytes")
    if records is None or run.usage is None:
        return []
    held = records + messages * (20 + 20)
    beyond = run.usage.total_disk - held
    return [
        Result(
            f"{label}: CommitLog records",
            "GiB",
            [records / GIB],
            note=f"{records / messages:,.0f} B a message",
            extra={"bytes": records},
        ),
        Result(
            f"{label}: disk beyond the records and entries",
            "MiB",
            [beyond / MIB],
            target=Target(IDLE_DISK / MIB, at_least=False),
            note=f"{held / GIB:.3f} GiB held: records, ConsumeQueue and index entries (20 B each a message)",
            extra={"bytes": beyond},
        ),
    ]


def queues_results(run: Run, plan: Plan) -> list[Result]:
    queues = plan.topics * QUEUES
    label = f"queues, {plan.topics:,} x {QUEUES} = {queues:,}"
    none = Target(0.0, at_least=False)
    full = plan.topics >= FULL.topics
    return [
        *failure_row(run, label),
        Result(f"{label}: 5xx answers", "", [figure(run, "server_errors")], target=none),
        Result(f"{label}: produces not SEND_OK", "", [figure(run, "not_send_ok")], target=none),
        Result(f"{label}: queues not read back", "", [figure(run, "not_read_back")], target=none),
        *disk_rows(run, label, "GiB", GIB, scaled(QUEUES_DISK, plan.topics / FULL.topics)),
        *memory_rows(run, label),
        Result(
            f"{label}: produce",
            "msgs/s",
            [figure(run, "produce_msgs_per_s")],
            note=f"one request per topic; topics created in {figure(run, 'create_s'):.1f} s",
        ),
        Result(
            f"{label}: graceful stop (SIGTERM until exit)",
            "s",
            [figure(run, "stop_s")],
            target=Target(STOP_S, at_least=False) if full else None,
            note=f"exit status {figure(run, 'stop_exit_status'):.0f}"
            + ("; killed after the wait" if run.figures.get("stop_killed") else ""),
        ),
        Result(
            f"{label}: start after the stop",
            "s",
            [figure(run, "start_s")],
            note=f"on the empty store: {figure(run, 'empty_start_s'):.2f} s",
        ),
        Result(
            f"{label}: start after SIGKILL until /readyz 200",
            "s",
            [figure(run, "recovery_start_s")],
            target=Target(RECOVERY_S, at_least=False) if full else None,
        ),
        Result(
            f"{label}: queues not read back after SIGKILL",
            "",
            [figure(run, "not_read_back_after_kill")],
            target=none,
        ),
    ]


RUNS: dict[str, Callable[[Plan, int], Run]] = {"idle": run_idle, "bulk": run_bulk, "queues": run_queues}
RESULTS: dict[str, Callable[[Run, Plan], list[Result]]] = {
    "idle": idle_results,
    "bulk": bulk_results,
    "queues": queues_results,
}


def anchors() -> list[Result]:
    """The anchors' documented defaults (constants above, not measured)."""
    sparse = "created sparse: disk grows with data"
    return [
        Result(
            "RocketMQ CommitLog segment (mapedFileSizeCommitLog)",
            "MiB",
            [ROCKETMQ_COMMITLOG_FILE_SIZE / MIB],
            note=sparse,
        ),
        Result(
            "RocketMQ ConsumeQueue file (mapedFileSizeConsumeQueue, 300,000 x 20 B)",
            "MiB",
            [ROCKETMQ_CONSUMEQUEUE_FILE_SIZE / MIB],
            note=sparse,
        ),
        Result(
            "RocketMQ index file (5,000,000 slots, 20,000,000 entries)",
            "MiB",
            [ROCKETMQ_INDEX_FILE_SIZE / MIB],
            note=sparse,
        ),
        Result(
            "Kafka log segment (log.segment.bytes)",
            "MiB",
            [KAFKA_LOG_SEGMENT_BYTES / MIB],
            note="grows with data (log.preallocate=false)",
        ),
        Result(
            "Kafka offset / time index (segment.index.bytes)",
            "MiB",
            [KAFKA_SEGMENT_INDEX_BYTES / MIB],
            note="set to this length per segment when created, trimmed when it rolls",
        ),
    ]


def make_parser() -> argparse.ArgumentParser:
    parser = harness.arguments(
        "footprint",
        __doc__,
        "64 MiB instead of 1 GiB, 1,000 topics instead of 10,000",
        SECTIONS,
        raw=True,
    )
    parser.add_argument(
        "--disk-cap-gib",
        type=float,
        default=DISK_CAP_GIB,
        help="end a scenario whose store takes more of the disk than this (default %(default)s)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args, plan, sections = harness.parse(make_parser(), argv, FULL, QUICK, SECTIONS)
    cap = int(args.disk_cap_gib * GIB)
    started = time.perf_counter()
    runs: dict[str, Run] = {}

    def run(name: str) -> list[Result]:
        runs[name] = RUNS[name](plan, cap)
        print(f"  {name}: {runs[name].figures}", file=sys.stderr, flush=True)
        return RESULTS[name](runs[name], plan)

    results = harness.run_sections(sections, run)
    anchor_rows = anchors()
    print_table(anchor_rows, "The anchors' documented defaults (file sizes; not measured)")
    settings: dict[str, object] = {
        "plan": asdict(plan),
        "sections": sections,
        "broker_environment": broker_environment(),
        "open_file_limit_queues": NOFILE,
        "scratch_parent": str(scratch_parent()),
        "disk_cap_gib": args.disk_cap_gib,
        "free_floor_gib": FREE_FLOOR / GIB,
        "anchors": [row.as_dict() for row in anchor_rows],
        "runs": {
            name: {
                "store": str(r.store),
                "figures": r.figures,
                "failure": r.failure,
                "disk_by_entry": r.usage.disk if r.usage else None,
                "apparent_by_entry": r.usage.apparent if r.usage else None,
            }
            for name, r in runs.items()
        },
    }
    harness.report("footprint", args.json, argv, results, settings, started)
    missed = [result.name for result in results if result.verdict.startswith("MISS")]
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
