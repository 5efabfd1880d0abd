"""StoreServices: the store's background threads, started once the store is recovered and
stopped, in order, when it closes.

Segment allocation, the CommitLog flush (group commit under SYNC_FLUSH, the periodic flush under
ASYNC_FLUSH), the ConsumeQueue flush with the checkpoint, the message index, retention and the
consumer offsets' persistence.
"""

from __future__ import annotations

from collections.abc import Callable

from app.store.allocate import AllocateSegmentService
from app.store.checkpoint import Checkpoint
from app.store.commit_log import CommitLog
from app.store.config import FlushMode, StoreConfig
from app.store.consumer_offsets import ConsumerOffsetManager, OffsetPersistService
from app.store.flush import (
    AsyncFlushService,
    CommitLogFlusher,
    ConsumeQueueFlushService,
    DirtyQueues,
    GroupCommitService,
)
from app.store.index_service import IndexService
from app.store.retention import CleanService


class StoreServices:
    def __init__(
        self,
        config: StoreConfig,
        commitlog: CommitLog,
        checkpoint: Checkpoint,
        dirty_queues: DirtyQueues,
        index_service: IndexService | None,
        clean_service: CleanService,
        consumer_offsets: ConsumerOffsetManager,
    ) -> None:
        self.config = config
        self.commitlog = commitlog
        self.checkpoint = checkpoint
        self.dirty_queues = dirty_queues
        self.index_service = index_service
        self.clean_service = clean_service
        self.consumer_offsets = consumer_offsets
        self.allocate_service: AllocateSegmentService | None = None
        self.group_commit: GroupCommitService | None = None
        self.async_flush: AsyncFlushService | None = None
        self.consumequeue_flush: ConsumeQueueFlushService | None = None
        self.offset_persist: OffsetPersistService | None = None

    def start(
        self,
        flusher: CommitLogFlusher,
        covered_timestamp: Callable[[], int],
        covered_offset: Callable[[], int],
    ) -> None:
        """``flusher`` forces the CommitLog; ``covered_timestamp`` and ``covered_offset``: how far
        the ConsumeQueues reach once flushed (the checkpoint's ConsumeQueue fields)."""
        config = self.config
        self.allocate_service = AllocateSegmentService(
            self.commitlog.files, config.disk_check_interval_ms, self.commitlog.chunk_size
        )
        self.allocate_service.start()
        if config.flush_mode is FlushMode.SYNC:
            self.group_commit = GroupCommitService(
                flusher, config.group_commit_interval_ms, config.sync_flush_timeout_ms
            )
            self.group_commit.start()
        else:
            self.async_flush = AsyncFlushService(
                flusher,
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
            covered_timestamp=covered_timestamp,
            covered_offset=covered_offset,
            sync_root=config.consumequeue_dir,
        )
        self.consumequeue_flush.start()
        if self.index_service is not None:
            self.index_service.start()
        self.clean_service.start()
        self.offset_persist = OffsetPersistService(
            self.consumer_offsets, config.consumer_offset_persist_interval_ms
        )
        self.offset_persist.start()

    def stop_retention(self) -> None:
        """First at close: no file is deleted while the store shuts down."""
        self.clean_service.stop()

    def stop(self) -> None:
        """Stop the other services, each draining what it holds, once the CommitLog takes no more
        appends. The index drains first: its last flush moves the checkpoint's index timestamp."""
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
