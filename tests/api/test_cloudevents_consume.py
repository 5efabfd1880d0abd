"""``format=cloudevents`` on JSON pulls, event streams and WebSocket subscriptions: each message a
structured CloudEvent that the CNCF SDK reads back - an event produced with the SDK exactly as it
went in (attributes and data, byte for byte), any other message with Wharf's own attributes."""

from __future__ import annotations

import base64
import datetime
from typing import Any

import httpx
import orjson
import pytest
from cloudevents.v1.conversion import to_binary, to_structured
from cloudevents.v1.http import CloudEvent, from_http

from tests.api.server import BrokerProcess
from tests.api.sse import events, new_topic, produce
from tests.ws.wsclient import WsBroker

STRUCTURED = {"content-type": "application/cloudevents+json"}
ATTRIBUTES = {
    "type": "com.example.order.created",
    "source": "https://shop.example/orders",
    "subject": "order-7",
    "time": "2026-11-28T10:00:00.123456Z",
    "dataschema": "https://shop.example/schemas/order",
    "tenant": "acme",
}
# (id, extra attributes, data): JSON data, bytes, text, and no data at all.
EVENTS: list[tuple[str, dict[str, str], Any]] = [
    ("e-json", {}, {"order": 7, "lines": [{"sku": "a", "n": 2}], "note": "caf\u00e9"}),
    ("e-bytes", {"datacontenttype": "application/octet-stream"}, bytes(range(256)) * 3),
    ("e-text", {"datacontenttype": "text/plain; charset=utf-8"}, "line one\nline two"),
    ("e-none", {}, None),
]


def sdk_events() -> list[CloudEvent]:
    return [CloudEvent({**ATTRIBUTES, "id": event_id, **extra}, data) for event_id, extra, data in EVENTS]


def read_back(document: dict[str, Any]) -> CloudEvent:
    event: CloudEvent = from_http(STRUCTURED, orjson.dumps(document))
    return event


def assert_same(back: CloudEvent, sent: CloudEvent) -> None:
    assert back.get_attributes() == sent.get_attributes()
    assert back.get_data() == sent.get_data()
    # Byte for byte: the SDK writes both the same way.
    assert to_structured(back) == to_structured(sent)
    if sent.get_data() is not None:
        assert to_binary(back) == to_binary(sent)


def produce_events(client: httpx.Client, topic: str) -> list[CloudEvent]:
    sent = sdk_events()
    for index, event in enumerate(sent):
        headers, body = (to_binary if index % 2 else to_structured)(event)  # both modes
        response = client.post(f"/v1/topics/{topic}/messages", headers=headers, content=body)
        assert response.status_code == 200, response.text
    return sent


def pulled_events(client: httpx.Client, topic: str) -> list[dict[str, Any]]:
    response = client.get(
        f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0, "format": "cloudevents"}
    )
    assert response.status_code == 200, response.text
    documents: list[dict[str, Any]] = response.json()["messages"]
    return documents


def test_events_come_back_from_a_pull_as_they_went_in(client: httpx.Client) -> None:
    topic = new_topic(client, "ce-pull", queues=1)
    sent = produce_events(client, topic)
    documents = pulled_events(client, topic)
    assert len(documents) == len(sent)
    for document, event in zip(documents, sent, strict=True):
        assert_same(read_back(document), event)


def test_events_come_back_from_an_event_stream_as_they_went_in(client: httpx.Client) -> None:
    topic = new_topic(client, "ce-sse", queues=1)
    sent = produce_events(client, topic)
    received = events(client, topic, len(sent), format="cloudevents", **{"from": "first"})
    for event, original in zip(received, sent, strict=True):
        assert event.event == ATTRIBUTES["type"]
        assert_same(read_back(orjson.loads(event.data)), original)


def test_events_come_back_from_a_websocket_subscription_as_they_went_in(
    broker: BrokerProcess, client: httpx.Client
) -> None:
    topic = new_topic(client, "ce-ws", queues=1)
    sent = produce_events(client, topic)
    with WsBroker(broker).subscribe(
        topic=topic, group="ce-ws", format="cloudevents", credit=10, **{"from": "first"}
    ) as socket:
        frame = socket.next("messages")
        assert frame["format"] == "cloudevents"
        assert frame["offsets"] == list(range(len(sent)))
        for document, original in zip(frame["messages"], sent, strict=True):
            assert_same(read_back(document), original)
        # The offsets are what the group acknowledges.
        socket.send(type="ack", queue_id=0, offsets=frame["offsets"])
        assert socket.next("committed")["offset"] == len(sent)


def test_a_nacked_event_comes_again_as_the_same_cloudevent(
    broker: BrokerProcess, client: httpx.Client
) -> None:
    topic = new_topic(client, "ce-nack", queues=1)
    (sent, *_) = produce_events(client, topic)
    with WsBroker(broker).subscribe(
        topic=topic, group="ce-nack", format="cloudevents", credit=10, **{"from": "first"}
    ) as socket:
        first = socket.next("messages")
        socket.send(type="nack", queue_id=0, offset=0)
        again = socket.next("messages")
        assert again["format"] == "cloudevents" and again["offsets"] == [0]
        assert again["messages"] == first["messages"][:1]
        assert_same(read_back(again["messages"][0]), sent)


def test_a_message_produced_without_cloudevents_gets_wharfs_attributes(
    broker: BrokerProcess, client: httpx.Client
) -> None:
    topic = new_topic(client, "ce-plain", queues=1)
    (json_result, text_result, bytes_result) = produce(
        client,
        topic,
        [
            {"body": '{"a": 1}', "tags": "TagA", "keys": ["k-1", "k-2"]},
            {"body": "plain text"},
            {"body": base64.b64encode(b"\x00\xff").decode(), "encoding": "base64"},
        ],
    )
    stored = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0}).json()["messages"]
    backs = [read_back(document) for document in pulled_events(client, topic)]
    source = f"{broker.url}/v1/topics/{topic}"
    assert [back["id"] for back in backs] == [m["unique_id"] for m in stored]
    assert json_result["unique_id"] == stored[0]["unique_id"]
    assert {back["source"] for back in backs} == {source}
    assert [back["type"] for back in backs] == ["TagA", "wharf.message", "wharf.message"]
    assert backs[0]["subject"] == "k-1"
    times = [datetime.datetime.fromisoformat(back["time"].replace("Z", "+00:00")) for back in backs]
    assert [int(t.timestamp() * 1000) for t in times] == [m["store_timestamp"] for m in stored]
    assert backs[0]["datacontenttype"] == "application/json" and backs[0].get_data() == {"a": 1}
    assert backs[1]["datacontenttype"].startswith("text/plain") and backs[1].get_data() == "plain text"
    assert backs[2]["datacontenttype"] == "application/octet-stream" and backs[2].get_data() == b"\x00\xff"
    assert text_result and bytes_result


@pytest.mark.parametrize(
    "path", ["/v1/topics/{topic}/queues/0/messages?offset=0", "/v1/topics/{topic}/events"]
)
def test_an_unknown_format_is_refused(client: httpx.Client, path: str) -> None:
    topic = new_topic(client, "ce-format", queues=1)
    response = client.get(path.format(topic=topic), params={"format": "xml"})
    assert response.status_code == 422, response.text
    assert response.json()["error_code"] == 42201
