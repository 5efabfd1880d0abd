"""WebSocket benchmark: messages pushed to subscribers, and pipelined WebSocket produce.

Run from the repository root::

    .venv/bin/python -m bench.ws [--quick] [--json out.json] [--only push,fanout,produce]

A real broker process (``python -m app``, uvicorn, real sockets, ASYNC flush) and the clients share
this machine, so every figure includes the client's own work (JSON decoding, credit frames). Bodies
are 128 bytes.

* ``push``: one subscriber drains a stored backlog of one topic (4 queues) from ``from=first``,
  granting credit back in blocks of half its window; messages/s from its first to its last message.
  Baseline: the same backlog read by HTTP pulls (32 messages per request, queue by queue).
* ``fanout``: 100 concurrent subscribers, each reading the whole backlog of a smaller topic;
  messages/s summed over all of them.
* ``produce``: one WebSocket producer sending frames without waiting, at most ``window`` unanswered;
  acknowledged messages/s. Baseline: one HTTP POST per message over a kept-alive connection.

``push`` and ``produce`` also run with ``format=binary``: the subscriber takes frames of stored
records (cut apart, not decoded: as the binary HTTP pull is measured), the producer sends binary
batches of 100 messages.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import orjson
from websockets.asyncio.client import connect
from wharf_client.codec import IncomingMessage, encode_batch, split_records

from bench import harness
from bench.harness import Result, Stopwatch
from tests.api.server import BrokerProcess

SECTIONS = ("push", "fanout", "produce")
BODY = "x" * 128
BINARY_BATCH = 100


@dataclass(frozen=True, slots=True)
class Plan:
    repeats: int
    push_messages: int
    fanout_subscribers: int
    fanout_messages: int
    produce_messages: int
    http_produce_messages: int
    credit_window: int
    produce_window: int


FULL = Plan(3, 100_000, 100, 2_000, 50_000, 5_000, 2_000, 1_000)
QUICK = Plan(1, 20_000, 100, 500, 10_000, 1_000, 2_000, 1_000)


def fill(client: httpx.Client, topic: str, count: int, queues: int = 4) -> None:
    client.post("/v1/topics", json={"name": topic, "queues": queues}).raise_for_status()
    for start in range(0, count, 1_000):
        batch = [{"body": BODY} for _ in range(min(1_000, count - start))]
        client.post(f"/v1/topics/{topic}/messages", json={"messages": batch}).raise_for_status()


async def drain(base: str, topic: str, count: int, window: int, binary: bool = False) -> float:
    """Read ``count`` messages from the start of ``topic``; seconds from the first to the last."""
    url = f"{base}/v1/ws/subscribe?topic={topic}&from=first&credit={window}"
    if binary:
        url += "&format=binary"
    received = 0
    owed = 0
    started = 0.0
    async with connect(url, max_size=None) as socket:
        while received < count:
            data = await socket.recv()
            if isinstance(data, bytes):
                got = len(split_records(data))
            else:
                frame = orjson.loads(data)
                if frame["type"] != "messages":
                    continue
                got = len(frame["messages"])
            if not received:
                started = time.perf_counter()
            received += got
            owed += got
            if owed >= window // 2:
                await socket.send(orjson.dumps({"type": "permit", "n": owed}).decode())
                owed = 0
    return time.perf_counter() - started


def http_drain(url: str, topic: str, count: int, queues: int = 4) -> float:
    with httpx.Client(base_url=url, timeout=30) as client, Stopwatch() as watch:
        received = 0
        for queue_id in range(queues):
            offset = 0
            while True:
                answer = client.get(
                    f"/v1/topics/{topic}/queues/{queue_id}/messages",
                    params={"offset": offset, "max_messages": 32},
                ).json()
                if not answer["messages"]:
                    break
                received += len(answer["messages"])
                offset = answer["next_offset"]
    assert received == count, (received, count)
    return watch.seconds


async def ws_produce(base: str, topic: str, count: int, window: int, batch: int = 0) -> float:
    """Produce ``count`` messages with at most ``window`` unanswered: one JSON frame each, or with
    ``batch`` binary frames (``format=binary``) of that many messages."""
    url = f"{base}/v1/ws/produce?topic={topic}" + ("&format=binary" if batch else "")
    frame = encode_batch([IncomingMessage(BODY.encode())] * batch) if batch else b""
    async with connect(url, max_size=None) as socket:
        room = asyncio.Semaphore(window)
        answered = 0

        async def read_results() -> None:
            nonlocal answered
            while answered < count:
                frame = orjson.loads(await socket.recv())
                for result in frame["results"]:
                    assert result.get("status") == "SEND_OK", result
                    room.release()
                answered += len(frame["results"])

        started = time.perf_counter()
        reader = asyncio.ensure_future(read_results())
        if batch:
            for _ in range(count // batch):
                for _ in range(batch):
                    await room.acquire()
                await socket.send(frame)
        else:
            for number in range(count):
                await room.acquire()
                await socket.send(orjson.dumps({"id": number, "body": BODY}).decode())
        await reader
        return time.perf_counter() - started


def http_produce(url: str, topic: str, count: int) -> float:
    with httpx.Client(base_url=url, timeout=30) as client, Stopwatch() as watch:
        for _ in range(count):
            client.post(f"/v1/topics/{topic}/messages", json={"body": BODY}).raise_for_status()
    return watch.seconds


class Bench:
    def __init__(self, plan: Plan, broker: BrokerProcess) -> None:
        self.plan = plan
        self.url = broker.url
        self.base = broker.url.replace("http://", "ws://", 1)
        self.client = httpx.Client(base_url=broker.url, timeout=60)
        self.topics = 0

    def topic(self, prefix: str) -> str:
        self.topics += 1
        return f"{prefix}-{self.topics}"

    def push(self) -> list[Result]:
        plan = self.plan
        topic = self.topic("push")
        fill(self.client, topic, plan.push_messages)
        ws_rates, binary_rates, http_rates = [], [], []
        for _ in range(plan.repeats):
            seconds = asyncio.run(drain(self.base, topic, plan.push_messages, plan.credit_window))
            ws_rates.append(plan.push_messages / seconds)
            seconds = asyncio.run(drain(self.base, topic, plan.push_messages, plan.credit_window, True))
            binary_rates.append(plan.push_messages / seconds)
            http_rates.append(plan.push_messages / http_drain(self.url, topic, plan.push_messages))
        baseline = Result("HTTP pull, 32 per request", "msgs/s", http_rates, alias="http-pull")
        note = f"{plan.push_messages:,} stored messages, credit window {plan.credit_window}"
        json_push = Result("WebSocket push, 1 subscriber", "msgs/s", ws_rates, note=note, alias="ws-json")
        binary_note = "format=binary; ratio against the JSON push"
        return [
            baseline,
            json_push.against(baseline),
            Result("WebSocket push, binary records", "msgs/s", binary_rates, note=binary_note).against(
                json_push
            ),
        ]

    def fanout(self) -> list[Result]:
        plan = self.plan
        topic = self.topic("fanout")
        fill(self.client, topic, plan.fanout_messages)

        async def all_subscribers() -> float:
            started = time.perf_counter()
            await asyncio.gather(
                *(
                    drain(self.base, topic, plan.fanout_messages, plan.credit_window)
                    for _ in range(plan.fanout_subscribers)
                )
            )
            return time.perf_counter() - started

        total = plan.fanout_subscribers * plan.fanout_messages
        rates = [total / asyncio.run(all_subscribers()) for _ in range(plan.repeats)]
        return [
            Result(
                f"WebSocket push, {plan.fanout_subscribers} subscribers",
                "msgs/s",
                rates,
                note=f"each reads the same {plan.fanout_messages:,} messages; rate summed, connect included",
            )
        ]

    def produce(self) -> list[Result]:
        plan = self.plan
        http_rates, ws_rates, binary_rates = [], [], []
        for _ in range(plan.repeats):
            topic = self.topic("produce-http")
            http_rates.append(
                plan.http_produce_messages / http_produce(self.url, topic, plan.http_produce_messages)
            )
            topic = self.topic("produce-ws")
            seconds = asyncio.run(ws_produce(self.base, topic, plan.produce_messages, plan.produce_window))
            ws_rates.append(plan.produce_messages / seconds)
            topic = self.topic("produce-ws-binary")
            seconds = asyncio.run(
                ws_produce(self.base, topic, plan.produce_messages, plan.produce_window, BINARY_BATCH)
            )
            binary_rates.append(plan.produce_messages / seconds)
        baseline = Result("HTTP POST, 1 message per request", "msgs/s", http_rates, alias="http-post")
        note = f"at most {plan.produce_window} unanswered frames, 1 message per frame"
        json_produce = Result("WebSocket produce, pipelined", "msgs/s", ws_rates, note=note, alias="ws-json")
        binary_note = (
            f"format=binary, {BINARY_BATCH} per frame, at most {plan.produce_window} messages unanswered; "
            "ratio against the JSON frames"
        )
        return [
            baseline,
            json_produce.against(baseline),
            Result("WebSocket produce, binary batches", "msgs/s", binary_rates, note=binary_note).against(
                json_produce
            ),
        ]


def make_parser() -> argparse.ArgumentParser:
    return harness.arguments("ws", __doc__, "smaller counts, one repeat", SECTIONS, raw=True)


def main(argv: list[str] | None = None) -> int:
    args, plan, sections = harness.parse(make_parser(), argv, FULL, QUICK, SECTIONS)
    started = time.perf_counter()
    with harness.scratch_dir("ws-bench-", Path(__file__).resolve().parent) as root:
        broker = BrokerProcess(root / "store", flush_mode="ASYNC", commitlog_file_size=256 * 1024 * 1024)
        try:
            broker.start()
            bench = Bench(plan, broker)
            results = harness.run_sections(
                sections, lambda name: getattr(bench, name)(), lambda name, _: name
            )
        finally:
            broker.stop()
    harness.report("ws", args.json, argv, results, {"plan": asdict(plan), "sections": sections}, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
