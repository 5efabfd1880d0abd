"""The binary produce batch: what a client encodes the broker decodes to the same messages, and any
cut or corrupted batch is refused with BatchFormatError (a 400), never another exception."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.codec import BatchFormatError, IncomingMessage, encode_batch, parse_batch

texts = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=20)
words = st.text(alphabet="abcxyz-_0189é", min_size=1, max_size=8)
property_names = st.text(alphabet="abcdefgh_", min_size=1, max_size=8)
property_values = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x01\x02"), max_size=10
)

messages = st.builds(
    IncomingMessage,
    body=st.binary(max_size=64),
    tags=texts,
    keys=st.lists(words, max_size=3),
    properties=st.dictionaries(property_names, property_values, max_size=3),
    queue_id=st.one_of(st.none(), st.integers(min_value=0, max_value=2**31 - 1)),
    sharding_key=st.one_of(st.none(), texts.filter(bool)),
    unique_id=st.one_of(st.none(), texts.filter(bool)),
    flag=st.integers(min_value=-(2**31), max_value=2**31 - 1),
    born_timestamp=st.integers(min_value=0, max_value=2**62),
    delay_level=st.one_of(st.none(), st.integers(min_value=1, max_value=18)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(messages, max_size=6))
def test_a_batch_decodes_to_the_messages_it_was_encoded_from(batch: list[IncomingMessage]) -> None:
    assert parse_batch(encode_batch(batch)) == batch


@settings(max_examples=300, deadline=None)
@given(st.lists(messages, min_size=1, max_size=3), st.data())
def test_a_cut_or_corrupted_batch_is_a_batch_format_error(
    batch: list[IncomingMessage], data: st.DataObject
) -> None:
    raw = bytearray(encode_batch(batch))
    if data.draw(st.booleans(), label="cut"):
        # A batch cut anywhere is refused, at a message boundary too: it says how long it is.
        del raw[data.draw(st.integers(min_value=0, max_value=len(raw) - 1), label="at") :]
        with pytest.raises(BatchFormatError) as refused:
            parse_batch(bytes(raw))
        assert str(refused.value)  # says where the batch goes wrong
        return
    position = data.draw(st.integers(min_value=0, max_value=len(raw) - 1), label="at")
    raw[position] = data.draw(st.integers(min_value=0, max_value=255), label="byte")
    try:
        parsed = parse_batch(bytes(raw))
    except BatchFormatError as refused:
        assert str(refused)  # says where the batch goes wrong
    else:  # a changed byte inside a body or a text field can still be a valid batch: the same messages
        assert len(parsed) == len(batch)
        assert sum(got != sent for got, sent in zip(parsed, batch, strict=True)) <= 1
