"""The HTTP benchmark's long-polling sections: ``wake`` (one held pull woken by a produce) and
``holds`` (thousands of pulls held at once); see bench/http.py."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import statistics
import time
from collections.abc import Callable, Iterator

import httpx
import orjson

from bench.harness import Result, Target
from bench.http_load import (
    RawConnection,
    open_request,
    read_answer,
    request_bytes,
    rss_bytes,
    wait_all,
)
from bench.http_setup import (
    MIB,
    QUEUES,
    SMALL_BODY,
    Bench,
    broker_settings,
    percentile,
    text_body,
)
from tests.api.server import BrokerProcess

WAKE_P50_TARGET_MS = 1.0
WAKE_P99_TARGET_MS = 3.0


def wake(bench: Bench) -> list[Result]:
    plan = bench.plan
    topic = "wake"
    bench.create_topic(topic, queues=1)
    port = bench.broker.port
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
            request_bytes("GET", f"/v1/topics/{topic}/queues/0/messages?offset={offset}&max_wait_ms=10000")
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


def holds(bench: Bench) -> list[Result]:
    plan = bench.plan
    runs = []
    for repeat in range(plan.hold_repeats):
        broker = BrokerProcess(bench.root / f"holds-{repeat}", **broker_settings()).start()
        try:
            sample = bench.sampling if repeat == 0 else _no_sampling
            runs.append(asyncio.run(hold_round(broker, plan.holds, plan.hold_topics, sample)))
        finally:
            broker.stop()
            shutil.rmtree(bench.root / f"holds-{repeat}", ignore_errors=True)
    count = plan.holds
    per_hold = [run["extra_rss"] / count / 1024 for run in runs]
    layout = f"{plan.hold_topics} topics x {QUEUES} queues, {count // (plan.hold_topics * QUEUES)} per queue"
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
                "rss_after_answers_mib": round(statistics.median(run["rss_after"] / MIB for run in runs), 1),
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
            answers = await pulls.hold(requests)
        hold_s = time.perf_counter() - started
        rss_held = rss_bytes(pid)
        with sample(f"holds-answer-{phase}", pid):
            produced = await pulls.produce(topics)
            acked = time.perf_counter()
            results = await asyncio.gather(*answers)
        finished = max(at for _, _, at in results)
        bad = [(status, body[:120]) for status, body, _ in results if status != 200 or b'"FOUND"' not in body]
        if bad:
            raise RuntimeError(f"{len(bad)} held pulls were answered without their message: {bad[:3]}")
        await pulls.wait_held(0, exact=True)
        pulls.close_all()
        return {
            "rss_held": rss_held,
            "hold_s": hold_s,
            "acked_s": acked - produced,
            "answer_s": finished - produced,
        }

    async with httpx.AsyncClient(base_url=broker.url, timeout=60) as client:
        pulls = HoldClient(client, broker.port)
        for topic in [*topics, "hold-warmup"]:
            (await client.post("/v1/topics", json={"name": topic, "queues": QUEUES})).raise_for_status()
        # Warm-up: the first held pulls import and allocate what later ones reuse.
        warming = await pulls.hold([pull_request("hold-warmup", i % QUEUES, 0) for i in range(200)])
        await pulls.produce(["hold-warmup"])
        await asyncio.gather(*warming)
        pulls.close_all()
        await pulls.wait_held(0, exact=True)

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
