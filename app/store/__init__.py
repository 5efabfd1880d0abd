"""Wharf's storage engine: CommitLog, ConsumeQueues, flush and recovery (SPEC.md section 1).

A library of its own: it imports nothing but the standard library.
"""

from app.store.config import FlushMode, StoreConfig
from app.store.errors import (
    CorruptRecordError,
    DiskFullError,
    EmptyBodyError,
    InvalidQueueError,
    InvalidTopicError,
    MessageRejectedError,
    MessageTooLargeError,
    PropertiesTooLargeError,
    StoreClosedError,
    StoreConfigError,
    StoreError,
)
from app.store.filter import FilterExpressionError, TagFilter
from app.store.message_store import MessageStore
from app.store.record import Message, StoredMessage, decode_record, message_id, parse_message_id
from app.store.results import AppendResult, GetMessageResult, GetMessageStatus, PutStatus

__all__ = [
    "AppendResult",
    "CorruptRecordError",
    "DiskFullError",
    "EmptyBodyError",
    "FilterExpressionError",
    "FlushMode",
    "GetMessageResult",
    "GetMessageStatus",
    "InvalidQueueError",
    "InvalidTopicError",
    "Message",
    "MessageRejectedError",
    "MessageStore",
    "MessageTooLargeError",
    "PropertiesTooLargeError",
    "PutStatus",
    "StoreClosedError",
    "StoreConfig",
    "StoreConfigError",
    "StoreError",
    "StoredMessage",
    "TagFilter",
    "decode_record",
    "message_id",
    "parse_message_id",
]
