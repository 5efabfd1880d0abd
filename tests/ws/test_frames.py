"""The subscriber's ``messages`` frame: a retried message shows the topic it was produced to."""

from __future__ import annotations

import orjson
import pytest

from app.api.ws import frames
from app.api.ws.frames import messages_frame
from app.store import Message
from app.store.record_format import OFFSETS, POS_QUEUEOFFSET, Limits, encode_host, encode_record

STORE_HOST = encode_host("10.1.2.3", 10911)


def record(topic: str, properties: dict[str, str]) -> memoryview:
    message = Message(topic, b"boom", queue_id=0, properties=properties)
    stored = bytearray(encode_record(message, STORE_HOST, 1_700_000_000_000, Limits()).data)
    OFFSETS.pack_into(stored, POS_QUEUEOFFSET, 0, 4096)  # as the CommitLog patches them in
    return memoryview(stored)


def test_a_message_of_a_retry_topic_names_its_original_topic_and_the_retry_topic() -> None:
    records = [
        record("%RETRY%billing", {"RETRY_TOPIC": "orders"}),
        record("orders", {}),
        record("%RETRY%billing", {}),  # produced there by hand: nothing to restore
    ]
    frame, count = messages_frame("%RETRY%billing", 0, records, 1 << 20)
    decoded = orjson.loads(frame)
    assert (count, decoded["topic"]) == (3, "%RETRY%billing")
    shown = [(message["topic"], message.get("retry_topic")) for message in decoded["messages"]]
    assert shown == [("orders", "%RETRY%billing"), ("orders", None), ("%RETRY%billing", None)]


def test_a_frame_of_every_record_at_once_is_the_frame_the_record_by_record_cut_makes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The frame encodes all the records in one call when they fit the room; at every room, from
    one that holds a single record to one that holds them all, it is byte for byte the frame
    the record-by-record cut makes (the only way when they do not fit)."""
    records = [record("orders", {"TAGS": "t" * n}) for n in range(6)]
    whole = len(messages_frame("orders", 3, records, 1 << 20)[0])
    rooms = range(1, whole + 4)
    at_once = [messages_frame("orders", 3, records, room) for room in rooms]
    every = orjson.loads(frames.messages_json(records, True))
    monkeypatch.setattr(frames, "messages_json", lambda *_: b"x" * (1 << 21))
    one_by_one = [messages_frame("orders", 3, records, room) for room in rooms]
    assert at_once == one_by_one
    assert {count for _, count in at_once} == set(range(1, 7))
    assert orjson.loads(at_once[-1][0])["messages"] == every
