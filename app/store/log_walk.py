"""Walking the CommitLog: its records validated one by one, in log order, across its segments.

A walk reads each record through :func:`app.store.record.check_record` (magic, sizes, offset,
CRC) and crosses a blank END_OF_FILE record to the next segment; it stops at the first record that
is not valid, which is the end of the log. :class:`LogWalk` is recovery's walk, from a segment on,
and marks where the log ends; :func:`records_from` walks from an offset (the index's rebuild, a
lagging ConsumeQueue's), and :func:`records_since` from a store time, starting at the segment
that holds it.
"""

from __future__ import annotations

from collections.abc import Iterator

from app.store.commit_log import CommitLog
from app.store.mapped_file import MappedFile
from app.store.record import CheckedRecord, check_record, message_size, store_timestamp
from app.store.record_format import FIXED_SIZE


class LogWalk:
    """One validating walk of ``commitlog`` from segment ``start_index`` (at ``start_position``, a
    record boundary) on: iterate the walk for (offset, record) of each message (see
    :func:`check_record` for ``with_properties``). It stops at the first record that is not valid;
    its ``end`` is then the end of the log, and the CommitLog's ``last_record_offset`` the offset of
    the last valid record walked."""

    def __init__(self, commitlog: CommitLog, start_index: int, start_position: int, with_properties: bool):
        self.commitlog = commitlog
        self.start_index = start_index
        self.start_position = start_position
        self.with_properties = with_properties
        files = commitlog.files.files
        # Where the walk stopped: the end of the log once it has run out.
        self.end = files[start_index].file_from_offset + start_position if files else 0

    def __iter__(self) -> Iterator[tuple[int, CheckedRecord]]:
        start_position, with_properties = self.start_position, self.with_properties
        last = -1
        try:
            for mapped in self.commitlog.files.files[self.start_index :]:
                view = mapped.view
                base = mapped.file_from_offset
                position = start_position
                start_position = 0
                while True:
                    checked = check_record(view, position, base + position, with_properties)
                    if checked is None:
                        self.end = base + position
                        return
                    if checked.size == 0:  # blank END_OF_FILE: the log continues in the next segment
                        break
                    last = base + position
                    yield last, checked
                    position += checked.size
                    mapped.last_store_timestamp = checked.store_timestamp
                self.end = base + mapped.file_size
        finally:
            if last >= 0:
                self.commitlog.last_record_offset = last


def records_from(commitlog: CommitLog, offset: int) -> Iterator[tuple[int, CheckedRecord]]:
    """Validate and yield (offset, record) for each message from ``offset`` (a record boundary)
    to the end of the log, crossing blank END_OF_FILE records; stops at the first invalid one."""
    offset = max(offset, commitlog.files.min_offset)
    while True:
        mapped = commitlog.files.find(offset)
        if mapped is None:
            return
        base = mapped.file_from_offset
        position = offset - base
        while position < mapped.wrote_position:
            checked = check_record(mapped.view, position, base + position)
            if checked is None:
                return
            if checked.size == 0:
                break
            yield base + position, checked
            position += checked.size
        else:
            if mapped.wrote_position < mapped.file_size:
                return  # the end of the log
        offset = base + mapped.file_size


def records_since(commitlog: CommitLog, timestamp_ms: int) -> Iterator[tuple[int, CheckedRecord]]:
    """Validate and yield (offset, record) for each message stored at or after ``timestamp_ms``,
    in log order. The walk starts at the last segment whose first record is older, so it reads
    little more than the records it yields."""
    files = commitlog.files.files
    start = 0
    for index in range(len(files) - 1, -1, -1):
        first = first_store_timestamp(files[index])
        if first is not None and first <= timestamp_ms:
            start = index
            break
    if not files:
        return
    for offset, record in records_from(commitlog, _first_stored_since(commitlog, start, timestamp_ms)):
        if record.store_timestamp >= timestamp_ms:
            yield offset, record


def _first_stored_since(commitlog: CommitLog, start_index: int, timestamp_ms: int) -> int:
    """The offset of the first record stored at or after ``timestamp_ms``, from segment
    ``start_index`` on, hopping from record to record by their sizes: the records before it are
    not validated (recovery did), so the hop costs a fraction of a full walk."""
    files = commitlog.files.files
    offset = files[start_index].file_from_offset
    for mapped in files[start_index:]:
        view, base, wrote = mapped.view, mapped.file_from_offset, mapped.wrote_position
        position = 0
        while position + FIXED_SIZE <= wrote:
            size = message_size(view, position)
            if size is None or position + size > wrote:
                break  # a blank END_OF_FILE (the next segment goes on) or the end of the log
            if store_timestamp(view, position) >= timestamp_ms:
                return base + position
            position += size
        offset = base + position
        if wrote < mapped.file_size:
            break
    return offset


def first_store_timestamp(mapped: MappedFile) -> int | None:
    """Store time of the first record of the CommitLog segment ``mapped``; None when it holds none."""
    checked = check_record(mapped.view, 0, mapped.file_from_offset)
    if checked is None or checked.size == 0:
        return None
    return checked.store_timestamp
