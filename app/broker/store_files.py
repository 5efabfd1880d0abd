"""The store's files as an operator sees them: the CommitLog's segments with their offsets and sizes
(the latest ones only, so the answer stays small on a big store), and totals of the ConsumeQueue and
index files. It walks directories: call it off the event loop."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from app.store import MessageStore


def _walk_totals(directory: Path) -> tuple[int, int]:
    """(files, bytes) under ``directory``, every level down; (0, 0) when it does not exist."""
    files = size = 0
    pending = [directory]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except FileNotFoundError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                pending.append(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                files += 1
                size += entry.stat(follow_symlinks=False).st_size
    return files, size


def describe_files(store: MessageStore, segments: int) -> dict[str, Any]:
    """The CommitLog's last ``segments`` segments (oldest first) and its totals; the ConsumeQueue
    and index files' totals."""
    commitlog = store.commitlog
    mapped = list(commitlog.files.files)
    config = store.config
    queue_files, queue_bytes = _walk_totals(config.consumequeue_dir)
    index_files, index_bytes = _walk_totals(config.index_dir)
    try:
        queue_dirs = sum(
            len(os.listdir(topic)) for topic in os.scandir(config.consumequeue_dir) if topic.is_dir()
        )
    except FileNotFoundError:
        queue_dirs = 0
    return {
        "commitlog": {
            "segments": len(mapped),
            "bytes": sum(segment.file_size for segment in mapped),
            "min_offset": commitlog.min_offset,
            "max_offset": commitlog.max_offset,
            "segment_bytes": config.commitlog_file_size,
            "files": [
                {
                    "name": Path(segment.path).name,
                    "from_offset": segment.file_from_offset,
                    "size_bytes": segment.file_size,
                    "written_bytes": segment.wrote_position,
                }
                for segment in mapped[max(0, len(mapped) - segments) :]
            ],
        },
        "consume_queues": {"queues": queue_dirs, "files": queue_files, "bytes": queue_bytes},
        "index": {"files": index_files, "bytes": index_bytes},
    }
