"""Wharf's storage engine: CommitLog, ConsumeQueues, flush and recovery, the message index,
retention and the disk guard (SPEC.md section 1), and consumer offsets (section 4).

A library of its own: it imports nothing but the standard library.
"""

from app.store.config import FlushMode, StoreConfig
from app.store.consumer_offsets import ConsumeFromWhere, ConsumerOffsetManager, OffsetEntry
from app.store.disk_guard import DiskGuard, DiskUsageProbe
from app.store.errors import (
    CorruptRecordError,
    DiskFullError,
    EmptyBodyError,
    InvalidQueueError,
    InvalidTopicError,
    MessageRejectedError,
    MessageTooLargeError,
    PropertiesTooLargeError,
    ReplicaReadOnlyError,
    StoreClosedError,
    StoreConfigError,
    StoreError,
    StoreLockedError,
)
from app.store.filter import FilterExpressionError, MessageFilter, TagFilter
from app.store.message_store import MessageStore
from app.store.record import StoredMessage, decode_record
from app.store.record_format import Message, message_id, parse_message_id
from app.store.results import AppendResult, GetMessageResult, GetMessageStatus, PutStatus
from app.store.retention import CleanReport

__all__ = [
    "AppendResult",
    "CleanReport",
    "ConsumeFromWhere",
    "ConsumerOffsetManager",
    "CorruptRecordError",
    "DiskFullError",
    "DiskGuard",
    "DiskUsageProbe",
    "EmptyBodyError",
    "FilterExpressionError",
    "FlushMode",
    "GetMessageResult",
    "GetMessageStatus",
    "InvalidQueueError",
    "InvalidTopicError",
    "Message",
    "MessageFilter",
    "MessageRejectedError",
    "MessageStore",
    "MessageTooLargeError",
    "OffsetEntry",
    "PropertiesTooLargeError",
    "PutStatus",
    "ReplicaReadOnlyError",
    "StoreClosedError",
    "StoreConfig",
    "StoreConfigError",
    "StoreLockedError",
    "StoreError",
    "StoredMessage",
    "TagFilter",
    "decode_record",
    "message_id",
    "parse_message_id",
]
