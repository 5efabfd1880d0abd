"""Start-up recovery (SPEC 1.8): find the true end of the CommitLog and make the ConsumeQueues agree.

* Normal (the abort file is absent): walk the last three CommitLog segments while each record is
  valid (magic, sizes, offset, CRC); the first invalid one is the end of the log.
* Unclean (the abort file is present): start at the last segment whose first record was stored
  before the checkpoint, validate every record from there and re-dispatch it. Dispatch is
  idempotent, so records the ConsumeQueues already hold are skipped.

In both cases the torn tail is cut off (and zeroed), later segments are deleted and ConsumeQueue
entries that point past the end are truncated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from app.store.checkpoint import Checkpoint
from app.store.commit_log import CommitLog, Dispatch, skips_consume_queue
from app.store.consume_queue import ConsumeQueue

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    clean: bool
    start_offset: int
    end_offset: int
    records_checked: int
    records_redispatched: int


def recover(
    commitlog: CommitLog,
    consume_queues: Callable[[], Iterable[ConsumeQueue]],
    checkpoint: Checkpoint,
    clean: bool,
    dispatch: Dispatch,
    normal_segments: int = 3,
) -> RecoveryReport:
    for queue in consume_queues():
        queue.recover()
    files = commitlog.files.files
    if not files:
        for queue in consume_queues():
            queue.truncate_after(0)
        return RecoveryReport(clean, 0, 0, 0, 0)
    if clean:
        start_index = max(0, len(files) - normal_segments)
    else:
        start_index = _unclean_start(commitlog, checkpoint.min_timestamp())
    checked = redispatched = 0
    for offset, record in commitlog.walk(start_index):
        checked += 1
        if not clean and not skips_consume_queue(record.sysflag):
            dispatch(
                record.topic,
                record.queue_id,
                record.queue_offset,
                offset,
                record.size,
                record.tags_code,
                record.store_timestamp,
                record.keys,
                record.uniq_key,
            )
            redispatched += 1
    end = commitlog.walk_end
    commitlog.files.set_end(end)
    for queue in consume_queues():
        if queue.max_physical_end > end:
            queue.truncate_after(end)
    report = RecoveryReport(clean, files[start_index].file_from_offset, end, checked, redispatched)
    log.info("recovered the CommitLog: %s", report)
    return report


def _unclean_start(commitlog: CommitLog, checkpoint_ms: int) -> int:
    """Index of the last segment whose first record was stored at or before the checkpoint."""
    files = commitlog.files.files
    for index in range(len(files) - 1, -1, -1):
        first = commitlog.first_store_timestamp(files[index])
        if first is not None and first <= checkpoint_ms:
            return index
    return 0
