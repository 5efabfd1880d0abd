"""Metrics benchmark: a scrape of ``GET /metrics`` with 10,000 queues, produce while Prometheus
scrapes, and what the HTTP histogram and the text writer cost.

Run from the repository root (``produce`` needs ``wrk``: ``apt-get install -y wrk``)::

    .venv/bin/python -m bench.metrics [--quick] [--json out.json] [--only scrape,produce,middleware,writer]

``scrape`` and ``produce`` share one broker process (``python -m app``, ASYNC flush, ConsumeQueue
segments of 1,000 entries, as bench.queues):

* ``scrape``: GET /metrics, to its last byte, on the empty broker (the baseline: counters and store
  gauges only), then again once it holds 1,250 topics x 8 queues = 10,000 queues with a message
  in each, GROUPS groups that committed an offset on every queue (a lag series per group and queue)
  and pulled queue 0 of every topic (a consumed counter per topic and group). Also the server's
  CPU time per scrape. Target: SCRAPE_TARGET_S for the 10,000-queue scrape.
* ``produce``: one 128 B message per POST from wrk (keep-alive, as bench.http) to that broker: alone
  (the baseline), with a scrape every second, and with scrapes back to back (the worst case; Prometheus
  scrapes every 15 s or so). Rates and p99 latency, runs interleaved. Target: a scrape a second
  keeps PRODUCE_SHARE_TARGET of the rate.

In process:

* ``middleware``: an ASGI app that answers at once, leaving on the scope what produce's route leaves
  (its endpoint), called with and without the HTTP histogram's middleware around it, rounds
  interleaved: the microseconds a request pays. Target: MIDDLEWARE_TARGET_US
  (bench/metrics_inprocess.py holds these two sections).
* ``writer``: the lag family of a store of 10,000 queues and GROUPS groups (40,000 series), written
  by :mod:`app.broker.metrics_text`, against the same family built through prometheus_client's
  ``GaugeMetricFamily`` and written by its ``generate_latest`` (the baseline).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import httpx

from bench import harness
from bench.harness import RESULTS_DIR, Result, Stopwatch, Target
from bench.http_load import WrkRun, cpu_seconds, post_script, raise_fd_limit, request_bytes, run_wrk, wrk_path
from bench.metrics_inprocess import bench_middleware, bench_writer
from bench.queues_load import create_topics, produce_all, run_calls, topic_name
from bench.topics import QUEUES
from tests.api.server import BrokerProcess

SECTIONS = ("scrape", "produce", "middleware", "writer")
TOPICS = 1_250  # x QUEUES (8) = 10,000 queues
GROUPS = 4
SCRAPE_TARGET_S = 0.5
# A scrape of the 10,000-queue broker costs it about 0.1 s of CPU, on the core produce runs on: one
# a second leaves produce about 0.9 of its rate, whatever the scrape does besides.
PRODUCE_SHARE_TARGET = 0.8
SETTINGS = {
    "flush_mode": "ASYNC",
    "consumequeue_file_entries": 1_000,
    "commitlog_file_size": 64 * 1024 * 1024,
    "hold_check_interval_ms": 60_000,
    "log_level": "warning",
}


@dataclass(frozen=True, slots=True)
class Plan:
    scrapes: int
    repeats: int  # produce rounds, middleware rounds
    seconds: float  # per wrk run
    connections: int
    calls: int  # per middleware round


FULL = Plan(scrapes=10, repeats=3, seconds=5, connections=64, calls=20_000)
QUICK = replace(FULL, scrapes=3, repeats=1, seconds=3, calls=5_000)


class LoadedBroker:
    """One broker for ``scrape`` and ``produce``: filled with queues and groups on first use."""

    def __init__(self, root: Path) -> None:
        self.process = BrokerProcess(root / "store", **SETTINGS).start()
        self.client = httpx.Client(base_url=self.process.url, timeout=120)
        self.filled = False

    @property
    def pid(self) -> int:
        assert self.process.process is not None
        return self.process.process.pid

    def fill(self) -> None:
        if self.filled:
            return
        create_topics(self.process.url, TOPICS)
        produce_all(self.process.port, TOPICS)
        for group in range(GROUPS):
            for first in range(0, TOPICS, 100):
                offsets = [
                    {"topic": topic_name(topic), "queue_id": queue, "offset": 1}
                    for topic in range(first, min(TOPICS, first + 100))
                    for queue in range(QUEUES)
                ]
                self.client.put(f"/v1/groups/g{group}/offsets", json={"offsets": offsets}).raise_for_status()
        pulls = [
            request_bytes("GET", f"/v1/topics/{topic_name(topic)}/queues/0/messages?group=g{group}")
            for topic in range(TOPICS)
            for group in range(GROUPS)
        ]
        asyncio.run(run_calls(self.process.port, pulls, lambda index, status, body: None))
        self.filled = True

    def scrape(self) -> tuple[float, float, bytes]:
        """Wall seconds to the last byte, server CPU seconds, and the body of one scrape."""
        cpu = cpu_seconds(self.pid)
        with Stopwatch() as watch:
            response = self.client.get("/metrics")
        response.raise_for_status()
        return watch.seconds, cpu_seconds(self.pid) - cpu, response.content

    def close(self) -> None:
        self.client.close()
        self.process.stop()


def series_count(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))


def bench_scrape(plan: Plan, broker: LoadedBroker) -> list[Result]:
    def scrapes() -> tuple[list[float], list[float], bytes]:
        walls, cpus, body = [], [], b""
        for _ in range(plan.scrapes):
            wall, cpu, body = broker.scrape()
            walls.append(wall)
            cpus.append(cpu)
        return walls, cpus, body

    empty_walls, _, empty_body = scrapes()
    baseline = Result(
        "scrape, empty broker",
        "s",
        empty_walls,
        note=f"{series_count(empty_body)} series, {len(empty_body):,} B",
        alias="empty",
    )
    broker.fill()
    walls, cpus, body = scrapes()
    lag_series = body.count(b"\nwharf_consumer_lag{")
    return [
        baseline,
        Result(
            f"scrape, {TOPICS * QUEUES:,} queues x {GROUPS} groups",
            "s",
            walls,
            target=Target(SCRAPE_TARGET_S, at_least=False),
            note=f"{series_count(body):,} series ({lag_series:,} of lag), {len(body):,} B; "
            f"server CPU {statistics.median(cpus) * 1000:.0f} ms a scrape",
            extra={"series": series_count(body), "bytes": len(body), "server_cpu_s": statistics.median(cpus)},
        ).against(baseline),
    ]


class Scraper:
    """Scrapes in a thread, every ``interval_s`` (0: back to back), until stopped."""

    def __init__(self, url: str, interval_s: float) -> None:
        self.url = url
        self.interval_s = interval_s
        self.durations: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=120) as client:
            while not self._stop.is_set():
                with Stopwatch() as watch:
                    client.get("/metrics").raise_for_status()
                self.durations.append(watch.seconds)
                self._stop.wait(max(0.0, self.interval_s - watch.seconds))

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def bench_produce(plan: Plan, broker: LoadedBroker, root: Path) -> list[Result]:
    broker.fill()
    broker.client.post("/v1/topics", json={"name": "produce", "queues": 4}).raise_for_status()
    body = root / "produce.bin"
    body.write_bytes(b"x" * 128)
    script = post_script(root / "produce.lua", body, "application/octet-stream")
    url = f"{broker.process.url}/v1/topics/produce/messages"
    loads = {"alone": None, "a scrape every second": 1.0, "scrapes back to back": 0.0}
    runs: dict[str, list[WrkRun]] = {name: [] for name in loads}
    scrape_s: dict[str, list[float]] = {name: [] for name in loads}
    run_wrk(url, script, 1, plan.connections, 2, broker.pid)  # warm-up
    for _ in range(plan.repeats):
        for name, interval_s in loads.items():
            if interval_s is None:
                runs[name].append(run_wrk(url, script, plan.seconds, plan.connections, 2, broker.pid))
                continue
            with Scraper(broker.process.url, interval_s) as scraper:
                runs[name].append(run_wrk(url, script, plan.seconds, plan.connections, 2, broker.pid))
            scrape_s[name] += scraper.durations

    def p99(name: str) -> float:
        return statistics.median(run.latency_ms.get("p99", float("nan")) for run in runs[name])

    baseline = Result(
        "produce 128 B, no scraper",
        "req/s",
        [run.requests_per_s for run in runs["alone"]],
        note=f"p99 {p99('alone'):.1f} ms",
        alias="alone",
    )
    results = [baseline]
    for name in ("a scrape every second", "scrapes back to back"):
        scraped = scrape_s[name]
        results.append(
            Result(
                f"produce 128 B, {name}",
                "req/s",
                [run.requests_per_s for run in runs[name]],
                target=Target(PRODUCE_SHARE_TARGET, on_ratio=True) if name.startswith("a scrape") else None,
                note=f"p99 {p99(name):.1f} ms; {len(scraped)} scrapes, median "
                f"{statistics.median(scraped) * 1000:.0f} ms under load",
                extra={"p99_ms": p99(name), "scrapes": len(scraped)},
            ).against(baseline)
        )
    return results


def make_parser() -> argparse.ArgumentParser:
    parser = harness.arguments("metrics", __doc__, "fewer scrapes and shorter runs", SECTIONS, raw=True)
    parser.add_argument(
        "--dir", type=Path, default=RESULTS_DIR, help="parent of the scratch directory (a real disk)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args, plan, sections = harness.parse(make_parser(), argv, FULL, QUICK, SECTIONS)
    if "produce" in sections and wrk_path() is None:
        print("wrk is not installed: apt-get install -y wrk", file=sys.stderr)
        return 1
    raise_fd_limit()  # the broker inherits it: 10,000 queues
    load: dict[str, float] = {}
    started = time.perf_counter()
    with harness.scratch_dir("metrics-bench-", args.dir) as root:
        broker: LoadedBroker | None = None

        def loaded() -> LoadedBroker:
            nonlocal broker
            if broker is None:
                broker = LoadedBroker(root)
            return broker

        def run(name: str) -> list[Result]:
            load[name] = os.getloadavg()[0]
            if name == "scrape":
                return bench_scrape(plan, loaded())
            if name == "produce":
                return bench_produce(plan, loaded(), root)
            if name == "middleware":
                return bench_middleware(plan.repeats, plan.calls)
            return bench_writer(plan.repeats, root, TOPICS, GROUPS)

        def title(name: str, seconds: float) -> str:
            return f"{name} ({seconds:.0f} s, 1-min load average {load[name]:.1f} at start)"

        try:
            results = harness.run_sections(sections, run, title)
        finally:
            if broker is not None:
                broker.close()
    settings = {
        "plan": asdict(plan),
        "sections": sections,
        "broker": SETTINGS,
        "topics": TOPICS,
        "queues_per_topic": QUEUES,
        "groups": GROUPS,
        "load_average_at_section_start": load,
    }
    harness.report("metrics", args.json, argv, results, settings, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
