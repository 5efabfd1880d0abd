"""One transaction for a whole binary batch (``POST /v1/topics/{topic}/transactions``): none of its
messages is visible before the commit, every one of them once after it, in the batch's order; a
rollback drops them all; a transaction key finds the earlier transaction and its state; bad input
gets a clear 4xx."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import httpx
import pytest
from wharf_client.codec import BATCH_MEDIA_TYPE, IncomingMessage, encode_batch

from app.api.errors import ErrorCode
from tests.api.test_errors import assert_error
from tests.transactions.transacting import commit, pending, rollback

_groups = itertools.count()


@pytest.fixture
def group() -> str:
    return f"batch-tx-{next(_groups)}"


def rows(count: int, prefix: str = "row", **fields: Any) -> list[IncomingMessage]:
    return [
        IncomingMessage(body=f"{prefix}-{i}".encode(), unique_id=f"{prefix}-id-{i}", **fields)
        for i in range(count)
    ]


def begin_batch(
    client: httpx.Client, topic: str, group: str, messages: list[IncomingMessage], key: str | None = None
) -> dict[str, Any]:
    params = {"producer_group": group}
    if key is not None:
        params["transaction_key"] = key
    answer = client.post(
        f"/v1/topics/{topic}/transactions",
        params=params,
        content=encode_batch(messages),
        headers={"content-type": BATCH_MEDIA_TYPE},
    )
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def topic_messages(client: httpx.Client, topic: str) -> list[dict[str, Any]]:
    """Every message of every queue of the topic, page by page."""
    found = []
    for queue in client.get(f"/v1/topics/{topic}/queues").json()["queues"]:
        offset = 0
        while offset < queue["max_offset"]:
            page = client.get(
                f"/v1/topics/{topic}/queues/{queue['queue_id']}/messages",
                params={"offset": offset, "max_messages": 1000},
            ).json()
            found.extend(page["messages"])
            offset = page["next_offset"]
    return found


def test_a_batch_is_invisible_until_its_commit_then_every_message_once(
    client: httpx.Client, topic: str, group: str
) -> None:
    begun = begin_batch(client, topic, group, rows(250))
    assert begun["state"] == "OPEN" and begun["messages"] == 250 and begun["repeated"] is False
    assert begun["status"] == "SEND_OK"
    assert topic_messages(client, topic) == []
    open_ones = client.get("/v1/transactions/pending", params={"producer_group": group, "checked": "false"})
    assert [one["transaction_id"] for one in open_ones.json()["transactions"]] == [begun["transaction_id"]]
    assert open_ones.json()["transactions"][0]["messages"] == 250
    assert pending(client, group) == []  # not checked yet: the default list leaves it out

    answer = commit(client, begun["transaction_id"])
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "COMMITTED" and answer.json()["messages"] == 250
    visible = topic_messages(client, topic)
    assert sorted(message["body"] for message in visible) == sorted(f"row-{i}" for i in range(250))
    assert sorted(message["unique_id"] for message in visible) == sorted(f"row-id-{i}" for i in range(250))
    # Spread over the queues as a produce spreads them, in the batch's order within a queue.
    assert len({message["queue_id"] for message in visible}) == 4
    for queue in range(4):
        numbers = [int(m["body"].split("-")[1]) for m in visible if m["queue_id"] == queue]
        assert numbers == sorted(numbers)
    again = commit(client, begun["transaction_id"])
    assert again.status_code == 409 and again.json()["state"] == "COMMITTED"
    assert len(topic_messages(client, topic)) == 250
    assert client.get(f"/v1/producers/{group}").json()["open_transactions"] == 0


def test_a_rolled_back_batch_leaves_nothing(client: httpx.Client, topic: str, group: str) -> None:
    begun = begin_batch(client, topic, group, rows(40))
    answer = rollback(client, begun["transaction_id"])
    assert answer.status_code == 200 and answer.json()["state"] == "ROLLED_BACK"
    assert topic_messages(client, topic) == []
    assert commit(client, begun["transaction_id"]).json()["state"] == "ROLLED_BACK"


def test_messages_that_are_not_plain_commit_through_the_general_path(
    client: httpx.Client, topic: str, group: str
) -> None:
    messages = [
        IncomingMessage(body=b"a", tags="t1", keys=["k1"], properties={"color": "red"}, sharding_key="s"),
        IncomingMessage(body=b"b", tags="t2", properties={"color": "blue"}, sharding_key="s"),
        IncomingMessage(body=b"c", queue_id=3, unique_id="own-c"),
    ]
    begun = begin_batch(client, topic, group, messages)
    assert topic_messages(client, topic) == []
    assert commit(client, begun["transaction_id"]).status_code == 200
    visible = {message["body"]: message for message in topic_messages(client, topic)}
    assert visible["a"]["properties"]["color"] == "red" and visible["a"]["tags"] == "t1"
    assert visible["a"]["keys"] == ["k1"]
    assert visible["a"]["queue_id"] == visible["b"]["queue_id"]  # one sharding key, one queue
    assert visible["c"]["queue_id"] == 3 and visible["c"]["unique_id"] == "own-c"


def test_many_batches_end_in_one_request_with_per_message_transactions(
    client: httpx.Client, topic: str, group: str
) -> None:
    first = begin_batch(client, topic, group, rows(30, "first"))
    second = begin_batch(client, topic, group, rows(20, "second"))
    single = client.post(
        f"/v1/topics/{topic}/messages",
        params={"transaction": "begin", "producer_group": group},
        json={"messages": [{"body": "single"}]},
    ).json()["results"][0]
    ids = [first["transaction_id"], single["transaction_id"], second["transaction_id"]]
    answer = client.post("/v1/transactions/commit", json={"transaction_ids": ids})
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [result["state"] for result in results] == ["COMMITTED"] * 3
    assert [result.get("messages") for result in results] == [30, None, 20]
    assert len(topic_messages(client, topic)) == 51


def test_a_transaction_key_answers_the_earlier_transaction_and_its_state(
    client: httpx.Client, topic: str, group: str
) -> None:
    key = f"{group}-batch-7-partition-0"
    begun = begin_batch(client, topic, group, rows(10), key=key)
    assert begun["transaction_key"] == key and begun["repeated"] is False
    again = begin_batch(client, topic, group, rows(10), key=key)
    assert again["transaction_id"] == begun["transaction_id"]
    assert again["repeated"] is True and again["state"] == "OPEN"
    assert client.get(f"/v1/producers/{group}").json()["open_transactions"] == 1
    assert commit(client, begun["transaction_id"]).status_code == 200
    after = begin_batch(client, topic, group, rows(10), key=key)
    assert (after["transaction_id"], after["state"], after["repeated"]) == (
        begun["transaction_id"],
        "COMMITTED",
        True,
    )
    assert len(topic_messages(client, topic)) == 10  # the repeats stored nothing

    dropped = begin_batch(client, topic, group, rows(3, "other"), key=key + "-b")
    rollback(client, dropped["transaction_id"])
    assert begin_batch(client, topic, group, rows(3, "other"), key=key + "-b")["state"] == "ROLLED_BACK"
    # Another producer group's key is its own.
    other = begin_batch(client, topic, group + "-other", rows(1), key=key)
    assert other["repeated"] is False and other["transaction_id"] != begun["transaction_id"]


def test_a_held_pull_wakes_at_the_commit(client: httpx.Client, topic: str, group: str) -> None:
    begun = begin_batch(client, topic, group, rows(5, queue_id=2))
    answers: list[httpx.Response] = []

    def pull() -> None:
        with httpx.Client(base_url=str(client.base_url), timeout=30) as own:
            answers.append(
                own.get(f"/v1/topics/{topic}/queues/2/messages", params={"offset": 0, "max_wait_ms": 20000})
            )

    waiting = threading.Thread(target=pull)
    waiting.start()
    # The pull is held: nothing is visible while the transaction is open.
    waiting.join(timeout=1.0)
    assert waiting.is_alive()
    assert commit(client, begun["transaction_id"]).status_code == 200
    waiting.join(timeout=10)
    assert not waiting.is_alive(), "the commit did not wake the held pull"
    assert [message["body"] for message in answers[0].json()["messages"]] == [f"row-{i}" for i in range(5)]


def test_bad_input_gets_a_clear_4xx(client: httpx.Client, topic: str, group: str) -> None:
    url = f"/v1/topics/{topic}/transactions"
    batch = encode_batch(rows(2))
    binary = {"content-type": BATCH_MEDIA_TYPE}
    answer = client.post(url, params={"producer_group": group}, json={"messages": [{"body": "x"}]})
    assert_error(answer, ErrorCode.UNSUPPORTED_MEDIA_TYPE)
    answer = client.post(url, params={"producer_group": group}, content=b"WHB1garbage", headers=binary)
    assert answer.status_code == 400, answer.text
    delayed = encode_batch([IncomingMessage(body=b"later", delay_level=3)])
    answer = client.post(url, params={"producer_group": group}, content=delayed, headers=binary)
    assert_error(answer, ErrorCode.INVALID_PARAMETER)
    assert "delayed" in answer.json()["message"]
    answer = client.post(url, content=batch, headers=binary)
    assert answer.status_code == 422, answer.text
    assert "producer_group" in answer.text
    answer = client.post(url, params={"producer_group": "no spaces"}, content=batch, headers=binary)
    assert answer.status_code == 400, answer.text
    answer = client.post(
        url, params={"producer_group": group, "transaction_key": "a b"}, content=batch, headers=binary
    )
    assert_error(answer, ErrorCode.INVALID_PARAMETER)
    answer = client.post(
        url,
        params={"producer_group": group},
        content=encode_batch([IncomingMessage(body=b"x", queue_id=9)]),
        headers=binary,
    )
    assert answer.status_code == 400, answer.text
    answer = client.post(
        url,
        params={"producer_group": group},
        content=encode_batch([IncomingMessage(body=b"x", properties={"TAGS": "reserved"})]),
        headers=binary,
    )
    assert_error(answer, ErrorCode.INVALID_PROPERTY)
    assert topic_messages(client, topic) == []
    assert client.get(f"/v1/producers/{group}").json()["open_transactions"] == 0
