"""The CommitLog record's layout and its encoder (the decoder and checks: :mod:`app.store.record`).

All integers are big-endian. The fixed part is 91 bytes::

    offset  field                       size
    0       TOTALSIZE                   4   whole record
    4       MAGICCODE                   4   MESSAGE_MAGIC, or BLANK_MAGIC for the end-of-file filler
    8       BODYCRC                     4   CRC32 of BODY & 0x7FFFFFFF (RocketMQ's UtilAll.crc32)
    12      QUEUEID                     4
    16      FLAG                        4
    20      QUEUEOFFSET                 8   position in its ConsumeQueue, counted in messages
    28      PHYSICALOFFSET              8   global byte offset of this record
    36      SYSFLAG                     4
    40      BORNTIMESTAMP               8   ms
    48      BORNHOST                    8   IPv4 + port
    56      STORETIMESTAMP              8   ms, set under the append lock
    64      STOREHOST                   8   IPv4 + port
    72      RECONSUMETIMES              4
    76      PREPAREDTRANSACTIONOFFSET   8
    84      BODY                        4 + n
    88+n    TOPIC                       1 + n
    ..      PROPERTIES                  2 + n   "k\\x01v\\x02k\\x01v\\x02" (RocketMQ 4.9.1+: no last \\x02)

RocketMQ stores an IPv6 host in 20 bytes (address + port) and says so in SYSFLAG (bit 0x10 for
BORNHOST, 0x20 for STOREHOST): every field after such a host moves 12 bytes on. Wharf reads those
records (:func:`layout_of`) and writes IPv4 hosts only.

A record is encoded outside the append lock with placeholder QUEUEOFFSET, PHYSICALOFFSET and
STORETIMESTAMP; the CommitLog patches those three under the lock (:data:`PATCH_OFFSETS`).
"""

from __future__ import annotations

import re
import socket
import struct
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple, cast

from app.store.errors import (
    EmptyBodyError,
    InvalidTopicError,
    MessageRejectedError,
    MessageTooLargeError,
    PropertiesTooLargeError,
)
from app.store.kernel import compiled

MESSAGE_MAGIC = 0xDAA320A7 - (1 << 32)  # stored as a signed int32, as in RocketMQ
BLANK_MAGIC = 0xCBD43194 - (1 << 32)

HEADER = struct.Struct(">iiiiiqqiq8sq8siqi")  # fields 1-14 and BODY's length
assert HEADER.size == 88
FIXED_SIZE = HEADER.size + 1 + 2  # + topic length + properties length
assert FIXED_SIZE == 91

POS_BODYCRC = 8
POS_QUEUEOFFSET = 20
POS_PHYSICALOFFSET = 28
POS_SYSFLAG = 36
POS_STORETIMESTAMP = 56
POS_STOREHOST = 64
POS_RECONSUMETIMES = 72
POS_BODY = 88


# Patched under the lock: queue offset and physical offset (adjacent), then the store timestamp.
OFFSETS = struct.Struct(">qq")
TIMESTAMP = struct.Struct(">q")
SIZE_MAGIC = struct.Struct(">ii")
INT = struct.Struct(">i")
SHORT = struct.Struct(">h")

# A blank record needs at least its size and magic.
BLANK_MIN_SIZE = SIZE_MAGIC.size

PLACEHOLDER = -1

# SYSFLAG bits (RocketMQ MessageSysFlag).
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_ROLLBACK = 0xC
SYSFLAG_TRANSACTION_MASK = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20
SYSFLAG_HOSTS_V6 = SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6
# Wharf's own bit, above RocketMQ's: the producer chose the unique id (UNIQ_KEY), so a retry may
# repeat it; the idempotency window is rebuilt at start from the records that carry this bit.
SYSFLAG_PRODUCER_UNIQ_KEY = 0x10000
# Wharf's own bit too: every record Wharf writes has it, and its properties end with a separator,
# which its check requires (RocketMQ 4.9.1+ writes none, so a record without the bit needs none).
SYSFLAG_PROPERTIES_END = 0x20000


class Layout(NamedTuple):
    """Where a record's fields are, for the IPv4/IPv6 form of its two hosts (SYSFLAG's
    :data:`SYSFLAG_HOSTS_V6` bits): the fields before BORNHOST never move."""

    header: struct.Struct  # fields 1-14 and BODY's length
    fixed_size: int  # the record's size with an empty body, topic and properties
    born_host_size: int
    store_timestamp: int
    store_host: int
    store_host_size: int
    reconsume_times: int
    body: int


def _layout(sysflag: int) -> Layout:
    born = 20 if sysflag & SYSFLAG_BORNHOST_V6 else 8
    store = 20 if sysflag & SYSFLAG_STOREHOST_V6 else 8
    header = struct.Struct(f">iiiiiqqiq{born}sq{store}siqi")
    store_timestamp = 48 + born
    return Layout(
        header,
        header.size + 1 + 2,
        born,
        store_timestamp,
        store_timestamp + 8,
        store,
        store_timestamp + 8 + store,
        header.size,
    )


_LAYOUTS = {bits: _layout(bits) for bits in (0, 0x10, 0x20, 0x30)}
IPV4_LAYOUT = _LAYOUTS[0]
assert (
    IPV4_LAYOUT.header.format == HEADER.format
    and IPV4_LAYOUT.body == POS_BODY
    and IPV4_LAYOUT.fixed_size == FIXED_SIZE
)


def layout_of(sysflag: int) -> Layout:
    """The field positions of a record with this SYSFLAG."""
    return _LAYOUTS[sysflag & SYSFLAG_HOSTS_V6]


def layout_at(buf: bytes | bytearray | memoryview, pos: int = 0) -> Layout:
    """The field positions of the record at ``pos`` (``buf`` needs its first 40 bytes)."""
    return _LAYOUTS[INT.unpack_from(buf, pos + POS_SYSFLAG)[0] & SYSFLAG_HOSTS_V6]


# Property names (RocketMQ MessageConst).
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
# Delayed delivery: what a producer may set in a binary batch (a level, a delay, a time) ...
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
# ... and what the broker writes: where a scheduled message goes, and when it is due (kept on the
# delivered message as its original delivery time).
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
# Transactional messages: a half message's mark and producer group, how often it was checked and
# the transaction it belongs to; an op record's outcome.
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_TRANSACTION_ID = "TRANSACTION_ID"
PROPERTY_TRANSACTION_STATE = "TRANSACTION_STATE"
# A message sent back for another try (app.broker.retry): the topic it was first produced to.
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

TOPIC_PATTERN = re.compile(r"[%|a-zA-Z0-9_-]+")


# The delay levels' topic (level n waits in queue n - 1) and each level's delay, as RocketMQ's
# ScheduleMessageService has them. A ConsumeQueue entry of this topic holds, where other topics
# hold the tag code, the time its message is due: store timestamp + the level's delay.
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_MESSAGE_DELAY_LEVEL = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
DELAY_LEVELS = 18
_DELAY_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DELAY = re.compile(r"^(\d{1,9})(ms|s|m|h|d)$")


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """RocketMQ's messageDelayLevel, ``"1s 5s 10s ... 2h"``: the 18 levels' delays in ms (units ms,
    s, m, h, d); ValueError for anything else."""
    parts = text.split()
    if len(parts) != DELAY_LEVELS:
        raise ValueError(f"the message delay levels are {DELAY_LEVELS} delays, not {len(parts)}: {text!r}")
    delays = []
    for part in parts:
        match = _DELAY.match(part)
        if match is None:
            raise ValueError(f"a delay level is a number and a unit (ms, s, m, h, d), not {part!r}")
        delays.append(int(match[1]) * _DELAY_UNITS_MS[match[2]])
    return tuple(delays)


# Each level's delay. The broker's setting (WHARF_MESSAGE_DELAY_LEVEL) replaces it at the store's
# start for the whole process, as RocketMQ's messageDelayLevel is the broker's
# (app.store.log_codec.bind_level_delays): read it through this module, never copy it.
LEVEL_DELAYS_MS = parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL)


def queue_tags_code(topic: str, queue_id: int, tags_code: int, store_timestamp: int) -> int:
    """What a record's ConsumeQueue entry holds as its tag code: the due time for a delayed
    message's entry in :data:`SCHEDULE_TOPIC` (RocketMQ's CommitLog.checkMessageAndReturnSize),
    else the tag code."""
    if topic == SCHEDULE_TOPIC and 0 <= queue_id < len(LEVEL_DELAYS_MS):
        return store_timestamp + LEVEL_DELAYS_MS[queue_id]
    return tags_code


def java_hash_continue(h: int, text: str) -> int:
    """Java's String.hashCode of a string that starts with one hashing to ``h`` and goes on with
    ``text``, unsigned: ``h*31^n + text[0]*31^(n-1) + ... + text[n-1]`` over UTF-16 code units,
    modulo 2^32. From 0, it is ``text``'s own hash."""
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h


@lru_cache(maxsize=4096)
def tags_hash(tags: str) -> int:
    """The ConsumeQueue's tag code: Java's String.hashCode of the tags, 0 for none."""
    if not tags:
        return 0
    h = java_hash_continue(0, tags)
    return h - (1 << 32) if h & 0x80000000 else h


# A born host nobody told the broker: a message stored by the broker itself, or a producer whose
# address is not an IPv4 one (RocketMQ's IPv6 layout, 20-byte hosts, is read but not written).
NO_HOST = b"\0" * 8


@lru_cache(maxsize=256)
def encode_host(host: str, port: int) -> bytes:
    """8 bytes: IPv4 address and port, as BORNHOST and STOREHOST are stored."""
    try:
        address = socket.inet_aton(host)
    except OSError:
        try:
            address = socket.inet_aton(socket.gethostbyname(host))
        except OSError:
            address = b"\0\0\0\0"
    return address + INT.pack(port)


def decode_host(raw: bytes) -> tuple[str, int]:
    """(address, port) of a stored host: 8 bytes for IPv4, 20 for IPv6."""
    if len(raw) == 20:
        return socket.inet_ntop(socket.AF_INET6, raw[:16]), INT.unpack(raw[16:20])[0]
    return socket.inet_ntoa(raw[:4]), INT.unpack(raw[4:8])[0]


def message_id(store_host: bytes, physical_offset: int) -> str:
    """RocketMQ's offset message id: STOREHOST and PHYSICALOFFSET, 32 hex digits (56 for an IPv6
    store host, as RocketMQ's MessageDecoder.createMessageId makes it)."""
    return (store_host + physical_offset.to_bytes(8, "big")).hex().upper()


def parse_message_id(msg_id: str) -> tuple[str, int, int]:
    """(store ip, store port, physical offset) from a message id; ValueError if malformed."""
    if len(msg_id) not in (32, 56):
        raise ValueError(
            f"message id must be 32 hex digits (56 for an IPv6 host), got {len(msg_id)} characters"
        )
    raw = bytes.fromhex(msg_id)
    host, port = decode_host(raw[:-8])
    return host, port, int.from_bytes(raw[-8:], "big")


def encode_properties(properties: dict[str, str]) -> bytes:
    """``name\\x01value\\x02`` for each property: RocketMQ's pairs, each followed by its separator.
    RocketMQ 4.9.1 and later leave the last one out; every RocketMQ decoder reads both forms, and
    the separator at the end is how a check tells a record torn by a crash (zeros or stale bytes
    there) from a whole one: a record written so carries :data:`SYSFLAG_PROPERTIES_END`, and its
    check requires it. A pair with an empty value is left out, as RocketMQ's decoder leaves it out
    (the broker refuses one a producer sends: this keeps a message stored before that readable and
    movable); an empty name, or a separator in a name or value, is refused."""
    if not properties:
        return b""
    parts = []
    for name, value in properties.items():
        if not name or "\x01" in name or "\x02" in name or "\x01" in value or "\x02" in value:
            raise MessageRejectedError(f"property {name!r} contains a reserved separator or is empty")
        if value:
            parts.append(f"{name}\x01{value}\x02")
    try:
        return "".join(parts).encode()
    except UnicodeEncodeError as exc:
        raise MessageRejectedError(f"a property is not valid Unicode text: {exc.reason}") from None


def decode_properties(raw: bytes | bytearray | memoryview) -> dict[str, str]:
    if not raw:
        return {}
    return _parse_properties(str(raw, "utf-8"))


def _parse_properties(text: str) -> dict[str, str]:
    properties = {}
    for item in text.split(PROPERTY_SEPARATOR):
        if item:
            name, _, value = item.partition(NAME_VALUE_SEPARATOR)
            properties[name] = value
    return properties


class Tagged:
    """Tags and keys read from a message's properties, where they travel (TAGS, KEYS)."""

    __slots__ = ()
    properties: dict[str, str]

    @property
    def tags(self) -> str:
        return self.properties.get(PROPERTY_TAGS, "")

    @property
    def keys(self) -> str:
        return self.properties.get(PROPERTY_KEYS, "")


@dataclass(slots=True)
class Message(Tagged):
    """A message as a producer hands it to the store.

    Tags, keys and the unique id travel as properties (TAGS, KEYS, UNIQ_KEY), as in RocketMQ.
    ``born_timestamp`` 0 means "now".
    """

    topic: str
    body: bytes
    queue_id: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sysflag: int = 0
    born_timestamp: int = 0
    born_host: bytes = NO_HOST
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


class EncodedRecord(NamedTuple):
    """A record ready to be copied into the CommitLog, placeholders still unpatched."""

    data: bytes
    topic: str
    queue_id: int
    tags_code: int
    keys: str
    uniq_key: str
    sysflag: int


@dataclass(frozen=True, slots=True)
class Limits:
    max_message_size: int = 4 * 1024 * 1024
    max_topic_length: int = 127
    max_properties_size: int = 32_767


@lru_cache(maxsize=4096)
def validate_topic(topic: str, max_length: int = 127) -> bytes:
    """The topic's bytes, or InvalidTopicError naming what is wrong."""
    if not topic:
        raise InvalidTopicError("topic name is empty")
    if len(topic) > max_length:
        raise InvalidTopicError(f"topic name is {len(topic)} characters, the limit is {max_length}")
    if not TOPIC_PATTERN.fullmatch(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} may only contain letters, digits and the characters % | - _"
        )
    return topic.encode("ascii")


def encode_record(message: Message, store_host: bytes, now_ms: int, limits: Limits) -> EncodedRecord:
    """Validate a message and encode it with placeholder offsets and store timestamp: in the
    compiled kernel when it is loaded (app.store.kernel), which leaves the messages it refuses, and any
    odd shape, to :func:`python_encode_record`."""
    if compiled is not None:
        made = compiled.encode_record(message, store_host, now_ms, limits)
        if made is not None:
            return cast(EncodedRecord, made)
    return python_encode_record(message, store_host, now_ms, limits)


def python_encode_record(message: Message, store_host: bytes, now_ms: int, limits: Limits) -> EncodedRecord:
    """The pure-Python twin of the kernel's record encoder."""
    body = message.body
    if not body:
        raise EmptyBodyError("message body is empty")
    if len(body) > limits.max_message_size:
        raise MessageTooLargeError(
            f"message body is {len(body)} bytes, the limit is {limits.max_message_size}"
        )
    topic = validate_topic(message.topic, limits.max_topic_length)
    properties = encode_properties(message.properties)
    if len(properties) > limits.max_properties_size:
        raise PropertiesTooLargeError(
            f"properties are {len(properties)} bytes, the limit is {limits.max_properties_size}"
        )
    total = FIXED_SIZE + len(body) + len(topic) + len(properties)
    sysflag = message.sysflag & ~SYSFLAG_HOSTS_V6 | SYSFLAG_PROPERTIES_END
    header = HEADER.pack(
        total,
        MESSAGE_MAGIC,
        body_crc(body),
        message.queue_id,
        message.flag,
        PLACEHOLDER,
        PLACEHOLDER,
        sysflag,
        message.born_timestamp or now_ms,
        message.born_host,
        PLACEHOLDER,
        store_host,
        message.reconsume_times,
        message.prepared_transaction_offset,
        len(body),
    )
    data = b"".join(
        (header, body, len(topic).to_bytes(1, "big"), topic, SHORT.pack(len(properties)), properties)
    )
    props = message.properties
    tags = props.get(PROPERTY_TAGS, "")
    return EncodedRecord(
        data,
        message.topic,
        message.queue_id,
        tags_hash(tags) if tags else 0,
        props.get(PROPERTY_KEYS, ""),
        props.get(PROPERTY_UNIQ_KEY, ""),
        sysflag,
    )


def body_crc(data: bytes | bytearray | memoryview) -> int:
    """BODYCRC as RocketMQ writes it (``UtilAll.crc32``): the body's CRC32 with its top bit
    cleared, so that the int is never negative."""
    return zlib.crc32(data) & 0x7FFFFFFF


def crc_matches(data: bytes | bytearray | memoryview, stored: int) -> bool:
    """Whether ``stored`` is the body's CRC: RocketMQ's masked value, or the full CRC32 as a signed
    int, which Wharf wrote before it masked (a store from then still opens)."""
    crc = zlib.crc32(data)
    return stored == crc & 0x7FFFFFFF or stored == (crc - (1 << 32) if crc & 0x80000000 else crc)


if compiled is not None:
    compiled.bind(EncodedRecord, validate_topic)
