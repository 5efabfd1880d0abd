"""The history of a nemesis run: one JSON object per operation and its outcome, in a file as it
happens (so a run that hangs still leaves what it did) and in memory for the checker."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import orjson


class History:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.events: list[dict[str, Any]] = []
        self._began = time.monotonic()
        self._lock = threading.Lock()
        self._file = open(path, "wb")  # noqa: SIM115 - closed by close()

    def now(self) -> float:
        return round(time.monotonic() - self._began, 4)

    def add(self, kind: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            event = {"t": self.now(), "kind": kind, **fields}
            self.events.append(event)
            self._file.write(orjson.dumps(event) + b"\n")
            return event

    def flush(self) -> None:
        with self._lock:
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()
