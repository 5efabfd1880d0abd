"""QueueTable: the store's ConsumeQueues, one per (topic, queue id), and their files.

It opens a queue the first time a message is dispatched to it, loads the queues found on disk at
start, answers a queue's offsets, and removes a topic's queues with their files. It needs nothing
but the configuration, so it can exist before the MessageStore that fills it (see
:mod:`app.store.message_store` for why that matters).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from app.store.config import StoreConfig
from app.store.consume_queue import UNIT, ConsumeQueue
from app.store.file_cache import SegmentCache, max_map_count, raise_nofile_limit, store_file_budget
from app.store.flush import DirtyQueues
from app.store.mapped_file import MappedFile
from app.store.record_format import SCHEDULE_TOPIC, queue_tags_code
from app.store.topic_deletions import TopicDeletions

if TYPE_CHECKING:
    from app.store.commit_log import CommitLog
    from app.store.consumer_offsets import ConsumerOffsetManager

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]
CheckRoom = Callable[[int], None]


class QueueTable:
    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.queues: dict[QueueKey, ConsumeQueue] = {}
        # Sized at open, from the limits then in force.
        self.segment_cache = SegmentCache(max(1, config.max_mapped_segments or 1))
        self.lock = threading.Lock()

    # -- offsets ---------------------------------------------------------------------------------

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get((topic, queue_id))

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next queue offset of a queue; 0 for a queue that does not exist (yet)."""
        queue = self.queues.get((topic, queue_id))
        return queue.max_offset if queue is not None else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        queue = self.queues.get((topic, queue_id))
        return queue.min_offset if queue is not None else 0

    def topics(self) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for topic, queue_id in list(self.queues):
            found.setdefault(topic, []).append(queue_id)
        return {topic: sorted(ids) for topic, ids in found.items()}

    def all(self) -> list[ConsumeQueue]:
        return list(self.queues.values())

    # -- opening ---------------------------------------------------------------------------------

    def obtain(self, topic: str, queue_id: int, check_room: CheckRoom) -> ConsumeQueue:
        """The queue, opened (no segment mapped) if it is new; ``check_room`` vets its new files."""
        queue = self.queues.get((topic, queue_id))
        if queue is None:
            with self.lock:
                queue = self.queues.get((topic, queue_id))
                if queue is None:
                    queue = ConsumeQueue.open(
                        self.config.consumequeue_dir,
                        topic,
                        queue_id,
                        self.config.consumequeue_file_entries,
                        self.segment_cache,
                        check_room,
                        self.config.consumequeue_chunk_size,
                    )
                    # In place: copying the table for each new queue made a start with tens of
                    # thousands of queues quadratic. Readers only get() from it or copy it whole
                    # with list(), each one step under the GIL.
                    self.queues[(topic, queue_id)] = queue
        return queue

    def prepare(
        self,
        entries: dict[QueueKey, int],
        queue_offsets: dict[QueueKey, int],
        held: list[MappedFile],
        check_room: CheckRoom,
    ) -> None:
        """Allocate and map the segments ``entries`` (new entries per queue) go to, and hold them
        (``held``): under the CommitLog lock, before a batch writes anything, so that dispatch
        never opens or maps one."""
        for (topic, queue_id), count in entries.items():
            queue = self.queues.get((topic, queue_id)) or self.obtain(topic, queue_id, check_room)
            queue.prepare(queue_offsets.get((topic, queue_id), 0), count, held)

    def load(self, deletions: TopicDeletions, check_room: CheckRoom) -> None:
        """Name the segments of every queue on disk (mapping none); drop what a crash in the middle
        of a topic's deletion left behind."""
        root = self.config.consumequeue_dir
        with os.scandir(root) as topic_entries:
            topics = sorted(entry.name for entry in topic_entries if entry.is_dir())
        for topic in topics:
            with os.scandir(root / topic) as queue_entries:
                queue_ids = sorted(
                    int(entry.name) for entry in queue_entries if entry.is_dir() and entry.name.isdigit()
                )
            for queue_id in queue_ids:
                self.obtain(topic, queue_id, check_room).files.load()
        self._drop_deleted_queues(deletions)

    def size_cache(self, commitlog_segments: int) -> None:
        """Raise the open-file limit as far as allowed and bound the mapped segments by what is left
        once the CommitLog's segments (and a reserve for index files) are counted."""
        nofile = raise_nofile_limit()
        budget = self.config.max_mapped_segments
        if budget <= 0:
            budget = max(16, store_file_budget(nofile, max_map_count()) - commitlog_segments - 8)
        self.segment_cache.max_mapped = budget
        log.info("open file limit %d: at most %d ConsumeQueue segments mapped at once", nofile, budget)

    def settle(self, commitlog_min: int, queue_offsets: dict[QueueKey, int]) -> None:
        """After recovery: skip the entries below the CommitLog's first offset and fill
        ``queue_offsets`` (the CommitLog's next queue offset of every queue)."""
        for key, queue in self.queues.items():
            if commitlog_min > 0 and queue.max_offset > 0:
                if 0 < queue.max_physical_end <= commitlog_min:
                    queue.min_logic_offset = queue.max_offset  # all below the log: no search
                else:
                    queue.correct_min_offset(commitlog_min)  # maps the queue for the search
            queue_offsets[key] = queue.max_offset

    def close(self) -> None:
        for queue in self.all():
            queue.close()

    # -- removing --------------------------------------------------------------------------------

    def delete_topic(
        self, topic: str, commitlog: CommitLog, deletions: TopicDeletions, offsets: ConsumerOffsetManager
    ) -> int:
        """Drop every ConsumeQueue of ``topic`` and every group's committed offsets on it; its
        CommitLog records go with retention, dead from now on (:mod:`app.store.topic_deletions`).

        Returns how many queues were removed. New messages to the topic start again at offset 0.
        """
        with commitlog.lock:
            # On disk first: a crash from here on leaves the old records dead, whatever remains.
            deletions.record(topic, commitlog.max_offset, commitlog.min_offset)
            if offsets.remove_topic(topic):
                offsets.persist()
            doomed = self.detach_topic(topic)
            for queue in doomed:
                commitlog.queue_offsets.pop((queue.topic, queue.queue_id), None)
        self.remove_files(topic, doomed)
        return len(doomed)

    def detach_topic(self, topic: str) -> list[ConsumeQueue]:
        """Take every queue of ``topic`` out of the table (call :meth:`remove_files` on them next)."""
        with self.lock:
            doomed = [queue for key, queue in self.queues.items() if key[0] == topic]
            self.queues = {key: queue for key, queue in self.queues.items() if key[0] != topic}
        return doomed

    def remove_files(self, topic: str, queues: Iterable[ConsumeQueue]) -> None:
        """Delete the files of detached queues of ``topic``, and its directory once empty."""
        for queue in queues:
            queue.files.remove_first(len(queue.files.files))
            if queue.files.directory.is_dir():
                queue.files.directory.rmdir()
        topic_dir = self.config.consumequeue_dir / topic
        if topic_dir.is_dir() and not any(topic_dir.iterdir()):
            topic_dir.rmdir()

    def _drop_deleted_queues(self, deletions: TopicDeletions) -> None:
        """Remove what a crash in the middle of a topic's deletion left: a queue of a deleted topic
        whose first entry points below the deletion floor holds only dead entries (the queues of a
        re-created topic start above it)."""
        for key, queue in list(self.queues.items()):
            floor = deletions.floor(key[0])
            if floor and queue.files.files:
                first = queue.entry(queue.files.min_offset // UNIT.size)
                if first is None or first[0] < floor:
                    log.warning("removing queue %s of deleted topic %r, left behind by a crash", *key[::-1])
                    self.queues = {k: q for k, q in self.queues.items() if k != key}
                    self.remove_files(key[0], [queue])


class QueueDispatcher:
    """The CommitLog's dispatch: writes each record's ConsumeQueue entry, under the append lock
    (and during recovery, for every record walked again)."""

    def __init__(
        self, queues: QueueTable, deletions: TopicDeletions, dirty: DirtyQueues, check_room: CheckRoom
    ) -> None:
        self.queues = queues
        self.deletions = deletions
        self.dirty = dirty
        self.check_room = check_room

    def dispatch(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        physical_offset: int,
        size: int,
        tags_code: int,
        store_timestamp: int,
        keys: str,
        uniq_key: str,
    ) -> None:
        if self.deletions.floors and self.deletions.is_dead(topic, physical_offset):
            return  # recovery walking a record written before its topic was deleted
        queue = self.queues.queues.get((topic, queue_id)) or self.queues.obtain(
            topic, queue_id, self.check_room
        )
        if topic == SCHEDULE_TOPIC:
            tags_code = queue_tags_code(topic, queue_id, tags_code, store_timestamp)
        if queue.put(queue_offset, physical_offset, size, tags_code):
            self.dirty.mark(queue.files)

    def dispatch_run(self, topic: str, queue_id: int, queue_offset: int, entries: bytearray) -> None:
        """Write an appended batch's entries for one queue (``queue_offset`` the first's), packed
        back to back as the queue stores them."""
        if self.deletions.floors and self.deletions.is_dead(topic, UNIT.unpack_from(entries)[0]):
            return
        queue = self.queues.queues.get((topic, queue_id)) or self.queues.obtain(
            topic, queue_id, self.check_room
        )
        if queue.put_run(queue_offset, entries):
            self.dirty.mark(queue.files)
