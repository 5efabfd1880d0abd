"""A small synchronous WebSocket client with JSON frames, HTTP helpers, and a server on a thread
of the test's process, for the protocol tests."""

from __future__ import annotations

import asyncio
import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlencode

import httpx
import orjson
import uvicorn
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

_names = itertools.count()


def new_topic(client: httpx.Client, prefix: str, queues: int = 4, perm: int = 6) -> str:
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in f"{prefix[:60]}-{next(_names)}")
    response = client.post("/v1/topics", json={"name": name, "queues": queues, "perm": perm})
    assert response.status_code == 201, response.text
    return name


def produce(client: httpx.Client, topic: str, *bodies: str, **fields: Any) -> list[dict[str, Any]]:
    response = client.post(
        f"/v1/topics/{topic}/messages", json={"messages": [{"body": body, **fields} for body in bodies]}
    )
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


class Socket:
    """A WebSocket with JSON frames; frames of other types are kept in ``skipped`` while waiting."""

    def __init__(self, url: str) -> None:
        self._connect = connect(url, open_timeout=10, close_timeout=5)
        self.connection: ClientConnection = self._connect.__enter__()
        self.skipped: list[dict[str, Any]] = []
        self.assignment: dict[str, Any] = {}

    def send(self, **frame: Any) -> None:
        self.connection.send(orjson.dumps(frame).decode())

    def frame(self, timeout_s: float = 10.0) -> dict[str, Any]:
        frame: dict[str, Any] = orjson.loads(self.connection.recv(timeout=timeout_s))
        return frame

    def next(self, kind: str, timeout_s: float = 10.0) -> dict[str, Any]:
        """The next frame of type ``kind``; frames of other types before it go to ``skipped``."""
        while True:
            frame = self.frame(timeout_s)
            if frame["type"] == kind:
                return frame
            self.skipped.append(frame)

    def messages(self, count: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """Exactly the next ``count`` messages (fails if a frame carries more than that)."""
        found: list[dict[str, Any]] = []
        while len(found) < count:
            found.extend(self.next("messages", timeout_s)["messages"])
        assert len(found) == count, f"expected {count} messages, a frame brought {len(found)}"
        return found

    def status(self) -> dict[str, Any]:
        """The broker's status reply. Client frames are handled in order, so every message frame sent
        before the reply was sent before the broker looked at its credit."""
        self.send(type="status")
        return self.next("status")

    def closed(self, timeout_s: float = 10.0) -> tuple[int, str]:
        """Wait for the broker's close frame: (code, reason)."""
        try:
            while True:
                self.frame(timeout_s)
        except ConnectionClosed as closed:
            assert closed.rcvd is not None, "the socket was dropped without a close frame"
            return closed.rcvd.code, closed.rcvd.reason

    def close(self) -> None:
        self._connect.__exit__(None, None, None)

    def __enter__(self) -> Socket:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Reachable(Protocol):
    """A broker served at ``url`` (a process, or a server of this process)."""

    url: str


class WsBroker:
    """Connect to a broker's WebSocket endpoints."""

    def __init__(self, process: Reachable) -> None:
        self.base = process.url.replace("http://", "ws://", 1)

    def connect(self, path: str, **params: Any) -> Socket:
        query = urlencode({name: value for name, value in params.items() if value is not None})
        return Socket(f"{self.base}{path}?{query}")

    def subscribe(self, **params: Any) -> Socket:
        """A subscription; the assignment frame (sent once the start offsets are fixed) is read."""
        socket = self.connect("/v1/ws/subscribe", **params)
        socket.assignment = socket.next("assignment")
        return socket

    def produce(self, topic: str) -> Socket:
        return self.connect("/v1/ws/produce", topic=topic)


def held_pulls(client: httpx.Client) -> int:
    return int(client.get("/v1/stats").json()["held_pulls"])


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Poll an observable condition until it holds or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


class Serving(NamedTuple):
    url: str
    loop: asyncio.AbstractEventLoop  # the server's event loop, on its thread


@contextmanager
def on_a_thread(config: uvicorn.Config, listener: socket.socket) -> Iterator[Serving]:
    """``config``'s app served by uvicorn on a thread of this process, on ``listener`` (bound and
    listening), from the moment it has started until the block ends."""
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: running.started, timeout_s=30), "the server did not start"
        yield Serving(f"http://127.0.0.1:{listener.getsockname()[1]}", running.servers[0].get_loop())
    finally:
        running.should_exit = True
        thread.join(10)
        listener.close()
