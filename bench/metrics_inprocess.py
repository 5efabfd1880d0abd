"""The in-process sections of bench.metrics: ``middleware`` (what the HTTP histogram costs a
request) and ``writer`` (the lag family written by app/broker/metrics_text.py against
prometheus_client). See bench/metrics.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.types import Message as AsgiMessage

from app.api.metrics import HttpDurations, HttpMetricsMiddleware
from app.broker.metrics_text import consumer_lag
from app.store import Message, MessageStore, StoreConfig
from bench.harness import Result, Stopwatch, Target
from bench.queues_load import topic_name
from bench.topics import QUEUES

MIDDLEWARE_TARGET_US = 5.0


async def _produce_endpoint(request: object) -> None:
    return None


ROUTE = Route("/v1/topics/{topic}/messages", _produce_endpoint, methods=["POST"])
START: AsgiMessage = {"type": "http.response.start", "status": 200, "headers": []}
BODY: AsgiMessage = {"type": "http.response.body", "body": b"{}"}


async def _answer(scope: Scope, receive: Receive, send: Send) -> None:
    """What produce's plain Starlette route leaves on the scope and sends, and nothing else."""
    scope["endpoint"] = _produce_endpoint
    scope["path_params"] = {"topic": "t"}
    await send(START)
    await send(BODY)


async def _receive() -> AsgiMessage:
    return {"type": "http.request", "body": b"", "more_body": False}


async def _send(message: AsgiMessage) -> None:
    return None


async def _calls_us(app: ASGIApp, calls: int) -> float:
    with Stopwatch() as watch:
        for _ in range(calls):
            await app({"type": "http", "method": "POST", "path": "/v1/topics/t/messages"}, _receive, _send)
    return watch.seconds / calls * 1e6


def bench_middleware(repeats: int, calls: int) -> list[Result]:
    wrapped = HttpMetricsMiddleware(_answer, HttpDurations(), [ROUTE])

    async def rounds() -> tuple[list[float], list[float]]:
        bare, timed = [], []
        for _ in range(repeats * 5):
            bare.append(await _calls_us(_answer, calls))
            timed.append(await _calls_us(wrapped, calls))
        return bare, timed

    bare, timed = asyncio.run(rounds())
    baseline = Result("ASGI call, no middleware", "us/request", bare, alias="bare")
    return [
        baseline,
        Result("ASGI call through the HTTP histogram", "us/request", timed).against(baseline),
        Result(
            "HTTP histogram's cost",
            "us/request",
            [with_ - without for with_, without in zip(timed, bare, strict=True)],
            target=Target(MIDDLEWARE_TARGET_US, at_least=False),
            note="per round: the call through the middleware minus the bare call",
        ),
    ]


class _LagThroughTheClientLibrary(Collector):
    """The lag family as prometheus_client builds it: a GaugeMetricFamily row by row."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store

    def collect(self) -> list[GaugeMetricFamily]:
        family = GaugeMetricFamily("wharf_consumer_lag", "lag", labels=["group", "topic", "queue"])
        queues = self.store.queues.queues
        for group, topic, queue_id, committed in self.store.consumer_offsets.all():
            queue = queues[(topic, queue_id)]
            lag = max(0, queue.max_offset - max(committed, queue.min_offset))
            family.add_metric([group, topic, str(queue_id)], lag)
        return [family]


def bench_writer(repeats: int, root: Path, topics: int, groups: int) -> list[Result]:
    config = StoreConfig(
        root / "writer-store",
        consumequeue_file_entries=1_000,
        commitlog_file_size=64 * 1024 * 1024,
        message_index_enable=False,
    )
    with MessageStore(config) as store:
        for topic in range(topics):
            store.append([Message(topic_name(topic), b"x", queue) for queue in range(QUEUES)])
            for group in range(groups):
                for queue in range(QUEUES):
                    store.consumer_offsets.commit(f"g{group}", topic_name(topic), queue, 0)
        series = topics * QUEUES * groups
        library = _LagThroughTheClientLibrary(store)

        def timed(write: Callable[[], object]) -> float:
            with Stopwatch() as watch:
                write()
            return watch.seconds / series * 1e6

        through_library, written = [], []
        for _ in range(repeats * 3):
            through_library.append(timed(lambda: generate_latest(library)))
            written.append(timed(lambda: consumer_lag(store).encode()))
    baseline = Result(
        f"{series:,} lag series, prometheus_client families", "us/series", through_library, alias="library"
    )
    return [
        baseline,
        Result(f"{series:,} lag series, metrics_text", "us/series", written).against(baseline),
    ]
