"""The HTTP floor: the thinnest "broker" plain HTTP users could reach on Wharf's serving stack.

A raw ASGI app (no FastAPI, no Starlette, no store, no validation) with the URL shapes the peers
benchmark's plain lanes use, keeping each topic's messages in a list in memory:

* ``POST /v1/topics/{t}/messages``: the body read whole, one message object (or ``{"messages":
  [...]}``) parsed with msgspec, each message's ``body`` kept as the raw JSON it came as and its
  ``encoding``, both put into the message a pull answers with one formatting each (the least a
  server of these JSON shapes can do), any long poll waiting on the topic woken, and a prepared answer of
  the shape Wharf gives (``{"results": [{"msg_id", "unique_id", "queue_id", "queue_offset",
  "status": "SEND_OK"}]}``). A binary batch (``application/vnd.wharf.batch``) is turned into
  records by the compiled kernel's encoder, in one call, as Wharf's own produce encodes it: the
  record is the wire format of a binary pull, so any server of it does this much.
* ``GET /v1/topics/{t}/queues/0/messages?offset=N&max_messages=M&max_wait_ms=W``: the messages from
  ``offset`` at once when there are any, else held on the topic's :class:`asyncio.Event` up to
  ``max_wait_ms``; answered as Wharf's JSON pull (``status``, ``next_offset``, ``messages`` with the
  fields of Wharf's, the body as it was posted), or, with ``Accept: application/vnd.wharf.records``,
  as Wharf's binary pull: the records joined, the count and next offset in headers.
* ``POST /v1/topics`` (201) and ``DELETE /v1/topics/{t}`` (200, the topic's messages dropped), so a
  lane can create and delete its stream; ``GET /readyz`` and ``/healthz`` answer 200.
* WebSocket ``/v1/ws/produce?topic=T``: each text frame one JSON message, kept as a POST keeps it,
  pushed at once to every subscriber of the topic, then answered ``{"type": "results", "results":
  [...]}``; ``/v1/ws/subscribe?topic=T``: an ``{"type": "assignment"}`` frame, then one ``{"type":
  "messages", "messages": [...]}`` frame per message produced after it (the frames a subscriber
  sends, permits, are read and ignored).

Served by uvicorn as the broker is (uvloop, httptools, one process, log level warning, no access
log), what a client gets from it is the ceiling of the plain HTTP path on this stack: the client,
the sockets and uvicorn, with nothing of Wharf::

    .venv/bin/python -m bench.relay_app --port 8081

With ``--store DIR`` (the store mode) the produce socket keeps each message in a real
:class:`~app.store.MessageStore` opened in ``DIR`` at the broker's default settings (opened at
start-up, closed at shutdown; the directory's lock gives each relay process a directory of its
own), doing for each frame exactly the store work Wharf's produce and subscribe sockets do for one
message, and nothing else: the frame parsed by the produce socket's own ``parse_message``, encoded
into a record by the kernel's encoder that Wharf's plain produce makes (``plain_encoder``, one
queue), appended with ``append_records``, read back with ``get_message``
and made into the subscriber's frame by Wharf's ``messages_frame``, pushed to the subscribers, then
the producer answered with the kernel's ``plain_answers``. No FastAPI, no tasks, no long-poll
service, no credit, no checks: what a client gets from it is the least a broker that parses, stores,
reads back and frames each message with Wharf's own store and codecs adds to the sockets, the
ceiling of any Python broker on this stack with this store. In the store mode the HTTP produce
stores each request's messages the same way, in one append (a JSON body parsed by Wharf's own
``wire.body_of``, a binary batch encoded by the kernel straight from its bytes), and a pull reads
them back with ``get_message`` and answers as Wharf does (``pull_body``, or the records joined)::

    .venv/bin/python -m bench.relay_app --port 8082 --store /tmp/relay-store

:class:`RelayProcess` runs it in a child process on a free port for the peers benchmark.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import msgspec
import orjson

from app.api import wire
from app.api.messages import pull_body
from app.api.ws.frames import messages_frame
from app.api.ws.produce import parse_message
from app.broker.plain import plain_encoder
from app.codec import BATCH_MEDIA_TYPE, RECORDS_MEDIA_TYPE, IncomingMessage
from app.routing.topic_config import TopicConfig
from app.settings import Settings
from app.store import MessageStore
from app.store.kernel import compiled
from app.store.record_format import BLANK_MIN_SIZE, NO_HOST, Limits
from tests.api.server import ROOT, free_port

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON_HEADERS = [(b"content-type", b"application/json")]
PULL_DEFAULT_MESSAGES = 32  # Wharf's default when a pull names no max_messages
# As long as Wharf's ids: a 32-digit hexadecimal msg_id and unique_id, the offset at the end.
MSG_ID = b"7F00000100001F900000000000%06X"
UNIQUE_ID = b"7F0000010000ABCD1234000000%06X"
RESULT = (
    b'{"msg_id":"'
    + MSG_ID
    + b'","unique_id":"'
    + UNIQUE_ID
    + b'","queue_id":0,"queue_offset":%d,"status":"SEND_OK"}'
)
ONE_RESULT = b'{"results":[' + RESULT + b"]}"
PULL = b'{"status":"%s","next_offset":%d,"min_offset":0,"max_offset":%d,"suggest_broker_id":0,"messages":['
# A pulled message as Wharf's JSON pull shows it: ids, topic (JSON), offset, body (raw JSON),
# encoding, timestamps.
MESSAGE = (
    b'{"msg_id":"' + MSG_ID + b'","unique_id":"' + UNIQUE_ID + b'","topic":%s,"queue_id":0,'
    b'"queue_offset":%d,"tags":"","keys":[],"properties":{},"body":%s,"encoding":"%s",'
    b'"born_timestamp":%d,"store_timestamp":%d,"reconsume_times":0}'
)
BATCH = BATCH_MEDIA_TYPE.encode()
RECORDS = RECORDS_MEDIA_TYPE.encode()
LIMITS = Limits()  # the store's defaults
RECORD_LIMIT = (1 << 30) - BLANK_MIN_SIZE  # a record fits a segment of Wharf's default 1 GiB
UNIQUE_ID_PREFIX = "7F0000010000ABCD1234"
FRAME_ROOM = 1 << 24  # the byte room of a subscriber's frame: one message always fits


class Posted(msgspec.Struct):
    """A posted message: its body as the raw JSON it came as, its encoding."""

    body: msgspec.Raw
    encoding: str = "utf8"


POSTED = msgspec.json.Decoder(Posted)
POSTED_LIST = msgspec.json.Decoder(list[Posted])
TOP_LEVEL = msgspec.json.Decoder(dict[str, msgspec.Raw])


def posted_messages(body: bytes) -> list[Posted]:
    """The messages of a produce body: ``{"messages": [...]}`` or one message object."""
    fields = TOP_LEVEL.decode(body)
    if "messages" in fields:
        return POSTED_LIST.decode(fields["messages"])
    return [POSTED.decode(body)]


class Topic:
    """One topic's messages, each already the JSON object a pull answers, the event its long polls
    wait on (set, then replaced, when a message comes) and its WebSocket subscribers' ``send``."""

    __slots__ = ("event", "messages", "records", "subscribers")

    def __init__(self) -> None:
        self.messages: list[bytes] = []
        self.records: list[bytes] = []  # binary batches' messages, as stored records
        self.event = asyncio.Event()
        self.subscribers: list[Send] = []

    def append(self, topic: str, posted: list[Posted]) -> list[int]:
        """``posted`` kept as the messages a pull answers; their offsets."""
        start = len(self.messages)
        now = int(time.time() * 1000)
        name = orjson.dumps(topic)
        self.messages.extend(
            MESSAGE % (offset, offset, name, offset, message.body, message.encoding.encode(), now, now)
            for offset, message in enumerate(posted, start)
        )
        return list(range(start, len(self.messages)))

    def append_batch(self, topic: str, data: bytes) -> list[int]:
        """A binary batch's messages, encoded into records in one compiled call; their offsets."""
        if compiled is None:
            raise RuntimeError("the relay's binary batches need the compiled kernel")
        encoder = compiled.PlainEncoder(
            topic,
            topic.encode(),
            NO_HOST,
            int(time.time() * 1000),
            LIMITS.max_message_size,
            LIMITS.max_properties_size,
            RECORD_LIMIT,
            1,  # one queue
            0,
            UNIQUE_ID_PREFIX,
            len(self.records),
            NO_HOST,
        )
        if not compiled.encode_batch(data, encoder):
            raise ValueError("not a plain batch")
        start = len(self.records)
        self.records.extend(record[0] for record in encoder.result()[0])
        return list(range(start, len(self.records)))

    def wake(self) -> None:
        self.event.set()
        self.event = asyncio.Event()


class StoredTopics:
    """The store mode: each produced message stored in ``store`` and read back as Wharf does for
    one message (see the module docstring), unique ids from one counter carried on."""

    def __init__(self, store_dir: Path) -> None:
        if compiled is None:
            raise RuntimeError("the relay's store mode needs the compiled kernel")
        self.store = MessageStore(Settings(store_dir=store_dir).store_config())
        self.counter = 0

    def produce(self, topic: str, data: str | bytes) -> tuple[bytes, bytes]:
        """One produce frame's message stored: the subscribers' ``messages`` frame and the
        producer's ``results`` frame."""
        assert compiled is not None
        message = parse_message(orjson.loads(data))
        if not isinstance(message, IncomingMessage):
            raise message
        store = self.store
        encoder = self._encoder(topic)
        if not compiled.encode_messages([message], encoder):
            raise ValueError("not a plain message")
        made, _ids, queues, size, _body_size, _round_robin, self.counter = encoder.result()
        appended = store.append_records(made, size, queues)
        result = store.get_message(topic, 0, appended[0].queue_offset, 1)
        pushed, _count = messages_frame(topic, 0, result.records, FRAME_ROOM)
        answers = compiled.plain_answers(made, appended, "SEND_OK")
        return pushed, orjson.dumps({"type": "results", "results": answers})

    def produce_http(self, topic: str, body: bytes, content_type: bytes) -> bytes:
        """A produce request's messages stored as Wharf's plain produce stores them, in one
        append: a binary batch encoded straight from its bytes, a JSON body parsed by Wharf's own
        decoder; the answer as Wharf's."""
        assert compiled is not None
        encoder = self._encoder(topic)
        if content_type == BATCH:
            encoded = compiled.encode_batch(body, encoder)
        else:
            messages = wire.body_of(body)
            encoded = messages is not None and compiled.encode_messages(messages, encoder)
        if not encoded:
            raise ValueError("not a plain batch")
        made, _ids, queues, size, _body_size, _round_robin, self.counter = encoder.result()
        appended = self.store.append_records(made, size, queues)
        return orjson.dumps({"results": compiled.plain_answers(made, appended, "SEND_OK")})

    def pull(
        self, topic: str, offset: int, count: int, records: bool
    ) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        """A pull's answer read from the store, as Wharf makes it: the records joined (with the
        count and next offset in headers), or Wharf's JSON answer."""
        result = self.store.get_message(topic, 0, offset, count)
        if records:
            return records_answer(result.records, result.next_offset)
        return pull_body(result, 0), JSON_HEADERS

    def has_past(self, topic: str, offset: int) -> bool:
        """Whether the topic's queue holds a message at ``offset`` or after it."""
        return self.store.max_offset(topic, 0) > offset

    def _encoder(self, topic: str) -> Any:
        """The kernel's encoder of plain messages into ``topic`` (one queue), ids carried on."""
        config = TopicConfig(topic, read_queue_nums=1, write_queue_nums=1)
        now_ms = int(time.time() * 1000)
        return plain_encoder(
            self.store, config, topic.encode(), now_ms, 0, (UNIQUE_ID_PREFIX, self.counter), NO_HOST
        )


topics: dict[str, Topic] = {}
stored: StoredTopics | None = None  # set by main() in the store mode


def topic_named(name: str) -> Topic:
    topic = topics.get(name)
    if topic is None:
        topic = topics[name] = Topic()
    return topic


async def answer(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] = JSON_HEADERS
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def read_body(receive: Receive) -> bytes:
    message = await receive()
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    chunks = [body]
    while message.get("more_body", False):
        message = await receive()
        chunks.append(message.get("body", b""))
    return b"".join(chunks)


def query(scope: Scope) -> dict[bytes, bytes]:
    raw: bytes = scope["query_string"]
    return dict(pair.partition(b"=")[::2] for pair in raw.split(b"&") if pair)


def header(scope: Scope, name: bytes) -> bytes:
    return next((value for key, value in scope["headers"] if key == name), b"")


async def produce(name: str, scope: Scope, receive: Receive, send: Send) -> None:
    body = await read_body(receive)
    topic = topic_named(name)
    if stored is not None:
        answered = stored.produce_http(name, body, header(scope, b"content-type"))
        topic.wake()
        await answer(send, 200, answered)
        return
    if header(scope, b"content-type") == BATCH:
        offsets = topic.append_batch(name, body)
    else:
        offsets = topic.append(name, posted_messages(body))
    topic.wake()
    if len(offsets) == 1:
        offset = offsets[0]
        await answer(send, 200, ONE_RESULT % (offset, offset, offset))
        return
    results = b",".join(RESULT % (offset, offset, offset) for offset in offsets)
    await answer(send, 200, b'{"results":[' + results + b"]}")


async def pull(name: str, scope: Scope, send: Send) -> None:
    params = query(scope)
    offset = int(params.get(b"offset", b"0"))
    count = int(params.get(b"max_messages", PULL_DEFAULT_MESSAGES))
    wait_s = int(params.get(b"max_wait_ms", b"0")) / 1000
    topic = topic_named(name)
    if stored is not None:
        if not stored.has_past(name, offset):
            await held(topic, wait_s)
        body, headers = stored.pull(name, offset, count, header(scope, b"accept") == RECORDS)
        await answer(send, 200, body, headers)
        return
    if header(scope, b"accept") == RECORDS:
        records = topic.records[offset : offset + count]
        await answer(send, 200, *records_answer(records, offset + len(records)))
        return
    if len(topic.messages) <= offset:
        await held(topic, wait_s)
    found = topic.messages[offset : offset + count]
    end = len(topic.messages)
    status = b"FOUND" if found else b"OFFSET_OVERFLOW_ONE"
    head = PULL % (status, offset + len(found), end)
    await answer(send, 200, head + b",".join(found) + b"]}")


async def held(topic: Topic, wait_s: float) -> None:
    """A long poll: until a message comes to ``topic`` or ``wait_s`` passes (none when 0)."""
    if wait_s > 0:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait_s):
                await topic.event.wait()


def records_answer(records: list[bytes], next_offset: int) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """A binary pull's answer, as Wharf's: the records joined, their count and the next offset in
    headers."""
    headers = [
        (b"content-type", RECORDS),
        (b"x-wharf-message-count", b"%d" % len(records)),
        (b"x-wharf-next-offset", b"%d" % next_offset),
    ]
    return b"".join(records), headers


async def produce_socket(name: str, receive: Receive, send: Send) -> None:
    """Each frame one message: stored (in the store mode, in the store), pushed to the topic's
    subscribers, then answered."""
    topic = topic_named(name)
    await send({"type": "websocket.accept"})
    while True:
        event = await receive()
        if event["type"] != "websocket.receive":
            return
        text = event.get("text")
        if stored is not None:
            pushed, answered = stored.produce(name, text if text is not None else event["bytes"])
        else:
            posted = POSTED.decode(text.encode() if text is not None else event["bytes"])
            (offset,) = topic.append(name, [posted])
            pushed = b'{"type":"messages","messages":[' + topic.messages[offset] + b"]}"
            answered = b'{"type":"results","results":[' + RESULT % (offset, offset, offset) + b"]}"
        for subscriber in list(topic.subscribers):
            await subscriber({"type": "websocket.send", "text": pushed.decode()})
        await send({"type": "websocket.send", "text": answered.decode()})


async def subscribe_socket(name: str, receive: Receive, send: Send) -> None:
    """An assignment frame, then every message produced while the socket is open."""
    topic = topic_named(name)
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.send", "text": '{"type":"assignment","queues":[{"queue_id":0}]}'})
    topic.subscribers.append(send)
    try:
        while (await receive())["type"] == "websocket.receive":
            pass  # permits: the relay pushes regardless
    finally:
        topic.subscribers.remove(send)


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The relay: produce, long-poll pull, topic create and delete, the produce and subscribe
    sockets (see the module docstring)."""
    kind = scope["type"]
    if kind == "lifespan":
        while True:
            event = await receive()
            if stored is not None:
                # The store's files and its directory lock live as long as the server serves.
                if event["type"] == "lifespan.startup":
                    stored.store.open()
                elif event["type"] == "lifespan.shutdown":
                    stored.store.close()
            await send({"type": event["type"] + ".complete"})
            if event["type"] == "lifespan.shutdown":
                return
    if kind == "websocket":
        if (await receive())["type"] != "websocket.connect":
            return
        name = query(scope).get(b"topic", b"").decode()
        if scope["path"] == "/v1/ws/produce":
            await produce_socket(name, receive, send)
        elif scope["path"] == "/v1/ws/subscribe":
            await subscribe_socket(name, receive, send)
        else:
            await send({"type": "websocket.close", "code": 1008})
        return
    if kind != "http":
        return
    method: str = scope["method"]
    parts = scope["path"].split("/")  # "", "v1", "topics", name, ...
    if parts[1:3] == ["v1", "topics"]:
        if len(parts) == 5 and parts[4] == "messages" and method == "POST":
            await produce(parts[3], scope, receive, send)
            return
        if len(parts) == 7 and parts[4:] == ["queues", "0", "messages"] and method == "GET":
            await pull(parts[3], scope, send)
            return
        if len(parts) == 3 and method == "POST":
            await read_body(receive)
            await answer(send, 201, b"{}")
            return
        if len(parts) == 4 and method == "DELETE":
            topics.pop(parts[3], None)
            await answer(send, 200, b"{}")
            return
    elif scope["path"] in ("/readyz", "/healthz"):
        await answer(send, 200, b'{"status":"ok"}')
        return
    await answer(send, 404, b'{"error":"not found"}')


class RelayProcess:
    """``python -m bench.relay_app`` in a child process on a free port, its output in ``log_path``;
    in the store mode (``--store``) when given ``store_dir``."""

    def __init__(self, log_path: Path, store_dir: Path | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.store_dir = store_dir
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> RelayProcess:
        command = [sys.executable, "-m", "bench.relay_app", "--port", str(self.port)]
        if self.store_dir is not None:
            command += ["--store", str(self.store_dir)]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"relay exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"relay did not become ready in {timeout_s} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.relay_app", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--store", type=Path, help="the store mode: a MessageStore in this directory")
    args = parser.parse_args(argv)
    if args.store is not None:
        global stored
        stored = StoredTopics(args.store)
    import uvicorn

    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        ws="websockets-sansio",  # as the broker serves its sockets
        log_level="warning",
        access_log=False,
        lifespan="on",
        # A long poll still held when the run ends need not keep the process up.
        timeout_graceful_shutdown=2,
    )


if __name__ == "__main__":
    main()
