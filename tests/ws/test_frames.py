"""The subscriber's ``messages`` frame: a retried message shows the topic it was produced to."""

from __future__ import annotations

import orjson

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
