"""Unique message ids (RocketMQ's MessageClientIDSetter) for the messages a producer sends without
one (a retry carries the same id, so the broker stores the message once), and the broker's for
the messages that came without one."""

from __future__ import annotations

import functools
import os
import secrets
import socket
import time


@functools.cache
def _host_address() -> bytes:
    """This host's IPv4 address, looked up once per process."""
    try:
        return socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        return b"\x7f\0\0\x01"


class UniqueIdGenerator:
    """32 hex digits: host, process and a random salt, then a counter - unique without coordination.

    Each producer has its own, made when the producer is (a process forked later makes producers of
    its own); the broker has one for the messages that came without an id."""

    def __init__(self) -> None:
        prefix = _host_address() + (os.getpid() & 0xFFFF).to_bytes(2, "big") + secrets.token_bytes(4)
        self.prefix = prefix.hex().upper()
        self.counter = int(time.time() * 1000) << 8  # the next id's; its low 48 bits are written

    def next(self) -> str:
        counter = self.counter
        self.counter = counter + 1
        return f"{self.prefix}{counter & 0xFFFFFFFFFFFF:012X}"
