"""A real HTTP endpoint on loopback for push tests: records every request it is sent and answers
what the test's ``respond`` says (a status, and headers), or never answers while ``hang`` says so."""

from __future__ import annotations

import dataclasses
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from tests.api.server import BrokerProcess


@dataclasses.dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes
    number: int  # 0 for the first request the receiver got
    at: float  # time.monotonic() when it came

    @property
    def offset(self) -> tuple[str, int, int]:
        return (
            self.headers["wharf-topic"],
            int(self.headers["wharf-queue-id"]),
            int(self.headers["wharf-queue-offset"]),
        )


Answer = int | tuple[int, dict[str, str]]


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # many subscriptions connect at once
    daemon_threads = True


class Receiver:
    def __init__(
        self, respond: Callable[[Received], Answer] = lambda _: 200, tls: tuple[Path, Path] | None = None
    ) -> None:
        self.respond = respond
        self.received: list[Received] = []
        self.open_requests = 0
        self.most_open = 0
        self.hang = threading.Event()  # while set, requests get no answer
        self.hang_from: int | None = None  # requests from this number on get no answer
        self._released = threading.Event()
        self._changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - the http.server hook's name
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with receiver._changed:
                    request = Received(
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        len(receiver.received),
                        time.monotonic(),
                    )
                    receiver.received.append(request)
                    receiver.open_requests += 1
                    receiver.most_open = max(receiver.most_open, receiver.open_requests)
                    receiver._changed.notify_all()
                try:
                    if receiver.hang.is_set() or (
                        receiver.hang_from is not None and request.number >= receiver.hang_from
                    ):
                        receiver._released.wait()
                        return
                    answer = receiver.respond(request)
                    status, headers = (answer, {}) if isinstance(answer, int) else answer
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("content-length", "0")
                    self.end_headers()
                finally:
                    with receiver._changed:
                        receiver.open_requests -= 1
                        receiver._changed.notify_all()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls is not None:  # (certificate, key): an https endpoint
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def hang_after(self, answered: int) -> None:
        """Answer the first ``answered`` requests, then none until :meth:`answer_all`."""
        self.hang_from = answered

    def answer_all(self) -> None:
        """Answer every request from now on (those left hanging stay so: their caller is gone)."""
        self.hang_from = None
        self.hang.clear()

    def wait_for(self, done: Callable[[list[Received]], bool], timeout_s: float = 60.0) -> list[Received]:
        """Wait until ``done`` holds for the requests received (a bound on a failing test, not a timing
        assertion); the requests."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not done(self.received):
                left = deadline - time.monotonic()
                assert left > 0, (
                    f"the receiver got {len(self.received)} requests and the test waited for more"
                )
                self._changed.wait(left)
            return list(self.received)

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._released.set()
        self.server.shutdown()
        self.server.server_close()


def wait_until(check: Callable[[], Any], timeout_s: float = 60.0, what: str = "the condition") -> Any:
    """Poll the broker until ``check`` answers something true (a bound for a failing test)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}"
        time.sleep(0.05)


@contextmanager
def push_broker(store_dir: Any, **settings: object) -> Iterator[tuple[BrokerProcess, httpx.Client]]:
    process = BrokerProcess(store_dir, push_allow_private="true", **settings).start()
    try:
        with httpx.Client(base_url=process.url, timeout=30) as http:
            yield process, http
    finally:
        process.stop()


def subscribe(http: httpx.Client, group: str, **fields: object) -> dict[str, Any]:
    answer = http.put(f"/v1/groups/{group}/push", json=fields)
    assert answer.status_code in (200, 201), answer.text
    found: dict[str, Any] = answer.json()
    return found


def produce(http: httpx.Client, topic: str, *messages: dict[str, Any]) -> list[dict[str, Any]]:
    answer = http.post(f"/v1/topics/{topic}/messages", json={"messages": list(messages)})
    assert answer.status_code in (200, 201), answer.text
    results: list[dict[str, Any]] = answer.json()["results"]
    return results


def state(http: httpx.Client, group: str) -> dict[str, Any]:
    answer = http.get(f"/v1/groups/{group}/push")
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()["state"]
    return found


def committed(http: httpx.Client, group: str, topic: str) -> dict[int, int | None]:
    answer = http.get(f"/v1/groups/{group}/offsets", params={"topic": topic})
    assert answer.status_code == 200, answer.text
    return {row["queue_id"]: row["committed_offset"] for row in answer.json()["offsets"]}
