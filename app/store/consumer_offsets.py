"""Consumer offsets (SPEC 4): the committed offset of every (group, topic, queue), on the broker.

In memory as RocketMQ's offset table, ``topic@group -> queueId -> offset``; on disk as a snapshot,
``config/consumerOffset.json``::

    {"offsetTable": {"orders@billing": {"0": 12, "1": 7}}}

plus a log of what changed since, ``config/consumerOffset.log``, one JSON line per committed or
dropped entry::

    {"k": "orders@billing", "q": 0, "o": 13}
    {"k": "orders@billing", "drop": true}

Every ``consumer_offset_persist_interval_ms`` (5 s) when something changed, and at shutdown, the
entries changed since the last write are appended to the log and forced: a write costs what
changed, not the whole table (10,000 groups x 8 queues and one commit append one line). When the
log outgrows the snapshot (and :data:`COMPACT_MIN_LOG_BYTES`), at start, and on a forced
:meth:`ConsumerOffsetManager.persist`, the log is compacted: the pending changes are appended, the
snapshot is rewritten atomically (temporary file, fsync, rename, fsync of the directory) and the log
is emptied. Loading reads the snapshot, then replays the log; the first line of the log that does
not parse (a write cut by a crash) ends it. As the log always ends with the value the snapshot
holds for every entry it names, replaying it over a newer snapshot (a crash between the rename
and the emptying) changes nothing.

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
import os
import threading
from pathlib import Path
from typing import NamedTuple, Protocol

from app.store.atomic_file import append_whole, fsync_directory, write_atomically
from app.store.errors import DiskFullError, StoreConfigError
from app.store.service import ServiceThread

log = logging.getLogger(__name__)

RETRY_TOPIC_PREFIX = "%RETRY%"
NOT_FOUND = -1

# The log is compacted into the snapshot once it is larger than both this and the snapshot.
COMPACT_MIN_LOG_BYTES = 4 << 20


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


def _encode(table: dict[str, dict[int, int]]) -> bytes:
    """The snapshot document, RocketMQ's consumerOffset.json."""
    document = {key: {str(q): o for q, o in sorted(queues.items())} for key, queues in table.items()}
    return json.dumps({"offsetTable": document}, indent=2, sort_keys=True).encode()


class ConsumerOffsetManager:
    """The offset table, its JSON file, and the queryConsumerOffset rules."""

    def __init__(self, path: Path, queues: QueueOffsets | None = None) -> None:
        self.path = path
        self.log_path = path.with_suffix(".log")
        self.queues = queues
        self._table: dict[str, dict[int, int]] = {}
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()
        self._version = 0
        self._persisted_version = 0
        # Changed since the last write: (key, queue id) committed, keys dropped. Every change to
        # the table goes through commit() or _drop(), or the log would miss it.
        self._dirty: set[tuple[str, int]] = set()
        self._dropped: set[str] = set()
        self._log_bytes = 0
        self._snapshot_bytes = 0

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
            self._dirty.add((key, queue_id))
            self._version += 1

    def clamp_to_queue_ends(self) -> list[OffsetEntry]:
        """Lower every committed offset past its queue's end to that end; the entries lowered (as
        they were). Called where the log's end moved back under the table - recovery cut a torn
        tail, a former master cut what the new master never had, a slave that copied its
        master's offsets became the master - because the messages stored next at those queue
        offsets are not the ones the group consumed, and an offset past them would skip them."""
        if self.queues is None:
            return []
        lowered: list[OffsetEntry] = []
        with self._lock:
            for key, queues in self._table.items():
                topic, _, group = key.partition("@")
                for queue_id, offset in queues.items():
                    end = self.queues.max_offset(topic, queue_id)
                    if offset > end:
                        lowered.append(OffsetEntry(group, topic, queue_id, offset))
                        queues[queue_id] = end
                        self._dirty.add((key, queue_id))
            if lowered:
                self._version += 1
        for entry in lowered[:10]:
            log.warning(
                "group %s on %s queue %d: committed offset %d is past the queue's end %d; lowered",
                entry.group,
                entry.topic,
                entry.queue_id,
                entry.offset,
                self.queues.max_offset(entry.topic, entry.queue_id),
            )
        if len(lowered) > 10:
            log.warning("%d more committed offsets lowered to their queues' ends", len(lowered) - 10)
        return lowered

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

    def group_topics(self) -> dict[str, set[str]]:
        """group -> the topics it has committed offsets on."""
        with self._lock:
            keys = list(self._table)
        groups: dict[str, set[str]] = {}
        for key in keys:
            topic, _, group = key.partition("@")
            groups.setdefault(group, set()).add(topic)
        return groups

    def groups_of_topic(self, topic: str) -> set[str]:
        with self._lock:
            keys = list(self._table)
        return {group for key in keys for t, _, group in [key.partition("@")] if t == topic}

    def topics_of_group(self, group: str) -> set[str]:
        with self._lock:
            keys = list(self._table)
        return {t for key in keys for t, _, g in [key.partition("@")] if g == group}

    def remove(self, group: str, topic: str | None = None) -> int:
        """Forget a group's offsets (on one topic, or on all); returns how many queues were dropped."""
        with self._lock:
            doomed = [
                key
                for key in self._table
                if key.partition("@")[2] == group and (topic is None or key.partition("@")[0] == topic)
            ]
            return self._drop(doomed)

    def _drop(self, keys: list[str]) -> int:
        """Remove whole ``topic@group`` keys and note them for the log; hold ``_lock``."""
        dropped = 0
        for key in keys:
            queues = self._table.pop(key, None)
            if queues is not None:
                dropped += len(queues)
                self._dropped.add(key)
        if keys:
            self._version += 1
        return dropped

    def remove_topic(self, topic: str) -> int:
        """Forget every group's offsets on ``topic`` (it was deleted); returns how many queues."""
        prefix = f"{topic}@"
        with self._lock:
            return self._drop([key for key in self._table if key.startswith(prefix)])

    # -- persistence -----------------------------------------------------------------------------

    def encode(self) -> bytes:
        """The JSON document of the whole table."""
        with self._lock:
            table = {key: dict(queues) for key, queues in self._table.items()}
        return _encode(table)

    def load(self) -> None:
        """Read the snapshot and replay the log, then compact them; StoreConfigError if the
        snapshot is not a valid offset table."""
        table: dict[str, dict[int, int]] = {}
        if self.path.exists():
            try:
                document = json.loads(self.path.read_bytes())
                table = {
                    str(key): {int(queue_id): int(offset) for queue_id, offset in queues.items()}
                    for key, queues in document["offsetTable"].items()
                }
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                raise StoreConfigError(
                    f"{self.path} is not a valid consumer offset table: {error}"
                ) from error
        replayed = self._replay(table)
        self._snapshot_bytes = self.path.stat().st_size if self.path.exists() else 0
        self._log_bytes = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self._lock:
            self._table = table
            self._dirty, self._dropped = set(), set()
            self._version = self._persisted_version = 0
        if replayed:
            self.persist()  # fold the log into the snapshot, dropping any torn tail

    def _replay(self, table: dict[str, dict[int, int]]) -> bool:
        """Apply the log's lines to ``table``; whether the log held anything."""
        if not self.log_path.exists():
            return False
        data = self.log_path.read_bytes()
        good = 0
        for line in data.splitlines(keepends=True):
            try:
                if not line.endswith(b"\n"):
                    raise ValueError("no line end")
                item = json.loads(line)
                key = item["k"]
                if not isinstance(key, str):
                    raise ValueError("no key")
                if item.get("drop"):
                    table.pop(key, None)
                else:
                    table.setdefault(key, {})[int(item["q"])] = int(item["o"])
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                log.warning(
                    "%s: dropping %d bytes from offset %d on (%s)",
                    self.log_path,
                    len(data) - good,
                    good,
                    error,
                )
                break
            good += len(line)
        return bool(data)

    def persist(self, only_if_changed: bool = False) -> bool:
        """Append what changed to the log, and compact when due; with ``only_if_changed``, skip
        when nothing changed since the last write. Without it, always compact (a full write).
        Returns whether it wrote."""
        with self._persist_lock:
            if only_if_changed and self._version == self._persisted_version:
                return False
            compact = (
                not only_if_changed
                or not self.path.exists()
                or self._log_bytes > max(COMPACT_MIN_LOG_BYTES, self._snapshot_bytes)
            )
            with self._lock:
                version = self._version
                dirty, dropped = self._dirty, self._dropped
                self._dirty, self._dropped = set(), set()
                lines = [json.dumps({"k": key, "drop": True}).encode() + b"\n" for key in sorted(dropped)]
                for key, queue_id in sorted(dirty):
                    offset = self._table.get(key, {}).get(queue_id)
                    if offset is not None:
                        lines.append(json.dumps({"k": key, "q": queue_id, "o": offset}).encode() + b"\n")
                # The snapshot is of the same moment as the lines: the log then ends, for every
                # entry it names, with the snapshot's value.
                table = {key: dict(queues) for key, queues in self._table.items()} if compact else None
            try:
                if lines:
                    self._append(b"".join(lines))
                if table is not None:
                    data = _encode(table)
                    write_atomically(self.path, data)
                    self._snapshot_bytes = len(data)
                    self._truncate_log()
            except BaseException:
                with self._lock:  # written again by the next persist
                    self._dirty |= dirty
                    self._dropped |= dropped
                raise
            self._persisted_version = version
            return True

    def _append(self, data: bytes) -> None:
        """Append whole lines to the log and force them; a failed write is cut back off."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        created = not self.log_path.exists()
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if created:  # the new file's name must survive a power cut too
                fsync_directory(self.log_path.parent)
            self._log_bytes = append_whole(fd, data, self.log_path)
        finally:
            os.close(fd)

    def _truncate_log(self) -> None:
        if not self.log_path.exists():
            self._log_bytes = 0
            return
        fd = os.open(self.log_path, os.O_WRONLY)
        try:
            os.ftruncate(fd, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._log_bytes = 0


class OffsetPersistService(ServiceThread):
    """Writes the offset table every interval when it changed, and once more at stop."""

    name = "consumer-offset-persist"

    def __init__(self, manager: ConsumerOffsetManager, interval_ms: int) -> None:
        super().__init__(interval_ms / 1000)
        self.manager = manager
        self.failing = False

    def run_once(self) -> None:
        # On a full disk the offsets stay in memory (commits keep working) and the next pass
        # tries again: the file on disk is the previous table until then.
        try:
            self.manager.persist(only_if_changed=True)
        except DiskFullError as error:
            if not self.failing:
                log.error("consumer offsets not persisted, retrying every pass: %s", error)
            self.failing = True
            return
        if self.failing:
            log.warning("consumer offsets persisted again")
            self.failing = False
