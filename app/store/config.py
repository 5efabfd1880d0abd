"""The store's settings: one frozen value object, every default from SPEC.md."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path


class FlushMode(enum.StrEnum):
    ASYNC = "ASYNC"
    SYNC = "SYNC"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    store_dir: Path
    flush_mode: FlushMode = FlushMode.ASYNC
    commitlog_file_size: int = 1024 * 1024 * 1024
    consumequeue_file_entries: int = 300_000
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
    # Reading.
    max_scan_bytes_per_pull: int = 16_000
    max_transfer_bytes_per_pull: int = 4 * 1024 * 1024
    # Recovery walks this many trailing CommitLog segments after a clean stop.
    recover_segments_normal: int = 3
    extra: dict[str, object] = field(default_factory=dict, compare=False)

    @property
    def commitlog_dir(self) -> Path:
        return self.store_dir / "commitlog"

    @property
    def consumequeue_dir(self) -> Path:
        return self.store_dir / "consumequeue"

    @property
    def config_dir(self) -> Path:
        return self.store_dir / "config"

    @property
    def checkpoint_path(self) -> Path:
        return self.store_dir / "checkpoint"

    @property
    def abort_path(self) -> Path:
        return self.store_dir / "abort"

    @property
    def consumequeue_file_size(self) -> int:
        return self.consumequeue_file_entries * 20
