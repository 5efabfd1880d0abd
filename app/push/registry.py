"""The push subscriptions of a broker, kept in ``config/pushSubscriptions.json`` under the store
directory and rewritten atomically (temporary file, fsync, rename) on every change, before the
change is answered::

    {"subscriptions": {"<group>": {"topic": ..., "url": ..., "secret": "whsec_...", ...}}}

The file holds the signing secrets: it is written with mode 0600.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from app.push.subscription import PushSubscription, from_stored, to_stored
from app.store.atomic_file import write_atomically

FILE_NAME = "pushSubscriptions.json"


class PushRegistry:
    def __init__(self, config_dir: Path) -> None:
        self.path = config_dir / FILE_NAME
        self._lock = threading.Lock()
        self._subscriptions: dict[str, PushSubscription] = {}
        if self.path.exists():
            table = json.loads(self.path.read_text())["subscriptions"]
            self._subscriptions = {group: from_stored(fields) for group, fields in table.items()}

    def __len__(self) -> int:
        return len(self._subscriptions)

    def get(self, group: str) -> PushSubscription | None:
        return self._subscriptions.get(group)

    def all(self) -> list[PushSubscription]:
        return [self._subscriptions[group] for group in sorted(self._subscriptions)]

    def put(self, subscription: PushSubscription) -> None:
        with self._lock:
            self._write({**self._subscriptions, subscription.group: subscription})

    def replace_all(self, table: dict[str, PushSubscription]) -> None:
        """Keep exactly these subscriptions (a slave copying its master's), in one write."""
        with self._lock:
            self._write(dict(table))

    def delete(self, group: str) -> bool:
        with self._lock:
            if group not in self._subscriptions:
                return False
            self._write({name: value for name, value in self._subscriptions.items() if name != group})
            return True

    def _write(self, table: dict[str, PushSubscription]) -> None:
        data = {"subscriptions": {group: to_stored(table[group]) for group in sorted(table)}}
        write_atomically(self.path, json.dumps(data, indent=1).encode())
        os.chmod(self.path, 0o600)
        self._subscriptions = table
