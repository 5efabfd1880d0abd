"""Normal outcomes of the store's operations: enums and small result records, never exceptions."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

from app.store.record_format import message_id


class PutStatus(enum.StrEnum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


class AppendResult(NamedTuple):
    """Where one message landed. ``msg_id`` is derived, so building a result costs little."""

    status: PutStatus
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    store_timestamp: int
    store_host: bytes

    @property
    def msg_id(self) -> str:
        return message_id(self.store_host, self.physical_offset)

    @property
    def end_offset(self) -> int:
        return self.physical_offset + self.size


class GetMessageStatus(enum.StrEnum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"


@dataclass(slots=True)
class GetMessageResult:
    """The answer to a read: the status, the offsets, and the records as slices of the mapped files.

    ``records`` are memoryviews into the CommitLog: decode them with
    :func:`app.store.record.decode_record`; they stay valid for as long as they are held.
    """

    status: GetMessageStatus
    next_offset: int
    min_offset: int
    max_offset: int
    records: list[memoryview] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)
    total_bytes: int = 0
    # The records read lie further behind the CommitLog's end than the page cache is taken to hold
    # (WHARF_ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO): a consumer this slow had better read a slave.
    reads_disk: bool = False

    @property
    def message_count(self) -> int:
        return len(self.records)
