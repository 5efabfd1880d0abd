"""Queue locks of ordered consumption (RocketMQ's RebalanceLockManager), and the state of a
failed ordered message that is retried in place.

A member of a group that consumes orderly locks the queues it reads: a lock is held by one client
of the group and lives ``expiry_ms`` after its last renewal (60 s by default; members renew every
20 s). While it lives nobody else of the group gets the queue, whatever the allocation says, so
a queue changes hands only after its holder unlocked it or went silent.

A failed ordered message is not sent to the retry topic: its queue is suspended for a moment and
the message is handed out again in place, its reconsume count one higher (one count per queue:
ordered consumption fails at the queue's head only).

The live locks and the reconsume counts are written to ``config/queueLocks.json`` (atomically)
before a change is answered, so that a restart, even after SIGKILL, does not hand a locked queue
to another member while its lock lives. Times are wall-clock milliseconds for that reason.
Suspensions are short and kept in memory only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from app.store.atomic_file import write_atomically

FILE_NAME = "queueLocks.json"

QueueId = tuple[str, int]  # topic, queue id


@dataclasses.dataclass
class QueueLock:
    client_id: str
    renewed_ms: int


@dataclasses.dataclass(frozen=True)
class Reconsume:
    """How often the message at ``offset`` of a queue was handed out again in place."""

    offset: int
    times: int


class QueueLocks:
    """The locks and in-place retries of every group of this broker. ``clock`` is epoch seconds."""

    def __init__(self, path: Path, expiry_ms: int, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self.expiry_ms = expiry_ms
        self.clock = clock
        self._locks: dict[str, dict[QueueId, QueueLock]] = {}
        self._reconsumes: dict[str, dict[QueueId, Reconsume]] = {}
        self._suspended: dict[tuple[str, str, int], int] = {}  # (group, topic, queue) -> until ms
        self._write_lock = threading.Lock()
        self._version = 0
        self._written = 0
        self._writing: asyncio.Future[None] | None = None
        if path.exists():
            self._load(json.loads(path.read_text()))

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- locks -----------------------------------------------------------------------------------

    def _live(self, lock: QueueLock | None, now_ms: int) -> bool:
        return lock is not None and now_ms - lock.renewed_ms <= self.expiry_ms

    def holder(self, group: str, topic: str, queue_id: int) -> str | None:
        """The client holding the queue's live lock, if any."""
        lock = self._locks.get(group, {}).get((topic, queue_id))
        return lock.client_id if lock is not None and self._live(lock, self.now_ms()) else None

    def holds(self, group: str, client_id: str, topic: str, queue_id: int) -> bool:
        return self.holder(group, topic, queue_id) == client_id

    def held_by(self, group: str, client_id: str) -> list[QueueId]:
        """The queues ``client_id`` holds live locks on, sorted."""
        now = self.now_ms()
        table = self._locks.get(group, {})
        return sorted(q for q, lock in table.items() if lock.client_id == client_id and self._live(lock, now))

    def lock(self, group: str, client_id: str, queues: Iterable[QueueId]) -> list[QueueId]:
        """Lock or renew ``queues`` for ``client_id``: each one that is free, expired or already
        its own. The queues it now holds, sorted (RocketMQ's tryLockBatch)."""
        now = self.now_ms()
        table = self._locks.setdefault(group, {})
        held = []
        for queue in queues:
            lock = table.get(queue)
            if lock is None or lock.client_id == client_id or not self._live(lock, now):
                table[queue] = QueueLock(client_id, now)
                held.append(queue)
        if held:
            self._version += 1
        elif not table:
            del self._locks[group]
        return sorted(set(held))

    def unlock(self, group: str, client_id: str, queues: Iterable[QueueId] | None = None) -> list[QueueId]:
        """Release ``client_id``'s locks on ``queues`` (all of its locks when None); another
        client's lock is left alone. The queues released."""
        table = self._locks.get(group, {})
        chosen = set(table) if queues is None else set(queues)
        released = sorted(q for q in chosen if q in table and table[q].client_id == client_id)
        for queue in released:
            del table[queue]
            self._suspended.pop((group, *queue), None)
        if not table:
            self._locks.pop(group, None)
        if released:
            self._version += 1
        return released

    # -- retry in place --------------------------------------------------------------------------

    def reconsume_times(self, group: str, topic: str, queue_id: int, offset: int) -> int:
        """How often the message at ``offset`` was handed out again in place (0 if never)."""
        entry = self._reconsumes.get(group, {}).get((topic, queue_id))
        return entry.times if entry is not None and entry.offset == offset else 0

    def failed(self, group: str, topic: str, queue_id: int, offset: int, suspend_ms: int, times: int) -> int:
        """The message at ``offset`` is handed out again in place with reconsume count ``times``,
        after its queue is suspended for ``suspend_ms``; ``times``."""
        self._reconsumes.setdefault(group, {})[topic, queue_id] = Reconsume(offset, times)
        self._suspended[group, topic, queue_id] = self.now_ms() + suspend_ms
        self._version += 1
        return times

    def passed(self, group: str, topic: str, queue_id: int) -> None:
        """The queue's failing message is done with (dead-lettered): forget its count."""
        table = self._reconsumes.get(group, {})
        if table.pop((topic, queue_id), None) is not None:
            self._suspended.pop((group, topic, queue_id), None)
            self._version += 1
            if not table:
                self._reconsumes.pop(group, None)

    def suspended_until(self, group: str, topic: str, queue_id: int) -> int | None:
        """When a suspended queue may be handed out again (epoch ms), or None."""
        until = self._suspended.get((group, topic, queue_id))
        if until is not None and until <= self.now_ms():
            del self._suspended[group, topic, queue_id]
            return None
        return until

    # -- persistence -----------------------------------------------------------------------------

    def snapshot(self) -> tuple[int, bytes]:
        """The state to write (live locks only), and its version."""
        now = self.now_ms()
        groups: dict[str, dict[str, list[dict[str, object]]]] = {}
        for group, table in sorted(self._locks.items()):
            locks = [
                {
                    "topic": topic,
                    "queue_id": queue_id,
                    "client_id": lock.client_id,
                    "renewed_ms": lock.renewed_ms,
                }
                for (topic, queue_id), lock in sorted(table.items())
                if self._live(lock, now)
            ]
            if locks:
                groups.setdefault(group, {})["locks"] = locks
        for group, counts in sorted(self._reconsumes.items()):
            groups.setdefault(group, {})["reconsumes"] = [
                {"topic": topic, "queue_id": queue_id, "offset": entry.offset, "times": entry.times}
                for (topic, queue_id), entry in sorted(counts.items())
            ]
        return self._version, json.dumps({"groups": groups}, indent=1).encode()

    @property
    def dirty(self) -> bool:
        return self._version != self._written

    async def flush(self) -> None:
        """Return once every change made so far is written. Callers share the writes: one runs
        at a time, and the next one writes whatever changed meanwhile (group commit)."""
        target = self._version
        while self._written < target:
            if self._writing is None:
                self._writing = asyncio.ensure_future(self._write_latest())
            await asyncio.shield(self._writing)

    async def _write_latest(self) -> None:
        try:
            version, data = self.snapshot()
            await asyncio.to_thread(self.write, version, data)
        finally:
            self._writing = None

    def write(self, version: int, data: bytes) -> None:
        """Write a snapshot (from any thread); an older one than the last written is dropped."""
        with self._write_lock:
            if version <= self._written:
                return
            write_atomically(self.path, data)
            self._written = version

    def _load(self, document: dict[str, dict[str, dict[str, list[dict[str, object]]]]]) -> None:
        now = self.now_ms()
        for group, state in document.get("groups", {}).items():
            for item in state.get("locks", []):
                lock = QueueLock(str(item["client_id"]), _int(item["renewed_ms"]))
                if self._live(lock, now):
                    self._locks.setdefault(group, {})[str(item["topic"]), _int(item["queue_id"])] = lock
            for item in state.get("reconsumes", []):
                entry = Reconsume(_int(item["offset"]), _int(item["times"]))
                self._reconsumes.setdefault(group, {})[str(item["topic"]), _int(item["queue_id"])] = entry


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value
