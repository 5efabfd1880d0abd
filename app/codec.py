"""Message encodings on the wire: JSON message objects and Wharf's two binary formats.

Binary produce batch, ``Content-Type: application/vnd.wharf.batch`` (all integers big-endian)::

    batch   := "WHB1" | count u32 | message * count
    message := queue_id i32 (-1: the broker chooses) | flag i32 | born_timestamp i64 (0: now)
               | tags u16+utf8 | keys u16+utf8 (space-separated) | unique_id u16+utf8
               | sharding_key u16+utf8 | properties u32+bytes ("name\\x01value\\x02"...)
               | body u32+bytes

A delay travels in the batch as a property a RocketMQ producer would set: ``DELAY`` (the level,
1-18), ``TIMER_DELAY_MS`` or ``TIMER_DELIVER_MS`` (epoch ms). They become the message's
``delay_level``, ``delay_ms`` and ``deliver_at_ms`` and are not stored as properties.

Binary pull answer, ``Accept: application/vnd.wharf.records``: the stored CommitLog records,
concatenated exactly as they are on disk (each starts with its 4-byte TOTALSIZE; layout in
app/store/record.py), with the pull's status and offsets in ``X-Wharf-*`` headers. The broker
copies the bytes once and encodes nothing, which makes it the cheapest way to read.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
import pybase64

from app.store.consumer_offsets import RETRY_TOPIC_PREFIX
from app.store.kernel import compiled
from app.store.record import StoredMessage, decode_record
from app.store.record_format import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_STATE,
    PROPERTY_UNIQ_KEY,
    decode_properties,
    layout_at,
    message_id,
)

BATCH_MAGIC = b"WHB1"
BATCH_MEDIA_TYPE = "application/vnd.wharf.batch"
RECORDS_MEDIA_TYPE = "application/vnd.wharf.records"

_BATCH_HEAD = struct.Struct(">4sI")
_MESSAGE_HEAD = struct.Struct(">iiq")
_MESSAGE_HEAD_TAGS = struct.Struct(">iiqH")  # the head and the length of the tags that follow
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_SHORT = struct.Struct(">h")
_INTEGER = re.compile(r"-?[0-9]+")

# The properties the message view shows as fields of their own (tags, keys, unique_id), and those
# of delayed delivery (app.broker.delay) and transactions (app.broker.transaction_message): a
# producer sets them through the fields and parameters, never as properties.
RESERVED_PROPERTIES = frozenset(
    {
        PROPERTY_TAGS,
        PROPERTY_KEYS,
        PROPERTY_UNIQ_KEY,
        PROPERTY_DELAY_TIME_LEVEL,
        PROPERTY_TIMER_DELAY_MS,
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_REAL_TOPIC,
        PROPERTY_REAL_QUEUE_ID,
        PROPERTY_TIMER_OUT_MS,
        PROPERTY_TRANSACTION_PREPARED,
        PROPERTY_PRODUCER_GROUP,
        PROPERTY_TRANSACTION_CHECK_TIMES,
        PROPERTY_TRANSACTION_ID,
        PROPERTY_TRANSACTION_STATE,
    }
)
# The binary batch's delay properties, and the field each one sets.
_DELAY_PROPERTIES = (
    (PROPERTY_DELAY_TIME_LEVEL, "delay_level"),
    (PROPERTY_TIMER_DELAY_MS, "delay_ms"),
    (PROPERTY_TIMER_DELIVER_MS, "deliver_at_ms"),
)


class BatchFormatError(ValueError):
    """The binary batch does not follow the documented layout."""


class BodyEncodingError(ValueError):
    """A body does not decode with its declared encoding."""


@dataclass(slots=True)
class IncomingMessage:
    """A message as a client sent it, before the broker picks its queue."""

    body: bytes
    tags: str = ""
    keys: list[str] = field(default_factory=list)
    properties: dict[str, str] = field(default_factory=dict)
    queue_id: int | None = None
    sharding_key: str | None = None
    unique_id: str | None = None
    flag: int = 0
    born_timestamp: int = 0
    delay_level: int | None = None
    delay_ms: int | None = None
    deliver_at_ms: int | None = None


def decode_body(body: str, encoding: str) -> bytes:
    if encoding == "utf8":
        return body.encode()
    try:
        # pybase64: the standard library's answers (tests/api/test_wire.py), 5 times faster.
        return pybase64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        pass
    try:
        # What pybase64 refuses and the standard library's strict decoder takes (padding after a
        # whole quantum, "AAAA="): the standard library decides, on this rare path only.
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BodyEncodingError(f"body is not valid base64: {exc}") from None


def encode_body(body: bytes | memoryview) -> tuple[str, str]:
    """(text, encoding): UTF-8 text when the bytes are valid UTF-8, base64 otherwise."""
    try:
        return str(body, "utf-8"), "utf8"
    except UnicodeDecodeError:
        return pybase64.b64encode(body).decode("ascii"), "base64"


def record_to_json(record: memoryview | bytes) -> dict[str, Any]:
    """The pull API's message object, straight from a stored record.

    Unpacks the record with the store's header struct itself rather than through
    app.store.record.decode_record: the pull path is hot, and decode_record checks every length,
    copies the body and builds a StoredMessage, which makes a 32-message pull's encoding ~15% slower.
    The records here come from the store's own reads, already checked."""
    (
        _total,
        _magic,
        _crc,
        queue_id,
        _flag,
        queue_offset,
        physical_offset,
        _sysflag,
        born_timestamp,
        _born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        _prepared,
        body_length,
    ) = (layout := layout_at(record)).header.unpack_from(record, 0)
    body_end = layout.body + body_length
    topic_length = record[body_end]
    topic_end = body_end + 1 + topic_length
    (properties_length,) = _SHORT.unpack_from(record, topic_end)
    properties = decode_properties(record[topic_end + 2 : topic_end + 2 + properties_length])
    tags = properties.pop(PROPERTY_TAGS, "")
    keys = properties.pop(PROPERTY_KEYS, "")
    unique_id = properties.pop(PROPERTY_UNIQ_KEY, "")
    text, encoding = encode_body(record[layout.body : body_end])
    return {
        "msg_id": message_id(store_host, physical_offset),
        "unique_id": unique_id,
        "topic": str(record[body_end + 1 : topic_end], "ascii"),
        "queue_id": queue_id,
        "queue_offset": queue_offset,
        "tags": tags,
        "keys": keys.split() if keys else [],
        "properties": properties,
        "body": text,
        "encoding": encoding,
        "born_timestamp": born_timestamp,
        "store_timestamp": store_timestamp,
        "reconsume_times": reconsume_times,
    }


def python_message_json(record: memoryview | bytes, consumed: bool = False) -> bytes:
    """The JSON message object of a stored record, as the pull API answers it (``consumed``: as a
    group's consumer sees it, under its original topic when it comes from a retry topic)."""
    message = record_to_json(record)
    return orjson.dumps(as_consumed(message) if consumed else message)


def python_messages_json(records: Iterable[memoryview | bytes], consumed: bool = False) -> bytes:
    """A JSON array of the records' message objects."""
    return b"[" + b",".join(python_message_json(record, consumed) for record in records) + b"]"


def _compiled_message_json(record: memoryview | bytes, consumed: bool = False) -> bytes:
    assert compiled is not None
    return cast(bytes, compiled.message_json(record, consumed, python_message_json))


def _compiled_messages_json(records: Iterable[memoryview | bytes], consumed: bool = False) -> bytes:
    assert compiled is not None
    return cast(bytes, compiled.messages_json(records, consumed, python_message_json))


# The compiled kernel's encoders when it is loaded (app.store.kernel), else their Python twins.
message_json = python_message_json if compiled is None else _compiled_message_json
messages_json = python_messages_json if compiled is None else _compiled_messages_json


def as_consumed(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` as a group's consumer sees it (RocketMQ's resetRetryAndNamespace): one read from
    a retry topic shows the topic it was produced to as ``topic``, and in ``retry_topic`` the retry
    topic its ``queue_id`` and ``queue_offset`` belong to (commits and send-backs name that one)."""
    original = message["properties"].get(PROPERTY_RETRY_TOPIC)
    if original and message["topic"].startswith(RETRY_TOPIC_PREFIX):
        message["retry_topic"] = message["topic"]
        message["topic"] = original
    return message


def batch_count(data: bytes) -> int:
    """The messages a binary produce batch says it holds (its head); 0 when it has no valid head."""
    if len(data) < _BATCH_HEAD.size:
        return 0
    magic, count = _BATCH_HEAD.unpack_from(data, 0)
    return int(count) if magic == BATCH_MAGIC else 0


def parse_batch(data: bytes) -> list[IncomingMessage]:
    """Decode a binary produce batch; BatchFormatError says where it goes wrong."""
    data = bytes(data)
    size = len(data)
    if size < _BATCH_HEAD.size:
        raise BatchFormatError("batch is shorter than its 8-byte header")
    magic, count = _BATCH_HEAD.unpack_from(data, 0)
    if magic != BATCH_MAGIC:
        raise BatchFormatError(f"batch must start with {BATCH_MAGIC!r}, got {bytes(magic)!r}")
    head, u16, u32 = _MESSAGE_HEAD_TAGS.unpack_from, _U16.unpack_from, _U32.unpack_from
    position = _BATCH_HEAD.size
    messages: list[IncomingMessage] = []
    append = messages.append
    try:
        for _ in range(count):
            # Unrolled, on bytes rather than a memoryview: this loop runs once per produced message.
            queue_id, flag, born_timestamp, length = head(data, position)
            position += 18
            tags = data[position : position + length].decode() if length else ""
            position += length
            (length,) = u16(data, position)
            position += 2
            keys = data[position : position + length].decode().split() if length else []
            position += length
            (length,) = u16(data, position)
            position += 2
            unique_id = data[position : position + length].decode() if length else None
            position += length
            (length,) = u16(data, position)
            position += 2
            sharding_key = data[position : position + length].decode() if length else None
            position += length
            (properties_length,) = u32(data, position)
            position += 4
            raw_properties = data[position : position + properties_length] if properties_length else b""
            position += properties_length
            (length,) = u32(data, position)
            position += 4
            body = data[position : position + length]
            position += length
            # Slices past the end come back short rather than failing: one check per message.
            if position > size:
                raise struct.error("truncated")
            message = IncomingMessage(
                body,
                tags,
                keys,
                decode_properties(raw_properties) if properties_length else {},
                None if queue_id < 0 else queue_id,
                sharding_key,
                unique_id,
                flag,
                born_timestamp,
            )
            if properties_length:
                _take_delay(message, len(messages))
            append(message)
    except struct.error:
        raise BatchFormatError(f"batch ends inside message {len(messages)}") from None
    except UnicodeDecodeError:
        raise BatchFormatError(f"message {len(messages)} has a text field that is not UTF-8") from None
    if position != size:
        raise BatchFormatError(f"{size - position} bytes follow the last of {count} messages")
    return messages


def _take_delay(message: IncomingMessage, index: int) -> None:
    """Move the batch's delay properties into the message's delay fields."""
    properties = message.properties
    for name, field_name in _DELAY_PROPERTIES:
        value = properties.pop(name, None)
        if value is not None:
            if not _INTEGER.fullmatch(value):
                raise BatchFormatError(f"message {index}: property {name} must be an integer, not {value!r}")
            setattr(message, field_name, int(value))


def encode_batch(messages: Iterable[IncomingMessage]) -> bytes:
    """The binary produce batch for ``messages`` (the format clients send)."""
    parts = []
    count = 0
    for message in messages:
        count += 1
        delays = {
            name: str(value)
            for name, field_name in _DELAY_PROPERTIES
            if (value := getattr(message, field_name)) is not None
        }
        properties = "".join(
            f"{name}\x01{value}\x02" for name, value in {**message.properties, **delays}.items()
        ).encode()
        parts.append(
            _MESSAGE_HEAD.pack(
                -1 if message.queue_id is None else message.queue_id, message.flag, message.born_timestamp
            )
        )
        for text in (
            message.tags,
            " ".join(message.keys),
            message.unique_id or "",
            message.sharding_key or "",
        ):
            raw = text.encode()
            parts.append(_U16.pack(len(raw)))
            parts.append(raw)
        parts.append(_U32.pack(len(properties)))
        parts.append(properties)
        parts.append(_U32.pack(len(message.body)))
        parts.append(message.body)
    return _BATCH_HEAD.pack(BATCH_MAGIC, count) + b"".join(parts)


def python_decode_records(data: bytes | memoryview) -> list[StoredMessage]:
    """The messages of a binary pull answer (or a ``format=binary`` frame): its records, decoded."""
    return [decode_record(raw) for raw in split_records(data)]


def decode_records(data: bytes | memoryview) -> list[StoredMessage]:
    """:func:`python_decode_records`, in the compiled kernel when it is loaded (app.store.kernel)."""
    if compiled is None:
        return python_decode_records(data)
    return cast("list[StoredMessage]", compiled.decode_records(data, python_decode_records))


def split_records(data: bytes | memoryview) -> list[memoryview]:
    """Cut a binary pull answer back into its records."""
    view = memoryview(data)
    records = []
    position = 0
    while position < len(view):
        (size,) = struct.unpack_from(">i", view, position)
        if size <= 0 or position + size > len(view):
            raise BatchFormatError(f"record at {position} has an impossible size {size}")
        records.append(view[position : position + size])
        position += size
    return records
