"""Remote address patterns of the ACL file: ``globalWhiteRemoteAddresses`` and an account's
``whiteRemoteAddress``, in RocketMQ's notation plus CIDR.

===========================  ===============================================================
pattern                      matches
===========================  ===============================================================
(empty)                      nothing
``*``, ``*.*.*.*``           every address (IPv4 and IPv6)
``192.168.0.7``, ``::1``     that address
``192.168.0.*``              a wildcard octet (any octet may be ``*``)
``192.168.0.1-19``           a range of an octet (any octet), bounds included
``192.168.0.{1,7,9}``        a set of values of an octet (any octet)
``10.0.0.0/8``, ``fd00::/8`` a CIDR network
``a,b,c``                    any of the comma-separated patterns above (but ``{...}``)
===========================  ===============================================================

An IPv4-mapped IPv6 peer (``::ffff:10.1.2.3``) is matched as its IPv4 address.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_EVERYTHING = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})
_OCTET = re.compile(r"^(?:\*|\d{1,3}|\d{1,3}-\d{1,3}|\{\d{1,3}(?:,\d{1,3})*\})$")


def parse_address(host: str | None) -> IPAddress | None:
    """The peer's address, IPv4-mapped IPv6 unwrapped; None when it is not an IP address."""
    if not host:
        return None
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _octet_ranges(spec: str, pattern: str) -> tuple[tuple[int, int], ...]:
    if spec == "*":
        return ((0, 255),)
    if spec.startswith("{"):
        values = [int(part) for part in spec[1:-1].split(",")]
        ranges = tuple((value, value) for value in values)
    elif "-" in spec:
        low, high = (int(part) for part in spec.split("-"))
        if low > high:
            raise ValueError(f"{pattern!r}: range {spec} runs backwards")
        ranges = ((low, high),)
    else:
        ranges = ((int(spec), int(spec)),)
    if any(high > 255 for _, high in ranges):
        raise ValueError(f"{pattern!r}: {spec} is not an octet (0-255)")
    return ranges


@dataclass(frozen=True, slots=True)
class _Octets:
    """An IPv4 pattern: per octet, the ranges of values it accepts."""

    octets: tuple[tuple[tuple[int, int], ...], ...]

    def matches(self, address: IPAddress) -> bool:
        if not isinstance(address, ipaddress.IPv4Address):
            return False
        return all(
            any(low <= value <= high for low, high in ranges)
            for value, ranges in zip(address.packed, self.octets, strict=True)
        )


@dataclass(frozen=True, slots=True)
class _Network:
    network: IPNetwork

    def matches(self, address: IPAddress) -> bool:
        return address.version == self.network.version and address in self.network


def _parse_one(text: str, pattern: str) -> _Octets | _Network:
    if "/" in text:
        try:
            return _Network(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(f"{pattern!r}: {text!r} is not a CIDR network") from None
    parts = text.split(".")
    if len(parts) == 4 and all(_OCTET.match(part) for part in parts):
        return _Octets(tuple(_octet_ranges(part, pattern) for part in parts))
    try:
        address = parse_address(text)
    except ValueError:
        address = None
    if address is None:
        raise ValueError(f"{pattern!r}: {text!r} is not an address, a wildcard, a range nor a network")
    return _Network(ipaddress.ip_network(address))


@dataclass(frozen=True, slots=True)
class AddressPattern:
    """One ``whiteRemoteAddress`` (or one item of ``globalWhiteRemoteAddresses``)."""

    text: str
    everything: bool
    alternatives: tuple[_Octets | _Network, ...]

    @classmethod
    def parse(cls, pattern: str | None) -> AddressPattern:
        """ValueError, naming the pattern, when it is not one of the documented forms."""
        text = (pattern or "").strip()
        if not text:
            return cls("", False, ())
        if text in _EVERYTHING:
            return cls(text, True, ())
        # A comma inside braces lists octet values; elsewhere it separates whole patterns.
        items = [text] if "{" in text else [item.strip() for item in text.split(",")]
        if any(not item for item in items):
            raise ValueError(f"{text!r}: an empty item between commas")
        if any(item in _EVERYTHING for item in items):
            return cls(text, True, ())
        return cls(text, False, tuple(_parse_one(item, text) for item in items))

    def matches(self, address: IPAddress | None) -> bool:
        if self.everything:
            return True
        if address is None:
            return False
        return any(alternative.matches(address) for alternative in self.alternatives)
