"""CloudEvents produced with the CNCF SDK in the HTTP binding's binary, structured and batched modes:
how an event becomes a message, a resent event stored once, and a missing attribute refused."""

from __future__ import annotations

import base64
from typing import Any

import httpx
import orjson
import pytest
from cloudevents.v1.conversion import to_binary, to_structured
from cloudevents.v1.http import CloudEvent

from tests.api.sse import new_topic


def stored(client: httpx.Client, topic: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0})
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def post(
    client: httpx.Client, topic: str, headers: dict[str, str], body: bytes, **params: str
) -> httpx.Response:
    return client.post(f"/v1/topics/{topic}/messages", headers=headers, content=body, params=params)


ATTRIBUTES = {
    "type": "com.example.order.created",
    "source": "https://shop.example/orders",
    "id": "order-1-created",
    "subject": "order-1",
    "time": "2026-11-28T10:00:00.123Z",
    "dataschema": "https://shop.example/schemas/order",
    "tenant": "acme",  # an extension
}


@pytest.mark.parametrize("mode", ["binary", "structured"])
def test_an_event_becomes_a_message(client: httpx.Client, mode: str) -> None:
    topic = new_topic(client, f"ce-{mode}", queues=1)
    event = CloudEvent(ATTRIBUTES, {"order": 1, "total": 9.5})
    headers, body = (to_binary if mode == "binary" else to_structured)(event)
    response = post(client, topic, headers, body)
    assert response.status_code == 200, response.text
    (message,) = stored(client, topic)
    assert message["tags"] == "com.example.order.created"
    assert message["keys"] == ["order-1"]
    assert orjson.loads(message["body"]) == {"order": 1, "total": 9.5}
    properties = message["properties"]
    for name, value in ATTRIBUTES.items():
        assert properties[f"ce_{name}"] == value
    assert properties["ce_specversion"] == "1.0"


def test_binary_mode_keeps_the_data_bytes_and_its_content_type(client: httpx.Client) -> None:
    topic = new_topic(client, "ce-bytes", queues=1)
    data = bytes(range(256))
    headers, body = to_binary(CloudEvent({**ATTRIBUTES, "datacontenttype": "application/octet-stream"}, data))
    assert post(client, topic, headers, body).status_code == 200
    (message,) = stored(client, topic)
    assert message["encoding"] == "base64"
    assert base64.b64decode(message["body"]) == data
    assert message["properties"]["ce_datacontenttype"] == "application/octet-stream"


def test_a_batch_is_one_message_per_event_and_tags_can_override_the_type(client: httpx.Client) -> None:
    topic = new_topic(client, "ce-batch", queues=1)
    batch = [
        {"specversion": "1.0", "id": f"b-{i}", "source": "/batch", "type": "t.batch", "data": {"i": i}}
        for i in range(3)
    ]
    headers = {"content-type": "application/cloudevents-batch+json"}
    response = post(client, topic, headers, orjson.dumps(batch), tags="Chosen")
    assert response.status_code == 200, response.text
    assert len(response.json()["results"]) == 3
    messages = stored(client, topic)
    assert [orjson.loads(m["body"]) for m in messages] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert {m["tags"] for m in messages} == {"Chosen"}


@pytest.mark.parametrize("mode", ["binary", "structured", "batch"])
def test_a_resent_event_is_stored_once(client: httpx.Client, mode: str) -> None:
    topic = new_topic(client, f"ce-resent-{mode}", queues=1)
    event = CloudEvent(ATTRIBUTES, {"order": 1})
    if mode == "binary":
        headers, body = to_binary(event)
    elif mode == "structured":
        headers, body = to_structured(event)
    else:
        headers = {"content-type": "application/cloudevents-batch+json"}
        body = b"[" + to_structured(event)[1] + b"]"
    first = post(client, topic, headers, body)
    again = post(client, topic, headers, body)
    assert first.status_code == again.status_code == 200, again.text
    assert len(stored(client, topic)) == 1
    # The same id from another source is another event.
    other = CloudEvent({**ATTRIBUTES, "source": "https://elsewhere.example"}, {"order": 1})
    assert post(client, topic, *to_structured(other)).status_code == 200
    assert len(stored(client, topic)) == 2


@pytest.mark.parametrize("missing", ["specversion", "id", "source", "type"])
def test_a_missing_required_attribute_is_refused_by_name(client: httpx.Client, missing: str) -> None:
    topic = new_topic(client, "ce-missing", queues=1)
    attributes = {"specversion": "1.0", "id": "m-1", "source": "/m", "type": "t.m"}
    structured = {name: value for name, value in attributes.items() if name != missing}
    response = post(
        client,
        topic,
        {"content-type": "application/cloudevents+json"},
        orjson.dumps({**structured, "data": "x"}),
    )
    assert response.status_code == 400, response.text
    assert response.json()["error_code"] == 40016
    assert repr(missing) in response.json()["message"]
    if missing != "specversion":  # without ce-specversion a request is no event in binary mode
        headers = {f"ce-{name}": value for name, value in structured.items()}
        response = post(client, topic, {**headers, "content-type": "text/plain"}, b"x")
        assert response.status_code == 400, response.text
        assert response.json()["error_code"] == 40016
        assert repr(missing) in response.json()["message"]
    assert stored(client, topic) == []


@pytest.mark.parametrize(
    "body",
    [
        b'{"specversion": "0.3", "id": "1", "source": "/s", "type": "t"}',
        b'{"specversion": "1.0", "id": "1", "source": "/s", "type": "t", "data_base64": "%%%"}',
        b'{"specversion": "1.0", "id": "1", "source": "/s", "type": "t", "Bad-Name": "x"}',
        b'{"specversion": "1.0", "id": "1", "source": "/s", "type": "t", "nested": {"a": 1}}',
        b'["not an object"]',
        b"{not json",
    ],
)
def test_a_malformed_event_is_refused(client: httpx.Client, body: bytes) -> None:
    topic = new_topic(client, "ce-malformed", queues=1)
    response = post(client, topic, {"content-type": "application/cloudevents+json"}, body)
    assert response.status_code == 400, response.text
    assert response.json()["error_code"] == 40016
