"""A producer's check endpoint for the tests: a real HTTP server on a free port that records every
check the broker sends and answers each with the status chosen for its transaction."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class CheckEndpoint:
    def __init__(self) -> None:
        self.checks: list[dict[str, Any]] = []
        self.answers: dict[str, str] = {}  # transaction id -> "commit", "rollback" or "unknown"
        self.default = "unknown"
        self._lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
                length = int(self.headers.get("content-length", "0"))
                check = json.loads(self.rfile.read(length))
                with endpoint._lock:
                    endpoint.checks.append(check)
                    status = endpoint.answers.get(check["transaction_id"], endpoint.default)
                body = json.dumps({"status": status}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/check"

    def checks_of(self, transaction_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [check for check in self.checks if check["transaction_id"] == transaction_id]

    def wait_for_checks(
        self, transaction_id: str, count: int, timeout_s: float = 30.0
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_s
        while len(found := self.checks_of(transaction_id)) < count:
            assert time.monotonic() < deadline, f"{len(found)} checks of {transaction_id}, {count} wanted"
            time.sleep(0.05)
        return found


@contextmanager
def check_endpoint() -> Iterator[CheckEndpoint]:
    endpoint = CheckEndpoint()
    thread = threading.Thread(target=endpoint.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        endpoint.server.shutdown()
        endpoint.server.server_close()
        thread.join()
