"""Peers benchmark: Wharf against Redis Streams and NATS JetStream on one workload, from Python.

Run from the repository root::

    .venv/bin/python -m bench.peers [--quick] [--json out.json] [--only throughput,latency]
                                    [--systems redis,nats,wharf] [--messages N] [--samples N]
                                    [--wharf binary,json,json-http,plain-json,plain-binary,floor,ws-floor,ws-store-floor,...]

Every system gets the same work from one Python process on this machine: bodies of 1 KiB (the same
random bytes), batches of 100, fresh streams named for the run and deleted after it, the systems
interleaved within each repeat, each figure the median of the repeats. Redis (6379) and NATS with
JetStream (4222) are the services already running on localhost, used as they are configured; one
that does not answer is skipped with the reason. Wharf is a broker process started for the run
(``python -m app`` at the store's defaults, a temporary store), one topic of one queue per stream, so each
system writes and reads one ordered log. ``--wharf`` picks Wharf's lanes (all by default): the
throughput lanes ``binary``, ``json``, ``json-http``, ``plain-json`` and ``plain-binary``, the latency
lanes ``binary``, ``plain-http`` and ``ws-json``, and ``floor``, ``ws-floor``, ``ws-store-floor``,
``floor-json``, ``floor-binary``, ``store-floor-json`` and ``store-floor-binary``, the HTTP and
WebSocket floors (below), whose relay processes are started and stopped with the broker.

* ``throughput``: produce ``messages`` with 4 batches of 100 in flight, then read them back one
  batch (or window) of 100 at a time, messages/s (the plain lanes: one batch of 100 in flight, then
  pulls of 1000). Redis: pipelines of 100 ``XADD`` (not transactions), then
  ``XRANGE ... COUNT 100``. NATS: a file-storage stream, 100 ``publish_async`` awaited together per
  batch, then an ephemeral pull consumer (no acks) ``fetch(100)``. Wharf binary: binary batches
  (``application/vnd.wharf.batch``) sent by the asyncio client's ``AsyncProducer`` with
  ``pipeline=True`` (4 batches unanswered on one produce WebSocket: the one queue keeps its order),
  then read by its ``AsyncSubscriber`` with a credit of 100 (a subscribe socket with
  ``format=binary``; ``poll_batch``, every record decoded by the compiled kernel). Wharf JSON:
  ``{"messages": [...]}`` with base64 bodies over HTTP, then the JSON subscribe socket the browser
  console reads, with a credit of 100 (a permit for every 50 messages taken); "Wharf JSON, HTTP
  pull" produces the same way and reads with JSON pulls of 100, as curl does. The JSON lanes encode
  and decode bodies with pybase64. The plain lanes are the path plain HTTP users take: one request
  at a time (sent, its answer awaited, then the next) on one kept-alive connection of one
  ``httpx.AsyncClient``, as curl, a generated OpenAPI client or a browser's ``fetch`` do. "Wharf
  plain JSON" posts ``{"messages": [...]}`` of 100 base64 bodies
  (``"encoding": "base64", "queue_id": 0``), then reads with JSON pulls
  (``GET /v1/topics/{t}/queues/0/messages?offset=N&max_messages=1000``), each body base64-decoded;
  "Wharf plain binary" posts binary batches of 100 (``encode_batch``, content type
  ``application/vnd.wharf.batch``), then reads with the same pulls answered as
  ``application/vnd.wharf.records`` (``Accept``), cut by ``split_records`` and every body compared
  with the one sent. Every reader checks it got every message and every byte. The broker process's
  CPU time per message (from ``/proc/<pid>/stat``) is reported for each system whose process this
  machine shows.
* ``latency``: one message at a time, from just before it is sent until the consumer has it:
  Redis ``XREAD BLOCK`` on a second connection, NATS an ordered push consumer; "Wharf binary" a
  binary WebSocket produce frame and a ``format=binary`` subscribe socket; "Wharf plain HTTP" one
  JSON message (``{"body": ..., "encoding": "base64", "queue_id": 0}``) posted on one httpx
  connection, read by long polls (``GET ...?offset=N&max_wait_ms=10000``, JSON) on a second, each
  body checked; "Wharf WebSocket JSON" a JSON produce frame on ``/v1/ws/produce`` (``format=json``)
  and the JSON subscribe socket (a window of permits, as the throughput lane's), each body checked.
  p50 and p99 of each repeat, and the broker's CPU per message so sent and delivered (the sockets'
  and connections' set-up included).
* The HTTP floor, "HTTP floor" (``--wharf floor``, latency only): "Wharf plain HTTP"'s latency lane,
  the very same client code, against :mod:`bench.relay_app` instead of the broker: a raw ASGI app
  (no FastAPI, no Starlette, no store) with the same URLs, which keeps each posted message in a
  list in memory, wakes the long poll waiting on the topic and answers the same JSON shapes, served
  by uvicorn as the broker is (uvloop, httptools, one process). What it measures is httpx, the
  sockets and uvicorn, with nothing of Wharf: the ceiling that the plain HTTP path of any server on
  this stack reaches with this client. Wharf's plain HTTP e2e is read against it: what lies above
  the floor is Wharf's own, the floor itself the client's and uvicorn's, which no work in Wharf
  removes. Its rows (p50, p99, and the relay's CPU per message) are a reference, with no target.
* The WebSocket floor, "WebSocket floor" (``--wharf ws-floor``, latency only): "Wharf WebSocket
  JSON"'s latency lane, the same client code, against the relay's produce and subscribe sockets
  (each frame's message kept in memory and pushed to the subscriber before the producer's answer):
  the websockets client, the sockets and uvicorn's WebSocket protocol, nothing of Wharf. A
  reference for Wharf WebSocket JSON's e2e, with no target.
* The WebSocket store floor, "WebSocket store floor" (``--wharf ws-store-floor``, latency only): the
  WebSocket floor's lane against a second relay, started with a store of its own (``python -m
  bench.relay_app --store DIR``, a :class:`~app.store.MessageStore` at the broker's defaults), whose
  produce socket does for each frame exactly the store work Wharf's produce and subscribe sockets
  do for one message and nothing else: the frame parsed as Wharf parses it, encoded into a record by
  the compiled kernel, appended alone, read back with ``get_message`` and made into the
  subscriber's frame by Wharf's ``messages_frame``, the producer answered with the kernel's
  answers; no FastAPI, no Starlette, no tasks, no long-poll service, no credit. It is the least a
  broker that parses, stores, reads back and frames each message with Wharf's own store and codecs
  adds to the sockets: the ceiling of any Python broker on this stack with this store. Between it
  and the WebSocket floor lies the store's and the codecs' share; between Wharf WebSocket JSON and
  it, the rest of Wharf's socket path. A reference, with no target.
* The throughput floors, "HTTP floor, JSON batches" and "HTTP floor, binary batches" (``--wharf
  floor-json,floor-binary``, throughput only): "Wharf plain JSON"'s and "Wharf plain binary"'s
  throughput lanes, the same client code, against the relay (JSON messages kept as a pull answers
  them; binary batches encoded into records by the compiled kernel, as Wharf's produce encodes
  them, and pulls answered with the records joined). What a plain lane's row lies below its floor
  is Wharf's own; the floor is the client's, uvicorn's and the wire format's. No target.
* The throughput store floors, "HTTP store floor, JSON batches" and "HTTP store floor, binary
  batches" (``--wharf store-floor-json,store-floor-binary``, throughput only): the same two lanes
  against the relay in its store mode, whose produce stores each request's messages as Wharf's
  plain produce does (Wharf's JSON decoder, or the binary batch's compiled encoding; one append
  into the store; the kernel's answers) and whose pulls read them back with ``get_message`` and
  answer as Wharf does, and nothing else. Between it and the floor lies the store's share; between
  a plain lane and it, the rest of Wharf's HTTP path. No target.

Targets are ratios against the better peer: Wharf binary produce >= 2x, consume >= 5x and e2e p99
at most Redis's; Wharf JSON produce >= 1x and consume >= 2x; Wharf plain JSON produce >= 1x and
consume >= 2x; Wharf plain binary produce >= 2x and consume >= 5x; Wharf plain HTTP e2e p99 at most
2x Redis's and Wharf WebSocket JSON e2e p99 at most Redis's. Redis and NATS keep their own best path
(pipelines, ``publish_async``), so the plain lanes' ratios set Wharf's plain path against it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol, cast

import httpx
import nats
import orjson
import pybase64
import redis.asyncio as aioredis
from nats.js.api import AckPolicy, ConsumerConfig, StorageType
from websockets.asyncio.client import connect
from wharf_client import AsyncProducer, AsyncSubscriber, OutgoingMessage
from wharf_client.codec import (
    BATCH_MEDIA_TYPE,
    RECORDS_MEDIA_TYPE,
    IncomingMessage,
    encode_batch,
    split_records,
)

from app.store.record_format import INT, layout_at
from bench import harness
from bench.harness import Result, Target
from bench.http_load import cpu_seconds
from bench.http_setup import broker_settings, percentile
from bench.relay_app import RelayProcess
from tests.api.server import BrokerProcess

SECTIONS = ("throughput", "latency")
SYSTEMS = ("redis", "nats", "wharf")
WHARF_NAMES = {
    "binary": "Wharf binary",
    "json": "Wharf JSON",
    "json-http": "Wharf JSON, HTTP pull",
    "plain-json": "Wharf plain JSON",
    "plain-binary": "Wharf plain binary",
    "plain-http": "Wharf plain HTTP",
    "ws-json": "Wharf WebSocket JSON",
    "floor": "HTTP floor",
    "ws-floor": "WebSocket floor",
    "ws-store-floor": "WebSocket store floor",
    "floor-json": "HTTP floor, JSON batches",
    "floor-binary": "HTTP floor, binary batches",
    "store-floor-json": "HTTP store floor, JSON batches",
    "store-floor-binary": "HTTP store floor, binary batches",
}
# The floors' lanes, each the Wharf lane whose client code it runs against the relay.
FLOOR_OF = {
    "floor": "plain-http",
    "floor-json": "plain-json",
    "floor-binary": "plain-binary",
    "store-floor-json": "plain-json",
    "store-floor-binary": "plain-binary",
}
WHARF_LANES = tuple(WHARF_NAMES)
FLOOR_KINDS = (
    "floor",
    "ws-floor",
    "ws-store-floor",
    "floor-json",
    "floor-binary",
    "store-floor-json",
    "store-floor-binary",
)
# The floors served by the relay with a store of its own (``--store``).
STORE_FLOORS = ("ws-store-floor", "store-floor-json", "store-floor-binary")
WHARF_SECTIONS = {
    "binary": SECTIONS,
    "plain-http": ("latency",),
    "ws-json": ("latency",),
    "floor": ("latency",),
    "ws-floor": ("latency",),
    "ws-store-floor": ("latency",),
    "floor-json": ("throughput",),
    "floor-binary": ("throughput",),
    "store-floor-json": ("throughput",),
    "store-floor-binary": ("throughput",),
}
# Targets, as ratios to the better peer: (produce, consume) throughput, and e2e p99 at most.
THROUGHPUT_GOALS = {
    "Wharf binary": (2.0, 5.0),
    "Wharf JSON": (1.0, 2.0),
    "Wharf plain JSON": (1.0, 2.0),
    "Wharf plain binary": (2.0, 5.0),
}
LATENCY_GOALS = {"Wharf binary": 1.0, "Wharf plain HTTP": 2.0, "Wharf WebSocket JSON": 1.0}
BODY = secrets.token_bytes(1024)
BATCH = 100
IN_FLIGHT = 4
PULL_MESSAGES = 1_000  # what a plain lane's pull asks for
LONG_POLL_MS = 10_000
JSON = "application/json"
REDIS_URL = "redis://127.0.0.1:6379"
NATS_URL = "nats://127.0.0.1:4222"
TIMEOUT_S = 30.0

Entries = list[tuple[bytes, dict[bytes, bytes]]]  # what XRANGE and XREAD answer per stream


@dataclass(frozen=True, slots=True)
class Plan:
    repeats: int
    messages: int  # per system and repeat
    latency_samples: int  # per system and repeat
    warmup_messages: int


FULL = Plan(repeats=3, messages=30_000, latency_samples=1_000, warmup_messages=2_000)
QUICK = Plan(repeats=1, messages=5_000, latency_samples=200, warmup_messages=1_000)


def batch_sizes(count: int) -> Iterator[int]:
    return (min(BATCH, count - start) for start in range(0, count, BATCH))


async def produce_all(count: int, send: Callable[[int], Awaitable[None]], in_flight: int = IN_FLIGHT) -> None:
    """Send ``count`` messages as batches of ``BATCH``, ``in_flight`` batches at a time."""
    sizes = batch_sizes(count)

    async def worker() -> None:
        for size in sizes:  # one iterator shared by the workers: each batch is sent once
            await send(size)

    await asyncio.gather(*(worker() for _ in range(in_flight)))


def record_body(record: memoryview) -> bytes:
    """The body of one stored record of a binary pull answer (layout in app/store/record_format.py)."""
    at = layout_at(record).body
    (size,) = INT.unpack_from(record, at - INT.size)  # BODYLENGTH comes just before BODY
    return record[at : at + size].tobytes()


def sent_ok(answer: httpx.Response, count: int) -> None:
    """Check a produce answer holds ``count`` results, all ``SEND_OK``."""
    answer.raise_for_status()
    results = orjson.loads(answer.content)["results"]
    assert len(results) == count and all(result["status"] == "SEND_OK" for result in results), results


async def pull_json(http: httpx.AsyncClient, stream: str, count: int, max_messages: int) -> int:
    """Read queue 0 of ``stream`` from its start with JSON pulls of ``max_messages``, one at a time,
    until ``count`` messages came; the bytes of the base64-decoded bodies."""
    url = f"/v1/topics/{stream}/queues/0/messages"
    received = size = offset = 0
    while received < count:
        answer = await http.get(url, params={"offset": offset, "max_messages": max_messages})
        answer.raise_for_status()
        document = orjson.loads(answer.content)
        for message in document["messages"]:
            assert message["encoding"] == "base64", message["encoding"]
            size += len(pybase64.b64decode(message["body"]))
        got = len(document["messages"])
        offset = document["next_offset"]
        assert got, f"{stream} ends after {received} of {count}"
        received += got
    return size


def process_named(command: str) -> int | None:
    """The one process of this machine whose command name is ``command``, if exactly one shows."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == command:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found[0] if len(found) == 1 else None


@dataclass(frozen=True, slots=True)
class Rates:
    """One timed run: messages per second, and CPU microseconds per message of the broker process
    (None when this machine does not show it) and of this client process."""

    messages_per_s: float
    broker_us: float | None
    client_us: float


class Measured:
    """``with Measured(pid, count) as run: ...`` then ``run.rates``: the block's wall and CPU time."""

    def __init__(self, pid: int | None, count: int) -> None:
        self.pid = pid
        self.count = count

    def __enter__(self) -> Measured:
        self.broker = cpu_seconds(self.pid) if self.pid else 0.0
        self.client = time.process_time()
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        seconds = time.perf_counter() - self.started
        client = time.process_time() - self.client
        broker = cpu_seconds(self.pid) - self.broker if self.pid else None
        self.rates = Rates(
            self.count / seconds,
            None if broker is None else broker / self.count * 1e6,
            client / self.count * 1e6,
        )


def cpu_rows(what: str, runs: list[Rates]) -> list[Result]:
    """The broker's CPU per message over ``runs`` as a row (none when the broker's process is not
    on this machine), the client's in its note."""
    if not runs or runs[0].broker_us is None:
        return []
    client = statistics.median(run.client_us for run in runs)
    return [
        Result(
            f"{what} broker CPU",
            "us/msg",
            [run.broker_us for run in runs if run.broker_us is not None],
            note=f"client {client:.1f} us/msg",
            extra={"client_us_per_msg": client},
        )
    ]


class Served(Protocol):
    """A server process the Wharf lanes reach: the broker (:class:`BrokerProcess`), or the relay
    of a floor (:class:`RelayProcess`)."""

    @property
    def url(self) -> str: ...

    @property
    def process(self) -> subprocess.Popen[bytes] | None: ...


class Lane:
    """One way of producing and consuming a stream: a row of the throughput table."""

    name = ""
    alias = ""
    pid: int | None = None  # the broker process, when this machine shows it
    note = ""  # how the system is set up, printed under the throughput table
    latency_note = ""  # printed under the latency table
    sections: tuple[str, ...] = SECTIONS  # the sections it has a row in
    in_flight = IN_FLIGHT  # batches unanswered at once while producing

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def create(self, stream: str) -> None: ...

    async def delete(self, stream: str) -> None: ...

    async def send(self, stream: str, size: int) -> None:
        raise NotImplementedError

    async def consume(self, stream: str, count: int) -> int:
        """Read the stream's ``count`` messages from its start; body bytes."""
        raise NotImplementedError

    async def latency(self, stream: str, samples: int) -> list[float]:
        """Seconds from sending each of ``samples`` messages, one at a time, to its delivery."""
        raise NotImplementedError


class RedisLane(Lane):
    name = "Redis Streams"
    alias = "Redis"

    def __init__(self, url: str) -> None:
        self.url = url

    async def open(self) -> None:
        self.client = aioredis.Redis.from_url(self.url, socket_timeout=TIMEOUT_S)
        self.reader = aioredis.Redis.from_url(self.url, socket_timeout=TIMEOUT_S)
        server = await self.client.info("server")
        pid = int(server["process_id"])
        self.pid = pid if Path(f"/proc/{pid}/stat").exists() else None
        try:
            config = await self.client.config_get("appendonly") | await self.client.config_get("save")
            persistence = f"appendonly {config['appendonly']}, save '{config['save']}'"
        except aioredis.ResponseError:  # CONFIG may be renamed away
            persistence = "persistence unknown"
        self.note = f"Redis {server['redis_version']}, {persistence}; redis-py without hiredis"

    async def close(self) -> None:
        await self.client.aclose()
        await self.reader.aclose()

    async def delete(self, stream: str) -> None:
        await self.client.delete(stream)

    async def send(self, stream: str, size: int) -> None:
        async with self.client.pipeline(transaction=False) as pipe:
            for _ in range(size):
                pipe.xadd(stream, {"body": BODY})
            ids = await pipe.execute()
        assert len(ids) == size, ids

    async def consume(self, stream: str, count: int) -> int:
        received = size = 0
        start: bytes = b"-"
        while received < count:
            # Entries are (id, fields) with bytes throughout (the client decodes nothing).
            entries = cast(Entries, await self.client.xrange(stream, min=start, max="+", count=BATCH))
            assert entries, f"{stream} ends after {received} of {count}"
            for _entry_id, fields in entries:
                size += len(fields[b"body"])
            received += len(entries)
            start = b"(" + entries[-1][0]
        return size

    async def latency(self, stream: str, samples: int) -> list[float]:
        arrivals: asyncio.Queue[float] = asyncio.Queue()

        async def read() -> None:
            last: bytes | str = "0-0"
            for _ in range(samples):
                answer = cast(
                    list[tuple[bytes, Entries]],
                    await self.reader.xread({stream: last}, count=1, block=int(TIMEOUT_S * 1000)),
                )
                arrivals.put_nowait(time.perf_counter())
                last = answer[0][1][0][0]

        reader = asyncio.ensure_future(read())
        return await one_at_a_time(
            samples, lambda: self.client.xadd(stream, {"body": BODY}), arrivals, reader
        )


class NatsLane(Lane):
    name = "NATS JetStream"
    alias = "NATS"

    def __init__(self, url: str) -> None:
        self.url = url

    async def open(self) -> None:
        self.connection = await nats.connect(self.url, connect_timeout=5, allow_reconnect=False)
        self.js = self.connection.jetstream(timeout=TIMEOUT_S)
        self.pid = process_named("nats-server")
        version = self.connection.connected_server_version
        self.note = f"nats-server {version.major}.{version.minor}.{version.patch}, file storage, 1 replica"

    async def close(self) -> None:
        await self.connection.close()

    async def create(self, stream: str) -> None:
        await self.js.add_stream(name=stream, subjects=[stream], storage=StorageType.FILE)

    async def delete(self, stream: str) -> None:
        await self.js.delete_stream(stream)

    async def send(self, stream: str, size: int) -> None:
        pending = [await self.js.publish_async(stream, BODY) for _ in range(size)]
        for ack in await asyncio.gather(*pending):
            assert ack.stream == stream, ack

    async def consume(self, stream: str, count: int) -> int:
        config = ConsumerConfig(ack_policy=AckPolicy.NONE)
        subscription = await self.js.pull_subscribe(stream, stream=stream, config=config)
        received = size = 0
        try:
            while received < count:
                messages = await subscription.fetch(BATCH, timeout=TIMEOUT_S)
                received += len(messages)
                size += sum(len(message.data) for message in messages)
        finally:
            await subscription.unsubscribe()
        assert received == count, (received, count)
        return size

    async def latency(self, stream: str, samples: int) -> list[float]:
        arrivals: asyncio.Queue[float] = asyncio.Queue()

        async def arrived(_message: Any) -> None:
            arrivals.put_nowait(time.perf_counter())

        subscription = await self.js.subscribe(stream, stream=stream, cb=arrived, ordered_consumer=True)
        try:
            return await one_at_a_time(samples, lambda: self.js.publish(stream, BODY), arrivals)
        finally:
            await subscription.unsubscribe()


class WharfLane(Lane):
    """Wharf through its asyncio client's fastest path (``binary``: ``AsyncProducer`` over a produce
    WebSocket, ``AsyncSubscriber`` with binary records), or JSON both ways as a browser sends and
    reads it (``json``: HTTP batches, the JSON subscribe socket) or as curl does (``json-http``:
    HTTP batches, JSON pulls); ``ws-json`` has a latency row only: JSON produce frames and the JSON
    subscribe socket. The plain lanes are :class:`PlainLane`."""

    def __init__(self, broker: Served, kind: str) -> None:
        self.url = broker.url
        self.base = broker.url.replace("http://", "ws://", 1)
        self.kind = kind
        self.binary = kind == "binary"
        self.name = WHARF_NAMES[kind]
        self.alias = self.name
        self.sections = WHARF_SECTIONS.get(kind, ("throughput",))
        self.note = "ASYNC flush, a topic of 1 queue" + ("" if "binary" in kind else ", base64 bodies")
        assert broker.process is not None
        self.pid = broker.process.pid

    async def open(self) -> None:
        limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
        self.http = httpx.AsyncClient(base_url=self.url, timeout=TIMEOUT_S, limits=limits)
        self.producer = AsyncProducer(self.url, max_in_flight=IN_FLIGHT, timeout_s=TIMEOUT_S, pipeline=True)

    async def close(self) -> None:
        await self.producer.close()
        await self.http.aclose()

    async def create(self, stream: str) -> None:
        (await self.http.post("/v1/topics", json={"name": stream, "queues": 1})).raise_for_status()

    async def delete(self, stream: str) -> None:
        (await self.http.delete(f"/v1/topics/{stream}")).raise_for_status()

    async def send(self, stream: str, size: int) -> None:
        if self.binary:
            results = await self.producer.send_batch(stream, [OutgoingMessage(BODY) for _ in range(size)])
            assert len(results) == size and all(result.status == "SEND_OK" for result in results), results
            return
        await self.send_json(stream, size)

    async def send_json(self, stream: str, size: int) -> None:
        """POST ``{"messages": [...]}`` of ``size`` base64 bodies to queue 0."""
        messages = [
            {"body": pybase64.b64encode(BODY).decode(), "encoding": "base64", "queue_id": 0}
            for _ in range(size)
        ]
        content = orjson.dumps({"messages": messages})
        answer = await self.http.post(
            f"/v1/topics/{stream}/messages", content=content, headers={"content-type": JSON}
        )
        sent_ok(answer, size)

    async def consume(self, stream: str, count: int) -> int:
        if self.kind == "binary":
            return await self._consume_with_client(stream, count)
        if self.kind == "json":
            return await self._consume_json_socket(stream, count)
        return await pull_json(self.http, stream, count, BATCH)

    async def _consume_with_client(self, stream: str, count: int) -> int:
        """Read the stream from its start with an AsyncSubscriber (``poll_batch``) holding a window
        of 100: binary records, decoded by the compiled kernel."""
        size = received = 0
        async with AsyncSubscriber(
            self.url, stream, start="first", credit=BATCH, timeout_s=TIMEOUT_S
        ) as reader:
            while received < count:
                batch = await reader.poll_batch(BATCH, TIMEOUT_S)
                assert batch, f"{stream} ends after {received} of {count}"
                received += len(batch)
                size += sum(len(message.body) for message in batch)
        return size

    async def _consume_json_socket(self, stream: str, count: int) -> int:
        """Read the stream from its start through the JSON subscribe socket, as the browser
        console does, within a window of 100 (a permit for every 50 taken); each body base64-decoded."""
        url = f"{self.base}/v1/ws/subscribe?topic={stream}&from=first&credit={BATCH}"
        received = size = owed = 0
        async with connect(url, max_size=None, compression=None) as socket:
            first = orjson.loads(await socket.recv(decode=False))
            assert first["type"] == "assignment", first
            while received < count:
                frame = orjson.loads(await socket.recv(decode=False))
                assert frame["type"] == "messages", frame
                for message in frame["messages"]:
                    assert message["encoding"] == "base64", message["encoding"]
                    size += len(pybase64.b64decode(message["body"]))
                got = len(frame["messages"])
                received += got
                owed += got
                if owed >= BATCH // 2:
                    await socket.send(b'{"type":"permit","n":%d}' % owed, text=True)
                    owed = 0
        return size

    async def latency(self, stream: str, samples: int) -> list[float]:
        if self.kind == "ws-json":
            return await self._latency_json_sockets(stream, samples)
        window = min(samples, 1_000)
        subscribe_url = f"{self.base}/v1/ws/subscribe?topic={stream}&from=first&format=binary&credit={window}"
        produce_url = f"{self.base}/v1/ws/produce?topic={stream}&format=binary"
        arrivals: asyncio.Queue[float] = asyncio.Queue()
        async with (
            connect(subscribe_url, max_size=None, compression=None) as subscriber,
            connect(produce_url, compression=None) as producer,
        ):
            first = orjson.loads(await subscriber.recv())
            assert first["type"] == "assignment", first

            async def read() -> None:
                received = owed = 0
                while received < samples:
                    frame = await subscriber.recv()
                    now = time.perf_counter()
                    assert isinstance(frame, bytes), frame
                    got = len(split_records(frame))
                    for _ in range(got):
                        arrivals.put_nowait(now)
                    received += got
                    owed += got
                    if owed >= window // 2:
                        await subscriber.send(orjson.dumps({"type": "permit", "n": owed}).decode())
                        owed = 0

            async def produce() -> None:
                await producer.send(encode_batch([IncomingMessage(BODY, queue_id=0)]))
                (result,) = orjson.loads(await producer.recv())["results"]
                assert result["status"] == "SEND_OK", result

            return await one_at_a_time(samples, produce, arrivals, asyncio.ensure_future(read()))

    async def _latency_json_sockets(self, stream: str, samples: int) -> list[float]:
        """One JSON produce frame at a time (its result awaited), each received by the JSON
        subscribe socket within a window of permits, as the throughput lane reads it."""
        window = min(samples, 1_000)
        subscribe_url = f"{self.base}/v1/ws/subscribe?topic={stream}&from=first&credit={window}"
        produce_url = f"{self.base}/v1/ws/produce?topic={stream}"
        arrivals: asyncio.Queue[float] = asyncio.Queue()
        async with (
            connect(subscribe_url, max_size=None, compression=None) as subscriber,
            connect(produce_url, compression=None) as producer,
        ):
            first = orjson.loads(await subscriber.recv(decode=False))
            assert first["type"] == "assignment", first

            async def read() -> None:
                received = owed = 0
                while received < samples:
                    data = await subscriber.recv(decode=False)
                    now = time.perf_counter()
                    frame = orjson.loads(data)
                    assert frame["type"] == "messages", frame
                    for message in frame["messages"]:
                        assert message["encoding"] == "base64", message["encoding"]
                        assert pybase64.b64decode(message["body"]) == BODY, message
                        arrivals.put_nowait(now)
                    got = len(frame["messages"])
                    received += got
                    owed += got
                    if owed >= window // 2:
                        await subscriber.send(b'{"type":"permit","n":%d}' % owed, text=True)
                        owed = 0

            async def produce() -> None:
                message = {"body": pybase64.b64encode(BODY).decode(), "encoding": "base64", "queue_id": 0}
                await producer.send(orjson.dumps(message), text=True)
                frame = orjson.loads(await producer.recv(decode=False))
                assert frame["type"] == "results", frame
                (result,) = frame["results"]
                assert result["status"] == "SEND_OK", result

            return await one_at_a_time(samples, produce, arrivals, asyncio.ensure_future(read()))


class PlainLane(WharfLane):
    """Wharf as plain HTTP users reach it: one request at a time (sent, its answer awaited, then the
    next) on one kept-alive connection of one ``httpx.AsyncClient``, as curl, a generated OpenAPI
    client or a browser's ``fetch`` do. ``plain-json``: JSON batches of 100 base64 bodies, JSON pulls
    of 1000; ``plain-binary``: binary batches of 100, pulls of 1000 answered as binary records;
    ``plain-http`` (latency only): one JSON message per POST, read by long polls on a second
    connection."""

    in_flight = 1

    def __init__(self, broker: Served, kind: str) -> None:
        super().__init__(broker, kind)
        self.note += ", one request at a time on one connection"

    async def open(self) -> None:
        self.http = plain_client(self.url)
        # The latency lane's consumer: a client of its own, so a connection of its own.
        self.reader = plain_client(self.url, TIMEOUT_S + LONG_POLL_MS / 1000)

    async def close(self) -> None:
        await self.http.aclose()
        await self.reader.aclose()

    async def send(self, stream: str, size: int) -> None:
        if self.kind != "plain-binary":
            await self.send_json(stream, size)
            return
        content = encode_batch([IncomingMessage(BODY, queue_id=0)] * size)
        answer = await self.http.post(
            f"/v1/topics/{stream}/messages", content=content, headers={"content-type": BATCH_MEDIA_TYPE}
        )
        sent_ok(answer, size)

    async def consume(self, stream: str, count: int) -> int:
        if self.kind != "plain-binary":
            return await pull_json(self.http, stream, count, PULL_MESSAGES)
        url = f"/v1/topics/{stream}/queues/0/messages"
        headers = {"accept": RECORDS_MEDIA_TYPE}
        received = size = offset = 0
        while received < count:
            answer = await self.http.get(
                url, params={"offset": offset, "max_messages": PULL_MESSAGES}, headers=headers
            )
            answer.raise_for_status()
            assert answer.headers["content-type"] == RECORDS_MEDIA_TYPE, answer.headers
            records = split_records(answer.content)
            assert len(records) == int(answer.headers["x-wharf-message-count"]), answer.headers
            for record in records:
                body = record_body(record)
                assert body == BODY, (stream, received, len(body))
                size += len(body)
            offset = int(answer.headers["x-wharf-next-offset"])
            assert records, f"{stream} ends after {received} of {count}"
            received += len(records)
        return size

    async def latency(self, stream: str, samples: int) -> list[float]:
        """Each message a JSON POST of its own; a consumer long-polling on a second client (and
        connection) from the offset after the last message it got."""
        url = f"/v1/topics/{stream}/queues/0/messages"
        arrivals: asyncio.Queue[float] = asyncio.Queue()

        async def read() -> None:
            received = offset = 0
            while received < samples:
                answer = await self.reader.get(url, params={"offset": offset, "max_wait_ms": LONG_POLL_MS})
                now = time.perf_counter()
                answer.raise_for_status()
                document = orjson.loads(answer.content)
                for message in document["messages"]:
                    assert message["encoding"] == "base64", message["encoding"]
                    assert pybase64.b64decode(message["body"]) == BODY, message
                    arrivals.put_nowait(now)
                received += len(document["messages"])
                offset = document["next_offset"]

        async def produce() -> None:
            message = {"body": pybase64.b64encode(BODY).decode(), "encoding": "base64", "queue_id": 0}
            answer = await self.http.post(
                f"/v1/topics/{stream}/messages", content=orjson.dumps(message), headers={"content-type": JSON}
            )
            sent_ok(answer, 1)

        return await one_at_a_time(samples, produce, arrivals, asyncio.ensure_future(read()))


class FloorLane(PlainLane):
    """An HTTP floor: a plain lane, the same client code, against :mod:`bench.relay_app` (a raw
    ASGI app that keeps the messages in a list and wakes a long poll with an event, served by
    uvicorn as the broker is) instead of the broker. ``floor`` runs "Wharf plain HTTP"'s latency
    lane, ``floor-json`` and ``floor-binary`` the throughput of "Wharf plain JSON" and "Wharf plain
    binary". What they measure is the client, the sockets and uvicorn (and, for binary batches, the
    records' encoding), with nothing of Wharf: the ceiling of the plain HTTP path on this stack.
    Their rows have no target."""

    def __init__(self, relay: RelayProcess, kind: str = "floor") -> None:
        super().__init__(relay, FLOOR_OF[kind])
        self.name = self.alias = WHARF_NAMES[kind]
        self.sections = WHARF_SECTIONS[kind]
        self.note = self.latency_note = (
            "bare ASGI relay (bench.relay_app: uvicorn, uvloop, httptools, messages in memory), "
            f"{WHARF_NAMES[FLOOR_OF[kind]]}'s client code"
        )


class StoreFloorLane(FloorLane):
    """An HTTP store floor: a plain lane's throughput against the relay in its store mode, whose
    produce stores each request's messages as Wharf's plain produce stores them (Wharf's own JSON
    decoder or the binary batch's compiled encoding, one append into a MessageStore at the broker's
    defaults, the kernel's answers) and whose pulls read them back with ``get_message`` and answer
    as Wharf does: the ceiling of any Python broker on this stack with this store, for a plain
    lane. No target."""

    def __init__(self, relay: RelayProcess, kind: str) -> None:
        super().__init__(relay, kind)
        self.note = self.latency_note = (
            "bare ASGI relay with Wharf's store (bench.relay_app --store: uvicorn, uvloop, httptools, a "
            "MessageStore at the broker's defaults; per request Wharf's parse, compiled encode, one append; "
            f"pulls read back with get_message), {WHARF_NAMES[FLOOR_OF[kind]]}'s client code"
        )


class WsFloorLane(WharfLane):
    """The WebSocket floor: "Wharf WebSocket JSON"'s latency lane, the same client code, against
    :mod:`bench.relay_app`'s produce and subscribe sockets (a message kept in a list and pushed to
    the subscriber before the producer's answer, served by uvicorn with the broker's WebSocket
    implementation): the ceiling of the JSON WebSocket path on this stack. No target."""

    def __init__(self, relay: RelayProcess) -> None:
        super().__init__(relay, "ws-json")
        self.name = self.alias = WHARF_NAMES["ws-floor"]
        self.sections = WHARF_SECTIONS["ws-floor"]
        self.note = self.latency_note = (
            "bare ASGI relay's sockets (bench.relay_app: uvicorn, uvloop, websockets-sansio, messages in "
            "memory), Wharf WebSocket JSON's client code"
        )


class WsStoreFloorLane(WsFloorLane):
    """The WebSocket store floor: the WebSocket floor's lane against the relay in its store mode
    (``--store``), which parses, stores, reads back and frames each message with Wharf's own store
    and codecs and nothing else: the ceiling of any Python broker on this stack with this store.
    No target."""

    def __init__(self, relay: RelayProcess) -> None:
        super().__init__(relay)
        self.name = self.alias = WHARF_NAMES["ws-store-floor"]
        self.sections = WHARF_SECTIONS["ws-store-floor"]
        self.note = self.latency_note = (
            "bare ASGI relay with Wharf's store (bench.relay_app --store: uvicorn, uvloop, websockets-sansio, "
            "a MessageStore at the broker's defaults; per message parse, compiled encode, single append, "
            "read back, messages_frame), Wharf WebSocket JSON's client code"
        )


def plain_client(url: str, timeout_s: float = TIMEOUT_S) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` of one kept-alive connection."""
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    return httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits)


def wharf_lane(broker: BrokerProcess, kind: str) -> WharfLane:
    return PlainLane(broker, kind) if kind.startswith("plain-") else WharfLane(broker, kind)


async def one_at_a_time(
    samples: int,
    produce: Callable[[], Awaitable[Any]],
    arrivals: asyncio.Queue[float],
    reader: asyncio.Future[None] | None = None,
) -> list[float]:
    """Produce one message, wait for the producer's answer and for its arrival, ``samples`` times;
    the seconds from each send to its arrival. ``reader`` (the consuming task) must end with them."""
    latencies = []
    try:
        for _ in range(samples):
            sent = time.perf_counter()
            await produce()
            latencies.append(await asyncio.wait_for(arrivals.get(), TIMEOUT_S) - sent)
        if reader is not None:
            await asyncio.wait_for(reader, TIMEOUT_S)
    finally:
        if reader is not None and not reader.done():
            reader.cancel()
    return latencies


async def unreachable(system: str, url: str) -> str | None:
    """Why ``system`` at ``url`` cannot be measured here, or None when it answers."""
    try:
        if system == "redis":
            client = aioredis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
            try:
                await client.ping()
            finally:
                await client.aclose()
        elif system == "nats":

            async def quiet(_error: Exception) -> None: ...

            # The client retries a server that refuses for ever unless attempts are bounded.
            connection = await asyncio.wait_for(
                nats.connect(
                    url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=1, error_cb=quiet
                ),
                5,
            )
            try:
                await connection.jetstream(timeout=2).account_info()
            finally:
                await connection.close()
    except Exception as exc:  # whatever the client raises, the peer is not there to measure
        return f"{type(exc).__name__}: {exc}".strip()
    return None


class Bench:
    def __init__(self, plan: Plan, lanes: list[Lane]) -> None:
        self.plan = plan
        self.lanes = lanes
        self.run_name = f"peers-{os.getpid()}-{secrets.token_hex(3)}"
        self.streams = 0

    def stream(self) -> str:
        self.streams += 1
        return f"{self.run_name}-{self.streams}"

    async def opened(self, run: Callable[[], Awaitable[list[Result]]]) -> list[Result]:
        for lane in self.lanes:
            await lane.open()
        try:
            return await run()
        finally:
            for lane in self.lanes:
                await lane.close()

    async def round(self, lane: Lane, count: int) -> tuple[Rates, Rates]:
        """Produce, then consume ``count`` messages on a fresh stream: for each, the rate and the
        broker's and this client's CPU microseconds per message."""
        stream = self.stream()
        await lane.create(stream)
        try:
            with Measured(lane.pid, count) as produced:
                await produce_all(count, lambda size: lane.send(stream, size), lane.in_flight)
            with Measured(lane.pid, count) as consumed:
                size = await lane.consume(stream, count)
        finally:
            await lane.delete(stream)
        assert size == count * len(BODY), (lane.name, size, count)
        return produced.rates, consumed.rates

    async def throughput(self) -> list[Result]:
        plan = self.plan
        rates: dict[tuple[str, str], list[Rates]] = {}
        for lane in self.lanes:
            await self.round(lane, plan.warmup_messages)
        for _ in range(plan.repeats):
            for lane in self.lanes:
                produced, consumed = await self.round(lane, plan.messages)
                rates.setdefault((lane.name, "produce"), []).append(produced)
                rates.setdefault((lane.name, "consume"), []).append(consumed)
        results: list[Result] = []
        for what in ("produce", "consume"):
            rows = {
                lane.name: Result(
                    f"{lane.name} {what}",
                    "msgs/s",
                    [run.messages_per_s for run in rates[lane.name, what]],
                    note=lane.note if what == "produce" else "",
                    alias=lane.alias,
                )
                for lane in self.lanes
            }
            peers = [rows[lane.name] for lane in self.lanes if not isinstance(lane, WharfLane)]
            better = max(peers, key=lambda row: row.value, default=None)
            for name, (produce_goal, consume_goal) in THROUGHPUT_GOALS.items():
                if name in rows and better is not None:
                    rows[name].target = Target(
                        produce_goal if what == "produce" else consume_goal, on_ratio=True
                    )
                    rows[name].against(better)
            results += rows.values()
        for (name, what), runs in rates.items():
            results += cpu_rows(f"{name} {what}", runs)
        return results

    async def latency(self) -> list[Result]:
        plan = self.plan
        p50: dict[str, list[float]] = {lane.name: [] for lane in self.lanes}
        p99: dict[str, list[float]] = {lane.name: [] for lane in self.lanes}
        cpu: dict[str, list[Rates]] = {lane.name: [] for lane in self.lanes}
        for _ in range(plan.repeats):
            for lane in self.lanes:
                stream = self.stream()
                await lane.create(stream)
                try:
                    with Measured(lane.pid, plan.latency_samples) as run:
                        samples = await lane.latency(stream, plan.latency_samples)
                finally:
                    await lane.delete(stream)
                p50[lane.name].append(percentile(samples, 0.5) * 1000)
                p99[lane.name].append(percentile(samples, 0.99) * 1000)
                cpu[lane.name].append(run.rates)
        results = []
        for lane in self.lanes:
            results.append(
                Result(f"{lane.name} e2e p50", "ms", p50[lane.name], note=lane.latency_note, alias=lane.alias)
            )
        for lane in self.lanes:
            # The CPU of one message produced and delivered alone, both sockets' frames included.
            results += cpu_rows(f"{lane.name} e2e", cpu[lane.name])
        p99_rows = {
            lane.name: Result(f"{lane.name} e2e p99", "ms", p99[lane.name], alias=lane.alias)
            for lane in self.lanes
        }
        peers = [p99_rows[lane.name] for lane in self.lanes if not isinstance(lane, WharfLane)]
        # Redis's p99 is the target; without Redis, the better peer's.
        redis = [row for row in peers if row.alias == RedisLane.alias]
        baseline = (redis or sorted(peers, key=lambda row: row.value))[:1]
        for name, goal in LATENCY_GOALS.items():
            wharf = p99_rows.get(name)
            if wharf is not None and baseline:
                wharf.target = Target(goal, at_least=False, on_ratio=True)
                wharf.against(baseline[0])
        return results + list(p99_rows.values())


def make_parser() -> argparse.ArgumentParser:
    parser = harness.arguments(
        "peers", __doc__, "5,000 messages, 200 latency samples, one repeat", SECTIONS, raw=True
    )
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated subset of {SYSTEMS}")
    parser.add_argument("--redis", default=REDIS_URL, help="the Redis server to measure")
    parser.add_argument("--nats", default=NATS_URL, help="the NATS server (with JetStream) to measure")
    parser.add_argument("--messages", type=int, help="messages per system and repeat (throughput)")
    parser.add_argument("--samples", type=int, help="latency samples per system and repeat")
    parser.add_argument(
        "--wharf",
        default=",".join(WHARF_LANES),
        help=f"comma-separated subset of Wharf's lanes {WHARF_LANES}",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args, plan, sections = harness.parse(make_parser(), argv, FULL, QUICK, SECTIONS)
    systems = harness.select_sections(args.systems, SYSTEMS)
    kinds = harness.select_sections(args.wharf, WHARF_LANES)
    if systems is None or kinds is None:
        return 2
    if args.messages:
        plan = replace(plan, messages=args.messages, warmup_messages=min(plan.warmup_messages, args.messages))
    if args.samples:
        plan = replace(plan, latency_samples=args.samples)
    started = time.perf_counter()
    skipped = {}
    for system, url in {"redis": args.redis, "nats": args.nats}.items():
        if system in systems and (reason := asyncio.run(unreachable(system, url))) is not None:
            print(f"skipping {system} at {url}: {reason}")
            skipped[system] = reason
    with harness.scratch_dir("peers-bench-", harness.scratch_parent()) as root:
        broker = BrokerProcess(root / "store", **broker_settings())

        def runs(kind: str) -> bool:
            """Whether Wharf lane ``kind`` has a section to run in."""
            return "wharf" in systems and kind in kinds and bool(set(WHARF_SECTIONS[kind]) & set(sections))

        # The floors' relay, and the store floor's (a relay with a store of its own), when needed.
        floor = any(runs(kind) for kind in FLOOR_KINDS if kind not in STORE_FLOORS)
        relay = RelayProcess(root / "relay.log") if floor else None
        store_floor = any(runs(kind) for kind in STORE_FLOORS)
        store_relay = RelayProcess(root / "relay-store.log", root / "relay-store") if store_floor else None
        try:
            broker.start()
            if relay is not None:
                relay.start()
            if store_relay is not None:
                store_relay.start()
            lanes: list[Lane] = []
            if "redis" in systems and "redis" not in skipped:
                lanes.append(RedisLane(args.redis))
            if "nats" in systems and "nats" not in skipped:
                lanes.append(NatsLane(args.nats))
            if "wharf" in systems:
                for kind in kinds:
                    if kind not in FLOOR_KINDS:
                        lanes.append(wharf_lane(broker, kind))
                    elif kind == "ws-store-floor":
                        if store_relay is not None:
                            lanes.append(WsStoreFloorLane(store_relay))
                    elif kind in STORE_FLOORS:
                        if store_relay is not None:
                            lanes.append(StoreFloorLane(store_relay, kind))
                    elif relay is not None:
                        lanes.append(FloorLane(relay, kind) if kind in FLOOR_OF else WsFloorLane(relay))
            bench = Bench(plan, lanes)

            def run(section: str) -> list[Result]:
                bench.lanes = [lane for lane in lanes if section in lane.sections]
                return asyncio.run(bench.opened(getattr(bench, section)))

            results = harness.run_sections(sections, run)
        finally:
            if relay is not None:
                relay.stop()
            if store_relay is not None:
                store_relay.stop()
            broker.stop()
    settings = {
        "plan": asdict(plan),
        "sections": sections,
        "systems": systems,
        "wharf_lanes": kinds,
        "skipped": skipped,
        "body_bytes": len(BODY),
        "batch": BATCH,
        "in_flight": IN_FLIGHT,
        "plain_in_flight": PlainLane.in_flight,
        "plain_pull_messages": PULL_MESSAGES,
        "long_poll_ms": LONG_POLL_MS,
    }
    harness.report("peers", args.json, argv, results, settings, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
