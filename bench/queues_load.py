"""The load and the measurements of bench.queues: topics created in lists, one message a queue a
round, every queue pulled, and the broker's descriptors and mappings read from /proc."""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

from bench.http_load import read_answer, request_bytes
from bench.topics import BULK, QUEUES

ROUNDS = 3
CONCURRENCY = 8


def topic_name(index: int) -> str:
    return f"q{index:06d}"


@dataclass(slots=True)
class Calls:
    """What a run of requests saw: each answer's latency, and the answers of 500 and above."""

    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    server_errors: list[str] = field(default_factory=list)

    @property
    def p99_ms(self) -> float:
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[98] * 1000

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies) * 1000


async def run_calls(
    port: int, requests: list[bytes], check: Callable[[int, int, bytes], str | None]
) -> Calls:
    """Send ``requests`` over CONCURRENCY keep-alive connections (a raw HTTP/1.1 client, so the
    client's cost stays small next to the broker's). ``check(index, status, body)`` returns what is
    wrong with an answer below 500, or None; an answer of 500 and above is recorded, not raised."""
    calls = Calls()
    cursor = iter(range(len(requests)))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for index in cursor:
                sent = time.perf_counter()
                writer.write(requests[index])
                status, body, finished = await read_answer(reader)
                calls.latencies.append(finished - sent)
                if status >= 500:
                    calls.server_errors.append(f"{status} {body[:200]!r}")
                    continue
                wrong = check(index, status, body)
                if wrong is not None:
                    raise RuntimeError(f"request {index}: {wrong}")
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    calls.seconds = time.perf_counter() - start
    return calls


def create_topics(url: str, count: int) -> float:
    """Create ``count`` topics of QUEUES queues in lists of BULK; the wall time."""
    start = time.perf_counter()
    with httpx.Client(base_url=url, timeout=300.0) as client:
        for first in range(0, count, BULK):
            chunk = [
                {"name": topic_name(i), "queues": QUEUES} for i in range(first, min(count, first + BULK))
            ]
            answer = client.post("/v1/topics", json={"topics": chunk})
            if answer.status_code != 200 or answer.json()["created"] != len(chunk):
                raise RuntimeError(f"bulk create: {answer.status_code} {answer.text[:500]}")
    return time.perf_counter() - start


def produce_requests(count: int, round_number: int) -> list[bytes]:
    requests = []
    for topic in range(count):
        messages = [{"body": f"{topic}/{q}/{round_number}", "queue_id": q} for q in range(QUEUES)]
        body = orjson.dumps({"messages": messages})
        headers = {"Content-Type": "application/json"}
        requests.append(request_bytes("POST", f"/v1/topics/{topic_name(topic)}/messages", body, headers))
    return requests


def produce_all(port: int, count: int) -> Calls:
    """ROUNDS rounds of one message per queue; every message must be stored (status SEND_OK)."""

    def check(index: int, status: int, body: bytes) -> str | None:
        if status != 200:
            return f"produce answered {status} {body[:200]!r}"
        results = orjson.loads(body)["results"]
        if len(results) != QUEUES or any(r.get("status") != "SEND_OK" for r in results):
            return f"produce answered {body[:300]!r}"
        return None

    total = Calls()
    for round_number in range(ROUNDS):
        calls = asyncio.run(run_calls(port, produce_requests(count, round_number), check))
        total.seconds += calls.seconds
        total.latencies += calls.latencies
        total.server_errors += calls.server_errors
    return total


def pull_all(port: int, queues: list[tuple[int, int]]) -> Calls:
    """Pull each (topic, queue) from offset 0; its ROUNDS messages must come back in order."""
    requests = [
        request_bytes("GET", f"/v1/topics/{topic_name(t)}/queues/{q}/messages?offset=0") for t, q in queues
    ]

    def check(index: int, status: int, body: bytes) -> str | None:
        topic, queue_id = queues[index]
        if status != 200:
            return f"pull {topic}/{queue_id} answered {status} {body[:200]!r}"
        bodies = [m["body"] for m in orjson.loads(body)["messages"]]
        wanted = [f"{topic}/{queue_id}/{r}" for r in range(ROUNDS)]
        return None if bodies == wanted else f"pull {topic}/{queue_id} returned {bodies}, not {wanted}"

    return asyncio.run(run_calls(port, requests, check))


def open_files(pid: int, store: Path) -> tuple[int, int]:
    """Descriptors of ``pid``: all, and those of files under ``store``."""
    total = under = 0
    prefix = str(store.resolve()) + os.sep
    for entry in os.scandir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(entry.path)
        except FileNotFoundError:  # closed while listed
            continue
        total += 1
        under += target.startswith(prefix)
    return total, under


def mappings(pid: int, store: Path) -> tuple[int, int]:
    """Lines of /proc/<pid>/maps: all, and those mapping files under ``store``."""
    prefix = str(store.resolve()) + os.sep
    lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return len(lines), sum(1 for line in lines if prefix in line)
