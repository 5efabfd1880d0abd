"""Transactional messages on a running broker: a half message is invisible until its commit, a
commit makes the message visible as it was produced, a rollback drops it, and a transaction ends
once (a second end is 409). The system topics are nobody's to produce to, read or delete."""

from __future__ import annotations

import itertools
from pathlib import Path

import httpx
import pytest

from app.api.errors import ErrorCode
from app.codec import BATCH_MEDIA_TYPE, IncomingMessage, encode_batch
from tests.api.server import BrokerProcess
from tests.api.test_errors import assert_error
from tests.transactions.transacting import begin, commit, pending, queue_messages, rollback, topic_messages

HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
OP = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
_groups = itertools.count()


@pytest.fixture
def group() -> str:
    return f"producers-{next(_groups)}"


def test_a_half_message_is_invisible_until_it_is_committed(
    client: httpx.Client, topic: str, group: str
) -> None:
    (begun,) = begin(client, topic, group, {"body": "hidden", "keys": ["order-7"], "queue_id": 2})
    assert begun["queue_id"] == 2 and begun["queue_offset"] is None and begun["status"] == "SEND_OK"
    assert begun["transaction_id"] == begun["msg_id"]
    assert topic_messages(client, topic) == []
    by_key = client.get(f"/v1/topics/{topic}/messages", params={"key": "order-7"}).json()
    assert by_key["messages"] == []
    by_unique_id = client.get(f"/v1/topics/{topic}/messages", params={"key": begun["unique_id"]}).json()
    assert by_unique_id["messages"] == []
    popped = client.post(f"/v1/groups/g-{group}/topics/{topic}/pop", json={"consume_from": "first"})
    assert popped.json()["messages"] == []
    listed = {item["name"] for item in client.get("/v1/topics", params={"limit": 1000}).json()["topics"]}
    assert HALF not in listed and OP not in listed

    committed = commit(client, begun["transaction_id"])
    assert committed.status_code == 200, committed.text
    (visible,) = queue_messages(client, topic, 2)
    assert visible["body"] == "hidden" and visible["msg_id"] == committed.json()["msg_id"]
    by_key = client.get(f"/v1/topics/{topic}/messages", params={"key": "order-7"}).json()
    assert [message["msg_id"] for message in by_key["messages"]] == [visible["msg_id"]]


def test_a_commit_keeps_unique_id_keys_tags_properties_and_body(
    client: httpx.Client, topic: str, group: str
) -> None:
    message = {
        "body": "payment",
        "tags": "TagA",
        "keys": ["order-1", "customer-9"],
        "properties": {"source": "test"},
        "unique_id": f"{group}-payment-1",
        "queue_id": 1,
    }
    (begun,) = begin(client, topic, group, message)
    answer = commit(client, begun["transaction_id"]).json()
    assert answer["state"] == "COMMITTED" and answer["status"] == "SEND_OK"
    assert (answer["topic"], answer["queue_id"], answer["queue_offset"]) == (topic, 1, 0)
    (visible,) = queue_messages(client, topic, 1)
    assert visible["unique_id"] == f"{group}-payment-1"
    assert (visible["tags"], visible["keys"], visible["body"]) == (
        "TagA",
        ["order-1", "customer-9"],
        "payment",
    )
    assert visible["properties"] == {"source": "test", "TRAN_MSG": "true", "PGROUP": group}


def test_a_rollback_drops_the_message(client: httpx.Client, topic: str, group: str) -> None:
    (begun,) = begin(client, topic, group, {"body": "never"})
    answer = rollback(client, begun["transaction_id"])
    assert answer.status_code == 200 and answer.json()["state"] == "ROLLED_BACK"
    assert topic_messages(client, topic) == []


def test_a_transaction_ends_once(client: httpx.Client, topic: str, group: str) -> None:
    first, second = begin(client, topic, group, {"body": "one"}, {"body": "two"})
    assert first["transaction_id"] != second["transaction_id"]
    assert commit(client, first["transaction_id"]).status_code == 200
    assert rollback(client, second["transaction_id"]).status_code == 200
    for again, was in (
        (commit(client, first["transaction_id"]), "COMMITTED"),
        (rollback(client, first["transaction_id"]), "COMMITTED"),
        (commit(client, second["transaction_id"]), "ROLLED_BACK"),
        (rollback(client, second["transaction_id"]), "ROLLED_BACK"),
    ):
        assert again.status_code == 409
        assert again.json()["error_code"] == ErrorCode.TRANSACTION_ENDED
        assert again.json()["state"] == was
    assert [message["body"] for message in topic_messages(client, topic)] == ["one"]


def test_an_id_that_names_no_transaction_is_404(client: httpx.Client, topic: str) -> None:
    plain = client.post(f"/v1/topics/{topic}/messages", json={"body": "plain"}).json()["results"][0]
    for transaction_id in (plain["msg_id"], "0" * 32, "not-an-id"):
        assert_error(commit(client, transaction_id), ErrorCode.TRANSACTION_NOT_FOUND)
        assert_error(rollback(client, transaction_id), ErrorCode.TRANSACTION_NOT_FOUND)


def test_every_produce_format_begins_transactions(client: httpx.Client, topic: str, group: str) -> None:
    params = {"transaction": "begin", "producer_group": group}
    raw = client.post(
        f"/v1/topics/{topic}/messages",
        params={**params, "queue_id": 0, "tags": "Raw"},
        content=b"raw",
        headers={"content-type": "application/octet-stream"},
    )
    ndjson = client.post(
        f"/v1/topics/{topic}/messages",
        params=params,
        content=b'{"body": "nd1", "queue_id": 0}\n{"body": "nd2", "queue_id": 0}\n',
        headers={"content-type": "application/x-ndjson"},
    )
    batch = client.post(
        f"/v1/topics/{topic}/messages",
        params=params,
        content=encode_batch([IncomingMessage(body=b"binary", queue_id=0)]),
        headers={"content-type": BATCH_MEDIA_TYPE},
    )
    results = [result for answer in (raw, ndjson, batch) for result in answer.json()["results"]]
    assert len(results) == 4 and all(result["transaction_id"] for result in results)
    assert queue_messages(client, topic, 0) == []
    for result in results:
        assert commit(client, result["transaction_id"]).status_code == 200
    assert [message["body"] for message in queue_messages(client, topic, 0)] == [
        "raw",
        "nd1",
        "nd2",
        "binary",
    ]


def test_a_repeated_unique_id_begins_no_second_transaction(
    client: httpx.Client, topic: str, group: str
) -> None:
    message = {"body": "once", "unique_id": f"{group}-retry"}
    (first,) = begin(client, topic, group, message)
    again, in_batch = begin(client, topic, group, message, message)
    assert again["transaction_id"] == in_batch["transaction_id"] == first["transaction_id"]
    assert again["queue_id"] == first["queue_id"] and again["queue_offset"] is None
    assert commit(client, first["transaction_id"]).status_code == 200
    assert [message["body"] for message in topic_messages(client, topic)] == ["once"]


def test_a_begin_needs_a_producer_group_and_no_delay(client: httpx.Client, topic: str) -> None:
    url = f"/v1/topics/{topic}/messages"
    for params in (
        {"transaction": "begin"},
        {"transaction": "begin", "producer_group": "bad group!"},
        {"transaction": "maybe", "producer_group": "fine"},
    ):
        assert_error(client.post(url, params=params, json={"body": "x"}), ErrorCode.INVALID_PARAMETER)
    delayed = client.post(
        url, params={"transaction": "begin", "producer_group": "fine"}, json={"body": "x", "delay_level": 1}
    )
    assert_error(delayed, ErrorCode.INVALID_PARAMETER)
    for name in ("TRAN_MSG", "PGROUP", "TRANSACTION_ID", "TRANSACTION_CHECK_TIMES"):
        reserved = client.post(url, json={"body": "x", "properties": {name: "1"}})
        assert_error(reserved, ErrorCode.INVALID_PROPERTY)
    assert topic_messages(client, topic) == []


def test_the_system_topics_are_nobodys(client: httpx.Client) -> None:
    for name in (HALF, OP):
        assert_error(client.post(f"/v1/topics/{name}/messages", json={"body": "x"}), ErrorCode.INVALID_TOPIC)
        assert_error(client.post("/v1/topics", json={"name": name}), ErrorCode.INVALID_TOPIC)
        assert_error(client.delete(f"/v1/topics/{name}"), ErrorCode.TOPIC_NOT_FOUND)
        assert_error(client.get(f"/v1/topics/{name}/queues/0/messages?offset=0"), ErrorCode.TOPIC_NOT_FOUND)
        assert_error(client.get(f"/v1/topics/{name}/messages?key=x"), ErrorCode.TOPIC_NOT_FOUND)
        popped = client.post(f"/v1/groups/thief/topics/{name}/pop", json={})
        assert_error(popped, ErrorCode.TOPIC_NOT_FOUND)


def test_a_producer_group_registers_its_check_endpoint(client: httpx.Client, group: str) -> None:
    assert client.get(f"/v1/producers/{group}").json() == {
        "producer_group": group,
        "check_url": None,
        "open_transactions": 0,
    }
    registered = client.put(f"/v1/producers/{group}", json={"check_url": "http://127.0.0.1:9/check"})
    assert registered.status_code == 200 and registered.json()["check_url"] == "http://127.0.0.1:9/check"
    assert client.get(f"/v1/producers/{group}").json()["check_url"] == "http://127.0.0.1:9/check"
    assert_error(
        client.put(f"/v1/producers/{group}", json={"check_url": "file:///etc/passwd"}),
        ErrorCode.INVALID_PARAMETER,
    )
    assert client.put(f"/v1/producers/{group}", json={"check_url": None}).json()["check_url"] is None


def test_the_pending_list_waits_for_the_first_check(client: httpx.Client, topic: str, group: str) -> None:
    (begun,) = begin(client, topic, group, {"body": "fresh"})
    # The module's broker checks after the default 6 s: a transaction just begun is not pending.
    assert pending(client, group) == []
    assert client.get(f"/v1/producers/{group}").json()["open_transactions"] == 1
    assert_error(
        client.get("/v1/transactions/pending", params={"producer_group": group, "limit": 0}),
        ErrorCode.INVALID_PARAMETER,
    )
    assert commit(client, begun["transaction_id"]).status_code == 200


def test_a_begin_past_the_open_transaction_cap_is_429_and_stores_nothing(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "store", max_open_transactions=3).start()
    try:
        with httpx.Client(base_url=process.url, timeout=30) as small:
            assert small.post("/v1/topics", json={"name": "capped", "queues": 1}).status_code == 201
            first = begin(small, "capped", "cappers", {"body": "a"}, {"body": "b"})
            too_many = small.post(
                "/v1/topics/capped/messages",
                params={"transaction": "begin", "producer_group": "cappers"},
                json={"messages": [{"body": "c"}, {"body": "d"}]},
            )
            assert_error(too_many, ErrorCode.TOO_MANY_OPEN_TRANSACTIONS)
            assert small.get("/v1/producers/cappers").json()["open_transactions"] == 2
            begin(small, "capped", "cappers", {"body": "c"})  # one more fits
            assert commit(small, first[0]["transaction_id"]).status_code == 200
            begin(small, "capped", "cappers", {"body": "d"})  # an end makes room
            assert small.get("/v1/producers/cappers").json()["open_transactions"] == 3
    finally:
        process.stop()
