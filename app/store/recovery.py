"""Start-up recovery (SPEC 1.8): find the true end of the CommitLog and make the ConsumeQueues agree.

* Normal (the abort file is absent): walk the last three CommitLog segments while each record is
  valid (magic, sizes, offset, CRC); the first invalid one is the end of the log.
* Unclean (the abort file is present): start at the last segment whose first record was stored
  before the checkpoint and validate every record from there.

Either way the log is the truth and the ConsumeQueues are made to agree with it
(RocketMQ's truncateDirtyLogicFiles and re-dispatch):

* entries that point past the end of the log are cut (their records were lost with the tail);
* every walked record whose queue offset is the next one its ConsumeQueue lacks is dispatched, so a
  queue whose last entries never reached the disk is rebuilt;
* a queue that is further behind (the walk meets a record past a hole in it) is rebuilt by a
  second walk from the end of its last entry, for the lagging queues only.

The torn tail is cut off (and zeroed) and later segments are deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from app.store.checkpoint import Checkpoint
from app.store.commit_log import CommitLog, Dispatch, skips_consume_queue
from app.store.consume_queue import ConsumeQueue
from app.store.log_walk import LogWalk, first_store_timestamp, records_from
from app.store.record import CheckedRecord, check_record
from app.store.record_format import BLANK_MIN_SIZE

log = logging.getLogger(__name__)

QueueKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    clean: bool
    start_offset: int
    end_offset: int
    records_checked: int
    records_redispatched: int
    queues_truncated: int = 0
    queues_rebuilt: int = 0


def recover(
    commitlog: CommitLog,
    consume_queues: Callable[[], Iterable[ConsumeQueue]],
    checkpoint: Checkpoint,
    clean: bool,
    dispatch: Dispatch,
    normal_segments: int = 3,
    is_dead: Callable[[str, int], bool] = lambda topic, offset: False,
) -> RecoveryReport:
    """Recover the CommitLog's end and bring every ConsumeQueue in line with it.

    ``is_dead(topic, offset)`` names records that must not come back (a deleted topic's).
    """
    queues = {(queue.topic, queue.queue_id): queue for queue in consume_queues()}
    for queue in queues.values():
        queue.recover(clean, checkpoint.consumequeue_offset)
    files = commitlog.files.files
    if clean:
        log.info("recovery: normal (%s)", "clean shutdown" if files else "a new store")
    else:
        log.warning("recovery: abnormal (the abort file is present: the last run did not stop cleanly)")
    if not files:
        for queue in queues.values():
            queue.truncate_after(0)
        return RecoveryReport(clean, 0, 0, 0, 0)
    trusted_end = _clean_end(commitlog, checkpoint) if clean else None
    if trusted_end is not None:
        # A clean stop wrote everything and named its last record, which checks out: no walk.
        commitlog.files.set_end(trusted_end)
        truncated = _cut_past(queues.values(), trusted_end)
        report = RecoveryReport(clean, trusted_end, trusted_end, 0, 0, queues_truncated=truncated)
        log.info("recovered the CommitLog from the clean stop's checkpoint: %s", report)
        return report
    start_index, start_position = (
        (max(0, len(files) - normal_segments), 0) if clean else _unclean_start(commitlog, checkpoint)
    )
    start_offset = files[start_index].file_from_offset + start_position

    checked = redispatched = 0
    lagging: dict[QueueKey, int] = {}
    next_offsets = {key: queue.max_offset for key, queue in queues.items()}

    def redispatch(offset: int, record: CheckedRecord, only: dict[QueueKey, int] | None) -> bool:
        key = (record.topic, record.queue_id)
        if (only is not None and key not in only) or is_dead(record.topic, offset):
            return False
        expected = next_offsets.get(key)
        if expected is None:
            queue = queues.get(key)
            expected = next_offsets[key] = queue.max_offset if queue is not None else 0
        if record.queue_offset < expected:
            return False  # the queue has it already
        if record.queue_offset > expected and (expected > 0 or only is None):
            # A hole: the queue lost entries whose records lie before this one.
            if only is None and key not in lagging:
                lagging[key] = _rebuild_from(queues.get(key), commitlog.min_offset)
            return False
        if not record.tags_code and not record.keys and not record.uniq_key:
            # The walk left the properties unparsed: read them now, for this record only.
            data = commitlog.read(offset, record.size)
            full = check_record(data, 0, offset) if data is not None else None
            if full is None:
                return False
            record = full
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
        next_offsets[key] = record.queue_offset + 1
        return True

    # Entries past the end hold queue offsets above every record the walk meets (a queue's offsets
    # grow with the log), so the walk can compare with the queues before they are cut.
    walk = LogWalk(commitlog, start_index, start_position, with_properties=False)
    for offset, record in walk:
        checked += 1
        if not skips_consume_queue(record.sysflag) and redispatch(offset, record, None):
            redispatched += 1
    end = walk.end
    commitlog.files.set_end(end)
    truncated = _cut_past(queues.values(), end)
    for key, queue in queues.items():
        next_offsets[key] = queue.max_offset

    if lagging:
        log.warning("rebuilding %d ConsumeQueue(s) behind the CommitLog: %s", len(lagging), sorted(lagging))
        for key in lagging:
            lagging_queue = queues.get(key)
            next_offsets[key] = lagging_queue.max_offset if lagging_queue is not None else 0
        for offset, record in records_from(commitlog, min(lagging.values())):
            if not skips_consume_queue(record.sysflag) and redispatch(offset, record, lagging):
                redispatched += 1
    report = RecoveryReport(
        clean,
        start_offset,
        end,
        checked,
        redispatched,
        queues_truncated=truncated,
        queues_rebuilt=len(lagging),
    )
    log.info("recovered the CommitLog: %s", report)
    return report


def _rebuild_from(queue: ConsumeQueue | None, commitlog_min: int) -> int:
    """Where a walk that rebuilds ``queue`` starts: just past the record of its last entry."""
    if queue is None or queue.max_offset <= queue.min_offset:
        return commitlog_min
    return max(commitlog_min, queue.max_physical_end)


def _cut_past(queues: Iterable[ConsumeQueue], end: int) -> int:
    """Cut the entries that point past ``end``; returns how many queues had some."""
    truncated = 0
    for queue in queues:
        if queue.max_physical_end > end:
            queue.truncate_after(end)
            truncated += 1
    return truncated


def _clean_end(commitlog: CommitLog, checkpoint: Checkpoint) -> int | None:
    """The end of the log a clean stop recorded, if its last record is still whole there and nothing
    valid follows it; None when the log must be walked instead."""
    last = checkpoint.clean_last_record
    mapped = commitlog.files.find(last) if last >= 0 else None
    if mapped is None:
        return None
    base = mapped.file_from_offset
    record = check_record(mapped.view, last - base, last)
    if record is None or record.size == 0:
        return None
    end = last + record.size
    if check_record(mapped.view, end - base, end) is not None:
        return None  # the log goes on past what the checkpoint names
    commitlog.last_record_offset = last
    return end


def _unclean_start(commitlog: CommitLog, checkpoint: Checkpoint) -> tuple[int, int]:
    """(segment index, position) where the walk after a crash starts.

    The checkpoint's offsets name a record boundary below which the CommitLog and every ConsumeQueue
    entry were on disk; without them (an older checkpoint), the last segment whose first record
    was stored at or before the checkpoint's timestamps.
    """
    files = commitlog.files.files
    boundary = checkpoint.min_offset()
    mapped = commitlog.files.find(boundary) if boundary > 0 else None
    if mapped is not None:
        position = boundary - mapped.file_from_offset
        # A whole record starts there, or nothing does (the log ended there): anything else means
        # the checkpoint does not name a boundary of this log, and the timestamps are used instead.
        if check_record(mapped.view, position, boundary) is not None or bytes(
            mapped.view[position : position + BLANK_MIN_SIZE]
        ) == bytes(BLANK_MIN_SIZE):
            return files.index(mapped), position
    elif boundary > 0 and boundary == files[-1].file_from_offset + commitlog.file_size:
        return len(files) - 1, commitlog.file_size  # the log ended with its last segment
    checkpoint_ms = checkpoint.min_timestamp()
    for index in range(len(files) - 1, -1, -1):
        first = first_store_timestamp(files[index])
        if first is not None and first <= checkpoint_ms:
            return index, 0
    return 0, 0
