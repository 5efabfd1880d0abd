"""Wharf's wire formats, as the client writes and reads them: the binary produce batch, the stored
records a binary pull answer (or a ``format=binary`` WebSocket frame) carries, and the body of a JSON
message object. The broker uses this module for the same formats (``app.codec`` imports it), so
each encoding exists once.

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
concatenated exactly as they are on disk, each starting with its 4-byte TOTALSIZE (big-endian)::

    offset  field                       size
    0       TOTALSIZE                   4   whole record
    4       MAGICCODE                   4   0xDAA320A7
    8       BODYCRC                     4
    12      QUEUEID                     4
    16      FLAG                        4
    20      QUEUEOFFSET                 8
    28      PHYSICALOFFSET              8
    36      SYSFLAG                     4   0x10: BORNHOST is IPv6 (20 bytes), 0x20: STOREHOST is
    40      BORNTIMESTAMP               8
    48      BORNHOST                    8   IPv4 + port (20 with IPv6; later fields move on)
    56      STORETIMESTAMP              8
    64      STOREHOST                   8
    72      RECONSUMETIMES              4
    76      PREPAREDTRANSACTIONOFFSET   8
    84      BODY                        4 + n
    88+n    TOPIC                       1 + n   ASCII
    ..      PROPERTIES                  2 + n   "name\\x01value\\x02"... (UTF-8)

The broker's store encodes records (app/store/record_format.py, the layout's one definition on the
server side); :func:`python_decode_records` here is the client's own small decoder of that layout,
so the client imports nothing of the store. tests/client/test_codec.py checks it against records
the store encoded, field by field, for both host layouts. (:func:`decode_records` takes the broker's
compiled decoder when it happens to be installed: see :mod:`wharf_client._kernel`.)
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType

from wharf_client._kernel import compiled

_base64: ModuleType | None
try:  # an optional speedup: the standard library's answers, 5 times faster
    import pybase64 as _base64
except ImportError:  # pragma: no cover - depends on the environment
    _base64 = None


__all__ = [
    "BATCH_MAGIC",
    "BATCH_MEDIA_TYPE",
    "RECORDS_MEDIA_TYPE",
    "BatchFormatError",
    "BodyEncodingError",
    "IncomingMessage",
    "Message",
    "batch_count",
    "decode_body",
    "decode_properties",
    "decode_record",
    "decode_records",
    "python_decode_records",
    "encode_batch",
    "encode_body",
    "message_id",
    "parse_batch",
    "split_records",
]

BATCH_MAGIC = b"WHB1"
BATCH_MEDIA_TYPE = "application/vnd.wharf.batch"
RECORDS_MEDIA_TYPE = "application/vnd.wharf.records"

# Property names (RocketMQ's MessageConst) the client reads or writes.
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"

_BATCH_HEAD = struct.Struct(">4sI")
_MESSAGE_HEAD = struct.Struct(">iiq")
_MESSAGE_HEAD_TAGS = struct.Struct(">iiqH")  # the head and the length of the tags that follow
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")
_INTEGER = re.compile(r"-?[0-9]+")

# The binary batch's delay properties, and the field each one sets.
_DELAY_PROPERTIES = (
    (PROPERTY_DELAY_TIME_LEVEL, "delay_level"),
    (PROPERTY_TIMER_DELAY_MS, "delay_ms"),
    (PROPERTY_TIMER_DELIVER_MS, "deliver_at_ms"),
)

# The stored record (see the module's docstring).
MESSAGE_MAGIC = 0xDAA320A7 - (1 << 32)  # a signed int32, as RocketMQ stores it
_POS_SYSFLAG = 36
_SYSFLAG_BORNHOST_V6 = 0x10
_SYSFLAG_STOREHOST_V6 = 0x20
_SYSFLAG_HOSTS_V6 = _SYSFLAG_BORNHOST_V6 | _SYSFLAG_STOREHOST_V6


def _record_header(sysflag: int) -> struct.Struct:
    """The record's fields 1-14 and BODY's length, for the IPv4/IPv6 form of its two hosts."""
    born = 20 if sysflag & _SYSFLAG_BORNHOST_V6 else 8
    store = 20 if sysflag & _SYSFLAG_STOREHOST_V6 else 8
    return struct.Struct(f">iiiiiqqiq{born}sq{store}siqi")


_RECORD_HEADERS = {bits: _record_header(bits) for bits in (0, 0x10, 0x20, 0x30)}
_RECORD_FIXED_SIZE = _RECORD_HEADERS[0].size + 1 + 2  # + topic length + properties length: 91


class BatchFormatError(ValueError):
    """The binary batch (or a binary pull answer's records) does not follow the documented layout."""


class BodyEncodingError(ValueError):
    """A body does not decode with its declared encoding."""


@dataclass(slots=True)
class IncomingMessage:
    """A message of a binary batch, as a client sends it, before the broker picks its queue."""

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


@dataclass(slots=True)
class Message:
    """A message as the broker stored it and a consumer reads it: one record of a binary pull
    answer or subscription frame. ``properties`` holds every stored property, TAGS, KEYS and
    UNIQ_KEY included; ``tags``, ``keys`` (space-separated) and ``unique_id`` read them."""

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int  # the record's offset in the broker's CommitLog
    size: int  # the record's size in bytes
    body: bytes
    properties: dict[str, str]
    flag: int
    sysflag: int
    body_crc: int
    born_timestamp: int  # ms: when the producer made it (or the broker received it)
    born_host: bytes
    store_timestamp: int  # ms: when the broker stored it
    store_host: bytes
    reconsume_times: int  # how many times it was sent back for another try
    prepared_transaction_offset: int

    @property
    def msg_id(self) -> str:
        """The broker's id of the stored message: its host and CommitLog offset, 32 hex digits."""
        return message_id(self.store_host, self.physical_offset)

    @property
    def unique_id(self) -> str:
        return self.properties.get(PROPERTY_UNIQ_KEY, "")

    @property
    def tags(self) -> str:
        return self.properties.get(PROPERTY_TAGS, "")

    @property
    def keys(self) -> str:
        """The message's keys, separated by spaces (``message.keys.split()`` lists them)."""
        return self.properties.get(PROPERTY_KEYS, "")


def message_id(store_host: bytes, physical_offset: int) -> str:
    """RocketMQ's offset message id: STOREHOST and PHYSICALOFFSET, 32 hex digits (56 for an IPv6
    store host)."""
    return (store_host + physical_offset.to_bytes(8, "big")).hex().upper()


# -- JSON message objects' bodies -----------------------------------------------------------------


def decode_body(body: str, encoding: str) -> bytes:
    """The bytes of a JSON message object's ``body`` in ``encoding`` (``utf8`` or ``base64``)."""
    if encoding == "utf8":
        return body.encode()
    if _base64 is not None:
        try:
            return bytes(_base64.b64decode(body, validate=True))
        except (binascii.Error, ValueError):
            pass
    try:
        # What pybase64 refuses and the standard library's strict decoder takes (padding after a
        # whole quantum, "AAAA="): the standard library decides.
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BodyEncodingError(f"body is not valid base64: {exc}") from None


def encode_body(body: bytes | memoryview) -> tuple[str, str]:
    """(text, encoding): UTF-8 text when the bytes are valid UTF-8, base64 otherwise."""
    try:
        return str(body, "utf-8"), "utf8"
    except UnicodeDecodeError:
        if _base64 is not None:
            return bytes(_base64.b64encode(body)).decode("ascii"), "base64"
        return base64.b64encode(body).decode("ascii"), "base64"


# -- the binary produce batch ---------------------------------------------------------------------


def decode_properties(raw: bytes | bytearray | memoryview) -> dict[str, str]:
    """``name\\x01value\\x02``... (the last separator optional) as a dict."""
    if not raw:
        return {}
    properties = {}
    for item in str(raw, "utf-8").split("\x02"):
        if item:
            name, _, value = item.partition("\x01")
            properties[name] = value
    return properties


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


# -- stored records (binary pull answers and subscription frames) ---------------------------------


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


def decode_record(buf: bytes | memoryview, pos: int = 0) -> Message:
    """The message of the record at ``pos``; BatchFormatError if it is not a whole, valid one."""
    left = len(buf) - pos
    if left < _RECORD_FIXED_SIZE:
        raise BatchFormatError(f"only {left} bytes left at {pos}, a record needs {_RECORD_FIXED_SIZE}")
    header = _RECORD_HEADERS[_INT.unpack_from(buf, pos + _POS_SYSFLAG)[0] & _SYSFLAG_HOSTS_V6]
    fixed_size = header.size + 3
    if left < fixed_size:
        raise BatchFormatError(f"only {left} bytes left at {pos}, a record needs {fixed_size}")
    (
        total,
        magic,
        body_crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sysflag,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared,
        body_length,
    ) = header.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC:
        raise BatchFormatError(f"bad magic code {magic & 0xFFFFFFFF:#x} at {pos}")
    if total < fixed_size or total > left or body_length < 0 or body_length > total - fixed_size:
        raise BatchFormatError(f"record size {total} / body {body_length} out of range at {pos}")
    body_start = pos + header.size
    body_end = body_start + body_length
    topic_end = body_end + 1 + buf[body_end]
    if topic_end + 2 > pos + total:
        raise BatchFormatError(f"the topic runs past the record at {pos}")
    (properties_length,) = _SHORT.unpack_from(buf, topic_end)
    if properties_length < 0 or topic_end + 2 + properties_length != pos + total:
        raise BatchFormatError(f"field lengths do not add up to the record size {total} at {pos}")
    try:
        topic = str(buf[body_end + 1 : topic_end], "ascii")
        properties = decode_properties(buf[topic_end + 2 : topic_end + 2 + properties_length])
    except UnicodeDecodeError:
        raise BatchFormatError(f"the record at {pos} has a topic or properties that do not decode") from None
    return Message(
        topic,
        queue_id,
        queue_offset,
        physical_offset,
        total,
        bytes(buf[body_start:body_end]),
        properties,
        flag,
        sysflag,
        body_crc,
        born_timestamp,
        born_host,
        store_timestamp,
        store_host,
        reconsume_times,
        prepared,
    )


def decode_records(data: bytes | memoryview) -> list[Message]:
    """The messages of a binary pull answer (or a ``format=binary`` frame): its records, decoded.

    With the broker's compiled kernel beside the client (:mod:`wharf_client._kernel`) its decoder
    cuts and decodes the records, 3 times as fast, and its messages are copied into
    :class:`Message`; else :func:`python_decode_records`, which gives the same messages."""
    if compiled is None:
        return python_decode_records(data)
    return [
        message
        if type(message) is Message
        else Message(
            message.topic,
            message.queue_id,
            message.queue_offset,
            message.physical_offset,
            message.size,
            message.body,
            message.properties,
            message.flag,
            message.sysflag,
            message.body_crc,
            message.born_timestamp,
            message.born_host,
            message.store_timestamp,
            message.store_host,
            message.reconsume_times,
            message.prepared_transaction_offset,
        )
        for message in compiled.decode_records(data, python_decode_records)
    ]


def python_decode_records(data: bytes | memoryview) -> list[Message]:
    """The messages of a binary pull answer: the client's own decoder, in pure Python."""
    data = bytes(data) if not isinstance(data, bytes) else data
    messages: list[Message] = []
    append = messages.append
    position = 0
    size = len(data)
    while position < size:
        if size - position < 4:
            raise BatchFormatError(f"{size - position} bytes at {position} are no record")
        message = decode_record(data, position)
        append(message)
        position += message.size
    return messages
