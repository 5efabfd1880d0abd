"""A WebSocket client on a plain TCP socket, for clients no library would be: ones that never read, or
that send frames a library refuses to build (bad UTF-8, wrong lengths, huge frames).

The upgrade handshake is written by hand; frames are built and parsed here (RFC 6455, client frames
masked). Nothing is read unless the test asks, so a socket with a tiny receive buffer holds the
broker's frames in the broker's send path, as a stalled browser tab would.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
from urllib.parse import urlencode, urlsplit

TEXT = 0x1
BINARY = 0x2
CLOSE = 0x8
PING = 0x9
PONG = 0xA


def encode_frame(opcode: int, payload: bytes, *, fin: bool = True, length: int | None = None) -> bytes:
    """One masked client frame. ``length`` declares another payload length than the real one."""
    declared = len(payload) if length is None else length
    head = bytearray([(0x80 if fin else 0) | opcode])
    if declared < 126:
        head.append(0x80 | declared)
    elif declared < 1 << 16:
        head.append(0x80 | 126)
        head += struct.pack(">H", declared)
    else:
        head.append(0x80 | 127)
        head += struct.pack(">Q", declared)
    mask = os.urandom(4)
    head += mask
    return bytes(head) + bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))


class RawWebSocket:
    """A hand-made WebSocket connection: ``recv_buffer_bytes`` sets SO_RCVBUF before connecting."""

    def __init__(self, url: str, path: str, recv_buffer_bytes: int | None = None, **params: object) -> None:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if recv_buffer_bytes is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer_bytes)
        self.sock.settimeout(10)
        self.sock.connect((host, port))
        query = urlencode({name: value for name, value in params.items() if value is not None})
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path}?{query} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        self._buffer = b""
        while b"\r\n\r\n" not in self._buffer:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the server closed the connection during the handshake")
            self._buffer += chunk
        head, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status + b" ":
            raise ConnectionError(f"no upgrade: {status.decode(errors='replace')}")

    def send_frame(self, opcode: int, payload: bytes, **options: object) -> None:
        self.sock.sendall(encode_frame(opcode, payload, **options))  # type: ignore[arg-type]

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_text(self, text: str) -> None:
        self.send_frame(TEXT, text.encode())

    def _read_exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            chunk = self.sock.recv(max(65536, size - len(self._buffer)))
            if not chunk:
                raise EOFError("the connection ended")
            self._buffer += chunk
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def read_frame(self) -> tuple[int, bytes]:
        """The next server frame as (opcode, payload); EOFError when the connection ends first."""
        first, second = self._read_exactly(2)
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack(">H", self._read_exactly(2))
        elif length == 127:
            (length,) = struct.unpack(">Q", self._read_exactly(8))
        return first & 0x0F, self._read_exactly(length)

    def read_until_close(self, max_bytes: int, timeout_s: float) -> tuple[int | None, str, int]:
        """Read every frame until the server's close frame or the end of the connection.

        Answers (close code or None when the connection ended without one, reason, bytes of data
        frames read before it). Raises AssertionError when more than ``max_bytes`` of data frames
        come first: the server went on sending instead of closing.
        """
        self.sock.settimeout(timeout_s)
        received = 0
        try:
            while True:
                opcode, payload = self.read_frame()
                if opcode == CLOSE:
                    code = struct.unpack(">H", payload[:2])[0] if len(payload) >= 2 else None
                    return code, payload[2:].decode(errors="replace"), received
                received += len(payload)
                if received > max_bytes:
                    raise AssertionError(f"{received} bytes arrived and the server has not closed")
        except (EOFError, ConnectionResetError):
            return None, "", received

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawWebSocket:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
