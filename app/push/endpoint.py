"""Which endpoints a push subscription may deliver to: ``http://`` and ``https://`` URLs with a host,
whose every address is public. Loopback, link-local, private, shared (100.64/10), multicast,
reserved and unspecified addresses are refused - a push would otherwise reach the broker's own
network (a cloud's metadata service at 169.254.169.254, an admin port on localhost) - unless the
operator allows them (``WHARF_PUSH_ALLOW_PRIVATE=true``).

The addresses are looked at when a subscription is created or changed, and again by its pusher
before a request once every :data:`RECHECK_INTERVAL_S` (:class:`EndpointGuard`): a name that comes to
resolve to a private address later (DNS rebinding) is refused then, each request a failure.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from app.broker.errors import InvalidParameterError

SCHEMES = ("http", "https")
RECHECK_INTERVAL_S = 60.0


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


class EndpointGuard:
    """Whether a subscription's requests may go to its endpoint now: its addresses, looked at again
    every ``interval_s`` (never with ``allow_private``)."""

    def __init__(
        self,
        url: str,
        allow_private: bool,
        interval_s: float = RECHECK_INTERVAL_S,
        check: Callable[[str, bool], Awaitable[None]] = check_endpoint,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url
        self.allow_private = allow_private
        self.interval_s = interval_s
        self._check = check
        self._clock = clock
        self._next_check = 0.0
        self._refusal: str | None = None

    async def refusal(self) -> str | None:
        """Why no request may go to the endpoint now, or None."""
        if self.allow_private:
            return None
        now = self._clock()
        if now >= self._next_check:
            self._next_check = now + self.interval_s
            try:
                await self._check(self.url, False)
                self._refusal = None
            except InvalidParameterError as error:
                self._refusal = error.message
        return self._refusal
