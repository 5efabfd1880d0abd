"""Ordered consumption benchmark: members of an ordered group against members of a concurrent
group, draining the same stored messages with group pull.

Run from the repository root::

    .venv/bin/python -m bench.ordered [--quick] [--json out.json] [--only concurrent,orderly]

A real broker (``python -m app``, ASYNC flush, 1 GiB CommitLog segments) runs in its own process;
one topic of 8 queues is filled once with small messages (128 B) under 256 sharding keys. Then,
for each repeat, a fresh group of ``consumers`` members (asyncio and httpx in this process, which
shares the machine's cores with the broker, one HTTP/1.1 connection each) joins - every member
heartbeats until all agree on the generation - and drains the topic: each member pulls ``batch``
messages across its queues (``GET /v1/groups/{group}/messages``) and commits what it read with its
generation, until a pull finds nothing.

* ``concurrent`` (the baseline): ``consume_mode`` ``concurrently``.
* ``orderly``: ``consume_mode`` ``orderly``; each member locks its queues before the drain
  (``POST /v1/groups/{group}/locks``), and the pulls hand out only locked queues, each from the
  committed offset (one batch per queue until committed), with commits fenced by the locks.

Figures are messages consumed per second, the median of the repeats, and ``orderly`` as a ratio to
``concurrent``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import httpx
import orjson

from bench import harness, pop
from bench.harness import Result
from bench.http_setup import GIB, text_body
from bench.pop import Drain
from tests.api.server import BrokerProcess

SECTIONS = ("concurrent", "orderly")
QUEUES = 8
KEYS = 256
BODY = 128
TOPIC = "ordered-bench"


@dataclass(frozen=True, slots=True)
class Plan:
    repeats: int
    messages: int  # stored once, drained by each repeat
    consumers: int  # the group's members
    batch: int


FULL = Plan(repeats=3, messages=100_000, consumers=4, batch=32)
QUICK = replace(FULL, repeats=1, messages=20_000)


class Run(pop.Run):
    """One broker with the topic filled; each drain uses a group of its own, whose members are the
    drain's connections."""

    async def members(self, mode: str) -> Drain:
        group = self.group(mode)
        members = [f"member-{index}" for index in range(self.plan.consumers)]
        async with httpx.AsyncClient(base_url=self.url, timeout=60) as client:
            generation = await join(client, group, members, mode)
        counts = []

        async def worker(client: httpx.AsyncClient, index: int) -> int:
            count = await member(client, group, members[index], generation, self.plan.batch)
            counts.append(count)
            return count

        drained = await self.drain(worker)
        assert sum(counts) == self.plan.messages, (sum(counts), self.plan.messages)
        return drained


async def member(client: httpx.AsyncClient, group: str, client_id: str, generation: int, batch: int) -> int:
    """Pull and commit until a pull answers nothing; the messages consumed."""
    count = 0
    params = {"client_id": client_id, "max_messages": batch}
    while True:
        answer = orjson.loads((await client.get(f"/v1/groups/{group}/messages", params=params)).content)
        if not answer["messages"]:
            return count
        count += len(answer["messages"])
        offsets = [
            {"topic": item["topic"], "queue_id": item["queue_id"], "offset": item["next_offset"]}
            for item in answer["offsets"]
        ]
        body = {"client_id": client_id, "generation": generation, "offsets": offsets}
        (await client.put(f"/v1/groups/{group}/offsets", json=body)).raise_for_status()


async def join(client: httpx.AsyncClient, group: str, members: list[str], mode: str) -> int:
    """Every member joins, then heartbeats again until all see one generation; ordered members
    lock their queues. The generation."""
    answers: dict[str, Any] = {}
    for _ in range(3):
        for member in members:
            body = {
                "client_id": member,
                "subscriptions": {TOPIC: "*"},
                "consume_from": "first",
                "consume_mode": "orderly" if mode == "orderly" else "concurrently",
            }
            answer = await client.post(f"/v1/groups/{group}/heartbeat", json=body)
            answer.raise_for_status()
            answers[member] = answer.json()
        if len({answer["generation"] for answer in answers.values()}) == 1:
            break
    if mode == "orderly":
        for member, answer in answers.items():
            queues = [
                {"topic": item["topic"], "queue_id": item["queue_id"]}
                for item in answer["assignments"]
                if item["topic"] == TOPIC
            ]
            locked = await client.post(
                f"/v1/groups/{group}/locks", json={"client_id": member, "queues": queues}
            )
            assert len(locked.json()["queues"]) == len(queues), locked.text
    return int(next(iter(answers.values()))["generation"])


def fill(client: httpx.Client, count: int) -> None:
    client.post("/v1/topics", json={"name": TOPIC, "queues": QUEUES}).raise_for_status()
    body = text_body(BODY, 7)
    for start in range(0, count, 1000):
        messages = [
            {"body": body, "sharding_key": f"key-{(start + n) % KEYS}"}
            for n in range(min(1000, count - start))
        ]
        client.post(f"/v1/topics/{TOPIC}/messages", json={"messages": messages}).raise_for_status()


def measure(plan: Plan, run: Run, sections: list[str]) -> list[Result]:
    samples: dict[str, list[Drain]] = {name: [] for name in sections}
    for _ in range(plan.repeats):
        for name in sections:  # interleaved, against the machine's noise
            samples[name].append(asyncio.run(run.members(name)))
    results = {}
    for name, drained in samples.items():
        cpu = statistics.median(drain.server_cpu_us_per_message for drain in drained)
        results[name] = Result(
            f"{name} ({plan.batch}/pull)",
            "messages/s",
            [drain.messages_per_s for drain in drained],
            note=f"{cpu:,.0f} us server CPU/message; {plan.consumers} members, {QUEUES} queues, {BODY} B bodies",
            extra={"server_cpu_us_per_message": cpu},
        )
    if "concurrent" in results:
        results["concurrent"].alias = "concurrent"
        if "orderly" in results:
            results["orderly"].against(results["concurrent"])
    return list(results.values())


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments("ordered", __doc__ or "", "fewer messages, one repeat", SECTIONS, raw=True)
    args, plan, sections = harness.parse(parser, argv, FULL, QUICK, SECTIONS)
    settings = {"flush_mode": "ASYNC", "commitlog_file_size": GIB, "consumequeue_file_entries": 300_000}
    started = time.perf_counter()
    load = os.getloadavg()[0]
    with harness.scratch_dir("ordered-bench-", harness.scratch_parent()) as root:
        broker = BrokerProcess(root / "store", **settings).start()
        try:
            with httpx.Client(base_url=broker.url, timeout=60) as client:
                fill(client, plan.messages)
            results = measure(plan, Run(plan, broker), sections)
        finally:
            broker.stop()
    harness.print_table(
        results, f"ordered against concurrent group pull (1-min load average {load:.1f} at start)"
    )
    harness.report("ordered", args.json, argv, results, {"plan": asdict(plan), "broker": settings}, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
