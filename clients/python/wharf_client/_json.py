"""JSON for the WebSocket frames: orjson when it happens to be installed (it is not a dependency),
else the standard library's json with the same compact output."""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson
except ImportError:  # pragma: no cover - depends on the environment
    orjson = None  # type: ignore[assignment]


def dumps(value: Any) -> str:
    """``value`` as compact JSON text."""
    if orjson is not None:
        return orjson.dumps(value).decode()
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def loads(data: str | bytes) -> Any:
    if orjson is not None:
        return orjson.loads(data)
    return json.loads(data)
