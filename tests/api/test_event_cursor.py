"""The event stream's cursor (``id:``): every queue's next offset, short, opaque and checked."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api.event_cursor import CursorError, decode_cursor, encode_cursor

offsets = st.dictionaries(st.integers(0, 65535), st.integers(0, 2**63 - 1), max_size=64)


@given(offsets)
def test_a_cursor_names_exactly_the_offsets_it_was_made_of(named: dict[int, int]) -> None:
    text = encode_cursor(named)
    assert text.isascii() and all(c.isalnum() or c in "-_" for c in text)
    assert decode_cursor(text) == named


def test_a_cursor_is_short() -> None:
    assert len(encode_cursor({queue_id: 1_000 for queue_id in range(4)})) <= 24
    assert len(encode_cursor({queue_id: 10**9 for queue_id in range(16)})) <= 160


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not base64!",
        "AA",  # version 0
        encode_cursor({0: 300})[:-1],  # cut inside a number
        encode_cursor({1: 2})[:3],  # a queue without its offset
        "AQ" + "_" * 20,  # a number past 63 bits
        "é",
        "A" * 5000,
    ],
)
def test_text_the_broker_did_not_write_is_refused(text: str) -> None:
    with pytest.raises(CursorError):
        decode_cursor(text)
