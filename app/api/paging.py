"""Paging of list endpoints: ``limit`` and an opaque ``cursor`` in, ``next_cursor`` out.

Lists are ordered by name; a cursor holds the last name of the page it ends and the list it
belongs to, base64url-encoded. The next page starts after that name, so a name created or deleted
between two pages neither repeats nor shifts another one out.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

import orjson
from fastapi import Query

from app.api.errors import ApiError, ErrorCode

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000

# Checked by hand, not by FastAPI, so that a bad limit is a 400 in the envelope, not a 422.
LimitParam = Annotated[
    str | None,
    Query(description=f"Items per page, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT})", examples=["100"]),
]
CursorParam = Annotated[
    str | None, Query(max_length=2048, description="next_cursor of the previous page; absent for the first")
]


def parse_limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise ApiError(
            ErrorCode.INVALID_PARAMETER, f"limit must be an integer from 1 to {MAX_LIMIT}, not {raw!r}"
        )
    return limit


def encode_cursor(kind: str, after: str) -> str:
    raw = orjson.dumps({"list": kind, "after": after})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(kind: str, cursor: str | None) -> str | None:
    """The name a page starts after; None for the first page. A cursor not made for this list is a 400."""
    if cursor is None:
        return None
    try:
        document = orjson.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(document, dict) or document.get("list") != kind:
            raise ValueError("not a cursor of this list")
        after = document["after"]
        if not isinstance(after, str):
            raise ValueError("no name")
        return after
    except (ValueError, KeyError, binascii.Error, orjson.JSONDecodeError):
        raise ApiError(
            ErrorCode.INVALID_CURSOR, f"cursor {cursor[:64]!r} is not a next_cursor of this list"
        ) from None
