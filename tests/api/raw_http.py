"""HTTP/1.1 over a plain socket, for requests no well-behaved client would send."""

from __future__ import annotations

import socket
from dataclasses import dataclass

import orjson


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def envelope(self) -> dict[str, object]:
        document = orjson.loads(self.body)
        assert isinstance(document, dict), self.body
        assert set(document) >= {"error_code", "message"}, document
        assert document["error_code"] // 100 == self.status, (self.status, document)
        return document


def connect(port: int, timeout_s: float = 30.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def read_response(sock: socket.socket) -> RawResponse:
    """One response, read to its Content-Length (a refusal always sends one)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return RawResponse(int(status_line.split()[1]), headers, body[:length])


def exchange(port: int, request: bytes, timeout_s: float = 30.0) -> RawResponse:
    with connect(port, timeout_s) as sock:
        sock.sendall(request)
        return read_response(sock)


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the other side sends until it closes (end of file or a reset); a socket timeout
    raises when it does not."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data
