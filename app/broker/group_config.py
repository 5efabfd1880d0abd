"""Per-group settings (RocketMQ's SubscriptionGroupConfig): how many times a message is consumed
again before it goes to the group's dead-letter topic.

Kept in ``config/subscriptionGroup.json`` under the store directory, rewritten atomically on
every change (groups change their settings rarely); a group without an entry uses the broker's
defaults (WHARF_MAX_RECONSUME_TIMES).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path
from typing import Any

from app.store.atomic_file import write_atomically

FILE_NAME = "subscriptionGroup.json"


@dataclasses.dataclass(frozen=True)
class GroupConfig:
    max_reconsume_times: int


class GroupConfigs:
    def __init__(self, config_dir: Path, default: GroupConfig) -> None:
        self.path = config_dir / FILE_NAME
        self.default = default
        self._lock = threading.Lock()
        self._configs: dict[str, GroupConfig] = {}
        if self.path.exists():
            table: dict[str, dict[str, Any]] = json.loads(self.path.read_text())["groups"]
            self._configs = {
                name: dataclasses.replace(default, **{k: v for k, v in fields.items() if k in _FIELDS})
                for name, fields in table.items()
            }

    def get(self, group: str) -> GroupConfig:
        return self._configs.get(group, self.default)

    def has(self, group: str) -> bool:
        return group in self._configs

    def set(self, group: str, **changes: Any) -> GroupConfig:
        """Change some of the group's settings (written to disk before this returns)."""
        with self._lock:
            config = dataclasses.replace(self.get(group), **changes)
            table = {**self._configs, group: config}
            data = {"groups": {name: dataclasses.asdict(value) for name, value in sorted(table.items())}}
            write_atomically(self.path, json.dumps(data, indent=1).encode())
            self._configs = table
            return config


_FIELDS = frozenset(field.name for field in dataclasses.fields(GroupConfig))
