"""Delayed delivery: a million pending delayed messages - what the broker's memory holds while they
wait, how long a start takes with them pending, and how late they are delivered.

Every section runs real broker processes (``python -m app``) on a temporary store on the
repository's disk; messages of 100 bytes are produced over HTTP in binary batches of 1,000 by 4
client threads.

* ``timer``: a baseline broker stores N plain messages (1,000,000; ``--quick`` 100,000); a second
  broker stores N with ``deliver_at_ms`` spread evenly over a window that opens after they are all
  produced and read into the timer log. Reported: the broker's anonymous memory (RssAnon: the Python
  heap, not the CommitLog's mapped pages) with the N pending, against the baseline's; the timer
  log's size; the start time of a restart with the N pending; then, once the window has passed,
  every message's lateness - its store time in its topic minus the time it was due (never negative)
  - and the lateness a consumer long-polling one queue saw. Start times are medians of 3 restarts.
* ``levels``: M messages (100,000; ``--quick`` 20,000) at delay level 3 (10 s), produced at 5,000 a
  second (about the timer section's rate), then as fast as the broker takes them (its delivery then
  falls behind: the rate it delivers at is the figure); the lateness of each.

Lateness p99 target: 1 s ("delivered within 1 s of its time under normal load").
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from wharf_client.codec import (
    BATCH_MEDIA_TYPE,
    RECORDS_MEDIA_TYPE,
    IncomingMessage,
    encode_batch,
    split_records,
)

from app.store.record import decode_record
from bench import harness
from bench.harness import Result, Target, scratch_parent
from tests.api.server import BrokerProcess

SECTIONS = ("timer", "levels")
TOPIC = "delayed"
QUEUES = 4
BODY = b"x" * 100
BATCH = 1_000
PRODUCERS = 4
RESTARTS = 3
LEVEL_RATE = 5_000  # messages a second: about what the timer section delivers
READ_BATCH = 10_000
LATENESS_TARGET_MS = 1_000
BROKER_SETTINGS = {
    "commitlog_file_size": 256 << 20,
    "consumequeue_file_entries": 300_000,
    "max_hash_slots": 1 << 20,
    "max_index_count": 4 << 20,
    "delay_offset_persist_interval_ms": 1_000,
    # A start reads back every message of the idempotency window (5 min): here, all of them. Off, so
    # that a start's time shows the store and the timer log, as when the messages came over hours.
    "idempotency_window_s": 0,
}
START_TIMEOUT_S = 180.0


@dataclass(frozen=True, slots=True)
class Plan:
    timer_messages: int
    window_s: float  # deliveries spread over this long
    level_messages: int


FULL = Plan(timer_messages=1_000_000, window_s=200.0, level_messages=100_000)
QUICK = Plan(timer_messages=100_000, window_s=20.0, level_messages=20_000)


def now_ms() -> int:
    return int(time.time() * 1000)


def memory(pid: int) -> dict[str, int]:
    """VmRSS and RssAnon of ``pid``, in bytes."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile"):
            fields[name] = int(value.split()[0]) * 1024
    return fields


def start_broker(directory: Path) -> tuple[BrokerProcess, httpx.Client]:
    broker = BrokerProcess(directory, log_level="warning", **BROKER_SETTINGS).start(START_TIMEOUT_S)
    client = httpx.Client(base_url=broker.url, timeout=120.0)
    if client.post("/v1/topics", json={"name": TOPIC, "queues": QUEUES}).status_code not in (200, 201):
        raise RuntimeError("cannot create the topic")
    return broker, client


def produce(url: str, count: int, make: Callable[[int], IncomingMessage], rate: float = 0.0) -> float:
    """Produce ``count`` messages made by ``make(index)``, at most ``rate`` a second (0: as fast as
    the broker takes them); the seconds it took."""
    batches = iter(range(0, count, BATCH))
    lock = threading.Lock()
    errors: list[str] = []

    def worker() -> None:
        with httpx.Client(base_url=url, timeout=120.0) as client:
            while True:
                with lock:
                    first = next(batches, None)
                if first is None:
                    return
                if rate:
                    time.sleep(max(0.0, started + first / rate - time.perf_counter()))
                body = encode_batch(make(index) for index in range(first, min(first + BATCH, count)))
                answer = client.post(
                    f"/v1/topics/{TOPIC}/messages", content=body, headers={"content-type": BATCH_MEDIA_TYPE}
                )
                if answer.status_code != 200:
                    errors.append(answer.text[:300])
                    return

    started = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(PRODUCERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError(f"produce failed: {errors[0]}")
    return time.perf_counter() - started


def stored(client: httpx.Client) -> int:
    return sum(queue["max_offset"] for queue in client.get(f"/v1/topics/{TOPIC}/queues").json()["queues"])


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def restart(broker: BrokerProcess) -> list[float]:
    """Stop the broker (SIGTERM) and start it again, RESTARTS times; the seconds each start took
    until it answered /readyz."""
    seconds = []
    for _ in range(RESTARTS):
        broker.stop()
        started = time.perf_counter()
        broker.start(START_TIMEOUT_S)
        seconds.append(time.perf_counter() - started)
    return seconds


def timer_enqueued(store_dir: Path) -> int:
    try:
        return int(json.loads((store_dir / "config" / "timerCheckpoint.json").read_text())["enqueue_offset"])
    except (FileNotFoundError, ValueError):
        return 0


def lateness_of_all(client: httpx.Client) -> tuple[list[int], list[int]]:
    """Store time minus due time of every delivered message, read back from every queue, and the
    store times."""
    lateness = []
    stored_at = []
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            answer = client.get(
                f"/v1/topics/{TOPIC}/queues/{queue_id}/messages",
                params={"offset": offset, "max_messages": READ_BATCH},
                headers={"accept": RECORDS_MEDIA_TYPE},
            )
            records = split_records(answer.content)
            if not records:
                break
            for record in records:
                message = decode_record(record)
                lateness.append(message.store_timestamp - int(message.properties["TIMER_OUT_MS"]))
                stored_at.append(message.store_timestamp)
            offset = int(answer.headers["X-Wharf-Next-Offset"])
    return lateness, stored_at


class LiveConsumer(threading.Thread):
    """Long-polls queue 0 and keeps, per message, when it was seen minus when it was due."""

    def __init__(self, url: str, count: int) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.count = count
        self.seen_late_ms: list[int] = []

    def run(self) -> None:
        offset = 0
        with httpx.Client(base_url=self.url, timeout=60.0) as client:
            while len(self.seen_late_ms) < self.count:
                answer = client.get(
                    f"/v1/topics/{TOPIC}/queues/0/messages",
                    params={"offset": offset, "max_messages": READ_BATCH, "max_wait_ms": 5_000},
                    headers={"accept": RECORDS_MEDIA_TYPE},
                )
                seen = now_ms()
                for record in split_records(answer.content):
                    due = int(decode_record(record).properties["TIMER_OUT_MS"])
                    self.seen_late_ms.append(seen - due)
                offset = int(answer.headers["X-Wharf-Next-Offset"])


def percentile(values: list[int], fraction: float) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))])


def lateness_results(
    label: str, lateness: list[int], extra_note: str = "", target: bool = True
) -> list[Result]:
    if min(lateness) < 0:
        raise RuntimeError(f"{label}: a message was delivered {-min(lateness)} ms early")
    note = (
        f"{len(lateness):,} messages; min {min(lateness)} ms, mean {statistics.fmean(lateness):.0f} ms, "
        f"p99.9 {percentile(lateness, 0.999):.0f} ms, max {max(lateness)} ms{extra_note}"
    )
    return [
        Result(f"{label}: lateness p50", "ms", [percentile(lateness, 0.5)]),
        Result(
            f"{label}: lateness p99",
            "ms",
            [percentile(lateness, 0.99)],
            target=Target(LATENESS_TARGET_MS, at_least=False) if target else None,
            note=note,
            extra={"min_ms": min(lateness), "max_ms": max(lateness), "p999_ms": percentile(lateness, 0.999)},
        ),
    ]


def run_timer(plan: Plan, root: Path) -> list[Result]:
    count = plan.timer_messages
    baseline, client = start_broker(root / "baseline")
    try:
        assert baseline.process is not None
        produce_s = produce(baseline.url, count, lambda n: IncomingMessage(BODY, queue_id=n % QUEUES))
        wait_for(lambda: stored(client) == count, 120, "the plain messages")
        plain = memory(baseline.process.pid)
        plain_starts = restart(baseline)
    finally:
        client.close()
        baseline.stop()
    print(f"  baseline: {count:,} plain messages in {produce_s:.1f} s", flush=True)

    broker, client = start_broker(root / "timer")
    try:
        # The window opens once producing, reading into the timer log and the restarts are over.
        opens = now_ms() + int((4 * produce_s + RESTARTS * (max(plain_starts) + 10)) * 1000)
        step = plan.window_s * 1000 / count
        produce(
            broker.url,
            count,
            lambda n: IncomingMessage(BODY, queue_id=n % QUEUES, deliver_at_ms=opens + int(n * step)),
        )
        produced = time.perf_counter()
        wait_for(
            lambda: timer_enqueued(broker.store_dir) == count, (opens - now_ms()) / 1000, "the timer log"
        )
        enqueued_s = time.perf_counter() - produced
        assert broker.process is not None
        pending = memory(broker.process.pid)
        timer_log_bytes = sum(path.stat().st_size for path in (broker.store_dir / "timerlog").iterdir())
        starts = restart(broker)
        assert broker.process is not None
        after_start = memory(broker.process.pid)
        if now_ms() >= opens:
            raise RuntimeError("the delivery window opened before the restarts were over: raise the lead")
        live = LiveConsumer(broker.url, count // QUEUES)
        live.start()
        print(
            f"  {count:,} pending; restarted in {statistics.median(starts):.2f} s; window opens", flush=True
        )
        wait_for(
            lambda: stored(client) == count, (opens - now_ms()) / 1000 + plan.window_s + 300, "the deliveries"
        )
        live.join(60)
        lateness, stored_at = lateness_of_all(client)
    finally:
        client.close()
        broker.stop()
    growth = pending["RssAnon"] - plain["RssAnon"]
    label = f"timer, {count:,} pending"
    mib = 1 << 20
    return [
        Result(
            f"{label}: broker RssAnon",
            "MiB",
            [pending["RssAnon"] / mib],
            note=f"baseline with {count:,} plain messages {plain['RssAnon'] / mib:.1f} MiB; VmRSS "
            f"{pending['VmRSS'] / mib:.0f} MiB (baseline {plain['VmRSS'] / mib:.0f}), the rest is the "
            "mapped CommitLog",
            extra={"baseline_rss_anon_mib": plain["RssAnon"] / mib, "vm_rss_mib": pending["VmRSS"] / mib},
        ),
        Result(f"{label}: RssAnon over the baseline, per message", "bytes", [growth / count]),
        Result(
            f"{label}: timer log on disk",
            "MiB",
            [timer_log_bytes / mib],
            note=f"read into it {enqueued_s:.1f} s after the last produce answered",
        ),
        Result(
            f"{label}: restart with them pending",
            "s",
            starts,
            note=f"baseline with {count:,} plain messages {statistics.median(plain_starts):.2f} s; "
            f"RssAnon after the start {after_start['RssAnon'] / mib:.1f} MiB",
            extra={
                "baseline_start_s": statistics.median(plain_starts),
                "rss_anon_after_start_mib": after_start["RssAnon"] / mib,
            },
        ),
        *lateness_results(
            label,
            lateness,
            f"; the last delivered {(max(stored_at) - opens) / 1000 - plan.window_s:.1f} s after the window closed",
        ),
        Result(
            f"{label}: lateness a long-polling consumer saw, p99",
            "ms",
            [percentile(live.seen_late_ms, 0.99)] if live.seen_late_ms else [float("nan")],
            note=f"{len(live.seen_late_ms):,} messages of queue 0; p50 {percentile(live.seen_late_ms, 0.5):.0f} ms"
            if live.seen_late_ms
            else "",
        ),
    ]


def run_levels(plan: Plan, root: Path) -> list[Result]:
    """Level 3 (10 s) messages produced at LEVEL_RATE a second, then as fast as the broker takes
    them: the lateness of each, and the rate the broker delivered them at."""
    return run_levels_at(plan.level_messages, LEVEL_RATE, root) + run_levels_at(
        plan.level_messages, 0.0, root
    )


def run_levels_at(count: int, rate: float, root: Path) -> list[Result]:
    broker, client = start_broker(root / f"levels-{rate:.0f}")
    try:
        produce_s = produce(
            broker.url, count, lambda n: IncomingMessage(BODY, queue_id=n % QUEUES, delay_level=3), rate
        )
        wait_for(lambda: stored(client) == count, 300, "the deliveries")
        lateness, stored_at = lateness_of_all(client)
    finally:
        client.close()
        broker.stop()
    pace = f"{rate:,.0f}/s" if rate else "flat out"
    delivered_rate = count / max(0.001, (max(stored_at) - min(stored_at)) / 1000)
    return [
        *lateness_results(
            f"levels, {count:,} at level 3 (10 s), produced {pace}",
            lateness,
            f"; produced in {produce_s:.1f} s ({count / produce_s:,.0f}/s)",
            target=bool(rate),
        ),
        Result(f"levels, produced {pace}: delivery rate", "msgs/s", [delivered_rate]),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments(
        "delay", __doc__.splitlines()[0], "100,000 timer messages, 20,000 level", SECTIONS
    )
    args, plan, sections = harness.parse(parser, argv, FULL, QUICK, SECTIONS)
    started = time.perf_counter()
    runs = {"timer": run_timer, "levels": run_levels}
    with harness.scratch_dir("wharf-bench-delay-", scratch_parent()) as root:
        results = harness.run_sections(sections, lambda name: runs[name](plan, root))
    settings: dict[str, Any] = {"quick": args.quick, **asdict(plan), "broker": BROKER_SETTINGS}
    harness.report("delay", args.json, argv, results, settings, started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
