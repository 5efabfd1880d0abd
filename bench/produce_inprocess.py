"""In-process produce benchmark: the broker's CPU per message for a produce request, no sockets.

Run from the repository root::

    .venv/bin/python -m bench.produce_inprocess [--quick] [--json out.json]

The app (``create_app``, the store's defaults, ASYNC flush) runs in this process on uvloop behind
the broker's own HTTP protocol (``app.server.server_config``'s, as uvicorn serves it); each request
is its bytes for ``POST /v1/topics/{t}/messages``, handed to the protocol as a connection's data,
and its answer is what the protocol writes to the connection's transport, which here keeps it (no
socket: the kernel's share of a request is not in the figure). Rows: a JSON batch of 100 messages of 1 KiB
(base64 bodies, as the peers benchmark's plain JSON lane sends them), a binary batch of the same
messages, and one raw 128 B message. The figure is the process's CPU time (every thread: the
index and allocating threads' share of the work is the broker's too) over the messages, so the
machine's other load moves it less than it moves wall time; a fresh store per repeat, after a
warm-up of 20 requests. Each row also counts the Python function calls per message (the same
requests once more under cProfile, on the event loop's thread): a figure the machine's load does
not move at all.
"""

from __future__ import annotations

import asyncio
import cProfile
import os
import pstats
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
import pybase64
import uvloop

from app.codec import BATCH_MEDIA_TYPE, IncomingMessage, encode_batch
from bench import harness
from bench.harness import Result
from bench.http_setup import broker_settings


@dataclass(frozen=True, slots=True)
class Plan:
    repeats: int
    requests: int  # per row and repeat


FULL = Plan(repeats=5, requests=400)
QUICK = Plan(repeats=1, requests=100)
WARMUP = 20
TOPIC = "bench-produce"
BODY = os.urandom(1024)
JSON_MESSAGE = {"body": pybase64.b64encode(BODY).decode(), "encoding": "base64", "queue_id": 0}
# (row, content type, body, messages per request)
ROWS: list[tuple[str, bytes, bytes, int]] = [
    ("JSON batch, 100 x 1 KiB", b"application/json", orjson.dumps({"messages": [JSON_MESSAGE] * 100}), 100),
    (
        "binary batch, 100 x 1 KiB",
        BATCH_MEDIA_TYPE.encode(),
        encode_batch([IncomingMessage(BODY, queue_id=0)] * 100),
        100,
    ),
    ("one raw message, 128 B", b"application/octet-stream", os.urandom(128), 1),
]


def _request(content_type: bytes, body: bytes) -> bytes:
    return (
        b"POST /v1/topics/%s/messages HTTP/1.1\r\nhost: bench\r\ncontent-type: %s\r\n"
        b"content-length: %d\r\n\r\n%s" % (TOPIC.encode(), content_type, len(body), body)
    )


async def _measure(
    root: Path, plan: Plan, content_type: bytes, body: bytes, per_request: int
) -> tuple[float, float]:
    """CPU microseconds and Python calls per message of ``plan.requests`` requests of ``body``."""
    from app.api.app import create_app
    from app.settings import Settings
    from tests.api.in_process import Transport, connector

    settings = Settings(store_dir=root, **broker_settings())  # type: ignore[arg-type]
    app = create_app(settings)
    request = _request(content_type, body)
    statuses: set[bytes] = set()
    loop = asyncio.get_running_loop()
    answered = loop.create_future()

    def on_write(data: bytes) -> None:
        statuses.add(data[9:12])  # "HTTP/1.1 200 ..."
        if not answered.done():
            answered.set_result(None)

    async with app.router.lifespan_context(app):
        await app.state.broker.topic_for_write(TOPIC)
        protocol = connector(app, settings)(Transport(on_write))

        async def send(count: int) -> None:
            nonlocal answered
            for _ in range(count):
                answered = loop.create_future()
                protocol.data_received(request)
                await answered

        await send(WARMUP)
        started = time.process_time()
        await send(plan.requests)
        elapsed = time.process_time() - started
        profile = cProfile.Profile()
        profile.enable()
        await send(plan.requests)
        profile.disable()
        protocol.connection_lost(None)
    if statuses != {b"200"}:
        raise RuntimeError(f"the broker answered {sorted(statuses)}")
    messages = plan.requests * per_request
    calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
    return elapsed / messages * 1e6, calls / messages


def run(plan: Plan, scratch: Path) -> list[Result]:
    cpu: dict[str, list[float]] = {name: [] for name, *_ in ROWS}
    calls: dict[str, list[float]] = {name: [] for name, *_ in ROWS}
    for repeat in range(plan.repeats):
        for index, (name, content_type, body, per_request) in enumerate(ROWS):
            root = scratch / f"store-{repeat}-{index}"
            try:
                us, count = uvloop.run(_measure(root, plan, content_type, body, per_request))
            finally:
                shutil.rmtree(root, ignore_errors=True)  # a store at the defaults takes GiBs
            cpu[name].append(us)
            calls[name].append(count)
    return [
        *(Result(name, "us CPU/msg", values) for name, values in cpu.items()),
        *(Result(f"{name}, Python calls", "calls/msg", values) for name, values in calls.items()),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments(
        "produce_inprocess", __doc__ or "", "100 requests per row, one repeat", raw=True
    )
    args, plan, _ = harness.parse(parser, argv, FULL, QUICK)
    started = time.perf_counter()
    with harness.scratch_dir("produce-inprocess-", harness.scratch_parent()) as scratch:
        results = run(plan, scratch)
    harness.print_table(results, f"produce in process, {plan.requests} requests x {plan.repeats}")
    settings = {"repeats": plan.repeats, "requests": plan.requests, "warmup": WARMUP}
    harness.report("produce_inprocess", args.json, argv, results, settings, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
