"""The producer's address as a record's born host (RocketMQ's BORNHOST): the client of the connection,
as uvicorn gives it - the peer, or what ``X-Forwarded-For`` says when the peer is a proxy listed in
``WHARF_FORWARDED_ALLOW_IPS``."""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from starlette.types import Scope

from app.store.record_format import NO_HOST, encode_host


@lru_cache(maxsize=4096)
def born_host(host: str, port: int) -> bytes:
    """The 8 bytes of an IPv4 client (an IPv4-mapped IPv6 one too); :data:`NO_HOST` for any other
    (Wharf reads RocketMQ's IPv6 layout, a 16-byte host flagged in the sysflag, but writes IPv4
    hosts only, so that every record it writes has its fields where the append path patches them)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # a unix socket path, or a name a test client made up
        return NO_HOST
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is None:
            return NO_HOST
        address = address.ipv4_mapped
    return encode_host(str(address), port if 0 <= port < 1 << 32 else 0)


def client_born_host(scope: Scope) -> bytes:
    """The born host of the request or WebSocket whose ASGI scope this is."""
    client = scope.get("client")
    if not client:
        return NO_HOST
    return born_host(str(client[0]), int(client[1] or 0))
