"""HTTP benchmark: produce, batch produce, pull, long-poll wake latency and thousands of held pulls.

Run from the repository root (needs ``wrk``: ``apt-get install -y wrk``)::

    .venv/bin/python -m bench.http [--quick] [--json out.json] [--only produce,batch,pull,wake,holds]
                                   [--profile DIR]

A real broker (``python -m app``: uvicorn with uvloop and httptools, one worker, ASYNC flush, 1 GiB
CommitLog segments) runs in its own process; the load comes from other processes. Both share the
machine's cores, so every rate here is what one server process reaches while the load generator
takes part of the CPU.

* ``produce``: one message (128 B) per POST, from wrk (keep-alive, 64 connections, 2 threads), as a
  raw ``application/octet-stream`` body and as a small JSON object. Baseline: ``bench.bare_app``, a
  FastAPI route that reads its body and answers a small JSON, under uvicorn with the same flags,
  driven by the same wrk script in the same repeats. Target: 80 % of the baseline.
* ``batch``: 100 messages of 1 KiB per POST, as JSON and as the binary batch
  (``application/vnd.wharf.batch``); messages per second.
* ``pull``: 1000 messages (1 KiB bodies) per GET from a pre-filled topic, as JSON and as raw records
  (``Accept: application/vnd.wharf.records``); messages per second.
* ``wake``: a pull held on an empty queue, then a produce to that queue: the time from the produce's
  answer reaching the producer to the pull's answer reaching the consumer (two raw connections
  polled by one thread against one clock), p50 and p99 over a few hundred rounds.
* ``holds``: 5,000 pulls held at once over 50 topics x 4 queues (raw asyncio connections), then one
  message to each queue: the server's extra RSS while they are held, and the time from sending the
  produces until the last held pull's answer is in. A fresh broker per repeat.

Every figure is the median of its repeats. ``--profile DIR`` adds one extra (uncounted) wrk run per
load with ``py-spy`` sampling the server and writes the collapsed stacks and a ranked summary
(``python -m bench.http_profile``) to ``DIR``; ``holds`` samples the phases of its first repeat,
which is counted, so take the figures from a run without ``--profile``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import signal
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import orjson

from app.api.codec import BATCH_MEDIA_TYPE, RECORDS_MEDIA_TYPE, IncomingMessage, encode_batch
from bench import http_profile
from bench.common import RESULTS_DIR, Result, Target, print_table, select_sections, write_json
from bench.http_load import (
    BareServer,
    RawConnection,
    WrkRun,
    open_request,
    post_script,
    pull_script,
    raise_fd_limit,
    read_answer,
    request_bytes,
    rss_bytes,
    run_wrk,
    wait_all,
    wrk_path,
)
from tests.api.server import BrokerProcess

SECTIONS = ("produce", "batch", "pull", "wake", "holds")
MIB = 1 << 20
GIB = 1 << 30

# Targets for this 2-core machine.
PRODUCE_SHARE_TARGET = 0.8  # single-message produce over the bare FastAPI route
BATCH_JSON_TARGET = 100_000  # msgs/s, 100 x 1 KiB per request
BATCH_BINARY_TARGET = 200_000
PULL_JSON_TARGET = 150_000  # msgs/s, 1000 per answer
PULL_BINARY_TARGET = 300_000
WAKE_P50_TARGET_MS = 1.0
WAKE_P99_TARGET_MS = 3.0

SMALL_BODY = 128
LARGE_BODY = 1024
BATCH_MESSAGES = 100
PULL_BATCH = 1000
QUEUES = 4


@dataclass(frozen=True, slots=True)
class Plan:
    """How much work each section does."""

    repeats: int
    seconds: float  # per wrk run
    warmup_seconds: float
    connections: int  # single-message produce
    batch_connections: int  # batch produce and pull: large bodies, fewer in flight
    threads: int
    pull_per_queue: int
    wake_rounds: int
    holds: int
    hold_topics: int
    hold_repeats: int
    profile_seconds: float


FULL = Plan(
    repeats=3,
    seconds=5,
    warmup_seconds=2,
    connections=64,
    batch_connections=16,
    threads=2,
    pull_per_queue=50_000,
    wake_rounds=200,
    holds=5_000,
    hold_topics=50,
    hold_repeats=3,
    profile_seconds=8,
)
QUICK = Plan(
    repeats=1,
    seconds=3,
    warmup_seconds=1,
    connections=64,
    batch_connections=16,
    threads=2,
    pull_per_queue=10_000,
    wake_rounds=100,
    holds=5_000,
    hold_topics=50,
    hold_repeats=1,
    profile_seconds=5,
)


def text_body(size: int, seed: int) -> str:
    """Printable ASCII (so JSON carries it as UTF-8, not base64), different per seed."""
    rng = random.Random(seed)
    return "".join(rng.choices(string.ascii_letters + string.digits, k=size))


def broker_settings() -> dict[str, object]:
    return {
        "flush_mode": "ASYNC",
        "commitlog_file_size": GIB,
        "consumequeue_file_entries": 300_000,  # the default; the test helper's is tiny
    }


def rate_samples(runs: list[WrkRun], per_request: int = 1) -> list[float]:
    return [run.requests_per_s * per_request for run in runs]


def wrk_extra(runs: list[WrkRun]) -> dict[str, float]:
    def median(values: Iterator[float]) -> float:
        return round(statistics.median(values), 3)

    return {
        "latency_p50_ms": median(run.latency_ms.get("p50", float("nan")) for run in runs),
        "latency_p99_ms": median(run.latency_ms.get("p99", float("nan")) for run in runs),
        "server_cores": median(run.server_cores for run in runs),
        "server_cpu_us_per_request": median(run.cpu_us_per_request for run in runs),
        "mb_read_per_s": median(run.bytes_read / run.seconds / 1e6 for run in runs),
    }


def wrk_note(runs: list[WrkRun], per_request: int = 1) -> str:
    extra = wrk_extra(runs)
    cpu = extra["server_cpu_us_per_request"] / per_request
    unit = "request" if per_request == 1 else "message"
    return (
        f"server {extra['server_cores']:.2f} cores, {cpu:,.1f} us CPU/{unit}; "
        f"latency p50 {extra['latency_p50_ms']:.1f} ms, p99 {extra['latency_p99_ms']:.1f} ms"
    )


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


class Bench:
    """One broker for the load sections; scratch files under ``root``."""

    def __init__(self, plan: Plan, root: Path, profile_dir: Path | None) -> None:
        self.plan = plan
        self.root = root
        self.profile_dir = profile_dir
        self.broker = BrokerProcess(root / "store", **broker_settings())
        self.broker.start()
        self.client = httpx.Client(base_url=self.broker.url, timeout=60)

    def close(self) -> None:
        self.client.close()
        self.broker.stop()

    @property
    def pid(self) -> int:
        assert self.broker.process is not None
        return self.broker.process.pid

    def create_topic(self, name: str, queues: int = QUEUES) -> None:
        self.client.post("/v1/topics", json={"name": name, "queues": queues}).raise_for_status()

    def file(self, name: str, data: bytes) -> Path:
        path = self.root / name
        path.write_bytes(data)
        return path

    def wrk(self, url: str, script: Path, connections: int, pid: int, seconds: float | None = None) -> WrkRun:
        plan = self.plan
        return run_wrk(url, script, seconds or plan.seconds, connections, plan.threads, pid)

    @contextlib.contextmanager
    def sampling(self, name: str, pid: int) -> Iterator[None]:
        """Sample ``pid`` with py-spy while the block runs (``--profile``); else do nothing."""
        if self.profile_dir is None:
            yield
            return
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        out = self.profile_dir / f"{name}.txt"
        sampler = http_profile.record(pid, 600, out)
        time.sleep(0.3)  # let py-spy attach
        try:
            yield
        finally:
            sampler.send_signal(signal.SIGINT)  # py-spy writes what it has and exits
            sampler.communicate()
        if out.exists():
            summary = http_profile.render(http_profile.summarise(out), top=40)
            (self.profile_dir / f"{name}.summary.txt").write_text(f"{name}\n{summary}\n")
            print(f"  profile {name}: {out}")

    def profile(self, name: str, url: str, script: Path, connections: int, pid: int) -> None:
        """An extra, uncounted wrk run with py-spy sampling the server (``--profile``)."""
        if self.profile_dir is None:
            return
        self.profile_dir.mkdir(parents=True, exist_ok=True)
        out = self.profile_dir / f"{name}.txt"
        seconds = self.plan.profile_seconds
        sampler = http_profile.record(pid, seconds, out)
        time.sleep(0.3)  # let py-spy attach
        run = self.wrk(url, script, connections, pid, seconds + 2)
        _, errors = sampler.communicate()
        if sampler.returncode != 0:
            print(f"py-spy failed on {name}: {errors.decode(errors='replace')}", file=sys.stderr)
            return
        summary = http_profile.render(http_profile.summarise(out), top=40)
        header = f"{name}: {run.requests_per_s:,.0f} requests/s while sampled (py-spy slows the server)\n"
        (self.profile_dir / f"{name}.summary.txt").write_text(header + summary + "\n")
        print(f"  profile {name}: {out}")

    # -- sections ----------------------------------------------------------------------------------

    def produce(self) -> list[Result]:
        plan = self.plan
        topic = "produce"
        self.create_topic(topic)
        raw_body = text_body(SMALL_BODY, 1).encode()
        scripts = {
            "raw": post_script(
                self.root / "produce-raw.lua", self.file("raw.bin", raw_body), "application/octet-stream"
            ),
            "json": post_script(
                self.root / "produce-json.lua",
                self.file("single.json", orjson.dumps({"body": raw_body.decode()})),
                "application/json",
            ),
        }
        path = f"/v1/topics/{topic}/messages"
        bare = BareServer(self.root / "bare.log").start()
        try:
            targets: dict[str, tuple[str, Path, int]] = {
                "bare": (bare.url + path, scripts["raw"], bare.pid),
                "raw": (self.broker.url + path, scripts["raw"], self.pid),
                "json": (self.broker.url + path, scripts["json"], self.pid),
            }
            for url, script, pid in targets.values():
                self.wrk(url, script, plan.connections, pid, plan.warmup_seconds)
            runs: dict[str, list[WrkRun]] = {name: [] for name in targets}
            for _ in range(plan.repeats):
                for name, (url, script, pid) in targets.items():  # interleaved against noise
                    runs[name].append(self.wrk(url, script, plan.connections, pid))
            for name, (url, script, pid) in targets.items():
                self.profile(f"produce-{name}", url, script, plan.connections, pid)
        finally:
            bare.stop()
        baseline = Result(
            "bare FastAPI route, 128 B POST",
            "req/s",
            rate_samples(runs["bare"]),
            note=wrk_note(runs["bare"]),
            extra=wrk_extra(runs["bare"]),
            alias="bare",
        )
        results = [baseline]
        bare_cpu = baseline.extra["server_cpu_us_per_request"]
        for name, label in (("raw", "octet-stream"), ("json", "JSON")):
            extra = wrk_extra(runs[name])
            # CPU per request is steadier than rates on a shared machine: the same ratio in CPU time.
            extra["cpu_ratio_vs_bare"] = round(bare_cpu / extra["server_cpu_us_per_request"], 3)
            results.append(
                Result(
                    f"produce 1 msg/request, {label}",
                    "req/s",
                    rate_samples(runs[name]),
                    target=Target(PRODUCE_SHARE_TARGET, on_ratio=True),
                    note=f"{wrk_note(runs[name])}; CPU-time ratio to bare {extra['cpu_ratio_vs_bare']:.2f}x",
                    extra=extra,
                ).against(baseline)
            )
        return results

    def batch(self) -> list[Result]:
        plan = self.plan
        topic = "batch"
        self.create_topic(topic)
        bodies = [text_body(LARGE_BODY, seed) for seed in range(BATCH_MESSAGES)]
        json_body = orjson.dumps({"messages": [{"body": body} for body in bodies]})
        binary_body = encode_batch(IncomingMessage(body=body.encode()) for body in bodies)
        url = f"{self.broker.url}/v1/topics/{topic}/messages"
        scripts = {
            "json": post_script(
                self.root / "batch-json.lua", self.file("batch.json", json_body), "application/json"
            ),
            "binary": post_script(
                self.root / "batch-binary.lua", self.file("batch.bin", binary_body), BATCH_MEDIA_TYPE
            ),
        }
        for script in scripts.values():
            self.wrk(url, script, plan.batch_connections, self.pid, plan.warmup_seconds)
        runs: dict[str, list[WrkRun]] = {name: [] for name in scripts}
        for _ in range(plan.repeats):
            for name, script in scripts.items():
                runs[name].append(self.wrk(url, script, plan.batch_connections, self.pid))
        for name, script in scripts.items():
            self.profile(f"batch-{name}", url, script, plan.batch_connections, self.pid)
        sizes = {"json": len(json_body), "binary": len(binary_body)}
        return [
            Result(
                f"batch produce {BATCH_MESSAGES} x 1 KiB, {name}",
                "msgs/s",
                rate_samples(runs[name], BATCH_MESSAGES),
                target=Target(target),
                note=f"{sizes[name]:,} B requests, {plan.batch_connections} connections; "
                + wrk_note(runs[name], BATCH_MESSAGES),
                extra=wrk_extra(runs[name]),
            )
            for name, target in (("json", BATCH_JSON_TARGET), ("binary", BATCH_BINARY_TARGET))
        ]

    def fill_pull_topic(self, topic: str) -> None:
        self.create_topic(topic)
        bodies = [text_body(LARGE_BODY, seed).encode() for seed in range(64)]
        per_request = 1000
        for queue_id in range(QUEUES):
            for start in range(0, self.plan.pull_per_queue, per_request):
                batch = encode_batch(
                    IncomingMessage(body=bodies[(start + i) % len(bodies)], queue_id=queue_id)
                    for i in range(per_request)
                )
                self.client.post(
                    f"/v1/topics/{topic}/messages", content=batch, headers={"Content-Type": BATCH_MEDIA_TYPE}
                ).raise_for_status()
        # Every offset the load asks for holds a whole answer: check the last one of each queue.
        last = self.plan.pull_per_queue - PULL_BATCH
        for queue_id in range(QUEUES):
            answer = self.client.get(
                f"/v1/topics/{topic}/queues/{queue_id}/messages",
                params={"offset": last, "max_messages": PULL_BATCH},
                headers={"Accept": RECORDS_MEDIA_TYPE},
            )
            answer.raise_for_status()
            count = int(answer.headers["X-Wharf-Message-Count"])
            if count != PULL_BATCH:
                raise RuntimeError(f"a pull of {PULL_BATCH} from queue {queue_id} answered {count} messages")

    def pull(self) -> list[Result]:
        plan = self.plan
        topic = "pull"
        self.fill_pull_topic(topic)
        slots = plan.pull_per_queue // PULL_BATCH
        url = self.broker.url
        scripts = {
            "json": pull_script(
                self.root / "pull-json.lua", topic, QUEUES, slots, PULL_BATCH, "application/json"
            ),
            "binary": pull_script(
                self.root / "pull-binary.lua", topic, QUEUES, slots, PULL_BATCH, RECORDS_MEDIA_TYPE
            ),
        }
        for script in scripts.values():
            self.wrk(url, script, plan.batch_connections, self.pid, plan.warmup_seconds)
        runs: dict[str, list[WrkRun]] = {name: [] for name in scripts}
        for _ in range(plan.repeats):
            for name, script in scripts.items():
                runs[name].append(self.wrk(url, script, plan.batch_connections, self.pid))
        for name, script in scripts.items():
            self.profile(f"pull-{name}", url, script, plan.batch_connections, self.pid)
        stored = QUEUES * plan.pull_per_queue
        return [
            Result(
                f"pull {PULL_BATCH}/request, {name}",
                "msgs/s",
                rate_samples(runs[name], PULL_BATCH),
                target=Target(target),
                note=f"{stored:,} stored 1 KiB messages in {QUEUES} queues, "
                f"{plan.batch_connections} connections; " + wrk_note(runs[name], PULL_BATCH),
                extra=wrk_extra(runs[name]),
            )
            for name, target in (("json", PULL_JSON_TARGET), ("binary", PULL_BINARY_TARGET))
        ]

    def wake(self) -> list[Result]:
        plan = self.plan
        topic = "wake"
        self.create_topic(topic, queues=1)
        port = self.broker.port
        consumer, producer, stats = RawConnection(port), RawConnection(port), RawConnection(port)
        produce = request_bytes(
            "POST",
            f"/v1/topics/{topic}/messages",
            text_body(SMALL_BODY, 2).encode(),
            {"Content-Type": "application/octet-stream"},
        )
        stats_request = request_bytes("GET", "/v1/stats")
        offset = 0

        def one_round() -> tuple[float, float, float]:
            """(ack -> pull answer, produce sent -> pull answer, produce round trip), seconds."""
            nonlocal offset
            consumer.send(
                request_bytes(
                    "GET", f"/v1/topics/{topic}/queues/0/messages?offset={offset}&max_wait_ms=10000"
                )
            )
            deadline = time.perf_counter() + 10
            while orjson.loads(stats.call(stats_request)[1])["held_pulls"] < 1:
                if time.perf_counter() > deadline:
                    raise TimeoutError("the pull was not held")
            sent = time.perf_counter()
            producer.send(produce)
            wait_all([producer, consumer], 10)
            assert producer.answer is not None and consumer.answer is not None
            status, body = consumer.answer
            if status != 200 or orjson.loads(body)["status"] != "FOUND":
                raise RuntimeError(f"the held pull answered {status}: {body[:200]!r}")
            offset += 1
            return (
                consumer.answered_at - producer.answered_at,
                consumer.answered_at - sent,
                producer.answered_at - sent,
            )

        try:
            for _ in range(20):  # warm-up
                one_round()
            p50: list[float] = []
            p99: list[float] = []
            totals: list[float] = []
            trips: list[float] = []
            first = 0.0
            for _ in range(plan.repeats):
                rounds = [one_round() for _ in range(plan.wake_rounds)]
                wakes = [r[0] * 1000 for r in rounds]
                first = max(first, sum(1 for w in wakes if w < 0) / len(wakes))
                p50.append(percentile(wakes, 0.5))
                p99.append(percentile(wakes, 0.99))
                totals.append(percentile([r[1] * 1000 for r in rounds], 0.5))
                trips.append(percentile([r[2] * 1000 for r in rounds], 0.5))
        finally:
            for connection in (consumer, producer, stats):
                connection.close()
        rounds_note = f"{plan.wake_rounds} rounds x {plan.repeats}"
        extra = {
            "produce_sent_to_pull_answer_p50_ms": round(statistics.median(totals), 3),
            "produce_round_trip_p50_ms": round(statistics.median(trips), 3),
            "share_pull_answer_first": round(first, 3),
        }
        return [
            Result(
                "long-poll wake, produce ack -> pull answer, p50",
                "ms",
                p50,
                target=Target(WAKE_P50_TARGET_MS, at_least=False),
                note=f"{rounds_note}; from sending the produce: p50 "
                f"{extra['produce_sent_to_pull_answer_p50_ms']:.2f} ms (produce round trip "
                f"{extra['produce_round_trip_p50_ms']:.2f} ms)",
                extra=extra,
            ),
            Result(
                "long-poll wake, produce ack -> pull answer, p99",
                "ms",
                p99,
                target=Target(WAKE_P99_TARGET_MS, at_least=False),
                note=rounds_note,
            ),
        ]

    def holds(self) -> list[Result]:
        plan = self.plan
        runs = []
        for repeat in range(plan.hold_repeats):
            broker = BrokerProcess(self.root / f"holds-{repeat}", **broker_settings()).start()
            try:
                sample = self.sampling if repeat == 0 else _no_sampling
                runs.append(asyncio.run(hold_round(broker, plan.holds, plan.hold_topics, sample)))
            finally:
                broker.stop()
                shutil.rmtree(self.root / f"holds-{repeat}", ignore_errors=True)
        count = plan.holds
        per_hold = [run["extra_rss"] / count / 1024 for run in runs]
        layout = (
            f"{plan.hold_topics} topics x {QUEUES} queues, {count // (plan.hold_topics * QUEUES)} per queue"
        )
        return [
            Result(
                f"{count:,} held pulls: extra server RSS",
                "MiB",
                [run["extra_rss"] / MIB for run in runs],
                note=f"{statistics.median(per_hold):.1f} KiB per held pull and its connection; {layout}; "
                f"a fresh broker each repeat",
                extra={
                    "kib_per_hold": round(statistics.median(per_hold), 2),
                    "rss_before_mib": round(statistics.median(run["rss_before"] / MIB for run in runs), 1),
                    "rss_after_answers_mib": round(
                        statistics.median(run["rss_after"] / MIB for run in runs), 1
                    ),
                },
            ),
            Result(
                f"{count:,} held pulls: produce -> all answered",
                "ms",
                [run["answer_s"] * 1000 for run in runs],
                note=f"queues holding a message already; {plan.hold_topics} produce requests (one message "
                f"per queue) sent at once, until the last pull answer is read; "
                f"all {count:,} held in {statistics.median(r['hold_s'] for r in runs):.1f} s",
                extra={
                    "produce_acked_ms": round(statistics.median(run["acked_s"] * 1000 for run in runs), 1),
                    "hold_setup_s": round(statistics.median(run["hold_s"] for run in runs), 2),
                },
            ),
            Result(
                f"{count:,} held pulls, empty queues: produce -> all answered",
                "ms",
                [run["cold_answer_s"] * 1000 for run in runs],
                note="the same on queues never written: each first message creates its ConsumeQueue file",
                extra={"hold_setup_s": round(statistics.median(run["cold_hold_s"] for run in runs), 2)},
            ),
        ]


@contextlib.contextmanager
def _no_sampling(name: str, pid: int) -> Iterator[None]:
    yield


class HoldClient:
    """Raw asyncio connections to one broker: held pulls, produces, the held count."""

    def __init__(self, client: httpx.AsyncClient, port: int) -> None:
        self.client = client
        self.port = port
        self.writers: list[asyncio.StreamWriter] = []

    async def held(self) -> int:
        return int((await self.client.get("/v1/stats")).json()["held_pulls"])

    async def wait_held(self, expected: int, exact: bool = False) -> None:
        deadline = time.perf_counter() + 120
        while True:
            held = await self.held()
            if held == expected or (held > expected and not exact):
                return
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{held} pulls were held, waiting for {expected}")
            await asyncio.sleep(0.01)

    async def hold(self, requests: list[bytes]) -> list[asyncio.Task[tuple[int, bytes, float]]]:
        """Send each pull on its own connection; tasks reading their answers, once all are held."""
        answers: list[asyncio.Task[tuple[int, bytes, float]]] = []
        wave = 500  # well under the listen backlog, so no connection waits for a SYN retry
        for start in range(0, len(requests), wave):
            opened = await asyncio.gather(
                *(open_request(self.port, request) for request in requests[start : start + wave])
            )
            for reader, writer in opened:
                answers.append(asyncio.create_task(read_answer(reader)))
                self.writers.append(writer)
            await self.wait_held(len(answers))
        return answers

    async def produce(self, topics: list[str]) -> float:
        """One request per topic (a message for each queue), all written at once; when sent."""
        connections = [await asyncio.open_connection("127.0.0.1", self.port) for _ in topics]
        requests = [
            request_bytes(
                "POST",
                f"/v1/topics/{topic}/messages",
                orjson.dumps({"messages": [{"body": "wake", "queue_id": q} for q in range(QUEUES)]}),
                {"Content-Type": "application/json"},
            )
            for topic in topics
        ]
        started = time.perf_counter()
        for (_, writer), request in zip(connections, requests, strict=True):
            writer.write(request)
        acks = await asyncio.gather(*(read_answer(reader) for reader, _ in connections))
        for status, body, _ in acks:
            if status != 200:
                raise RuntimeError(f"produce answered {status}: {body[:200]!r}")
        for _, writer in connections:
            writer.close()
        return started

    def close_all(self) -> None:
        for writer in self.writers:
            writer.close()
        self.writers.clear()


async def hold_round(
    broker: BrokerProcess,
    count: int,
    topic_count: int,
    sample: Callable[[str, int], contextlib.AbstractContextManager[None]] = _no_sampling,
) -> dict[str, float]:
    """Hold ``count`` pulls spread over ``topic_count`` topics x 4 queues, then wake them all with
    one message per queue; twice: first on empty queues (the message creates each queue's
    ConsumeQueue file), then on the same queues again (warm). ``sample(phase, pid)`` wraps the
    phases (profiles)."""
    assert broker.process is not None
    pid = broker.process.pid
    topics = [f"hold-{number}" for number in range(topic_count)]

    def pull_request(topic: str, queue_id: int, offset: int) -> bytes:
        path = f"/v1/topics/{topic}/queues/{queue_id}/messages?offset={offset}&max_wait_ms=30000"
        return request_bytes("GET", path)

    async def wake(offset: int, phase: str) -> dict[str, float]:
        """Hold every pull at ``offset``, then produce; RSS while held, and the times to hold them
        all, to the produce acks, and to the last pull answer."""
        requests = [
            pull_request(topics[i % topic_count], (i // topic_count) % QUEUES, offset) for i in range(count)
        ]
        started = time.perf_counter()
        with sample(f"holds-setup-{phase}", pid):
            answers = await holds.hold(requests)
        hold_s = time.perf_counter() - started
        rss_held = rss_bytes(pid)
        with sample(f"holds-answer-{phase}", pid):
            produced = await holds.produce(topics)
            acked = time.perf_counter()
            results = await asyncio.gather(*answers)
        finished = max(at for _, _, at in results)
        bad = [(status, body[:120]) for status, body, _ in results if status != 200 or b'"FOUND"' not in body]
        if bad:
            raise RuntimeError(f"{len(bad)} held pulls were answered without their message: {bad[:3]}")
        await holds.wait_held(0, exact=True)
        holds.close_all()
        return {
            "rss_held": rss_held,
            "hold_s": hold_s,
            "acked_s": acked - produced,
            "answer_s": finished - produced,
        }

    async with httpx.AsyncClient(base_url=broker.url, timeout=60) as client:
        holds = HoldClient(client, broker.port)
        for topic in [*topics, "hold-warmup"]:
            (await client.post("/v1/topics", json={"name": topic, "queues": QUEUES})).raise_for_status()
        # Warm-up: the first held pulls import and allocate what later ones reuse.
        warming = await holds.hold([pull_request("hold-warmup", i % QUEUES, 0) for i in range(200)])
        await holds.produce(["hold-warmup"])
        await asyncio.gather(*warming)
        holds.close_all()
        await holds.wait_held(0, exact=True)

        rss_before = rss_bytes(pid)
        cold = await wake(0, "cold")  # the first message of each queue creates its ConsumeQueue
        rss_after = rss_bytes(pid)
        warm = await wake(1, "warm")
    return {
        "rss_before": rss_before,
        "extra_rss": cold["rss_held"] - rss_before,
        "rss_after": rss_after,
        "cold_hold_s": cold["hold_s"],
        "cold_answer_s": cold["answer_s"],
        "hold_s": warm["hold_s"],
        "acked_s": warm["acked_s"],
        "answer_s": warm["answer_s"],
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.http", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="shorter runs, one repeat")
    parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "http.json", help="where to write results")
    parser.add_argument("--profile", type=Path, default=None, help="sample the server with py-spy into DIR")
    parser.add_argument(
        "--dir", type=Path, default=RESULTS_DIR, help="parent of the scratch directory (a real disk)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = QUICK if args.quick else FULL
    sections = select_sections(args.only, SECTIONS)
    if sections is None:
        return 2
    if wrk_path() is None and set(sections) & {"produce", "batch", "pull"}:
        print("wrk is not installed: apt-get install -y wrk", file=sys.stderr)
        return 1
    if args.profile is not None and http_profile.py_spy() is None:
        print("py-spy is not installed: .venv/bin/pip install py-spy", file=sys.stderr)
        return 1
    fd_limit = raise_fd_limit()  # the broker inherits it
    if "holds" in sections and fd_limit < plan.holds * 2 + 1000:
        print(f"the open-file limit is {fd_limit}, too low for {plan.holds} held pulls", file=sys.stderr)
        return 1
    args.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="http-bench-", dir=args.dir))
    results: list[Result] = []
    load: dict[str, float] = {}
    started = time.perf_counter()
    try:
        bench = Bench(plan, root, args.profile)
        try:
            for name in sections:
                section_started = time.perf_counter()
                load[name] = os.getloadavg()[0]  # the machine is shared: say how busy it was
                section = getattr(bench, name)()
                took = time.perf_counter() - section_started
                print_table(section, f"{name} ({took:.0f} s, 1-min load average {load[name]:.1f} at start)")
                results += section
        finally:
            with contextlib.suppress(Exception):
                bench.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.perf_counter() - started
    print(f"\ntotal {elapsed:.0f} s")
    command = " ".join([".venv/bin/python -m bench.http", *(argv if argv is not None else sys.argv[1:])])
    settings = {
        "plan": asdict(plan),
        "sections": sections,
        "broker": broker_settings(),
        "wrk": {"threads": plan.threads, "connections": plan.connections},
        "open_file_limit": fd_limit,
        "load_average_at_section_start": load,
        "elapsed_s": round(elapsed, 1),
    }
    write_json(args.json, "http", command, results, settings)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
