"""Encoding the subscriber's ``messages`` frames within the socket's byte room: JSON text frames,
with ``format=cloudevents`` JSON text frames of structured CloudEvents (and their queue offsets, in
``offsets``, to acknowledge them by), or with ``format=binary`` the stored CommitLog records
themselves (as a pull with ``Accept: application/vnd.wharf.records`` answers), concatenated in one
binary frame."""

from __future__ import annotations

import struct

import orjson

from app.cloudevents import render_cloudevent
from app.codec import as_consumed, message_json, messages_json, record_to_json
from app.store.record_format import layout_at

_RECONSUME_TIMES = struct.Struct(">i")


def messages_frame(topic: str, queue_id: int, records: list[memoryview], room: int) -> tuple[bytes, int]:
    """A ``messages`` frame of the first records that fit ``room`` bytes (at least one), and how
    many it holds. The rest are read again later: they were not delivered."""
    head = b'{"type":"messages","topic":%b,"queue_id":%d,"messages":' % (orjson.dumps(topic), queue_id)
    every = messages_json(records, True)  # all of them in one call: they usually fit
    if len(head) + len(every) + 2 <= room:  # the room the loop below would count for them all
        return head + every + b"}", len(records)
    head += b"["
    size = len(head) + 2
    parts: list[bytes] = []
    for record in records:
        part = message_json(record, True)
        if parts and size + len(part) + 1 > room:
            break
        parts.append(part)
        size += len(part) + 1
    return head + b",".join(parts) + b"]}", len(parts)


def cloudevents_frame(
    topic: str, queue_id: int, records: list[memoryview], queue_offsets: list[int], room: int, source: str
) -> tuple[bytes, int]:
    """A ``messages`` frame of the first records that fit ``room`` bytes (at least one) as
    CloudEvents, with their queue offsets; and how many it holds."""
    events: list[bytes] = []
    size = 96 + len(topic)
    for record in records:
        event = orjson.dumps(render_cloudevent(as_consumed(record_to_json(record)), source))
        if events and size + len(event) + 24 > room:
            break
        events.append(event)
        size += len(event) + 24  # the event, a comma and its offset
    count = len(events)
    return cloudevents_json(topic, queue_id, queue_offsets[:count], events), count


def cloudevents_json(topic: str, queue_id: int, offsets: list[int], events: list[bytes]) -> bytes:
    """A ``messages`` frame of encoded CloudEvents and their queue offsets."""
    head = b'{"type":"messages","topic":%b,"queue_id":%d,"format":"cloudevents","offsets":%b,"messages":[' % (
        orjson.dumps(topic),
        queue_id,
        orjson.dumps(offsets),
    )
    return head + b",".join(events) + b"]}"


def records_frame(records: list[memoryview], room: int) -> tuple[bytes, int]:
    """A binary ``messages`` frame: the first records that fit ``room`` bytes (at least one),
    concatenated as they are stored, and how many it holds."""
    size = 0
    count = 0
    for record in records:
        if count and size + len(record) > room:
            break
        size += len(record)
        count += 1
    return b"".join(records[:count]), count


def redelivered_record(record: memoryview, nacks: int) -> bytes:
    """A copy of a stored record whose RECONSUMETIMES counts ``nacks`` more deliveries (the field
    lies outside the body CRC, so the record stays valid)."""
    copy = bytearray(record)
    at = layout_at(copy).reconsume_times
    (times,) = _RECONSUME_TIMES.unpack_from(copy, at)
    _RECONSUME_TIMES.pack_into(copy, at, times + nacks)
    return bytes(copy)
