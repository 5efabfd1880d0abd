"""The broker core: its operations as plain Python over the store, the pull hold service and the
route registry, with its own exceptions (:mod:`app.broker.errors`). No web framework here: the
HTTP and WebSocket adapters in app/api parse, call the core, encode and map its exceptions."""

from wharf_client.unique_ids import UniqueIdGenerator

from app.broker.core import Broker, parse_start
from app.broker.errors import BrokerError
from app.broker.pull import MAX_SCAN_SLICES_PER_PULL, Read, read_or_hold

__all__ = [
    "MAX_SCAN_SLICES_PER_PULL",
    "Broker",
    "BrokerError",
    "Read",
    "UniqueIdGenerator",
    "parse_start",
    "read_or_hold",
]
