"""Topic configurations of this broker (RocketMQ's TopicConfigManager), kept in config/topics.json.

A topic has read and write queue numbers, a permission (RocketMQ's bits: 4 read, 2 write) and an
order flag. The file is rewritten atomically on every change; changes are rare.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson

from app.store.atomic_file import write_atomically

PERM_READ = 4
PERM_WRITE = 2
PERM_READ_WRITE = PERM_READ | PERM_WRITE

MAX_QUEUE_NUMS = 1024


@dataclass(frozen=True, slots=True)
class TopicConfig:
    name: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_READ_WRITE
    order: bool = False

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @property
    def queue_nums(self) -> int:
        """Queues that exist: the larger of the read and write numbers."""
        return max(self.read_queue_nums, self.write_queue_nums)


class TopicConfigManager:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = {}
        if path.exists():
            raw = orjson.loads(path.read_bytes())
            for item in raw.get("topics", []):
                config = TopicConfig(**item)
                self._topics[config.name] = config

    def get(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    def all(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda config: config.name)

    def put(self, config: TopicConfig) -> TopicConfig:
        """Create or replace a topic's configuration and persist the table."""
        with self._lock:
            self._topics = {**self._topics, config.name: config}
            self._persist()
        return config

    def get_or_create(self, name: str, default_queue_nums: int) -> tuple[TopicConfig, bool]:
        config = self._topics.get(name)
        if config is not None:
            return config, False
        with self._lock:
            config = self._topics.get(name)
            if config is not None:
                return config, False
            config = TopicConfig(name, default_queue_nums, default_queue_nums)
            self._topics = {**self._topics, name: config}
            self._persist()
        return config, True

    def delete(self, name: str) -> bool:
        with self._lock:
            if name not in self._topics:
                return False
            self._topics = {key: value for key, value in self._topics.items() if key != name}
            self._persist()
        return True

    def _persist(self) -> None:
        data = {"topics": [asdict(config) for config in sorted(self._topics.values(), key=lambda c: c.name)]}
        write_atomically(self.path, orjson.dumps(data, option=orjson.OPT_INDENT_2))
