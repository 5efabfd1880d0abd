"""Consumer offsets (SPEC 4): the committed offset of every (group, topic, queue), on the broker.

In memory as RocketMQ's offset table, ``topic@group -> queueId -> offset``; on disk as
``config/consumerOffset.json``::

    {"offsetTable": {"orders@billing": {"0": 12, "1": 7}}}

written every ``consumer_offset_persist_interval_ms`` (5 s) when something changed, and at
shutdown, always atomically (temporary file, fsync, rename, fsync of the directory): a crash leaves
the previous file or the new one, never a torn mix.

Reading follows the broker's queryConsumerOffset (seed 002): a committed offset is returned, raised
to the queue's min offset if retention deleted what it pointed at. A group with none gets 0 when
the queue still starts at 0 and its first message is not yet "on disk only" (within the share of
memory RocketMQ expects to be page cache), and "not found" otherwise; :meth:`start_offset` then
applies the consumer's policy, as RocketMQ's client does: the last offset, the first, or the first
message stored at or after a timestamp.
"""

from __future__ import annotations

import enum
import json
import logging
import threading
from pathlib import Path
from typing import NamedTuple, Protocol

from app.store.atomic_file import write_atomically
from app.store.errors import StoreConfigError
from app.store.service import ServiceThread

log = logging.getLogger(__name__)

RETRY_TOPIC_PREFIX = "%RETRY%"
NOT_FOUND = -1


class ConsumeFromWhere(enum.StrEnum):
    """Where a group without a committed offset starts."""

    LAST_OFFSET = "LAST_OFFSET"
    FIRST_OFFSET = "FIRST_OFFSET"
    TIMESTAMP = "TIMESTAMP"


class QueueOffsets(Protocol):
    """What the offset manager asks of the store about a queue."""

    def min_offset(self, topic: str, queue_id: int) -> int: ...

    def max_offset(self, topic: str, queue_id: int) -> int: ...

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int: ...

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, offset: int) -> bool: ...


class OffsetEntry(NamedTuple):
    group: str
    topic: str
    queue_id: int
    offset: int


def table_key(topic: str, group: str) -> str:
    """``topic@group``: a topic name cannot hold "@", so the first one splits the key."""
    return f"{topic}@{group}"


class ConsumerOffsetManager:
    """The offset table, its JSON file, and the queryConsumerOffset rules."""

    def __init__(self, path: Path, queues: QueueOffsets | None = None) -> None:
        self.path = path
        self.queues = queues
        self._table: dict[str, dict[int, int]] = {}
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()
        self._version = 0
        self._persisted_version = 0

    # -- committing and reading ------------------------------------------------------------------

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` as the group's next offset to consume on the queue (moving back is
        allowed: that is how an offset is reset)."""
        key = table_key(topic, group)
        with self._lock:
            queues = self._table.get(key)
            if queues is None:
                queues = self._table[key] = {}
            queues[queue_id] = offset
            self._version += 1

    def committed(self, group: str, topic: str, queue_id: int) -> int:
        """The offset as committed, :data:`NOT_FOUND` (-1) if none; not clamped."""
        queues = self._table.get(table_key(topic, group))
        if queues is None:
            return NOT_FOUND
        return queues.get(queue_id, NOT_FOUND)

    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, raised to the queue's min offset; :data:`NOT_FOUND` (-1) if none."""
        offset = self.committed(group, topic, queue_id)
        if offset >= 0 and self.queues is not None:
            offset = max(offset, self.queues.min_offset(topic, queue_id))
        return offset

    def query_consumer_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The broker's answer to queryConsumerOffset (seed 002): the committed offset (clamped);
        else 0 while the queue starts at 0 and its first message is still in memory; else
        :data:`NOT_FOUND`."""
        offset = self.query(group, topic, queue_id)
        if offset >= 0 or self.queues is None:
            return offset
        if self.queues.min_offset(topic, queue_id) <= 0 and not self.queues.check_in_disk_by_consume_offset(
            topic, queue_id, 0
        ):
            return 0
        return NOT_FOUND

    def start_offset(
        self,
        group: str,
        topic: str,
        queue_id: int,
        policy: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET,
        timestamp_ms: int | None = None,
    ) -> int:
        """Where the group reads the queue from: its offset, else what ``policy`` says (RocketMQ's
        computePullFromWhere). A retry topic starts at its beginning for LAST_OFFSET, and at its end
        for TIMESTAMP, as there."""
        offset = self.query_consumer_offset(group, topic, queue_id)
        if offset >= 0:
            return offset
        if self.queues is None:
            return 0
        retry = topic.startswith(RETRY_TOPIC_PREFIX)
        if policy is ConsumeFromWhere.FIRST_OFFSET or (policy is ConsumeFromWhere.LAST_OFFSET and retry):
            return self.queues.min_offset(topic, queue_id)
        if policy is ConsumeFromWhere.LAST_OFFSET or retry:
            return self.queues.max_offset(topic, queue_id)
        if timestamp_ms is None:
            raise ValueError("the TIMESTAMP policy needs a timestamp")
        return self.queues.search_offset(topic, queue_id, timestamp_ms)

    # -- listing and removing --------------------------------------------------------------------

    def all(self) -> list[OffsetEntry]:
        """Every committed offset, sorted by group, topic and queue."""
        with self._lock:
            items = [(key, dict(queues)) for key, queues in self._table.items()]
        entries: list[OffsetEntry] = []
        for key, queues in items:
            topic, _, group = key.partition("@")
            entries.extend(OffsetEntry(group, topic, queue_id, offset) for queue_id, offset in queues.items())
        return sorted(entries)

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        """queue id -> committed offset (as committed) of one group on one topic."""
        return dict(self._table.get(table_key(topic, group), {}))

    def groups_of_topic(self, topic: str) -> set[str]:
        return {entry.group for entry in self.all() if entry.topic == topic}

    def topics_of_group(self, group: str) -> set[str]:
        return {entry.topic for entry in self.all() if entry.group == group}

    def remove(self, group: str, topic: str | None = None) -> int:
        """Forget a group's offsets (on one topic, or on all); returns how many queues were dropped."""
        with self._lock:
            doomed = [
                key
                for key in self._table
                if key.partition("@")[2] == group and (topic is None or key.partition("@")[0] == topic)
            ]
            dropped = sum(len(self._table.pop(key)) for key in doomed)
            if doomed:
                self._version += 1
        return dropped

    def remove_topic(self, topic: str) -> int:
        """Forget every group's offsets on ``topic`` (it was deleted); returns how many queues."""
        prefix = f"{topic}@"
        with self._lock:
            doomed = [key for key in self._table if key.startswith(prefix)]
            dropped = sum(len(self._table.pop(key)) for key in doomed)
            if doomed:
                self._version += 1
        return dropped

    # -- persistence -----------------------------------------------------------------------------

    def encode(self) -> bytes:
        """The JSON document of the whole table."""
        return self._snapshot()[0]

    def _snapshot(self) -> tuple[bytes, int]:
        with self._lock:
            table = {
                key: {str(q): o for q, o in sorted(queues.items())} for key, queues in self._table.items()
            }
            version = self._version
        return json.dumps({"offsetTable": table}, indent=2, sort_keys=True).encode(), version

    def load(self) -> None:
        """Read the file if there is one; StoreConfigError if it is not a valid offset table."""
        if not self.path.exists():
            return
        try:
            document = json.loads(self.path.read_bytes())
            table = {
                str(key): {int(queue_id): int(offset) for queue_id, offset in queues.items()}
                for key, queues in document["offsetTable"].items()
            }
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise StoreConfigError(f"{self.path} is not a valid consumer offset table: {error}") from error
        with self._lock:
            self._table = table
            self._version = self._persisted_version = 0

    def persist(self, only_if_changed: bool = False) -> bool:
        """Write the table atomically; with ``only_if_changed``, skip when nothing changed since
        the last write. Returns whether it wrote."""
        with self._persist_lock:
            if only_if_changed and self._version == self._persisted_version:
                return False
            data, version = self._snapshot()
            write_atomically(self.path, data)
            self._persisted_version = version
            return True


class OffsetPersistService(ServiceThread):
    """Writes the offset table every interval when it changed, and once more at stop."""

    name = "consumer-offset-persist"

    def __init__(self, manager: ConsumerOffsetManager, interval_ms: int) -> None:
        super().__init__(interval_ms / 1000)
        self.manager = manager

    def run_once(self) -> None:
        self.manager.persist(only_if_changed=True)

    def on_stop(self) -> None:
        self.manager.persist(only_if_changed=True)
