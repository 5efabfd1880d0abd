"""Schemathesis hooks for the fuzz run: how to put produce's own media types on the wire.

Loaded by ``st run`` through ``SCHEMATHESIS_HOOKS=tests.contract.fuzz_hooks``.
"""

from __future__ import annotations

from typing import Any

import schemathesis


@schemathesis.serializer("application/x-ndjson")
def ndjson(ctx: schemathesis.SerializationContext, value: Any) -> bytes:
    """The NDJSON body is documented as a string (one message object per line): send it as UTF-8."""
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8", "surrogatepass")


schemathesis.serializer.alias("application/vnd.wharf.batch", "application/octet-stream")
