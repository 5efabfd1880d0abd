"""The CommitLog record's decoder and checks: the one place in the store that reads a record's bytes.

Everything in the store that reads a stored record goes through this module: a whole decode
(:func:`decode_record`), the validation recovery and the log walks use (:func:`check_record`), the
identity check of a read (:func:`record_is`), and the few fields read on their own (:func:`message_size`,
:func:`store_timestamp`, :func:`record_tags`, :func:`record_properties`). The layout and the encoder are in
:mod:`app.store.record_format`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple, cast

from app.store.errors import CorruptRecordError
from app.store.kernel import compiled
from app.store.record_format import (
    BLANK_MAGIC,
    BLANK_MIN_SIZE,
    FIXED_SIZE,
    INT,
    MESSAGE_MAGIC,
    POS_SYSFLAG,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SHORT,
    SIZE_MAGIC,
    SYSFLAG_BORNHOST_V6,
    SYSFLAG_PROPERTIES_END,
    TIMESTAMP,
    TOPIC_PATTERN,
    Tagged,
    crc_matches,
    decode_properties,
    layout_at,
    layout_of,
    message_id,
    tags_hash,
)

__all__ = [
    "BLANK",
    "CheckedRecord",
    "HEAD_SIZE",
    "IDENTITY",
    "StoredMessage",
    "TIMESTAMP_END",
    "check_record",
    "decode_record",
    "message_size",
    "record_is",
    "record_properties",
    "record_reconsume_times",
    "record_property_bytes",
    "record_tags",
    "store_timestamp",
]

# The first 8 bytes of a record: TOTALSIZE and MAGICCODE.
HEAD_SIZE = SIZE_MAGIC.size
# The bytes of a record up to and including STORETIMESTAMP, wherever its born host puts it.
TIMESTAMP_END = layout_of(SYSFLAG_BORNHOST_V6).store_timestamp + TIMESTAMP.size


def message_size(buf: bytes | bytearray | memoryview, pos: int = 0) -> int | None:
    """The size of the message record at ``pos`` (from its first :data:`HEAD_SIZE` bytes), or None
    if none starts there (a blank, zeroes, or a size below the fixed part)."""
    size, magic = SIZE_MAGIC.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC or size < FIXED_SIZE:
        return None
    return int(size)


def store_timestamp(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """STORETIMESTAMP of the record at ``pos``: ``buf`` needs only its first :data:`TIMESTAMP_END` bytes."""
    return int(TIMESTAMP.unpack_from(buf, pos + layout_at(buf, pos).store_timestamp)[0])


@dataclass(slots=True)
class StoredMessage(Tagged):
    """A record read back from the CommitLog."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    body: bytes
    properties: dict[str, str]
    flag: int
    sysflag: int
    body_crc: int
    born_timestamp: int
    born_host: bytes
    store_timestamp: int
    store_host: bytes
    reconsume_times: int
    prepared_transaction_offset: int

    @property
    def msg_id(self) -> str:
        return message_id(self.store_host, self.physical_offset)

    @property
    def unique_id(self) -> str:
        return self.properties.get(PROPERTY_UNIQ_KEY, "")


def decode_record(
    buf: bytes | bytearray | memoryview, pos: int = 0, check_crc: bool = False
) -> StoredMessage:
    """Decode the record at ``pos``; CorruptRecordError if it is not a whole, valid message record."""
    if len(buf) - pos < FIXED_SIZE:
        raise CorruptRecordError(f"only {len(buf) - pos} bytes left at {pos}, a record needs {FIXED_SIZE}")
    layout = layout_at(buf, pos)
    fixed_size = layout.fixed_size
    if len(buf) - pos < fixed_size:
        raise CorruptRecordError(f"only {len(buf) - pos} bytes left at {pos}, a record needs {fixed_size}")
    (
        total,
        magic,
        body_crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sysflag,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prepared,
        body_len,
    ) = layout.header.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC:
        raise CorruptRecordError(f"bad magic code {magic & 0xFFFFFFFF:#x} at {pos}")
    if total < fixed_size or total > len(buf) - pos or body_len < 0 or body_len > total - fixed_size:
        raise CorruptRecordError(f"record size {total} / body {body_len} out of range at {pos}")
    body_end = pos + layout.body + body_len
    record_end = pos + total
    if body_end + 3 > record_end:
        raise CorruptRecordError(f"body of {body_len} bytes leaves no room for topic and properties at {pos}")
    body = bytes(buf[pos + layout.body : body_end])
    topic_len = buf[body_end]
    topic_end = body_end + 1 + topic_len
    if topic_end + 2 > record_end:
        raise CorruptRecordError(f"topic of {topic_len} bytes runs past the record at {pos}")
    (props_len,) = SHORT.unpack_from(buf, topic_end)
    if fixed_size + body_len + topic_len + props_len != total or props_len < 0:
        raise CorruptRecordError(f"field lengths do not add up to the record size {total} at {pos}")
    if check_crc and not crc_matches(body, body_crc):
        raise CorruptRecordError(f"body CRC mismatch at {pos}")
    props_start = topic_end + 2
    return StoredMessage(
        str(buf[body_end + 1 : topic_end], "ascii"),
        queue_id,
        queue_offset,
        physical_offset,
        total,
        body,
        decode_properties(buf[props_start : props_start + props_len]),
        flag,
        sysflag,
        body_crc,
        born_ts,
        born_host,
        store_ts,
        store_host,
        reconsume,
        prepared,
    )


class CheckedRecord(NamedTuple):
    """What recovery needs of a record it validated: enough to re-dispatch it."""

    size: int
    topic: str
    queue_id: int
    queue_offset: int
    tags_code: int
    keys: str
    uniq_key: str
    sysflag: int
    store_timestamp: int


BLANK = CheckedRecord(0, "", 0, 0, 0, "", "", 0, 0)

if compiled is not None:
    compiled.bind_decoder(StoredMessage)
    compiled.bind_checker(CheckedRecord, BLANK)


def check_record(
    buf: bytes | bytearray | memoryview, pos: int, physical_offset: int, with_properties: bool = True
) -> CheckedRecord | None:
    """Validate the record at ``pos`` (:func:`python_check_record`), in the compiled kernel when it
    is loaded (app.store.kernel)."""
    if compiled is not None:
        checked = compiled.check_record(buf, pos, physical_offset, with_properties)
        if checked is not NotImplemented:
            return cast("CheckedRecord | None", checked)
    return python_check_record(buf, pos, physical_offset, with_properties)


def python_check_record(
    buf: bytes | bytearray | memoryview, pos: int, physical_offset: int, with_properties: bool = True
) -> CheckedRecord | None:
    """Validate the record at ``pos`` whose global offset should be ``physical_offset``.

    Returns the record's facts, :data:`BLANK` (size 0) for an end-of-file filler, or None when the
    bytes are not a whole valid record: bad magic, sizes that do not add up, an offset field that
    does not match its position, a CRC mismatch or, in a record Wharf wrote, properties that do not
    end with their separator (cut short). A record torn by
    a crash fails one of these, since the store keeps the bytes past its end zeroed.

    Without ``with_properties`` the properties are checked for their length and final separator
    only, and the result's ``tags_code``, ``keys`` and ``uniq_key`` are left empty: what a walk
    needs to find the end of the log and compare queue offsets, at about half the cost.
    """
    # Recovery calls this for every record of the log: it unpacks only what it checks and copies
    # nothing but the topic and the properties.
    remaining = len(buf) - pos
    if remaining < BLANK_MIN_SIZE:
        return None
    total, magic = SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        return BLANK if total == remaining else None
    if magic != MESSAGE_MAGIC or total < FIXED_SIZE or total > remaining:
        return None
    layout = layout_at(buf, pos)
    if total < layout.fixed_size:
        return None
    (
        _,
        _,
        body_crc,
        queue_id,
        _,
        queue_offset,
        record_offset,
        sysflag,
        _,
        _,
        store_timestamp,
        _,
        _,
        _,
        body_len,
    ) = layout.header.unpack_from(buf, pos)
    if record_offset != physical_offset or queue_offset < 0 or store_timestamp < 0:
        return None
    if body_len < 0 or body_len > total - layout.fixed_size:
        return None
    body_end = pos + layout.body + body_len
    topic_end = body_end + 1 + buf[body_end]
    record_end = pos + total
    if topic_end + 2 > record_end:
        return None
    (props_len,) = SHORT.unpack_from(buf, topic_end)
    if props_len < 0 or topic_end + 2 + props_len != record_end:
        return None
    # Wharf's records end their properties with a separator: anything else there is a torn tail.
    # (RocketMQ 4.9.1+ writes none, and leaves the bit clear.)
    if props_len and sysflag & SYSFLAG_PROPERTIES_END and buf[record_end - 1] != 2:
        return None
    if not crc_matches(buf[pos + layout.body : body_end], body_crc):
        return None
    topic = _valid_topic(bytes(buf[body_end + 1 : topic_end]))
    if topic is None:
        return None
    if not with_properties:
        return CheckedRecord(total, topic, queue_id, queue_offset, 0, "", "", sysflag, store_timestamp)
    try:
        properties = decode_properties(buf[topic_end + 2 : record_end]) if props_len else {}
    except (UnicodeDecodeError, ValueError):
        return None
    tags = properties.get(PROPERTY_TAGS, "")
    return CheckedRecord(
        total,
        topic,
        queue_id,
        queue_offset,
        tags_hash(tags) if tags else 0,
        properties.get(PROPERTY_KEYS, ""),
        properties.get(PROPERTY_UNIQ_KEY, ""),
        sysflag,
        store_timestamp,
    )


@lru_cache(maxsize=4096)
def _valid_topic(raw: bytes) -> str | None:
    """The topic name from its stored bytes, or None if they are not a valid name."""
    try:
        topic = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    return topic if TOPIC_PATTERN.fullmatch(topic) else None


_TAGS_PREFIX = b"TAGS\x01"


def _properties_at(buf: bytes | memoryview) -> int:
    """Where the properties of an encoded record start: they run to its end."""
    body_at = layout_at(buf).body
    (body_len,) = INT.unpack_from(buf, body_at - 4)
    topic_len_at: int = body_at + body_len
    return topic_len_at + 1 + buf[topic_len_at] + 2


def record_property_bytes(buf: bytes | memoryview) -> bytes:
    """The encoded properties of a record (``name\\x01value\\x02`` each; RocketMQ 4.9.1+ leaves
    out the last ``\\x02``), copied, not decoded."""
    return bytes(buf[_properties_at(buf) :])


def record_properties(buf: bytes | memoryview) -> dict[str, str]:
    """The properties of an encoded record, decoded without its body."""
    return decode_properties(buf[_properties_at(buf) :])


def record_reconsume_times(buf: bytes | memoryview) -> int:
    """RECONSUMETIMES of an encoded record."""
    return int(INT.unpack_from(buf, layout_at(buf).reconsume_times)[0])


def record_tags(buf: bytes | memoryview) -> str:
    """The TAGS property of an encoded record, read without decoding the rest of it."""
    properties = bytes(buf[_properties_at(buf) :])
    start = 0
    while True:
        found = properties.find(_TAGS_PREFIX, start)
        if found < 0:
            return ""
        if found == 0 or properties[found - 1] == 2:
            value_start = found + len(_TAGS_PREFIX)
            end = properties.find(b"\x02", value_start)
            return properties[value_start : end if end >= 0 else len(properties)].decode()
        start = found + 1


# TOTALSIZE, MAGICCODE, (BODYCRC), QUEUEID, (FLAG), QUEUEOFFSET, PHYSICALOFFSET: the fields that say
# which message a record is, read in one unpack.
IDENTITY = struct.Struct(">ii4xi4xqq")
assert IDENTITY.size == POS_SYSFLAG


def python_record_is(
    buf: bytes | memoryview, topic: bytes, queue_id: int, queue_offset: int, physical_offset: int
) -> bool:
    """Whether ``buf`` is exactly the message record a ConsumeQueue entry promises: a whole record
    of that topic, queue and queue offset, stored at ``physical_offset``.

    Reads check this instead of trusting the entry: an entry left behind by a crash may point at
    bytes that now hold another record, part of one, or nothing.
    """
    size = len(buf)
    if size < FIXED_SIZE:
        return False
    total, magic, record_queue_id, record_queue_offset, record_offset = IDENTITY.unpack_from(buf)
    if (
        total != size
        or magic != MESSAGE_MAGIC
        or record_queue_id != queue_id
        or record_queue_offset != queue_offset
        or record_offset != physical_offset
    ):
        return False
    body_at = layout_at(buf).body
    (body_len,) = INT.unpack_from(buf, body_at - 4)
    topic_at = body_at + body_len
    if total < body_at + 3 or body_len < 0 or topic_at + 1 + len(topic) > size or buf[topic_at] != len(topic):
        return False
    return buf[topic_at + 1 : topic_at + 1 + len(topic)] == topic


record_is: Callable[[bytes | memoryview, bytes, int, int, int], bool] = python_record_is
if compiled is not None:
    # The compiled check, called per message read; it hands odd arguments to the twin itself.
    compiled.bind_reader(python_record_is)
    record_is = compiled.record_is
