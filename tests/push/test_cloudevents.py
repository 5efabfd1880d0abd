"""Push subscriptions with ``format: cloudevents``: each message is POSTed as a CloudEvent in the
HTTP binding's binary mode, which the CNCF SDK reads back - an event produced with the SDK exactly
as it went in (attributes and data, byte for byte), any other message with Wharf's own attributes -
and a batch in the batched mode."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest
from cloudevents.v1.conversion import to_binary, to_structured
from cloudevents.v1.http import CloudEvent, from_http

from tests.api.server import BrokerProcess
from tests.api.test_cloudevents_consume import assert_same, read_back, sdk_events
from tests.push.receiver import Receiver, produce, push_broker, subscribe

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, httpx.Client]]:
    with push_broker(tmp_path_factory.mktemp("push-cloudevents") / "store") as running:
        yield running


def produce_sdk_events(http: httpx.Client, topic: str) -> list[CloudEvent]:
    sent = sdk_events()
    for index, event in enumerate(sent):
        headers, body = (to_binary if index % 2 else to_structured)(event)
        answer = http.post(
            f"/v1/topics/{topic}/messages", params={"queue_id": 0}, headers=headers, content=body
        )
        assert answer.status_code == 200, answer.text
    return sent


def test_each_message_is_pushed_as_a_cloudevent_in_binary_mode(
    broker: tuple[BrokerProcess, httpx.Client],
) -> None:
    process, http = broker
    assert http.post("/v1/topics", json={"name": "events", "queues": 1}).status_code == 201
    with Receiver() as receiver:
        created = subscribe(http, "ce-billing", topic="events", url=receiver.url, format="cloudevents")
        assert created["format"] == "cloudevents"
        assert http.get("/v1/groups/ce-billing/push").json()["format"] == "cloudevents"
        sent = produce_sdk_events(http, "events")
        (plain,) = produce(
            http, "events", {"body": '{"total": 12}', "queue_id": 0, "tags": "order.paid", "keys": ["o-9"]}
        )
        got = receiver.wait_for(lambda received: len(received) >= len(sent) + 1)
        # Requests may come in any order (16 in flight): matched to their events by id.
        by_id = {request.headers["ce-id"]: request for request in got}
        assert len(by_id) == len(got) == len(sent) + 1
        for event in sent:
            request = by_id.pop(event["id"])
            assert "ce-specversion" in request.headers and "wharf-topic" not in request.headers
            assert request.headers["webhook-id"].startswith("msg_")
            back = from_http(request.headers, request.body)
            assert back.get_attributes() == event.get_attributes()
            data = event.get_data()
            if data is None:
                assert request.body == b"" and "content-type" not in request.headers
            elif isinstance(data, str):
                assert request.body == data.encode()
            elif isinstance(data, bytes):
                assert request.body == data
            else:
                assert back.get_data() == data
        (last,) = by_id.values()
        back = from_http(last.headers, last.body)
        assert back["id"] == plain["unique_id"]
        assert back["source"] == f"{process.url}/v1/topics/events"
        assert (back["type"], back["subject"]) == ("order.paid", "o-9")
        assert last.headers["content-type"] == "application/json"
        assert back.get_data() == {"total": 12}


def test_a_batch_is_pushed_in_the_batched_mode(broker: tuple[BrokerProcess, httpx.Client]) -> None:
    _, http = broker
    assert http.post("/v1/topics", json={"name": "batched-events", "queues": 1}).status_code == 201
    with Receiver() as receiver:
        subscribe(
            http, "ce-batches", topic="batched-events", url=receiver.url, format="cloudevents", batch=10
        )
        sent = produce_sdk_events(http, "batched-events")
        got = receiver.wait_for(
            lambda received: sum(len(orjson.loads(r.body)) for r in received) >= len(sent)
        )
        assert all(r.headers["content-type"] == "application/cloudevents-batch+json" for r in got)
        back = {event["id"]: event for request in got for event in map(read_back, orjson.loads(request.body))}
        assert len(back) == len(sent)
        for original in sent:
            assert_same(back[original["id"]], original)


def test_a_format_other_than_raw_or_cloudevents_is_refused(
    broker: tuple[BrokerProcess, httpx.Client],
) -> None:
    _, http = broker
    answer = http.put(
        "/v1/groups/ce-wrong/push", json={"topic": "events", "url": "http://127.0.0.1:9/", "format": "xml"}
    )
    assert answer.status_code in (400, 422) and "format" in answer.json()["message"]
    assert http.get("/v1/groups/ce-wrong/push").status_code == 404
