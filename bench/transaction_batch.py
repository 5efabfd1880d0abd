"""Batch transactions against plain produce: what an all-or-nothing write (a Spark job's
exactly-once write) costs the broker, in process and over HTTP.

Run from the repository root::

    .venv/bin/python -m bench.transaction_batch [--messages 200000] [--repeats 3] [--quick] [--json out.json]

Every message is 128 B with a unique id of its own (as the Spark writer sends them), in binary
batches of ``--batch`` (1,000) messages, to a topic of 4 queues on a broker with the store's
defaults (ASYNC flush). Three ways to store ``--messages`` messages:

* ``produce``: one plain produce per batch (the baseline: at-least-once);
* ``batch transaction``: one batch transaction per batch (``begin_batch``), committed 10 batches
  per ``commit`` request (their records in one append): the exactly-once write;
* ``per-message transactions``: a begin of every message of the batch (one transaction each), then
  commits of 1,000 ids per request: the path a batch transaction replaces.

``inprocess`` calls the broker core of an app started in this process (no HTTP); ``http`` posts
the same requests to a broker process (``python -m app``) over one connection, one request at a
time. Each figure is the median of ``--repeats`` interleaved runs, in messages made visible per
second; the ratios are against ``produce`` in the same mode.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
from wharf_client.codec import BATCH_MEDIA_TYPE, IncomingMessage, encode_batch

from bench import harness
from bench.harness import Result, Target
from bench.http_setup import broker_settings
from tests.api.server import BrokerProcess

TOPIC = "batch-transaction-bench"
GROUP = "bench-writers"
QUEUES = 4
BODY = b"x" * 128
COMMIT_EVERY = 10  # batch transactions per commit request
TARGET = Target(0.7, on_ratio=True)


def batches(count: int, size: int, run: int) -> list[bytes]:
    """``count`` messages in binary batches of ``size``, each message with a unique id of its own."""
    found = []
    for first in range(0, count, size):
        found.append(
            encode_batch(
                IncomingMessage(body=BODY, unique_id=f"r{run}-{first + i}")
                for i in range(min(size, count - first))
            )
        )
    return found


class InProcess:
    """The broker core of an app started in this process."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker

    async def produce(self, data: list[bytes]) -> None:
        for batch in data:
            await self.broker.produce_batch(TOPIC, batch)

    async def batch_transaction(self, data: list[bytes]) -> None:
        transactions = self.broker.transactions
        ids: list[str] = []
        for batch in data:
            begun = await transactions.begin_batch(TOPIC, batch, GROUP)
            ids.append(begun["transaction_id"])
            if len(ids) == COMMIT_EVERY:
                await transactions.commit_many(ids)
                ids = []
        if ids:
            await transactions.commit_many(ids)

    async def per_message(self, data: list[bytes]) -> None:
        from app.codec import parse_batch

        transactions = self.broker.transactions
        ids: list[str] = []
        for batch in data:
            begun = await transactions.begin(TOPIC, parse_batch(batch), "begin", GROUP)
            ids.extend(one["transaction_id"] for one in begun)
            while len(ids) >= 1000:
                await transactions.commit_many(ids[:1000])
                ids = ids[1000:]
        if ids:
            await transactions.commit_many(ids)


class OverHttp:
    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.headers = {"content-type": BATCH_MEDIA_TYPE}

    def produce(self, data: list[bytes]) -> None:
        for batch in data:
            answer = self.client.post(f"/v1/topics/{TOPIC}/messages", content=batch, headers=self.headers)
            assert answer.status_code == 200, answer.text

    def _commit(self, ids: list[str]) -> None:
        answer = self.client.post("/v1/transactions/commit", json={"transaction_ids": ids})
        assert answer.status_code == 200, answer.text
        assert all(result.get("state") == "COMMITTED" for result in answer.json()["results"])

    def batch_transaction(self, data: list[bytes]) -> None:
        ids: list[str] = []
        for batch in data:
            answer = self.client.post(
                f"/v1/topics/{TOPIC}/transactions",
                params={"producer_group": GROUP},
                content=batch,
                headers=self.headers,
            )
            assert answer.status_code == 200, answer.text
            ids.append(orjson.loads(answer.content)["transaction_id"])
            if len(ids) == COMMIT_EVERY:
                self._commit(ids)
                ids = []
        if ids:
            self._commit(ids)

    def per_message(self, data: list[bytes]) -> None:
        ids: list[str] = []
        for batch in data:
            answer = self.client.post(
                f"/v1/topics/{TOPIC}/messages",
                params={"transaction": "begin", "producer_group": GROUP},
                content=batch,
                headers=self.headers,
            )
            assert answer.status_code == 200, answer.text
            ids.extend(one["transaction_id"] for one in orjson.loads(answer.content)["results"])
            while len(ids) >= 1000:
                self._commit(ids[:1000])
                ids = ids[1000:]
        if ids:
            self._commit(ids)


SECTIONS = ("produce", "batch_transaction", "per_message")
LABELS = {
    "produce": "produce, batches of {batch}",
    "batch_transaction": "batch transaction per batch of {batch}, commits of 10",
    "per_message": "per-message transactions, commits of 1,000",
}


def results_of(mode: str, samples: dict[str, list[float]], batch: int) -> list[Result]:
    results = {
        name: Result(f"{mode}: {LABELS[name].format(batch=f'{batch:,}')}", "messages/s", rates)
        for name, rates in samples.items()
    }
    produce = results["produce"]
    produce.alias = f"{mode} produce"
    for name in ("batch_transaction", "per_message"):
        if name in results:
            results[name].against(produce)
    results["batch_transaction"].target = TARGET
    return list(results.values())


async def run_inprocess(root: Path, args: argparse.Namespace, sections: list[str]) -> list[Result]:
    from app.api.app import create_app
    from app.settings import Settings

    settings = Settings(store_dir=root / "inprocess", **broker_settings())  # type: ignore[arg-type]
    app = create_app(settings)
    samples: dict[str, list[float]] = {name: [] for name in sections}
    async with app.router.lifespan_context(app):
        broker = app.state.broker
        await broker.topic_for_write(TOPIC)  # created as a produce creates it
        runner = InProcess(broker)
        calls: dict[str, Callable[[list[bytes]], Awaitable[None]]] = {
            "produce": runner.produce,
            "batch_transaction": runner.batch_transaction,
            "per_message": runner.per_message,
        }
        for repeat in range(args.repeats):
            for index, name in enumerate(sections):
                data = batches(args.messages, args.batch, repeat * 10 + index)
                started = time.perf_counter()
                await calls[name](data)
                samples[name].append(args.messages / (time.perf_counter() - started))
    return results_of("in process", samples, args.batch)


def run_http(root: Path, args: argparse.Namespace, sections: list[str]) -> list[Result]:
    broker = BrokerProcess(root / "http", **broker_settings()).start()
    samples: dict[str, list[float]] = {name: [] for name in sections}
    try:
        with httpx.Client(base_url=broker.url, timeout=120) as client:
            client.post("/v1/topics", json={"name": TOPIC, "queues": QUEUES}).raise_for_status()
            runner = OverHttp(client)
            calls: dict[str, Callable[[list[bytes]], None]] = {
                "produce": runner.produce,
                "batch_transaction": runner.batch_transaction,
                "per_message": runner.per_message,
            }
            for repeat in range(args.repeats):
                for index, name in enumerate(sections):
                    data = batches(args.messages, args.batch, repeat * 10 + index)
                    started = time.perf_counter()
                    calls[name](data)
                    samples[name].append(args.messages / (time.perf_counter() - started))
    finally:
        broker.stop()
    return results_of("HTTP", samples, args.batch)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="20,000 messages, one repeat")
    parser.add_argument("--modes", default="inprocess,http", help="inprocess, http or both")
    parser.add_argument("--no-per-message", action="store_true", help="leave the per-message path out")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.repeats = 20_000, 1
    sections = [name for name in SECTIONS if not (args.no_per_message and name == "per_message")]
    started = time.perf_counter()
    load = os.getloadavg()[0]
    results: list[Result] = []
    with harness.scratch_dir("transaction-batch-bench-", harness.scratch_parent()) as root:
        modes = args.modes.split(",")
        if "inprocess" in modes:
            results += asyncio.run(run_inprocess(root, args, sections))
        if "http" in modes:
            results += run_http(root, args, sections)
    harness.print_table(
        results,
        f"batch transactions against produce, {args.messages:,} messages (1-min load {load:.1f} at start)",
    )
    if args.json is not None:
        harness.report(
            "transaction_batch",
            args.json,
            argv,
            results,
            {"args": vars(args) | {"json": str(args.json)}},
            started,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
