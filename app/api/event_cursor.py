"""The ``id:`` of a Server-Sent Event: every queue's next offset, packed short and opaque.

An event stream reads several queues of a topic at once; the id of each event it writes names, for
every queue the stream reads, the offset it reads next - the offset after that event for the
event's own queue, and for the others what the events written before it reached. A client that
reconnects with its last id (``Last-Event-ID``) resumes each queue exactly there.

Layout, then base64url without padding (the characters of an id need no escaping anywhere)::

    version (1 byte, 1) | per queue: queue id (varint) | next offset (varint)

Varints are unsigned LEB128: a queue near its start costs two bytes, one at a billion five.
"""

from __future__ import annotations

import base64
import binascii

VERSION = 1
MAX_CURSOR_CHARS = 4096  # far more than 1,024 queues at the largest offsets need


class CursorError(ValueError):
    """A Last-Event-ID that no stream of this broker wrote."""


def _varint(value: int, out: bytearray) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def encode_cursor(offsets: dict[int, int]) -> str:
    """The id naming ``offsets`` (queue id -> next offset), queues in ascending order."""
    out = bytearray((VERSION,))
    for queue_id in sorted(offsets):
        _varint(queue_id, out)
        _varint(offsets[queue_id], out)
    return base64.urlsafe_b64encode(out).rstrip(b"=").decode("ascii")


def decode_cursor(text: str) -> dict[int, int]:
    """The offsets an id names; CursorError for text :func:`encode_cursor` did not write."""
    if not text or len(text) > MAX_CURSOR_CHARS or not text.isascii():
        raise CursorError("the event id is not one this broker wrote")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise CursorError("the event id is not base64url") from None
    if not raw or raw[0] != VERSION:
        raise CursorError("the event id is not one this broker wrote")
    numbers: list[int] = []
    value = shift = 0
    for byte in raw[1:]:
        value |= (byte & 0x7F) << shift
        shift += 7
        if shift > 63:
            raise CursorError("the event id holds a number out of range")
        if not byte & 0x80:
            numbers.append(value)
            value = shift = 0
    if shift or len(numbers) % 2:
        raise CursorError("the event id is cut short")
    offsets = dict(zip(numbers[::2], numbers[1::2], strict=True))
    if len(offsets) * 2 != len(numbers):
        raise CursorError("the event id names a queue twice")
    return offsets
