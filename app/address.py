"""The address a broker advertises when it listens on every interface.

Routes and message ids carry the broker's advertised address (``WHARF_ADVERTISED_URL``): clients and
other brokers connect to it. ``0.0.0.0`` (or ``::``) is where a server listens, never an address
anyone can reach, so a broker bound to a wildcard without an advertised URL advertises an IPv4
address of its own instead (message ids hold IPv4 addresses): the one of the interface its default
route leaves by (in a container, the container's address), else its host name's if that is not a
loopback address, else 127.0.0.1.
"""

from __future__ import annotations

import functools
import ipaddress
import socket

WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})

# TEST-NET-1 (RFC 5737): a UDP connect() only picks the outgoing interface, it sends nothing.
_ROUTE_PROBE = ("192.0.2.1", 9)


def is_wildcard(host: str) -> bool:
    """Whether ``host`` means "every interface" rather than one address."""
    return host.strip() in WILDCARD_HOSTS


def _default_route_ipv4() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(_ROUTE_PROBE)
        except OSError:  # no default route
            return None
        return str(probe.getsockname()[0])


def _hostname_ipv4() -> str | None:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return None


def _reachable(candidate: str | None) -> bool:
    if not candidate:
        return False
    address = ipaddress.ip_address(candidate)
    return not (address.is_loopback or address.is_unspecified)


@functools.cache
def reachable_ipv4() -> str:
    """This machine's IPv4 address for others to reach it by; the same for the process's lifetime."""
    for candidate in (_default_route_ipv4(), _hostname_ipv4()):
        if _reachable(candidate):
            return str(candidate)
    return "127.0.0.1"
