"""Receipt handles: what a popped message carries so that its consumer can ack it, nack it or
change its invisible time (RocketMQ 5's ExtraInfo, made opaque).

A handle names the group, the topic, the queue, the queue offset and the nonce of one hand-out.
Every hand-out of a message (the first pop, a pop after its invisible time, a nack, a change of
invisibility) draws a new nonce, so only the latest handle still acts: an older one answers
"expired". The bytes, in base64url without padding, are::

    version u8 | queue_id u32 | queue_offset i64 | nonce u64 | group u8+ascii | topic u8+ascii

A client keeps the text as it came and never reads into it; the version lets the layout change.
"""

from __future__ import annotations

import base64
import binascii
import struct
from typing import NamedTuple

HANDLE_VERSION = 1

_HEAD = struct.Struct(">BIqQ")  # version | queue id | queue offset | nonce
assert _HEAD.size == 21

# Group and topic names are at most 255 ASCII characters (the API's bounds): one length byte each.
_MAX_NAME = 255


class ReceiptHandle(NamedTuple):
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    nonce: int

    def encode(self) -> str:
        group, topic = self.group.encode("ascii"), self.topic.encode("ascii")
        raw = b"".join(
            (
                _HEAD.pack(HANDLE_VERSION, self.queue_id, self.queue_offset, self.nonce),
                bytes((len(group),)),
                group,
                bytes((len(topic),)),
                topic,
            )
        )
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_handle(text: str) -> ReceiptHandle | None:
    """The handle ``text`` encodes, or None when it is not one (another version, cut, garbage)."""
    if len(text) > 4 * (_HEAD.size + 2 + 2 * _MAX_NAME) // 3 + 4:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        version, queue_id, queue_offset, nonce = _HEAD.unpack_from(raw, 0)
        if version != HANDLE_VERSION:
            return None
        position = _HEAD.size
        names = []
        for _ in range(2):
            length = raw[position]
            names.append(raw[position + 1 : position + 1 + length].decode("ascii"))
            position += 1 + length
    except (binascii.Error, ValueError, struct.error, IndexError):
        return None
    if position != len(raw) or queue_offset < 0:
        return None
    return ReceiptHandle(names[0], names[1], queue_id, queue_offset, nonce)
