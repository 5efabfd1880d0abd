"""Unique ids for messages whose producer gave none (RocketMQ's MessageClientIDSetter)."""

from __future__ import annotations

import os
import secrets
import socket
import time


class UniqueIdGenerator:
    """32 hex digits: host, process and a random salt, then a counter - unique without coordination."""

    def __init__(self) -> None:
        try:
            address = socket.inet_aton(socket.gethostbyname(socket.gethostname()))
        except OSError:
            address = b"\x7f\0\0\x01"
        prefix = address + (os.getpid() & 0xFFFF).to_bytes(2, "big") + secrets.token_bytes(4)
        self.prefix = prefix.hex().upper()
        self.counter = int(time.time() * 1000) << 8  # the next id's; its low 48 bits are written

    def next(self) -> str:
        counter = self.counter
        self.counter = counter + 1
        return f"{self.prefix}{counter & 0xFFFFFFFFFFFF:012X}"
