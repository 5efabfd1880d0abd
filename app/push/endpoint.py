"""Which endpoints a push subscription may deliver to: ``http://`` and ``https://`` URLs with a host,
whose every address is public. Loopback, link-local, private, shared (100.64/10), multicast,
reserved and unspecified addresses are refused - a push would otherwise reach the broker's own
network (a cloud's metadata service at 169.254.169.254, an admin port on localhost) - unless the
operator allows them (``WHARF_PUSH_ALLOW_PRIVATE=true``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit

from app.broker.errors import InvalidParameterError

SCHEMES = ("http", "https")


def is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


async def check_endpoint(url: str, allow_private: bool) -> None:
    """Refuse (InvalidParameterError) a URL pushes may not go to."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise InvalidParameterError(f"url {url!r} is not a URL: {error}") from None
    if parts.scheme not in SCHEMES:
        raise InvalidParameterError(
            f"url must be http:// or https://, not {parts.scheme or 'without a scheme'}"
        )
    host = parts.hostname
    if not host:
        raise InvalidParameterError(f"url {url!r} names no host")
    if parts.fragment:
        raise InvalidParameterError("url must not have a fragment")
    if allow_private:
        return
    try:
        found = await asyncio.get_running_loop().getaddrinfo(
            host, port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM
        )
    except (OSError, UnicodeError) as error:
        raise InvalidParameterError(f"host {host!r} of url does not resolve: {error}") from None
    for *_, sockaddr in found:
        address = str(sockaddr[0])
        if not is_public(address):
            raise InvalidParameterError(
                f"host {host!r} of url resolves to {address}, a loopback, link-local or private "
                "address: pushes go to public addresses (WHARF_PUSH_ALLOW_PRIVATE=true allows it)"
            )
