"""Topic creation through the API: time per topic and the broker's RSS at 1 to 10,000 topics.

A real broker process (``python -m app``, default settings; SQLite route registry, or PostgreSQL
with ``--postgres URL``) per size and mode; topics of 8 queues are created through ``POST /v1/topics``:

* ``single``: one request per topic, 16 at a time (keep-alive connections);
* ``bulk``: lists of up to 1,000 topics per request, one at a time.

Reported per size: the wall time per topic over the whole creation, the time per topic of the last
tenth created (flat when creating the 10,000th costs what the first did), and the broker's resident
set size after the creation. The whole 10,000 must take 30 s or less.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx

from bench import harness
from bench.harness import Result, Target, print_table, scratch_parent
from bench.http_load import read_answer, rss_bytes
from tests.api.server import BrokerProcess

SECTIONS = ("single", "bulk")
SIZES = (1, 100, 1_000, 10_000)
QUICK_SIZES = (1, 100, 1_000)
CONCURRENCY = 16
BULK = 1_000
QUEUES = 8
TARGET_10K_S = 30.0


def topic_names(count: int) -> list[str]:
    return [f"bench-topic-{index:06d}" for index in range(count)]


def create_request(port: int, name: str) -> bytes:
    body = f'{{"name": "{name}", "queues": {QUEUES}}}'.encode()
    head = (
        f"POST /v1/topics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def create_single(port: int, names: list[str]) -> list[float]:
    """One request per topic over CONCURRENCY keep-alive connections (a raw HTTP/1.1 client, so the
    client's own cost stays small next to the broker's); the time each topic's create finished at."""
    done: list[float] = [0.0] * len(names)
    start = time.perf_counter()
    cursor = iter(range(len(names)))

    async def worker() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for index in cursor:
                writer.write(create_request(port, names[index]))
                status, body, finished = await read_answer(reader)
                if status != 201:
                    raise RuntimeError(f"create {names[index]}: {status} {body[:300]!r}")
                done[index] = finished - start
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return done


def create_bulk(url: str, names: list[str]) -> list[float]:
    """Lists of BULK topics, one request at a time; each topic finishes with its request."""
    done: list[float] = []
    start = time.perf_counter()
    with httpx.Client(base_url=url, timeout=120.0) as client:
        for first in range(0, len(names), BULK):
            chunk = names[first : first + BULK]
            answer = client.post(
                "/v1/topics", json={"topics": [{"name": n, "queues": QUEUES} for n in chunk]}
            )
            body = answer.json()
            if answer.status_code != 200 or body["created"] != len(chunk):
                raise RuntimeError(f"bulk create: {answer.status_code} {answer.text[:500]}")
            done += [time.perf_counter() - start] * len(chunk)
    return done


def check_listed(url: str, names: list[str]) -> None:
    """Every created topic is listed exactly once across the pages of GET /v1/topics."""
    seen: list[str] = []
    cursor = None
    with httpx.Client(base_url=url, timeout=60.0) as client:
        while True:
            params = {"limit": "1000", **({"cursor": cursor} if cursor else {})}
            page = client.get("/v1/topics", params=params).json()
            seen += [topic["name"] for topic in page["topics"]]
            cursor = page.get("next_cursor")
            if cursor is None:
                break
    if seen != sorted(names):
        raise RuntimeError(f"listed {len(seen)} topics, created {len(names)}")


@contextlib.contextmanager
def registry_url(postgres: str | None) -> Iterator[dict[str, str]]:
    """Broker settings for the route registry: SQLite in the store (none), or a throw-away
    PostgreSQL database on the server ``postgres`` names, dropped afterwards."""
    if postgres is None:
        yield {}
        return
    import psycopg

    name = f"wharf_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = postgres.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield {"database_url": f"{base}/{name}"}
    finally:
        with psycopg.connect(postgres, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run_size(mode: str, count: int, root: Path, postgres: str | None) -> list[Result]:
    with registry_url(postgres) as registry:
        return _run_size(mode, count, root, registry, "postgresql" if postgres else "sqlite")


def _run_size(mode: str, count: int, root: Path, registry: dict[str, str], database: str) -> list[Result]:
    broker = BrokerProcess(root / f"{mode}-{count}", log_level="warning", **registry).start()
    try:
        assert broker.process is not None
        pid = broker.process.pid
        rss_before = rss_bytes(pid)
        names = topic_names(count)
        done = (
            asyncio.run(create_single(broker.port, names))
            if mode == "single"
            else create_bulk(broker.url, names)
        )
        total = max(done)
        rss_after = rss_bytes(pid)
        check_listed(broker.url, names)
    finally:
        broker.stop()
    tenth = max(1, count // 10)
    ordered = sorted(done)
    # Time per topic of the last tenth: from the moment the one before it finished.
    last_tenth = (ordered[-1] - (ordered[-tenth - 1] if count > tenth else 0.0)) / tenth
    label = f"{mode}, {database}, {count:,} topic{'s' if count > 1 else ''}"
    results = [
        Result(
            f"{label}: create time per topic",
            "ms",
            [total / count * 1000],
            note=f"{total:.2f} s in all; last tenth {last_tenth * 1000:.2f} ms per topic",
            extra={"total_s": total, "last_tenth_ms_per_topic": last_tenth * 1000},
        ),
        Result(
            f"{label}: broker RSS after",
            "MiB",
            [rss_after / 2**20],
            note=f"{rss_before / 2**20:.1f} MiB before creating",
            extra={"rss_before_mib": rss_before / 2**20},
        ),
    ]
    if count == 10_000:
        results.append(
            Result(f"{label}: all created", "s", [total], target=Target(TARGET_10K_S, at_least=False))
        )
    return results


def make_parser() -> argparse.ArgumentParser:
    parser = harness.arguments("topics", __doc__.splitlines()[0], "up to 1,000 topics", SECTIONS)
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="run the route registry on a throw-away database of this PostgreSQL server "
        "(e.g. postgresql://postgres@127.0.0.1:5432/postgres) instead of SQLite",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args, sizes, sections = harness.parse(make_parser(), argv, SIZES, QUICK_SIZES, SECTIONS)
    results: list[Result] = []
    with harness.scratch_dir("wharf-bench-topics-", scratch_parent()) as root:
        for mode in sections:
            for count in sizes:
                results += run_size(mode, count, root, args.postgres)
                print(f"  {mode} {count}: {results[-2].note}", file=sys.stderr, flush=True)
    print_table(results, "Topic creation through the API (topics of 8 queues)")
    settings: dict[str, object] = {
        "sizes": sizes,
        "concurrency": CONCURRENCY,
        "bulk": BULK,
        "queues": QUEUES,
        "registry": "sqlite",
    }
    harness.report("topics", args.json, argv, results, settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
