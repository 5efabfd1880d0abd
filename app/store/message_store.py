"""MessageStore: the facade over the store's parts. It wires them at construction and runs their
life cycle (open: load, recover, start the services; close: drain and checkpoint); the work is
theirs:

* :class:`~app.store.writer.MessageWriter` validates and encodes, the
  :class:`~app.store.commit_log.CommitLog` appends, :class:`~app.store.queue_table.QueueTable`
  holds the ConsumeQueues, :class:`~app.store.reader.MessageReader` answers reads,
  :class:`~app.store.lookup.MessageLookup` lookups by id, key and time,
  :class:`~app.store.store_services.StoreServices` the background threads.

Arrival listeners (the long-polling hold service) are passed in at construction, as
``dispatchers``: each is called as (topic, queue id, next queue offset, tags code) after every
append, outside the lock, once per queue and tags code the append stored messages of. A listener may in turn need the queues' max offsets, which the store
answers: build a :class:`~app.store.queue_table.QueueTable` first, give the listener its
``max_offset`` and give the store the table with ``queues=``. The table needs nothing but the
configuration, so neither side is patched after it is built::

    queues = QueueTable(config)
    holds = PullHoldService(queues.max_offset, ...)
    store = MessageStore(config, [holds.notify_arrival], queues=queues)

The clock, the disk usage probe and the CommitLog flusher are collaborators (``clock=``,
``disk_usage=``, ``flusher=``): tests pass fakes. ``on_flush`` is told how long each CommitLog
flush took (the broker's metrics).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future

from app.store.atomic_file import fsync_directory
from app.store.checkpoint import NO_CLEAN_END, Checkpoint
from app.store.commit_log import CommitLog
from app.store.config import StoreConfig
from app.store.consume_queue import ConsumeQueue
from app.store.consumer_offsets import ConsumerOffsetManager
from app.store.dir_lock import StoreDirectoryLock
from app.store.disk_guard import DiskGuard, DiskUsageProbe, disk_usage_probe, free_bytes_probe
from app.store.epochs import EpochLog
from app.store.errors import NO_SPACE, DiskFullError, ReplicaReadOnlyError, StoreClosedError
from app.store.file_cache import SegmentCache
from app.store.filter import MessageFilter
from app.store.flush import (
    SYNCFS_AT_QUEUES,
    CommitLogFlusher,
    ConsumeQueueFlushService,
    DirtyQueues,
    FlushListener,
    GroupCommitService,
    flush_together,
)
from app.store.index_file import FORMAT_MARKER
from app.store.index_service import IndexService
from app.store.log_codec import bind_level_delays
from app.store.log_replica import read_replica
from app.store.lookup import MAX_TIMESTAMP_MS, MessageLookup
from app.store.mapped_file_queue import MappedFileQueue
from app.store.queue_table import QueueDispatcher, QueueTable
from app.store.reader import MessageReader
from app.store.record import CheckedRecord, StoredMessage, decode_record
from app.store.record_format import EncodedRecord, Limits, Message, encode_host, parse_delay_levels
from app.store.recovery import RecoveryReport, recover
from app.store.results import AppendResult, GetMessageResult
from app.store.retention import CleanReport, CleanService
from app.store.single_append import SingleAppend
from app.store.store_services import StoreServices
from app.store.topic_deletions import TopicDeletions
from app.store.writer import ArrivalListener, MessageWriter

log = logging.getLogger(__name__)

# Builds the CommitLog's flusher from its files and the checkpoint: tests pass a slow or stalled disk.
FlusherFactory = Callable[[MappedFileQueue, Checkpoint], CommitLogFlusher]


class MessageStore:
    def __init__(
        self,
        config: StoreConfig,
        dispatchers: Sequence[ArrivalListener] = (),
        *,
        queues: QueueTable | None = None,
        flusher: FlusherFactory = CommitLogFlusher,
        clock: Callable[[], float] = time.time,
        disk_usage: DiskUsageProbe | None = None,
        sleep: Callable[[float], None] = time.sleep,
        on_flush: FlushListener | None = None,
    ) -> None:
        if queues is not None and queues.config is not config:
            raise ValueError("the QueueTable was built for another StoreConfig")
        self.config = config
        self.clock = clock
        self.store_host = encode_host(config.store_host, config.store_port)
        self.limits = Limits(config.max_message_size, config.max_topic_length, config.max_properties_size)
        self.dir_lock = StoreDirectoryLock(config.store_dir)
        # A slave's store: only append_replica writes, so the CommitLog stays its master's.
        self.replica = False
        # Which master wrote which stretch of the CommitLog (app.store.epochs).
        self.epochs = EpochLog(config.config_dir / "epochs.json")
        self.checkpoint = Checkpoint(config.checkpoint_path)
        self.queues = queues if queues is not None else QueueTable(config)
        # Every new file asks the guard first (a full disk refuses it before it is allocated).
        self.disk_guard = DiskGuard(
            disk_usage or disk_usage_probe(config.store_dir),
            config.disk_refuse_writes_ratio,
            config.disk_accept_writes_ratio,
            config.disk_check_interval_ms,
            clock,
            where=f"the disk of {config.store_dir}",
            free_bytes=free_bytes_probe(config.store_dir),
        )
        check_room = self.disk_guard.check_room
        self.index_service: IndexService | None = None
        if config.message_index_enable:
            self.index_service = IndexService(
                config.index_dir,
                self.checkpoint,
                config.max_hash_slots,
                config.max_index_count,
                config.flush_interval_index_ms,
                clock,
                check_room=check_room,
                format_path=config.config_dir / FORMAT_MARKER,
            )
        self.dirty_queues = DirtyQueues()
        # Read before recovery dispatches anything: a deleted topic's records must stay dead.
        self.deletions = TopicDeletions(config.topic_deletions_path).load()
        self.dispatcher = QueueDispatcher(self.queues, self.deletions, self.dirty_queues, check_room)
        self.commitlog = CommitLog(
            config.commitlog_dir,
            config.commitlog_file_size,
            self.store_host,
            self.dispatcher.dispatch,
            self.dispatcher.dispatch_run,
            on_batch=self.index_service.submit if self.index_service is not None else None,
            check_room=check_room,
            chunk_size=config.commitlog_chunk_size,
            spare_directory=config.spare_dir,
        )
        self.flusher = flusher(self.commitlog.files, self.checkpoint)
        self.flusher.on_flush = on_flush
        self.recovery: RecoveryReport | None = None
        self.recovery_seconds = 0.0  # loading and recovery at open
        self.clean_service = CleanService(
            config, self.commitlog, self.queues.all, self.index_service, self.disk_guard, clock, sleep
        )
        self.reader = MessageReader(config, self.commitlog, self.queues, self.deletions)
        self.lookup = MessageLookup(
            self.commitlog, self.index_service, self.reader.look_live_message, config.max_index_query_results
        )
        self.consumer_offsets = ConsumerOffsetManager(config.consumer_offset_path, self)
        self.services = StoreServices(
            config,
            self.commitlog,
            self.checkpoint,
            self.dirty_queues,
            self.index_service,
            self.clean_service,
            self.consumer_offsets,
        )
        self.writer = MessageWriter(
            self.commitlog,
            self.queues,
            self.disk_guard,
            self.limits,
            self.services,
            dispatchers,
            SingleAppend(self.commitlog, self.dispatcher),
        )
        self.is_open = False

    @property
    def group_commit(self) -> GroupCommitService | None:
        return self.services.group_commit

    @property
    def consumequeue_flush(self) -> ConsumeQueueFlushService | None:
        return self.services.consumequeue_flush

    # -- lifecycle -------------------------------------------------------------------------------

    def open(self) -> MessageStore:
        """Load every file, recover, and start the flush services."""
        config = self.config
        # Before recovery: it writes the delayed messages' queue entries with their due times.
        bind_level_delays(parse_delay_levels(config.message_delay_level))
        config.store_dir.mkdir(parents=True, exist_ok=True)
        self.dir_lock.acquire()
        directories = [config.commitlog_dir, config.consumequeue_dir, config.config_dir]
        if self.index_service is not None:
            directories.append(config.index_dir)
        for directory in directories:
            directory.mkdir(parents=True, exist_ok=True)
        clean = not config.abort_path.exists()
        started = time.perf_counter()
        try:
            self.commitlog.files.load()
            self.queues.size_cache(len(self.commitlog.files.files))
            self.queues.load(self.deletions, self.disk_guard.check_room)
            self.recovery = recover(
                self.commitlog,
                self.queues.all,
                self.checkpoint,
                clean,
                self.dispatcher.dispatch,
                config.recover_segments_normal,
            )
        except BaseException:
            # Refused (a file disagrees with the configuration) or failed: leave nothing mapped.
            self._release_after_failed_open()
            raise
        self.queues.settle(self.commitlog.min_offset, self.commitlog.queue_offsets)
        try:
            if self.index_service is not None:
                self.index_service.load(clean)
                self.index_service.trim(self.commitlog.max_offset)
                self.index_service.schedule_rebuild(self.commitlog, self.commitlog.max_offset)
            self.consumer_offsets.load()
            self.consumer_offsets.clamp_to_queue_ends()  # recovery may have cut what they covered
        except BaseException:
            self._release_after_failed_open()
            raise
        self.recovery_seconds = time.perf_counter() - started
        self.checkpoint.forget_clean_end()
        self._touch_abort_file()
        # A power loss must not take the abort file (the next start would trust the disk and skip
        # the re-dispatch), nor the names of the directories made above: force the store root.
        fsync_directory(config.store_dir)
        self.commitlog.open()
        self.services.start(
            self.flusher, self.commitlog.last_store_timestamp, self.commitlog.dispatched_offset
        )
        self.is_open = True
        return self

    def _release_after_failed_open(self) -> None:
        self.commitlog.files.close()
        self.queues.close()
        if self.index_service is not None:
            self.index_service.close()  # closes nothing before its load
        self.dir_lock.release()

    def _touch_abort_file(self) -> None:
        """Mark the store as running. On a full disk the store still starts (to serve reads): the
        file may then be missing, and a crash before a clean stop is recovered as a clean stop."""
        try:
            self.config.abort_path.touch()
        except OSError as error:
            if error.errno not in NO_SPACE:
                raise
            log.error("cannot create %s on a full disk: %s", self.config.abort_path, error)

    def close(self) -> None:
        """Stop accepting writes, drain the flush services, write the checkpoint, remove abort."""
        if not self.is_open:
            return
        self.is_open = False
        self.services.stop_retention()
        self.commitlog.closed = True
        with self.commitlog.lock:
            pass  # wait for an append in progress
        self.services.stop()
        self.flusher.flush_all()
        # The ConsumeQueue flush drained at its stop; whatever it left (it failed, or stopped too
        # slowly) is flushed here, with one sync of the file system when many queues are left.
        unflushed = [
            queue.files for queue in self.queues.all() if queue.files.flushed_where < queue.files.max_offset
        ]
        if len(unflushed) >= SYNCFS_AT_QUEUES:
            flush_together(unflushed, self.config.consumequeue_dir)
        else:
            for files in unflushed:
                files.flush_all()
        self.checkpoint.commitlog_timestamp = max(
            self.checkpoint.commitlog_timestamp, self.commitlog.last_store_timestamp()
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
        self.queues.close()
        if self.index_service is not None:
            self.index_service.close()
        self.config.abort_path.unlink(missing_ok=True)
        self.dir_lock.release()

    def __enter__(self) -> MessageStore:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- writing (app.store.writer) ---------------------------------------------------------------

    def append(self, messages: Sequence[Message]) -> list[AppendResult]:
        """Validate, encode and append messages; no waiting for the disk. Either every message is
        valid and all are stored, or a MessageRejectedError names the first bad one."""
        self._check_writable()
        return self.writer.append(messages)

    def append_records(
        self, records: Sequence[EncodedRecord], total_size: int, entries: dict[tuple[str, int], int]
    ) -> list[AppendResult]:
        """Append records encoded already (:meth:`MessageWriter.append_records`)."""
        self._check_writable()
        return self.writer.append_records(records, total_size, entries)

    def durable(self, results: Sequence[AppendResult]) -> Future[bool]:
        """A future that is True once ``results`` are on disk as the flush mode promises."""
        return self.writer.durable(results)

    async def wait_durable(self, results: Sequence[AppendResult]) -> bool:
        """True once ``results`` are on disk as the flush mode promises, awaited on the running
        event loop; False when the group commit did not confirm them in time."""
        return await self.writer.wait_durable(results)

    def put(self, messages: Sequence[Message]) -> list[AppendResult]:
        """Append and, under SYNC_FLUSH, block until the group commit acknowledges the bytes."""
        self._check_writable()
        return self.writer.put(messages)

    async def put_async(self, messages: Sequence[Message]) -> list[AppendResult]:
        """As :meth:`put`, awaiting the group commit without blocking the event loop."""
        self._check_writable()
        return await self.writer.put_async(messages)

    def _check_open(self) -> None:
        if not self.is_open:
            raise StoreClosedError("the store is not open")

    def _check_writable(self) -> None:
        self._check_open()
        if self.replica:
            raise ReplicaReadOnlyError(
                "this broker is a slave: its CommitLog takes only what its master sends"
            )

    # -- reading (app.store.reader) ---------------------------------------------------------------

    def get_message(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int = 32,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult:
        """Read up to ``max_messages`` records of one queue from ``offset`` (SPEC 1.10), those
        ``message_filter`` matches."""
        return self.reader.get_message(topic, queue_id, offset, max_messages, message_filter)

    def read_messages(
        self, topic: str, queue_id: int, offset: int, max_messages: int = 32
    ) -> list[StoredMessage]:
        """Decoded messages from ``offset``: a convenience over :meth:`get_message`."""
        result = self.reader.get_message(topic, queue_id, offset, max_messages)
        return [decode_record(record) for record in result.records]

    def append_replica(self, offset: int, data: bytes) -> list[AppendResult]:
        """Write bytes a master's CommitLog holds at ``offset`` at the same place here (a slave's
        replication, :meth:`MessageWriter.append_replica`)."""
        return self.writer.append_replica(offset, data)

    def cut_back(self, offset: int) -> None:
        """Cut the CommitLog back to ``offset`` (a record boundary) and the ConsumeQueue entries
        past it: a former master drops the tail the new master never had (a boundary the two share)
        before it appends the new master's bytes; a broker starting drops a batch commit a crash
        tore (:mod:`app.broker.transaction_torn`). The index keeps its entries; a lookup checks the
        record it finds."""
        commitlog = self.commitlog
        with commitlog.lock:
            if offset >= commitlog.max_offset:
                return
            log.warning("cutting the CommitLog back from %d to %d", commitlog.max_offset, offset)
            commitlog.files.truncate(offset)
            commitlog.files.flush_all()
            commitlog.last_record_offset = -1  # unknown: the next clean start walks the log
            for queue in self.queues.all():
                queue.truncate_after(offset)
                queue.files.flush_all()
                commitlog.queue_offsets[(queue.topic, queue.queue_id)] = queue.max_offset
            checkpoint = self.checkpoint
            checkpoint.commitlog_offset = min(checkpoint.commitlog_offset, offset)
            checkpoint.consumequeue_offset = min(checkpoint.consumequeue_offset, offset)
            checkpoint.flush()
            # Offsets committed past the cut would skip the new master's messages stored there.
            self.consumer_offsets.clamp_to_queue_ends()

    def restart_replica_at(self, offset: int) -> None:
        """Drop the whole CommitLog and every ConsumeQueue entry, so that the next replicated bytes
        may start at ``offset`` (a segment boundary): a slave behind what its master still stores
        (retention deleted the rest) starts again from the master's first segment."""
        commitlog = self.commitlog
        with commitlog.lock:
            log.warning(
                "dropping the CommitLog (%d..%d) to copy the master's from %d",
                commitlog.min_offset,
                commitlog.max_offset,
                offset,
            )
            commitlog.files.clear()
            commitlog.last_record_offset = -1
            commitlog.queue_offsets.clear()
            for queue in self.queues.all():
                queue.files.clear()
                queue.min_logic_offset = queue.max_physical_end = 0
            self.checkpoint.commitlog_offset = self.checkpoint.consumequeue_offset = 0
            self.checkpoint.flush()

    def read_replica(self, offset: int, max_bytes: int) -> bytes:
        """Whole records of the CommitLog from ``offset`` (a record boundary), at most
        ``max_bytes`` of them and within one segment, for a slave; a segment's trailing blank
        record comes whole. Empty when nothing is stored past ``offset`` yet. It reads the disk:
        call it off the event loop."""
        return read_replica(self.commitlog, offset, max_bytes)

    def read_record(self, physical_offset: int) -> memoryview | None:
        """The stored message record that starts at ``physical_offset``, or None if there is none."""
        return self.reader.read_record(physical_offset)

    def look_message(self, physical_offset: int) -> StoredMessage | None:
        """The message stored at ``physical_offset`` (the offset a message id names), or None."""
        return self.reader.look_message(physical_offset)

    def read_live_record(self, physical_offset: int) -> memoryview | None:
        """As :meth:`read_record`, None for a record of a topic deleted since it was stored."""
        return self.reader.read_live_record(physical_offset)

    def records_since(self, timestamp_ms: int) -> Iterator[tuple[int, CheckedRecord]]:
        """(CommitLog offset, record) of every live message stored at or after ``timestamp_ms``,
        in log order; records of deleted topics are left out. It reads the disk: call it off the
        event loop."""
        return self.reader.records_since(timestamp_ms)

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
        return self.lookup.search_offset(self.queues.get(topic, queue_id), timestamp_ms)

    def check_in_disk_by_consume_offset(self, topic: str, queue_id: int, queue_offset: int) -> bool:
        """Whether the message at ``queue_offset`` is old enough to be out of the page cache."""
        return self.reader.check_in_disk_by_consume_offset(topic, queue_id, queue_offset)

    # -- retention -------------------------------------------------------------------------------

    def trigger_clean(self) -> CleanReport:
        """Run a retention pass now, as an admin asked: expired files go even outside deleteWhen."""
        if not self.is_open:
            raise StoreClosedError("the store is not open")
        return self.clean_service.clean(manual=True)

    # -- queues (app.store.queue_table) ----------------------------------------------------------

    @property
    def consume_queues(self) -> dict[tuple[str, int], ConsumeQueue]:
        return self.queues.queues

    @property
    def segment_cache(self) -> SegmentCache:
        return self.queues.segment_cache

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        return self.queues.get(topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.queues.max_offset(topic, queue_id)

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self.queues.min_offset(topic, queue_id)

    def topics(self) -> dict[str, list[int]]:
        return self.queues.topics()

    def last_store_timestamp(self, topic: str, queue_id: int) -> int | None:
        """Store time of the newest message of a queue, None for an empty queue."""
        return self.reader.last_store_timestamp(topic, queue_id)

    def delete_topic(self, topic: str) -> int:
        """Drop the topic's queues and offsets (:meth:`QueueTable.delete_topic`); how many queues."""
        return self.queues.delete_topic(topic, self.commitlog, self.deletions, self.consumer_offsets)
