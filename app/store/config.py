"""The store's settings: one frozen value object, every default from SPEC.md."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from app.store.record_format import DEFAULT_MESSAGE_DELAY_LEVEL


class FlushMode(enum.StrEnum):
    ASYNC = "ASYNC"
    SYNC = "SYNC"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    store_dir: Path
    flush_mode: FlushMode = FlushMode.ASYNC
    commitlog_file_size: int = 1024 * 1024 * 1024
    consumequeue_file_entries: int = 300_000
    # Disk blocks are allocated ahead of the writer a chunk at a time, not a whole file at once: a
    # CommitLog segment this much at a time (and the next segment, prepared ahead, its first chunk);
    # a ConsumeQueue segment one page first, then doubling up to this much at a time.
    commitlog_chunk_size: int = 16 * 1024 * 1024
    consumequeue_chunk_size: int = 1024 * 1024
    max_message_size: int = 4 * 1024 * 1024
    max_topic_length: int = 127
    max_properties_size: int = 32_767
    # Address written into STOREHOST and so into every message id.
    store_host: str = "127.0.0.1"
    store_port: int = 8080
    # SYNC_FLUSH group commit.
    sync_flush_timeout_ms: int = 5_000
    group_commit_interval_ms: int = 10
    # ASYNC_FLUSH.
    flush_interval_commitlog_ms: int = 500
    flush_commitlog_least_pages: int = 4
    flush_commitlog_thorough_interval_ms: int = 10_000
    flush_interval_consumequeue_ms: int = 1_000
    flush_consumequeue_least_pages: int = 2
    flush_consumequeue_thorough_interval_ms: int = 60_000
    # ConsumeQueue segments mapped at once, over all queues; 0: from the open-file and mapping
    # limits at start (see app/store/file_cache.py).
    max_mapped_segments: int = 0
    # Reading.
    max_scan_bytes_per_pull: int = 16_000
    max_transfer_bytes_per_pull: int = 4 * 1024 * 1024
    # RocketMQ's accessMessageInMemoryMaxRatio: the share of physical memory (percent) that the
    # newest CommitLog bytes are assumed to occupy in the page cache. A pull further behind than
    # that reads the disk: the master suggests reading from a slave.
    access_message_in_memory_max_ratio: float = 40.0
    # Recovery walks this many trailing CommitLog segments after a clean stop.
    recover_segments_normal: int = 3
    # Message index (SPEC 1.6): slots and entries per index file, flush interval, query limit.
    message_index_enable: bool = True
    max_hash_slots: int = 5_000_000
    max_index_count: int = 20_000_000
    flush_interval_index_ms: int = 1_000
    max_index_query_results: int = 64
    # Retention and the disk guard (SPEC 1.9). Ratios are percentages of the store's partition.
    file_reserved_time_h: int = 72
    delete_when: str = "04"  # hours of the day (local time), "04" or "04;16"
    disk_max_used_space_ratio: int = 75
    disk_force_clean_ratio: int = 85
    disk_refuse_writes_ratio: int = 90
    disk_accept_writes_ratio: int = 85
    disk_check_interval_ms: int = 1_000
    clean_resource_interval_ms: int = 10_000
    clean_first_delay_ms: int = 60_000
    delete_files_max_per_pass: int = 10
    delete_files_interval_ms: int = 100
    destroy_forcibly_interval_ms: int = 120_000
    # Consumer offsets (SPEC 4).
    consumer_offset_persist_interval_ms: int = 5_000
    # RocketMQ's messageDelayLevel: the delays of the 18 delay levels, for the whole process
    # (app.store.record_format.parse_delay_levels; tests shorten them).
    message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL

    @property
    def commitlog_dir(self) -> Path:
        return self.store_dir / "commitlog"

    @property
    def spare_dir(self) -> Path:
        """Where the next CommitLog segment is prepared, apart from the segments themselves."""
        return self.store_dir / "spare"

    @property
    def consumequeue_dir(self) -> Path:
        return self.store_dir / "consumequeue"

    @property
    def config_dir(self) -> Path:
        return self.store_dir / "config"

    @property
    def index_dir(self) -> Path:
        return self.store_dir / "index"

    @property
    def consumer_offset_path(self) -> Path:
        return self.config_dir / "consumerOffset.json"

    @property
    def topic_deletions_path(self) -> Path:
        return self.config_dir / "topicDeletions.json"

    @property
    def checkpoint_path(self) -> Path:
        return self.store_dir / "checkpoint"

    @property
    def abort_path(self) -> Path:
        return self.store_dir / "abort"

    @property
    def consumequeue_file_size(self) -> int:
        return self.consumequeue_file_entries * 20
