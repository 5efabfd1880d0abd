"""Encoding the subscriber's ``messages`` frames within the socket's byte room."""

from __future__ import annotations

import orjson

from app.codec import as_consumed, record_to_json


def messages_frame(topic: str, queue_id: int, records: list[memoryview], room: int) -> tuple[bytes, int]:
    """A ``messages`` frame of the first records that fit ``room`` bytes (at least one), and how
    many it holds. The rest are read again later: they were not delivered."""
    head = b'{"type":"messages","topic":%b,"queue_id":%d,"messages":[' % (orjson.dumps(topic), queue_id)
    size = len(head) + 2
    parts: list[bytes] = []
    for record in records:
        part = orjson.dumps(as_consumed(record_to_json(record)))
        if parts and size + len(part) + 1 > room:
            break
        parts.append(part)
        size += len(part) + 1
    return head + b",".join(parts) + b"]}", len(parts)
