"""Pop benchmark: pop + ack against plain pull, on the same stored messages.

Run from the repository root::

    .venv/bin/python -m bench.pop [--quick] [--json out.json] [--only pull,pop] [--flush ASYNC|SYNC]

A real broker (``python -m app``, ASYNC flush by default, 1 GiB CommitLog segments) runs in its
own process; one topic of 4 queues is filled with small messages (128 B) once. Then, for each
repeat, a fresh consumer group drains the whole topic with ``consumers`` concurrent HTTP/1.1
connections (asyncio and httpx in this process, which shares the machine's cores with the broker):

* ``pull`` (the baseline): each connection owns queues and pulls ``batch`` messages per GET,
  committing the offset it reached with the next pull (``commit_offset``), as a pull consumer does.
* ``pop``: each connection pops ``batch`` messages from any queue (``POST .../pop``), then acks
  them all in one ``POST .../ack``, until a pop comes back empty. Every pop and ack is in the
  pop journal before it is answered (written; forced to disk too with ``--flush SYNC``).
* ``pop1``: as ``pop`` with one message per pop and per ack, the way a simple consumer that
  handles one message at a time uses it.

Figures are messages consumed per second, the median of the repeats; ``pop`` and ``pop1`` are
also given as a ratio to ``pull``.
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

SECTIONS = ("pull", "pop", "pop1")
QUEUES = 4
BODY = 128
TOPIC = "pop-bench"
# Pop + ack does three times the work of a pull per message (a pop, an ack, two journal records),
# but a pull too goes once through HTTP and JSON per message: at least a third of pull's rate.
POP_TARGET = Target(0.33, on_ratio=True)


@dataclass(frozen=True, slots=True)
class Plan:
    repeats: int
    messages: int  # stored once, drained by each repeat
    pop1_messages: int  # drained one at a time: fewer
    consumers: int
    batch: int


FULL = Plan(repeats=3, messages=100_000, pop1_messages=3_000, consumers=8, batch=32)
QUICK = replace(FULL, repeats=1, messages=20_000, pop1_messages=1_000)


class Drain(NamedTuple):
    messages_per_s: float
    server_cpu_us_per_message: float


class Run:
    """One broker with the topic filled; each drain uses a group of its own."""

    def __init__(self, plan: Plan, broker: BrokerProcess) -> None:
        assert broker.process is not None
        self.plan = plan
        self.url = broker.url
        self.pid = broker.process.pid
        self.groups = 0

    def group(self, kind: str) -> str:
        self.groups += 1
        return f"{kind}-{self.groups}"

    async def drain(self, worker: Callable[[httpx.AsyncClient, int], Awaitable[int]]) -> Drain:
        """Run ``consumers`` workers until each is done: messages per second over all of them, and
        the server's CPU time per message (steadier than the rate on a shared machine)."""
        limits = httpx.Limits(max_connections=self.plan.consumers)
        async with httpx.AsyncClient(base_url=self.url, timeout=60, limits=limits) as client:
            cpu = cpu_seconds(self.pid)
            started = time.perf_counter()
            counts = await asyncio.gather(*(worker(client, index) for index in range(self.plan.consumers)))
            elapsed = time.perf_counter() - started
            cpu = cpu_seconds(self.pid) - cpu
        return Drain(sum(counts) / elapsed, cpu / sum(counts) * 1e6)

    async def pull(self) -> Drain:
        group = self.group("pull")
        batch = self.plan.batch

        async def worker(client: httpx.AsyncClient, index: int) -> int:
            count = 0
            for queue_id in range(index, QUEUES, self.plan.consumers):
                path = f"/v1/topics/{TOPIC}/queues/{queue_id}/messages"
                offset = 0
                while True:
                    params = {
                        "offset": offset,
                        "max_messages": batch,
                        "group": group,
                        "commit_offset": offset,
                    }
                    answer = orjson.loads((await client.get(path, params=params)).content)
                    if not answer["messages"]:
                        break
                    count += len(answer["messages"])
                    offset = answer["next_offset"]
            return count

        return await self.drain(worker)

    async def pop(self, batch: int, messages: int) -> Drain:
        group = self.group(f"pop{batch}")
        base = f"/v1/groups/{group}/topics/{TOPIC}"
        body = {"max_messages": batch, "invisible_ms": 60_000, "consume_from": "first"}
        left = [messages]

        async def worker(client: httpx.AsyncClient, index: int) -> int:
            count = 0
            while left[0] > 0:
                answer = await client.post(f"{base}/pop", json=body)
                popped = orjson.loads(answer.content)["messages"]
                if not popped:
                    break
                handles = [message["receipt_handle"] for message in popped]
                acked = orjson.loads(
                    (await client.post(f"{base}/ack", json={"receipt_handles": handles})).content
                )
                assert all(result["status"] == "ok" for result in acked["results"]), acked
                count += len(popped)
                left[0] -= len(popped)
            return count

        return await self.drain(worker)


def fill(client: httpx.Client, count: int) -> None:
    client.post("/v1/topics", json={"name": TOPIC, "queues": QUEUES}).raise_for_status()
    body = text_body(BODY, 7)
    for start in range(0, count, 1000):
        messages = [{"body": body} for _ in range(min(1000, count - start))]
        client.post(f"/v1/topics/{TOPIC}/messages", json={"messages": messages}).raise_for_status()


def measure(plan: Plan, run: Run, sections: list[str]) -> list[Result]:
    drains: dict[str, Callable[[], Awaitable[Drain]]] = {
        "pull": run.pull,
        "pop": lambda: run.pop(plan.batch, plan.messages),
        "pop1": lambda: run.pop(1, plan.pop1_messages),
    }
    samples: dict[str, list[Drain]] = {name: [] for name in sections}
    for _ in range(plan.repeats):
        for name in sections:  # interleaved, against the machine's noise
            samples[name].append(asyncio.run(drains[name]()))
    results = {}
    for name, drained in samples.items():
        batch = 1 if name == "pop1" else plan.batch
        cpu = statistics.median(drain.server_cpu_us_per_message for drain in drained)
        results[name] = Result(
            f"{name} ({batch}/request)",
            "messages/s",
            [drain.messages_per_s for drain in drained],
            note=f"{cpu:,.0f} us server CPU/message; {plan.consumers} connections, {BODY} B bodies",
            extra={"server_cpu_us_per_message": cpu},
        )
    if "pull" in results:
        results["pull"].alias = "pull"
        for name in ("pop", "pop1"):
            if name in results:
                results[name].against(results["pull"])
        if "pop" in results:
            results["pop"].target = POP_TARGET
    return list(results.values())


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments("pop", __doc__ or "", "fewer messages, one repeat", SECTIONS, raw=True)
    parser.add_argument("--flush", choices=("ASYNC", "SYNC"), default="ASYNC", help="the broker's flush mode")
    args, plan, sections = harness.parse(parser, argv, FULL, QUICK, SECTIONS)
    settings = {"flush_mode": args.flush, "commitlog_file_size": GIB, "consumequeue_file_entries": 300_000}
    started = time.perf_counter()
    load = os.getloadavg()[0]
    with harness.scratch_dir("pop-bench-", harness.scratch_parent()) as root:
        broker = BrokerProcess(root / "store", **settings).start()
        try:
            with httpx.Client(base_url=broker.url, timeout=60) as client:
                fill(client, plan.messages)
            results = measure(plan, Run(plan, broker), sections)
        finally:
            broker.stop()
    harness.print_table(results, f"pop + ack against pull (1-min load average {load:.1f} at start)")
    harness.report("pop", args.json, argv, results, {"plan": asdict(plan), "broker": settings}, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
