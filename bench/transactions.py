"""Transaction benchmark: begin + commit per second against plain produce, on the same broker.

Run from the repository root::

    .venv/bin/python -m bench.transactions [--quick] [--json out.json] [--only produce,transaction] [--flush ASYNC|SYNC]

A real broker (``python -m app``, ASYNC flush by default, 1 GiB CommitLog segments) runs in its
own process, with one topic of 4 queues. ``producers`` concurrent HTTP/1.1 connections (asyncio and
httpx in this process, which shares the machine's cores with the broker) each send messages of
128 B one at a time:

* ``produce`` (the baseline): one ``POST /v1/topics/{topic}/messages`` per message;
* ``transaction``: a begin (the same POST with ``transaction=begin&producer_group=``) then
  ``POST /v1/transactions/{id}/commit``, per message: a half message, then the real message and
  its op record.

Figures are messages made visible per second, the median of the repeats (interleaved), with the
server's CPU time per message; ``transaction`` is also given as a ratio to ``produce``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from typing import NamedTuple

import httpx
import orjson

from bench import harness
from bench.harness import Result, Target
from bench.http_load import cpu_seconds
from bench.http_setup import GIB, text_body
from tests.api.server import BrokerProcess

SECTIONS = ("produce", "transaction")
QUEUES = 4
BODY = 128
TOPIC = "transaction-bench"
GROUP = "bench-producers"
# Begin + commit is two requests where a produce is one, and stores three records instead of one:
# at least a third of produce's rate.
TRANSACTION_TARGET = Target(0.33, on_ratio=True)


@dataclass(frozen=True, slots=True)
class Plan:
    repeats: int
    messages: int  # per section and repeat
    producers: int


FULL = Plan(repeats=3, messages=6_000, producers=8)
QUICK = replace(FULL, repeats=1, messages=1_500)


class Burst(NamedTuple):
    messages_per_s: float
    server_cpu_us_per_message: float


class Run:
    def __init__(self, plan: Plan, broker: BrokerProcess) -> None:
        assert broker.process is not None
        self.plan = plan
        self.url = broker.url
        self.pid = broker.process.pid
        self.body = orjson.dumps({"body": text_body(BODY, 7)})

    async def burst(self, send_one: Callable[[httpx.AsyncClient], Awaitable[None]]) -> Burst:
        """``messages`` sends over ``producers`` connections: messages per second, and the
        server's CPU time per message (steadier than the rate on a shared machine)."""
        plan = self.plan
        limits = httpx.Limits(max_connections=plan.producers)
        left = [plan.messages]
        async with httpx.AsyncClient(base_url=self.url, timeout=60, limits=limits) as client:

            async def worker() -> None:
                while left[0] > 0:
                    left[0] -= 1
                    await send_one(client)

            cpu = cpu_seconds(self.pid)
            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(plan.producers)))
            elapsed = time.perf_counter() - started
            cpu = cpu_seconds(self.pid) - cpu
        return Burst(plan.messages / elapsed, cpu / plan.messages * 1e6)

    async def produce(self) -> Burst:
        headers = {"content-type": "application/json"}

        async def send_one(client: httpx.AsyncClient) -> None:
            answer = await client.post(f"/v1/topics/{TOPIC}/messages", content=self.body, headers=headers)
            assert answer.status_code == 200, answer.text

        return await self.burst(send_one)

    async def transaction(self) -> Burst:
        headers = {"content-type": "application/json"}
        params = {"transaction": "begin", "producer_group": GROUP}

        async def send_one(client: httpx.AsyncClient) -> None:
            begun = await client.post(
                f"/v1/topics/{TOPIC}/messages", content=self.body, headers=headers, params=params
            )
            transaction_id = orjson.loads(begun.content)["results"][0]["transaction_id"]
            committed = await client.post(f"/v1/transactions/{transaction_id}/commit")
            assert committed.status_code == 200, committed.text

        return await self.burst(send_one)


def measure(plan: Plan, run: Run, sections: list[str]) -> list[Result]:
    bursts: dict[str, Callable[[], Awaitable[Burst]]] = {
        "produce": run.produce,
        "transaction": run.transaction,
    }
    samples: dict[str, list[Burst]] = {name: [] for name in sections}
    for _ in range(plan.repeats):
        for name in sections:  # interleaved, against the machine's noise
            samples[name].append(asyncio.run(bursts[name]()))
    results = {}
    labels = {"produce": "produce, 1/request", "transaction": "begin + commit, 1/request"}
    for name, measured in samples.items():
        cpu = statistics.median(burst.server_cpu_us_per_message for burst in measured)
        results[name] = Result(
            labels[name],
            "messages/s",
            [burst.messages_per_s for burst in measured],
            note=f"{cpu:,.0f} us server CPU/message; {plan.producers} connections, {BODY} B bodies",
            extra={"server_cpu_us_per_message": cpu},
        )
    if "produce" in results:
        results["produce"].alias = "produce"
        if "transaction" in results:
            results["transaction"].against(results["produce"])
            results["transaction"].target = TRANSACTION_TARGET
    return list(results.values())


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments(
        "transactions", __doc__ or "", "fewer messages, one repeat", SECTIONS, raw=True
    )
    parser.add_argument("--flush", choices=("ASYNC", "SYNC"), default="ASYNC", help="the broker's flush mode")
    args, plan, sections = harness.parse(parser, argv, FULL, QUICK, SECTIONS)
    settings = {"flush_mode": args.flush, "commitlog_file_size": GIB, "consumequeue_file_entries": 300_000}
    started = time.perf_counter()
    load = os.getloadavg()[0]
    with harness.scratch_dir("transaction-bench-", harness.scratch_parent()) as root:
        broker = BrokerProcess(root / "store", **settings).start()
        try:
            with httpx.Client(base_url=broker.url, timeout=60) as client:
                client.post("/v1/topics", json={"name": TOPIC, "queues": QUEUES}).raise_for_status()
            results = measure(plan, Run(plan, broker), sections)
        finally:
            broker.stop()
    harness.print_table(results, f"begin + commit against produce (1-min load average {load:.1f} at start)")
    harness.report(
        "transactions", args.json, argv, results, {"plan": asdict(plan), "broker": settings}, started
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
