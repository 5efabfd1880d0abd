"""Replication of the CommitLog: a master's whole records read out, a slave's copy written in.

A master hands a slave the bytes its CommitLog holds from an offset (:func:`read_replica`): whole
records within one segment, a segment's trailing blank END_OF_FILE record alone. The slave checks
them (:func:`check_replica`) and writes them at the same offset of its own log
(:func:`append_replica`), copied as they are, so that its log stays byte-identical to the master's;
the messages among them are dispatched to its ConsumeQueues as an append's are. Bytes that cannot
go where they are sent raise :class:`ReplicaError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from app.store.commit_log import CommitLog, skips_consume_queue
from app.store.errors import StoreClosedError
from app.store.record import CheckedRecord, check_record
from app.store.record_format import BLANK_MAGIC, BLANK_MIN_SIZE, SIZE_MAGIC, EncodedRecord
from app.store.results import AppendResult, PutStatus

PUT_OK = PutStatus.PUT_OK


class ReplicaError(ValueError):
    """Replicated bytes that cannot go where they are sent: the wrong offset or not whole records."""


def check_replica(data: bytes, offset: int, file_size: int) -> list[tuple[int, CheckedRecord]]:
    """Validate bytes a master's CommitLog holds at ``offset`` before a slave writes them there:
    whole records inside one segment, the last of which may be a blank END_OF_FILE that fills it.
    Returns (offset, record) of each message; ReplicaError names the first thing wrong."""
    position = offset % file_size
    if position + len(data) > file_size:
        raise ReplicaError(f"{len(data)} bytes at {offset} cross the end of a CommitLog segment")
    view = memoryview(data)
    checked: list[tuple[int, CheckedRecord]] = []
    at = 0
    while at < len(data):
        record = check_record(view, at, offset + at)
        if record is None:
            raise ReplicaError(f"no valid record at CommitLog offset {offset + at}")
        if record.size == 0:  # the blank runs to the end of the chunk, which is the segment's
            if position + len(data) != file_size:
                raise ReplicaError(f"the blank record at {offset + at} does not fill its segment")
            break
        checked.append((offset + at, record))
        at += record.size
    return checked


def append_replica(
    commitlog: CommitLog,
    offset: int,
    data: bytes,
    checked: Sequence[tuple[int, CheckedRecord]],
    before_write: Callable[[], None] | None = None,
) -> list[AppendResult]:
    """Write a master's bytes at the same offset of ``commitlog`` (``offset`` must be its end) and
    dispatch the messages among them, ``checked`` by :func:`check_replica`. The bytes are
    copied as they are: the log stays byte-identical to the master's."""
    results: list[AppendResult] = []
    with commitlog.lock:
        if commitlog.closed:
            raise StoreClosedError("the CommitLog is closed")
        # An empty log starts wherever its master's starts: at a segment boundary.
        starts_empty = not commitlog.files.files and offset % commitlog.file_size == 0
        if offset != commitlog.files.max_offset and not starts_empty:
            raise ReplicaError(
                f"replicated bytes start at {offset}, this CommitLog ends at {commitlog.files.max_offset}"
            )
        if not data:
            return results
        if before_write is not None:
            before_write()
        last = commitlog.files.last_file
        mapped = commitlog.files.new_file(offset) if last is None or last.is_full else last
        position = mapped.wrote_position
        commitlog.files.reserve(mapped, position + len(data))
        mapped.mm[position : position + len(data)] = data
        for physical_offset, record in checked:
            if not skips_consume_queue(record.sysflag):
                key = (record.topic, record.queue_id)
                commitlog.queue_offsets[key] = record.queue_offset + 1
                commitlog.dispatch(
                    record.topic,
                    record.queue_id,
                    record.queue_offset,
                    physical_offset,
                    record.size,
                    record.tags_code,
                    record.store_timestamp,
                    record.keys,
                    record.uniq_key,
                )
            results.append(
                AppendResult(
                    PUT_OK,
                    record.topic,
                    record.queue_id,
                    record.queue_offset,
                    physical_offset,
                    record.size,
                    record.store_timestamp,
                    commitlog.store_host,
                )
            )
        mapped.wrote_position = position + len(data)
        if checked:
            mapped.last_store_timestamp = checked[-1][1].store_timestamp
            commitlog.last_record_offset = checked[-1][0]
            if commitlog.on_batch is not None:
                start = offset
                records = [
                    EncodedRecord(
                        data[at - start : at - start + record.size],
                        record.topic,
                        record.queue_id,
                        record.tags_code,
                        record.keys,
                        record.uniq_key,
                        record.sysflag,
                    )
                    for at, record in checked
                ]
                commitlog.on_batch(records, results)
    return results


def read_replica(commitlog: CommitLog, offset: int, max_bytes: int) -> bytes:
    """Whole records of ``commitlog`` from ``offset`` for a slave (:meth:`MessageStore.read_replica`)."""
    mapped = commitlog.files.find(offset)
    if mapped is None:
        if offset < commitlog.files.min_offset:
            raise ReplicaError(
                f"CommitLog offset {offset} is no longer stored (it starts at {commitlog.min_offset})"
            )
        return b""
    if not mapped.hold():
        return b""
    try:
        view, base = mapped.view, mapped.file_from_offset
        start = position = offset - base
        wrote = mapped.wrote_position
        while position + BLANK_MIN_SIZE <= wrote:
            size, magic = SIZE_MAGIC.unpack_from(view, position)
            if magic == BLANK_MAGIC:
                if position == start:
                    position = commitlog.file_size  # only the blank: send it alone
                break
            if position + size > wrote or (position > start and position + size - start > max_bytes):
                break
            position += size
        return bytes(view[start:position])
    finally:
        mapped.release()
