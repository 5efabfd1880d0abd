"""Decoding produced messages: JSON objects into :class:`IncomingMessage`, typed by msgspec.

Produce is the hottest path, and validating each message with pydantic cost about three times the
rest of decoding a JSON batch. The structs here check exactly what :class:`~app.api.schemas.MessageIn`
declares (``tests/api/test_wire.py`` holds the two to one shape); the pydantic models stay as the
OpenAPI document's description of the body.
"""

from __future__ import annotations

import binascii
import re
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct
from pybase64 import b64decode

from app.api.errors import ApiError, ErrorCode
from app.codec import BodyEncodingError, IncomingMessage, decode_body

MAX_BATCH_MESSAGES = 10_000


class WireMessage(Struct, forbid_unknown_fields=True):
    """One message object: the fields of :class:`~app.api.schemas.MessageIn`."""

    body: str
    encoding: Literal["utf8", "base64"] = "utf8"
    tags: Annotated[str, Meta(max_length=1024)] | None = None
    keys: list[str] | str | None = None
    properties: dict[str, str] | None = None
    queue_id: Annotated[int, Meta(ge=0)] | None = None
    sharding_key: Annotated[str, Meta(max_length=1024)] | None = None
    unique_id: Annotated[str, Meta(min_length=1, max_length=128)] | None = None
    delay_level: int | None = None
    delay_ms: int | None = None
    deliver_at_ms: int | None = None


class WireBatch(Struct, forbid_unknown_fields=True):
    messages: Annotated[list[WireMessage], Meta(min_length=1, max_length=MAX_BATCH_MESSAGES)]


_NDJSON_LINE = msgspec.json.Decoder(WireMessage)
_WHERE = re.compile(r"^(?P<what>.*) - at `\$(?P<path>[^`]*)`$", re.DOTALL)


def describe(error: msgspec.ValidationError, where: str = "") -> str:
    """msgspec's message with the field first: ``messages[0].body: Expected `str`, got `int```."""
    text = str(error)
    found = _WHERE.match(text)
    if found is None:
        return f"{where}{text}"
    path = found["path"].lstrip(".")
    return f"{where}{path}: {found['what']}" if path else f"{where}{found['what']}"


def _body_of(text: str, encoding: str) -> bytes:
    try:
        return decode_body(text, encoding)
    except BodyEncodingError as exc:
        raise ApiError(ErrorCode.INVALID_BODY_ENCODING, str(exc)) from None


def to_incoming(item: WireMessage) -> IncomingMessage:
    text, encoding = item.body, item.encoding
    if encoding == "base64":
        try:
            body = b64decode(text, validate=True)
        except (binascii.Error, ValueError):  # the standard library decides, and says what is wrong
            body = _body_of(text, encoding)
    else:
        body = _body_of(text, encoding)
    keys = item.keys
    # Positional, in IncomingMessage's field order (a keyword call costs a third more per message):
    # body, tags, keys, properties, queue_id, sharding_key, unique_id, flag, born_timestamp,
    # delay_level, delay_ms, deliver_at_ms.
    return IncomingMessage(
        body,
        item.tags or "",
        (keys.split() if isinstance(keys, str) else keys) if keys else [],
        item.properties or {},
        item.queue_id,
        item.sharding_key,
        item.unique_id,
        0,
        0,
        item.delay_level,
        item.delay_ms,
        item.deliver_at_ms,
    )


_BATCH = msgspec.json.Decoder(WireBatch)
INT64_MIN, UINT64_MAX = -(1 << 63), (1 << 64) - 1


def batch_of(raw: bytes) -> list[IncomingMessage] | None:
    """A ``{"messages": [...]}`` body decoded straight into its typed messages, without a dict per
    message on the way; None when the body is not a valid batch: the caller then decodes it as
    :func:`messages_of` does, which says what is wrong (or takes a single message object)."""
    try:
        batch = _BATCH.decode(raw)
    except ValueError:  # msgspec's errors, and text that is not UTF-8
        return None
    return _typed(batch.messages)


def body_of(raw: bytes) -> list[IncomingMessage] | None:
    """A produce's JSON body - a ``{"messages": [...]}`` batch or one message object - decoded
    straight from its bytes, as :func:`batch_of` decodes a batch; None when it is neither, valid:
    the caller then decodes it as :func:`messages_of` does, which says what is wrong. A body that
    names ``"messages"`` anywhere is tried as a batch (one message whose text holds the word is
    left to the caller: slower, the same answer)."""
    if b'"messages"' in raw:
        return batch_of(raw)
    try:
        message = _NDJSON_LINE.decode(raw)
    except ValueError:
        return None
    return _typed([message])


def _typed(items: list[WireMessage]) -> list[IncomingMessage] | None:
    """The messages of decoded ``items``; None when a number is one orjson (the dict path) refuses:
    outside 64 bits (queue_id is >= 0)."""
    for item in items:
        if item.queue_id is not None and item.queue_id > UINT64_MAX:
            return None
        if item.delay_level is not None or item.delay_ms is not None or item.deliver_at_ms is not None:
            for number in (item.delay_level, item.delay_ms, item.deliver_at_ms):
                if number is not None and not INT64_MIN <= number <= UINT64_MAX:
                    return None
    return [to_incoming(item) for item in items]


def messages_of(document: dict[str, Any]) -> list[IncomingMessage]:
    """A produce body's messages: ``{"messages": [...]}`` or one message object."""
    try:
        if "messages" in document:
            batch = msgspec.convert(document, WireBatch)
            return [to_incoming(item) for item in batch.messages]
        return [to_incoming(msgspec.convert(document, WireMessage))]
    except msgspec.ValidationError as exc:
        raise ApiError(ErrorCode.VALIDATION_FAILED, describe(exc)) from None


def message_of(fields: dict[str, Any]) -> IncomingMessage:
    """One message object (a WebSocket produce frame without its ``id`` and ``type``)."""
    try:
        return to_incoming(msgspec.convert(fields, WireMessage))
    except msgspec.ValidationError as exc:
        raise ApiError(ErrorCode.VALIDATION_FAILED, describe(exc)) from None


def ndjson_line(line: bytes, number: int) -> IncomingMessage:
    """One NDJSON line's message; ``number`` (from 1) names the line in errors."""
    try:
        return to_incoming(_NDJSON_LINE.decode(line))
    except msgspec.ValidationError as exc:
        raise ApiError(ErrorCode.VALIDATION_FAILED, describe(exc, f"line {number}: ")) from None
    except (msgspec.DecodeError, UnicodeDecodeError):
        raise ApiError(ErrorCode.MALFORMED_BODY, f"line {number} is not valid JSON") from None
