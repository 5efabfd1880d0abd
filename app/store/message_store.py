"""MessageStore: the facade that wires CommitLog, ConsumeQueues, flush services and recovery, the
message index, retention with the disk guard, and consumer offsets.

It holds no storage logic of its own: it encodes outside the lock, appends through the CommitLog,
waits for group commit when asked, and answers reads from a ConsumeQueue and the CommitLog.
The clock and the disk usage probe are collaborators (``clock=``, ``disk_usage=``): tests pass fakes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future

from app.store.allocate import AllocateSegmentService
from app.store.atomic_file import fsync_directory
from app.store.checkpoint import NO_CLEAN_END, Checkpoint
from app.store.commit_log import CommitLog, skips_consume_queue
from app.store.config import FlushMode, StoreConfig
from app.store.consume_queue import UNIT, ConsumeQueue
from app.store.consumer_offsets import ConsumerOffsetManager, OffsetPersistService
from app.store.dir_lock import StoreDirectoryLock
from app.store.disk_guard import DiskGuard, DiskUsageProbe, disk_usage_probe, free_bytes_probe
from app.store.errors import NO_SPACE, DiskFullError, InvalidQueueError, StoreClosedError
from app.store.file_cache import SegmentCache, max_map_count, raise_nofile_limit, store_file_budget
from app.store.filter import TagFilter
from app.store.flush import (
    AsyncFlushService,
    CommitLogFlusher,
    ConsumeQueueFlushService,
    DirtyQueues,
    GroupCommitService,
)
from app.store.index_service import IndexService
from app.store.lookup import MAX_TIMESTAMP_MS, MessageLookup
from app.store.mapped_file import MappedFile
from app.store.record import (
    FIXED_SIZE,
    MESSAGE_MAGIC,
    CheckedRecord,
    Limits,
    Message,
    StoredMessage,
    check_record,
    decode_record,
    encode_host,
    encode_record,
    record_is,
    record_tags,
)
from app.store.record import (
    SIZE_MAGIC as RECORD_HEAD,
)
from app.store.recovery import RecoveryReport, recover
from app.store.results import AppendResult, GetMessageResult, GetMessageStatus, PutStatus
from app.store.retention import CleanReport, CleanService
from app.store.topic_deletions import TopicDeletions

log = logging.getLogger(__name__)

# (topic, queue_id, next queue offset, tags_code): called after every append, outside the lock.
ArrivalListener = Callable[[str, int, int, int], None]

MAX_QUEUE_ID = 1 << 16
# RocketMQ's accessMessageInMemoryMaxRatio: the share of physical memory that the newest CommitLog
# bytes are assumed to occupy in the page cache (queryConsumerOffset's "still in memory" test).
ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO = 40

_DONE: Future[bool] = Future()
_DONE.set_result(True)


def _physical_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


class MessageStore:
    def __init__(
        self,
        config: StoreConfig,
        on_arrival: ArrivalListener | None = None,
        *,
        clock: Callable[[], float] = time.time,
        disk_usage: DiskUsageProbe | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self.clock = clock
        self.on_arrival = on_arrival
        self.store_host = encode_host(config.store_host, config.store_port)
        self.limits = Limits(config.max_message_size, config.max_topic_length, config.max_properties_size)
        self.dir_lock = StoreDirectoryLock(config.store_dir)
        self.checkpoint = Checkpoint(config.checkpoint_path)
        self.consume_queues: dict[tuple[str, int], ConsumeQueue] = {}
        # Sized at open, from the limits then in force.
        self.segment_cache = SegmentCache(max(1, config.max_mapped_segments or 1))
        self._queues_lock = threading.Lock()
        self.commitlog = CommitLog(
            config.commitlog_dir, config.commitlog_file_size, self.store_host, self._dispatch
        )
        self.flusher = CommitLogFlusher(self.commitlog.files, self.checkpoint)
        self.group_commit: GroupCommitService | None = None
        self.async_flush: AsyncFlushService | None = None
        self.consumequeue_flush: ConsumeQueueFlushService | None = None
        self.dirty_queues = DirtyQueues()
        self.recovery: RecoveryReport | None = None
        self.index_service: IndexService | None = None
        if config.message_index_enable:
            self.index_service = IndexService(
                config.index_dir,
                self.checkpoint,
                config.max_hash_slots,
                config.max_index_count,
                config.flush_interval_index_ms,
                clock,
            )
            self.commitlog.on_batch = self.index_service.submit
        self.disk_guard = DiskGuard(
            disk_usage or disk_usage_probe(config.store_dir),
            config.disk_refuse_writes_ratio,
            config.disk_accept_writes_ratio,
            config.disk_check_interval_ms,
            clock,
            where=f"the disk of {config.store_dir}",
            free_bytes=free_bytes_probe(config.store_dir),
        )
        # Every new file asks the guard first (a full disk refuses it before it is allocated).
        self.commitlog.files.check_room = self.disk_guard.check_room
        if self.index_service is not None:
            self.index_service.check_room = self.disk_guard.check_room
        self.allocate_service: AllocateSegmentService | None = None
        self.clean_service = CleanService(
            config, self.commitlog, self._all_queues, self.index_service, self.disk_guard, clock, sleep
        )
        # Read before recovery dispatches anything: a deleted topic's records must stay dead.
        self.deletions = TopicDeletions(config.topic_deletions_path).load()
        self.lookup = MessageLookup(
            self.commitlog, self.index_service, self._look_live_message, config.max_index_query_results
        )
        self.consumer_offsets = ConsumerOffsetManager(config.consumer_offset_path, self)
        self.offset_persist: OffsetPersistService | None = None
        self.in_memory_bytes = _physical_memory_bytes() * ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO // 100
        self.is_open = False
        self._stale_queues_logged: set[tuple[str, int]] = set()

    # -- lifecycle -------------------------------------------------------------------------------

    def open(self) -> MessageStore:
        """Load every file, recover, and start the flush services."""
        config = self.config
        config.store_dir.mkdir(parents=True, exist_ok=True)
        self.dir_lock.acquire()
        directories = [config.commitlog_dir, config.consumequeue_dir, config.config_dir]
        if self.index_service is not None:
            directories.append(config.index_dir)
        for directory in directories:
            directory.mkdir(parents=True, exist_ok=True)
        clean = not config.abort_path.exists()
        try:
            self.commitlog.files.load()
            self._size_segment_cache()
            self._load_consume_queues()
            self.recovery = recover(
                self.commitlog,
                self._all_queues,
                self.checkpoint,
                clean,
                self._dispatch,
                config.recover_segments_normal,
            )
        except BaseException:
            # Refused (a file disagrees with the configuration) or failed: leave nothing mapped.
            self.commitlog.files.close()
            for queue in self._all_queues():
                queue.close()
            self.dir_lock.release()
            raise
        commitlog_min = self.commitlog.min_offset
        for (topic, queue_id), queue in self.consume_queues.items():
            if commitlog_min > 0 and queue.max_offset > 0:
                if 0 < queue.max_physical_end <= commitlog_min:
                    queue.min_logic_offset = queue.max_offset  # all below the log: no search
                else:
                    queue.correct_min_offset(commitlog_min)  # maps the queue for the search
            self.commitlog.queue_offsets[(topic, queue_id)] = queue.max_offset
        try:
            if self.index_service is not None:
                self.index_service.load(clean)
                self.index_service.trim(self.commitlog.max_offset)
                self.index_service.schedule_rebuild(self.commitlog, self.commitlog.max_offset)
            self.consumer_offsets.load()
        except BaseException:
            self.commitlog.files.close()
            for queue in self._all_queues():
                queue.close()
            if self.index_service is not None:
                self.index_service.close()
            self.dir_lock.release()
            raise
        self._forget_clean_end()
        self._touch_abort_file()
        # A power loss must not take the abort file (the next start would trust the disk and skip
        # the re-dispatch), nor the names of the directories made above: force the store root.
        fsync_directory(config.store_dir)
        self.commitlog.open()
        self._start_services()
        self.is_open = True
        return self

    def _touch_abort_file(self) -> None:
        """Mark the store as running. On a full disk the store still starts (to serve reads): the
        file may then be missing, and a crash before a clean stop is recovered as a clean stop."""
        try:
            self.config.abort_path.touch()
        except OSError as error:
            if error.errno not in NO_SPACE:
                raise
            log.error("cannot create %s on a full disk: %s", self.config.abort_path, error)

    def _start_services(self) -> None:
        config = self.config
        self.allocate_service = AllocateSegmentService(self.commitlog.files, config.disk_check_interval_ms)
        self.allocate_service.start()
        if config.flush_mode is FlushMode.SYNC:
            self.group_commit = GroupCommitService(
                self.flusher, config.group_commit_interval_ms, config.sync_flush_timeout_ms
            )
            self.group_commit.start()
        else:
            self.async_flush = AsyncFlushService(
                self.flusher,
                config.flush_interval_commitlog_ms,
                config.flush_commitlog_least_pages,
                config.flush_commitlog_thorough_interval_ms,
            )
            self.async_flush.start()
        self.consumequeue_flush = ConsumeQueueFlushService(
            self.dirty_queues,
            self.checkpoint,
            config.flush_interval_consumequeue_ms,
            config.flush_consumequeue_least_pages,
            config.flush_consumequeue_thorough_interval_ms,
        )
        self.consumequeue_flush.covered_timestamp = self._last_store_timestamp
        self.consumequeue_flush.covered_offset = self._dispatched_offset
        self.consumequeue_flush.start()
        if self.index_service is not None:
            self.index_service.start()
        self.clean_service.start()
        self.offset_persist = OffsetPersistService(
            self.consumer_offsets, config.consumer_offset_persist_interval_ms
        )
        self.offset_persist.start()

    def close(self) -> None:
        """Stop accepting writes, drain the flush services, write the checkpoint, remove abort."""
        if not self.is_open:
            return
        self.is_open = False
        self.clean_service.stop()
        self.commitlog.closed = True
        with self.commitlog.lock:
            pass  # wait for an append in progress
        # The index drains first: its last flush moves the checkpoint's index timestamp.
        for service in (
            self.allocate_service,
            self.index_service,
            self.offset_persist,
            self.group_commit,
            self.async_flush,
            self.consumequeue_flush,
        ):
            if service is not None:
                service.stop()
        self.flusher.flush_all()
        for queue in self._all_queues():
            queue.files.flush_all()
        self.checkpoint.commitlog_timestamp = max(
            self.checkpoint.commitlog_timestamp, self._last_store_timestamp()
        )
        self.checkpoint.consumequeue_timestamp = self.checkpoint.commitlog_timestamp
        end = self.commitlog.max_offset
        self.checkpoint.commitlog_offset = self.checkpoint.consumequeue_offset = end
        self.checkpoint.clean_last_record = self.commitlog.last_record_offset if end else NO_CLEAN_END
        try:
            self.checkpoint.flush()
        except DiskFullError as error:  # the next start walks the last segments instead
            log.error("checkpoint not written: %s", error)
        self.commitlog.close()
        for queue in self._all_queues():
            queue.close()
        if self.index_service is not None:
            self.index_service.close()
        self.config.abort_path.unlink(missing_ok=True)
        self.dir_lock.release()

    def __enter__(self) -> MessageStore:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------------

    def append(self, messages: Sequence[Message]) -> list[AppendResult]:
        """Validate, encode (outside the lock) and append messages; no waiting for the disk.

        Either every message is valid and all are stored, or a MessageRejectedError names the
        first bad one and nothing is stored.
        """
        if not self.is_open:
            raise StoreClosedError("the store is not open")
        self.disk_guard.check_writable()
        now = int(time.time() * 1000)
        host, limits = self.store_host, self.limits
        check_fits = self.commitlog.check_fits
        records = []
        entries: dict[tuple[str, int], int] = {}  # new ConsumeQueue entries per queue
        total_size = 0
        for message in messages:
            if not 0 <= message.queue_id < MAX_QUEUE_ID:
                raise InvalidQueueError(f"queue id {message.queue_id} is out of range")
            record = encode_record(message, host, now, limits)
            size = len(record.data)
            check_fits(size)
            total_size += size
            records.append(record)
            if not skips_consume_queue(message.sysflag):
                key = (message.topic, message.queue_id)
                entries[key] = entries.get(key, 0) + 1
        held: list[MappedFile] = []
        try:
            results = self.commitlog.append(records, total_size, lambda: self._prepare_queues(entries, held))
        finally:
            for mapped in held:
                mapped.release()
        listener = self.on_arrival
        if listener is not None:
            for result, record in zip(results, records, strict=True):
                listener(result.topic, result.queue_id, result.queue_offset + 1, record.tags_code)
        return results

    def durable(self, results: Sequence[AppendResult]) -> Future[bool]:
        """A future that is True once ``results`` are on disk as the flush mode promises.

        Under ASYNC_FLUSH it is already done; under SYNC_FLUSH it completes with the group commit
        that covers the last result (False after the flush timeout).
        """
        if self.group_commit is None or not results:
            return _DONE
        return self.group_commit.request(max(result.end_offset for result in results))

    def put(self, messages: Sequence[Message]) -> list[AppendResult]:
        """Append and, under SYNC_FLUSH, block until the group commit acknowledges the bytes."""
        results = self.append(messages)
        if self.group_commit is not None and results:
            ok = self.durable(results).result()
            if not ok:
                results = [result._replace(status=PutStatus.FLUSH_DISK_TIMEOUT) for result in results]
        return results

    async def put_async(self, messages: Sequence[Message]) -> list[AppendResult]:
        """As :meth:`put`, awaiting the group commit without blocking the event loop."""
        results = self.append(messages)
        if self.group_commit is not None and results:
            ok = await asyncio.wrap_future(self.durable(results))
            if not ok:
                results = [result._replace(status=PutStatus.FLUSH_DISK_TIMEOUT) for result in results]
        return results

    # -- reading ---------------------------------------------------------------------------------

    def get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int = 32,
        tag_filter: TagFilter | None = None,
    ) -> GetMessageResult:
        """Read up to ``max_messages`` records of one queue from ``offset`` (SPEC 1.10)."""
        queue = self.consume_queues.get((topic, queue_id))
        if queue is None or queue.max_offset == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        min_offset, max_offset = queue.min_offset, queue.max_offset
        if offset < min_offset:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
        if offset == max_offset:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
        if offset > max_offset:
            next_offset = min_offset if min_offset == 0 else max_offset
            return GetMessageResult(
                GetMessageStatus.OFFSET_OVERFLOW_BADLY, next_offset, min_offset, max_offset
            )

        config = self.config
        scan_entries = max(config.max_scan_bytes_per_pull, max_messages * 20) // UNIT.size
        max_bytes = config.max_transfer_bytes_per_pull
        commitlog = self.commitlog
        commitlog_min = commitlog.min_offset
        records: list[memoryview] = []
        queue_offsets: list[int] = []
        total = 0
        next_offset = offset
        codes = tag_filter.codes if tag_filter is not None else None
        topic_bytes = topic.encode()
        raw = queue.entries(offset, scan_entries)
        if raw is None or (len(raw) >= UNIT.size and UNIT.unpack_from(raw)[0] < commitlog_min):
            # Retention deleted what this offset names since min_offset was read: never read it.
            queue.correct_min_offset(commitlog_min)
            if offset < queue.min_offset:
                return GetMessageResult(
                    GetMessageStatus.OFFSET_TOO_SMALL, queue.min_offset, queue.min_offset, queue.max_offset
                )
        if raw is not None:
            for physical_offset, size, tags_code in UNIT.iter_unpack(raw):
                if records and (len(records) >= max_messages or total + size > max_bytes):
                    break
                current = next_offset
                next_offset += 1
                if size <= 0 or physical_offset < commitlog_min:
                    continue
                if codes is not None and tags_code not in codes:
                    continue
                data = commitlog.read(physical_offset, size)
                if data is None:
                    continue
                if not record_is(data, topic_bytes, queue_id, current, physical_offset):
                    self._skip_stale_entry(topic, queue_id, current, physical_offset, size)
                    continue
                if tag_filter is not None and not tag_filter.matches(record_tags(data)):
                    continue
                records.append(data)
                queue_offsets.append(current)
                total += size
        status = GetMessageStatus.FOUND if records else GetMessageStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, next_offset, min_offset, max_offset, records, queue_offsets, total)

    def _skip_stale_entry(
        self, topic: str, queue_id: int, queue_offset: int, physical_offset: int, size: int
    ) -> None:
        # Never served: recovery removes such entries, so one here means a damaged store.
        key = (topic, queue_id)
        if key not in self._stale_queues_logged:
            self._stale_queues_logged.add(key)
            log.warning(
                "skipping %s/%d offset %d: its entry (CommitLog offset %d, %d bytes) does not point at "
                "that message; further skips in this queue are not logged",
                topic,
                queue_id,
                queue_offset,
                physical_offset,
                size,
            )

    def read_messages(
        self, topic: str, queue_id: int, offset: int, max_messages: int = 32
    ) -> list[StoredMessage]:
        """Decoded messages from ``offset``: a convenience over :meth:`get_message`."""
        result = self.get_message(topic, queue_id, offset, max_messages)
        return [decode_record(record) for record in result.records]

    def read_record(self, physical_offset: int) -> memoryview | None:
        """The stored message record that starts at ``physical_offset``, or None if there is none."""
        head = self.commitlog.read(physical_offset, RECORD_HEAD.size)
        if head is None:
            return None
        size, magic = RECORD_HEAD.unpack(head)
        if magic != MESSAGE_MAGIC or size < FIXED_SIZE:
            return None
        data = self.commitlog.read(physical_offset, size)
        if data is None or check_record(data, 0, physical_offset) is None:
            return None
        return data

    def look_message(self, physical_offset: int) -> StoredMessage | None:
        """The message stored at ``physical_offset`` (the offset a message id names), or None."""
        data = self.read_record(physical_offset)
        return decode_record(data) if data is not None else None

    def read_live_record(self, physical_offset: int) -> memoryview | None:
        """As :meth:`read_record`, None for a record of a topic deleted since it was stored."""
        data = self.read_record(physical_offset)
        dead = self.deletions.is_dead
        if data is not None and self.deletions.floors and dead(decode_record(data).topic, physical_offset):
            return None
        return data

    def _look_live_message(self, physical_offset: int) -> StoredMessage | None:
        """As :meth:`look_message`, None for a record of a topic deleted since it was stored."""
        message = self.look_message(physical_offset)
        if message is None or self.deletions.is_dead(message.topic, physical_offset):
            return None
        return message

    def records_since(self, timestamp_ms: int) -> Iterator[tuple[int, CheckedRecord]]:
        """(CommitLog offset, record) of every live message stored at or after ``timestamp_ms``,
        in log order; records of deleted topics are left out. It reads the disk: call it off the
        event loop."""
        is_dead = self.deletions.is_dead
        for offset, record in self.commitlog.records_since(timestamp_ms):
            if not is_dead(record.topic, offset):
                yield offset, record

    # -- lookups: by id, by key, by time ---------------------------------------------------------

    def query_message_by_id(self, msg_id: str) -> StoredMessage | None:
        """The message a message id names (no index needed), or None if there is none here."""
        return self.lookup.by_id(msg_id)

    def query_message_by_key(
        self,
        topic: str,
        key: str,
        max_messages: int | None = None,
        begin_ms: int = 0,
        end_ms: int = MAX_TIMESTAMP_MS,
    ) -> list[StoredMessage]:
        """Messages of ``topic`` whose KEYS hold the word ``key`` (or whose unique id is ``key``),
        stored in [begin_ms, end_ms], newest first, at most ``max_messages`` (capped by
        ``max_index_query_results``). Messages appended before the call are found."""
        return self.lookup.by_key(topic, key, max_messages, begin_ms, end_ms)

    def query_message_by_unique_id(self, topic: str, unique_id: str) -> StoredMessage | None:
        """The newest message of ``topic`` with UNIQ_KEY ``unique_id``, or None."""
        return self.lookup.by_unique_id(topic, unique_id)

    def query_message_by_unique_id_at(
        self, topic: str, unique_id: str, physical_offset: int
    ) -> StoredMessage | None:
        """The message at ``physical_offset`` if it is a live message of ``topic`` with UNIQ_KEY
        ``unique_id``; None otherwise (no index needed)."""
        return self.lookup.by_unique_id_at(topic, unique_id, physical_offset)

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The queue offset of the first message stored at or after ``timestamp_ms``; the max offset
        if there is none (RocketMQ's searchOffset)."""
        return self.lookup.search_offset(self.consume_queues.get((topic, queue_id)), timestamp_ms)

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, queue_offset: int) -> bool:
        """Whether the message at ``queue_offset`` is old enough to be out of the page cache: more
        than 40 % of physical memory of CommitLog lies after it (RocketMQ's checkInDiskByConsumeOffset)."""
        queue = self.consume_queues.get((topic, queue_id))
        entry = queue.entry(queue_offset) if queue is not None else None
        if entry is None:
            return False
        return self.commitlog.max_offset - entry[0] > self.in_memory_bytes

    # -- retention -------------------------------------------------------------------------------

    def trigger_clean(self) -> CleanReport:
        """Run a retention pass now, as an admin asked: expired files go even outside deleteWhen."""
        if not self.is_open:
            raise StoreClosedError("the store is not open")
        return self.clean_service.clean(manual=True)

    # -- queues ----------------------------------------------------------------------------------

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.consume_queues.get((topic, queue_id))

    def max_offset(self, topic: str, queue_id: int) -> int:
        queue = self.consume_queues.get((topic, queue_id))
        return queue.max_offset if queue is not None else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        queue = self.consume_queues.get((topic, queue_id))
        return queue.min_offset if queue is not None else 0

    def last_store_timestamp(self, topic: str, queue_id: int) -> int | None:
        """Store time of the newest message of a queue, None for an empty queue."""
        queue = self.consume_queues.get((topic, queue_id))
        if queue is None or queue.max_offset == 0:
            return None
        entry = queue.entry(queue.max_offset - 1)
        message = self.look_message(entry[0]) if entry is not None else None
        return message.store_timestamp if message is not None else None

    def delete_topic(self, topic: str) -> int:
        """Drop every ConsumeQueue of ``topic`` and every group's committed offsets on it; its
        CommitLog records go with retention, dead from now on (:mod:`app.store.topic_deletions`).

        Returns how many queues were removed. New messages to the topic start again at offset 0.
        """
        with self.commitlog.lock, self._queues_lock:
            # On disk first: a crash from here on leaves the old records dead, whatever remains.
            self.deletions.record(topic, self.commitlog.max_offset, self.commitlog.min_offset)
            if self.consumer_offsets.remove_topic(topic):
                self.consumer_offsets.persist()
            doomed = [queue for key, queue in self.consume_queues.items() if key[0] == topic]
            self.consume_queues = {key: q for key, q in self.consume_queues.items() if key[0] != topic}
            for queue in doomed:
                self.commitlog.queue_offsets.pop((queue.topic, queue.queue_id), None)
        self._remove_queue_files(topic, doomed)
        return len(doomed)

    def _remove_queue_files(self, topic: str, queues: Iterable[ConsumeQueue]) -> None:
        for queue in queues:
            queue.files.remove_first(len(queue.files.files))
            if queue.files.directory.is_dir():
                queue.files.directory.rmdir()
        topic_dir = self.config.consumequeue_dir / topic
        if topic_dir.is_dir() and not any(topic_dir.iterdir()):
            topic_dir.rmdir()

    def topics(self) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {}
        for topic, queue_id in list(self.consume_queues):
            found.setdefault(topic, []).append(queue_id)
        return {topic: sorted(ids) for topic, ids in found.items()}

    def _consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self.consume_queues.get((topic, queue_id))
        if queue is None:
            with self._queues_lock:
                queue = self.consume_queues.get((topic, queue_id))
                if queue is None:
                    queue = ConsumeQueue.open(
                        self.config.consumequeue_dir,
                        topic,
                        queue_id,
                        self.config.consumequeue_file_entries,
                        self.segment_cache,
                    )
                    queue.files.check_room = self.disk_guard.check_room
                    # In place: copying the table for each new queue made a start with tens of
                    # thousands of queues quadratic. Readers only get() from it or copy it whole
                    # with list(), each one step under the GIL.
                    self.consume_queues[(topic, queue_id)] = queue
        return queue

    def _prepare_queues(self, entries: dict[tuple[str, int], int], held: list[MappedFile]) -> None:
        """Under the CommitLog lock, before a batch writes anything: allocate and map the
        ConsumeQueue segments its entries go to and hold them (``held``, released after dispatch),
        so that dispatch never opens or maps one. On a full disk (DiskFullError) or out of
        descriptors or mappings (ResourceExhaustedError) the batch is refused whole rather than
        cut between CommitLog and queues."""
        queue_offsets = self.commitlog.queue_offsets
        for (topic, queue_id), count in entries.items():
            queue = self.consume_queues.get((topic, queue_id)) or self._consume_queue(topic, queue_id)
            queue.prepare(queue_offsets.get((topic, queue_id), 0), count, held)

    def _size_segment_cache(self) -> None:
        """Raise the open-file limit as far as allowed and bound the mapped ConsumeQueue segments
        by what is left once the CommitLog's segments (and a reserve for index files) are counted."""
        nofile = raise_nofile_limit()
        budget = self.config.max_mapped_segments
        if budget <= 0:
            fixed = len(self.commitlog.files.files) + 8
            budget = max(16, store_file_budget(nofile, max_map_count()) - fixed)
        self.segment_cache.max_mapped = budget
        log.info("open file limit %d: at most %d ConsumeQueue segments mapped at once", nofile, budget)

    def _all_queues(self) -> Iterable[ConsumeQueue]:
        return list(self.consume_queues.values())

    def _load_consume_queues(self) -> None:
        root = self.config.consumequeue_dir
        with os.scandir(root) as topic_entries:
            topics = sorted(entry.name for entry in topic_entries if entry.is_dir())
        for topic in topics:
            with os.scandir(root / topic) as queue_entries:
                queue_ids = sorted(
                    int(entry.name) for entry in queue_entries if entry.is_dir() and entry.name.isdigit()
                )
            for queue_id in queue_ids:
                self._consume_queue(topic, queue_id).files.load()  # names its segments, maps none
        self._drop_deleted_queues()

    def _drop_deleted_queues(self) -> None:
        """Remove what a crash in the middle of :meth:`delete_topic` left: a queue of a deleted
        topic whose first entry points below the deletion floor holds only dead entries (the
        queues of a re-created topic start above it)."""
        for key, queue in list(self.consume_queues.items()):
            floor = self.deletions.floor(key[0])
            if floor and queue.files.files:
                first = queue.entry(queue.files.min_offset // UNIT.size)
                if first is None or first[0] < floor:
                    log.warning("removing queue %s of deleted topic %r, left behind by a crash", *key[::-1])
                    self.consume_queues = {k: q for k, q in self.consume_queues.items() if k != key}
                    self._remove_queue_files(key[0], [queue])

    def _dispatch(
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
        queue = self.consume_queues.get((topic, queue_id)) or self._consume_queue(topic, queue_id)
        if queue.put(queue_offset, physical_offset, size, tags_code):
            self.dirty_queues.mark(queue.files)

    def _forget_clean_end(self) -> None:
        """From here on a crash must not look like a clean stop: clear the clean end before the abort
        file exists. A checkpoint that cannot be written is removed instead (unlinking needs no
        space): the next start then walks the log rather than trust an end that moved on."""
        self.checkpoint.clean_last_record = NO_CLEAN_END
        try:
            self.checkpoint.flush()
        except DiskFullError as error:
            log.error("%s; removing the checkpoint so that a crash cannot pass for a clean stop", error)
            self.checkpoint.path.unlink(missing_ok=True)

    def _dispatched_offset(self) -> int:
        """The end of the log as far as every record before it has its ConsumeQueue entry."""
        with self.commitlog.lock:  # an append dispatches each record just after it is written
            return self.commitlog.max_offset

    def _last_store_timestamp(self) -> int:
        last = self.commitlog.files.last_file
        return last.last_store_timestamp if last is not None else 0
