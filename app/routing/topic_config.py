"""Topic configurations of this broker (RocketMQ's TopicConfigManager), kept in config/topics.log.

A topic has read and write queue numbers, a permission (RocketMQ's bits: 4 read, 2 write) and an
order flag. The file is an append-only log of JSON lines, one per change::

    {"op": "put", "name": "orders", "read_queue_nums": 8, "write_queue_nums": 8, "perm": 6, "order": false}
    {"op": "delete", "name": "orders"}

so creating the 10,000th topic appends one line and forces it, as the first did. Loading replays
the lines; the first line that does not parse (a write cut by a crash) ends the log and is cut off.
The log is compacted - rewritten atomically with one "put" per live topic - at start when it holds
garbage, and while running when its dead lines outnumber the live ones (and pass a minimum), so
compaction costs O(1) per change on average. A ``topics.json`` left by an older version (a whole
table) is read once and replaced by the log; one RocketMQ wrote (its ``topicConfigTable``) is read
once and left in place, for RocketMQ.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import orjson
from wharf_client.perm import PERM_READ, PERM_READ_WRITE, PERM_WRITE

from app.store.atomic_file import write_atomically

log = logging.getLogger(__name__)


MAX_QUEUE_NUMS = 1024

# Compact while running once dead lines pass this many and outnumber the live topics.
COMPACT_MIN_GARBAGE = 1024


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


def _put_line(config: TopicConfig) -> bytes:
    return orjson.dumps({"op": "put", **asdict(config)}) + b"\n"


def _delete_line(name: str) -> bytes:
    return orjson.dumps({"op": "delete", "name": name}) + b"\n"


def _from_rocketmq(name: str, item: dict[str, object]) -> TopicConfig:
    """A topic of RocketMQ's config/topics.json (TopicConfig's JSON fields)."""

    def number(field: str, default: int) -> int:
        value = item.get(field, default)
        return value if isinstance(value, int) and 0 <= value <= MAX_QUEUE_NUMS else default

    return TopicConfig(
        name,
        number("readQueueNums", 4),
        number("writeQueueNums", 4),
        number("perm", PERM_READ_WRITE) & PERM_READ_WRITE,
        item.get("order") is True,
    )


class TopicConfigManager:
    def __init__(self, path: Path, legacy_path: Path | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = {}
        self._sorted: list[str] | None = None
        self._lines = 0  # lines in the log, live or dead
        self._fd: int | None = None
        self._load(legacy_path)

    # -- reading ---------------------------------------------------------------------------------

    def get(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    def __len__(self) -> int:
        return len(self._topics)

    def all(self) -> list[TopicConfig]:
        with self._lock:
            configs = list(self._topics.values())
        return sorted(configs, key=lambda config: config.name)

    def page(self, after: str | None, limit: int) -> tuple[list[TopicConfig], bool]:
        """Up to ``limit`` topics whose names sort after ``after``, by name; and whether more follow."""
        with self._lock:
            if self._sorted is None:
                self._sorted = sorted(self._topics)
            names = self._sorted
            start = 0 if after is None else bisect.bisect_right(names, after)
            chosen = names[start : start + limit]
            configs = [self._topics[name] for name in chosen]
            more = start + limit < len(names)
        return configs, more

    # -- changing --------------------------------------------------------------------------------

    def put(self, config: TopicConfig) -> TopicConfig:
        """Create or replace a topic's configuration and append it to the log."""
        with self._lock:
            self._append(_put_line(config))
            self._set(config)
            self._maybe_compact()
        return config

    def create_many(self, configs: Iterable[TopicConfig]) -> list[tuple[TopicConfig, bool]]:
        """Create the topics not there yet, in one append and one force of the log. For each: the
        configuration now in force (the existing one, if there was one) and whether it was created."""
        results: list[tuple[TopicConfig, bool]] = []
        with self._lock:
            fresh: dict[str, TopicConfig] = {}
            for config in configs:
                existing = self._topics.get(config.name) or fresh.get(config.name)
                if existing is not None:
                    results.append((existing, False))
                    continue
                fresh[config.name] = config
                results.append((config, True))
            if fresh:
                self._append(b"".join(_put_line(config) for config in fresh.values()))
                for config in fresh.values():
                    self._set(config)
                self._maybe_compact()
        return results

    def delete(self, name: str) -> bool:
        with self._lock:
            if name not in self._topics:
                return False
            self._append(_delete_line(name))
            del self._topics[name]
            self._sorted = None
            self._maybe_compact()
        return True

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    # -- the log ---------------------------------------------------------------------------------

    def _set(self, config: TopicConfig) -> None:
        if config.name not in self._topics:
            self._sorted = None
        self._topics[config.name] = config

    def _append(self, data: bytes) -> None:
        """Append whole lines and force them; on a failed write, cut the file back to where it was."""
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        size = os.fstat(self._fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError:
            os.ftruncate(self._fd, size)
            raise
        self._lines += data.count(b"\n")

    def _maybe_compact(self) -> None:
        garbage = self._lines - len(self._topics)
        if garbage >= COMPACT_MIN_GARBAGE and garbage > len(self._topics):
            self._compact()

    def _compact(self) -> None:
        """Rewrite the log atomically with one line per live topic."""
        ordered = sorted(self._topics.values(), key=lambda config: config.name)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        write_atomically(self.path, b"".join(_put_line(config) for config in ordered))
        self._lines = len(ordered)

    def _load(self, legacy_path: Path | None) -> None:
        legacy = legacy_path is not None and legacy_path.exists() and not self.path.exists()
        if legacy:
            assert legacy_path is not None
            table = orjson.loads(legacy_path.read_bytes())
            for item in table.get("topics", []):
                self._set(TopicConfig(**item))
            for name, item in table.get("topicConfigTable", {}).items():
                self._set(_from_rocketmq(name, item))
            self._compact()
            if "topicConfigTable" not in table:
                legacy_path.unlink()
            return
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        good = 0  # bytes of whole, valid lines
        for line in data.splitlines(keepends=True):
            try:
                if not line.endswith(b"\n"):
                    raise ValueError("no line end")
                item = orjson.loads(line)
                op = item.pop("op")
                if op == "put":
                    self._set(TopicConfig(**item))
                elif op == "delete":
                    self._topics.pop(item["name"], None)
                else:
                    raise ValueError(f"unknown op {op!r}")
            except (ValueError, TypeError, KeyError, AttributeError) as error:
                log.warning(
                    "%s: dropping %d bytes from offset %d on (%s)", self.path, len(data) - good, good, error
                )
                break
            good += len(line)
            self._lines += 1
        if good < len(data) or self._lines > len(self._topics):
            self._compact()
