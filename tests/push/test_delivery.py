"""Push delivery to a real endpoint on loopback: a 2xx commits, the request carries the message's
body and its headers, batches are JSON arrays, filters choose what is pushed, and a restart
resumes from the committed offsets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.push.receiver import Receiver, committed, produce, push_broker, state, subscribe, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, httpx.Client]]:
    with push_broker(tmp_path_factory.mktemp("push") / "store") as running:
        yield running


def test_a_2xx_acknowledges_and_commits_the_groups_offset(broker: tuple[BrokerProcess, httpx.Client]) -> None:
    _, http = broker
    assert http.post("/v1/topics", json={"name": "orders", "queues": 2}).status_code == 201
    produce(http, "orders", {"body": "before the subscription", "queue_id": 0})
    with Receiver() as receiver:
        created = subscribe(http, "billing", topic="orders", url=receiver.url)
        assert created["secret"].startswith("whsec_")
        results = produce(
            http,
            "orders",
            {
                "body": "one",
                "queue_id": 0,
                "tags": "paid",
                "keys": ["o-1"],
                "properties": {"CONTENT_TYPE": "text/plain", "region": "eu"},
            },
            {"body": "two", "queue_id": 1},
            {"body": "three", "queue_id": 0},
        )
        got = receiver.wait_for(lambda received: len(received) >= 3)
        # Only what was produced after the subscription was made.
        assert sorted(request.body for request in got) == [b"one", b"three", b"two"]
        first = next(request for request in got if request.body == b"one")
        assert first.headers["content-type"] == "text/plain"
        assert first.headers["wharf-topic"] == "orders"
        assert first.headers["wharf-queue-id"] == "0"
        assert first.headers["wharf-queue-offset"] == "1"
        assert first.headers["wharf-tags"] == "paid"
        assert first.headers["wharf-keys"] == "o-1"
        assert first.headers["wharf-msg-id"] == results[0]["msg_id"]
        assert first.headers["wharf-unique-id"] == results[0]["unique_id"]
        assert first.headers["wharf-reconsume-times"] == "0"
        assert json.loads(first.headers["wharf-properties"]) == {"CONTENT_TYPE": "text/plain", "region": "eu"}
        assert first.headers["webhook-id"] == f"msg_{results[0]['unique_id']}"
        two = next(request for request in got if request.body == b"two")
        assert two.headers["content-type"] == "application/octet-stream"
        assert wait_until(lambda: committed(http, "billing", "orders") == {0: 3, 1: 1}, what="the commits")
        shown = state(http, "billing")
        assert shown["delivered"] == 3
        assert shown["failed"] == 0
        assert shown["lag"] == 0
        assert shown["in_flight"] == 0
        assert shown["last_success_ms"] is not None
        assert "secret" not in http.get("/v1/groups/billing/push").json()
        (shown_in_console,) = http.get("/console/api/overview").json()["push"]
        assert (shown_in_console["group"], shown_in_console["state"]["delivered"]) == ("billing", 3)
        # Acknowledged messages are not delivered again.
        produce(http, "orders", {"body": "four", "queue_id": 1})
        got = receiver.wait_for(lambda received: len(received) >= 4)
        assert [request.body for request in got].count(b"one") == 1
    assert http.delete("/v1/groups/billing/push").status_code == 204
    assert http.get("/v1/groups/billing/push").status_code == 404


def test_a_batch_is_a_json_array_of_message_objects(broker: tuple[BrokerProcess, httpx.Client]) -> None:
    _, http = broker
    assert http.post("/v1/topics", json={"name": "batched", "queues": 1}).status_code == 201
    with Receiver(respond=lambda _: 204) as receiver:
        subscribe(http, "batcher", topic="batched", url=receiver.url, batch=10, paused=True)
        produce(http, "batched", *({"body": f"m{i}"} for i in range(5)))
        assert state(http, "batcher")["lag"] == 5  # paused: the messages wait in the queue
        subscribe(http, "batcher", topic="batched", url=receiver.url, batch=10)
        got = receiver.wait_for(lambda received: sum(int(r.headers["wharf-count"]) for r in received) >= 5)
        assert got[0].headers["content-type"] == "application/json"
        bodies = [message["body"] for request in got for message in json.loads(request.body)]
        assert bodies == [f"m{i}" for i in range(5)]
        assert all(request.headers["webhook-id"].startswith("batch_") for request in got)
        assert wait_until(lambda: committed(http, "batcher", "batched") == {0: 5}, what="the commit")
        metrics = http.get("/metrics").text
        assert 'wharf_push_delivered_total{group="batcher"} 5.0' in metrics
        assert 'wharf_push_delivery_latency_seconds_count{group="batcher"} 5.0' in metrics
        assert 'wharf_push_lag{group="batcher"} 0.0' in metrics


def test_a_filter_chooses_what_is_pushed_and_skipped_messages_are_committed(
    broker: tuple[BrokerProcess, httpx.Client],
) -> None:
    _, http = broker
    assert http.post("/v1/topics", json={"name": "filtered", "queues": 1}).status_code == 201
    with Receiver() as receiver:
        subscribe(http, "tagged", topic="filtered", url=receiver.url, filter={"tags": "a || b"})
        subscribe(http, "sql", topic="filtered", url=receiver.url, filter={"sql92": "amount > 10"})
        produce(
            http,
            "filtered",
            {"body": "x", "tags": "a"},
            {"body": "y", "tags": "c", "properties": {"amount": "20"}},
            {"body": "z", "tags": "b", "properties": {"amount": "5"}},
        )
        receiver.wait_for(lambda received: len(received) >= 3)
        assert wait_until(
            lambda: (
                committed(http, "tagged", "filtered") == {0: 3}
                and committed(http, "sql", "filtered") == {0: 3}
            ),
            what="the commits past what does not match",
        )
        assert sorted(request.body for request in receiver.received) == [b"x", b"y", b"z"]


def test_a_restart_resumes_from_the_committed_offsets(tmp_path: Path) -> None:
    with Receiver() as receiver, push_broker(tmp_path / "store") as (process, http):
        assert http.post("/v1/topics", json={"name": "kept", "queues": 1}).status_code == 201
        subscribe(http, "keeper", topic="kept", url=receiver.url)
        produce(http, "kept", {"body": "first"})
        receiver.wait_for(lambda received: len(received) >= 1)
        assert wait_until(lambda: committed(http, "keeper", "kept") == {0: 1}, what="the commit")
        process.stop()
        process.start()
        produce(http, "kept", {"body": "second"})
        got = receiver.wait_for(lambda received: len(received) >= 2)
        assert [request.body for request in got] == [b"first", b"second"]
        assert http.get("/v1/groups/keeper/push").json()["url"] == receiver.url
