"""Message encodings on the wire: JSON message objects and Wharf's two binary formats.

The formats a client writes or reads - the binary produce batch (``application/vnd.wharf.batch``),
the stored records of a binary pull answer (``application/vnd.wharf.records``), a JSON message
object's body - are encoded and decoded in :mod:`wharf_client.codec` (the client distribution,
documented there), imported here so that each encoding exists once: :class:`IncomingMessage`,
:func:`parse_batch`, :func:`encode_batch`, :func:`batch_count`, :func:`split_records`,
:func:`decode_body`, :func:`encode_body` and the media types are that module's. What only the
broker does stays here: the pull API's JSON message objects straight from stored records (in the
compiled kernel when it is loaded), a group's view of a retry topic's message, the reserved
properties, and :func:`decode_records` into the store's :class:`StoredMessage` (the client decodes
into its own ``wharf_client.Message``).

Binary pull answer, ``Accept: application/vnd.wharf.records``: the stored CommitLog records,
concatenated exactly as they are on disk (each starts with its 4-byte TOTALSIZE; layout in
app/store/record_format.py), with the pull's status and offsets in ``X-Wharf-*`` headers. The broker
copies the bytes once and encodes nothing, which makes it the cheapest way to read.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, cast

import orjson
from wharf_client.codec import (
    BATCH_MAGIC,
    BATCH_MEDIA_TYPE,
    RECORDS_MEDIA_TYPE,
    BatchFormatError,
    BodyEncodingError,
    IncomingMessage,
    batch_count,
    decode_body,
    encode_batch,
    encode_body,
    parse_batch,
    split_records,
)

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

__all__ = [
    "BATCH_MAGIC",
    "BATCH_MEDIA_TYPE",
    "RECORDS_MEDIA_TYPE",
    "RESERVED_PROPERTIES",
    "BatchFormatError",
    "BodyEncodingError",
    "IncomingMessage",
    "as_consumed",
    "batch_count",
    "decode_body",
    "decode_records",
    "encode_batch",
    "encode_body",
    "message_json",
    "messages_json",
    "parse_batch",
    "python_decode_records",
    "python_message_json",
    "python_messages_json",
    "record_to_json",
    "split_records",
]

_SHORT = struct.Struct(">h")

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


def python_decode_records(data: bytes | memoryview) -> list[StoredMessage]:
    """The store's messages of a binary pull answer (or a ``format=binary`` frame): its records,
    decoded by the store's decoder (a client decodes with ``wharf_client.codec.decode_records``)."""
    return [decode_record(raw) for raw in split_records(data)]


def decode_records(data: bytes | memoryview) -> list[StoredMessage]:
    """:func:`python_decode_records`, in the compiled kernel when it is loaded (app.store.kernel)."""
    if compiled is None:
        return python_decode_records(data)
    return cast("list[StoredMessage]", compiled.decode_records(data, python_decode_records))
