"""Many transactions ended by one request: ``POST /v1/transactions/commit`` and ``.../rollback``
with ``{"transaction_ids": [...]}`` end each as the single call would, in one append, and answer
each in the order of the ids - refusing one alone (not here, ended already) without refusing the
others."""

from __future__ import annotations

import itertools

import httpx
import pytest

from app.api.errors import ErrorCode
from app.broker.transactions import MAX_END_BATCH
from tests.api.test_errors import assert_error
from tests.transactions.transacting import begin, commit, pending, queue_messages

_groups = itertools.count()


@pytest.fixture
def group() -> str:
    return f"batch-producers-{next(_groups)}"


def end_many(client: httpx.Client, how: str, ids: list[str]) -> list[dict[str, object]]:
    answer = client.post(f"/v1/transactions/{how}", json={"transaction_ids": ids})
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [result["transaction_id"] for result in results] == ids
    return list(results)


def test_a_batch_commits_and_rolls_back_each_transaction_it_names_in_its_order(
    client: httpx.Client, topic: str, group: str
) -> None:
    begun = begin(client, topic, group, *({"body": f"m{i}", "queue_id": 0} for i in range(6)))
    ids = [result["transaction_id"] for result in begun]
    assert queue_messages(client, topic, 0) == []
    # Committed in an order of their own: the messages land in that order.
    committed = end_many(client, "commit", [ids[4], ids[0], ids[2]])
    assert [result["state"] for result in committed] == ["COMMITTED"] * 3
    assert all(result["status"] == "SEND_OK" and result["topic"] == topic for result in committed)
    offsets = [result["queue_offset"] for result in committed]
    assert offsets == [offsets[0], offsets[0] + 1, offsets[0] + 2]
    rolled_back = end_many(client, "rollback", [ids[1], ids[5]])
    assert [result["state"] for result in rolled_back] == ["ROLLED_BACK"] * 2
    assert all("queue_offset" not in result or result["queue_offset"] is None for result in rolled_back)
    visible = queue_messages(client, topic, 0)
    assert [message["body"] for message in visible] == ["m4", "m0", "m2"]
    assert [message["unique_id"] for message in visible] == [result["unique_id"] for result in committed]
    # The one left is open still, and the single call ends it as before.
    assert commit(client, ids[3]).status_code == 200
    assert [message["body"] for message in queue_messages(client, topic, 0)] == ["m4", "m0", "m2", "m3"]
    assert pending(client, group) == []


def test_one_that_cannot_be_ended_is_refused_alone(client: httpx.Client, topic: str, group: str) -> None:
    first, second = begin(
        client, topic, group, {"body": "one", "queue_id": 0}, {"body": "two", "queue_id": 0}
    )
    assert commit(client, first["transaction_id"]).status_code == 200
    unknown = "0" * 32
    results = end_many(client, "commit", [first["transaction_id"], unknown, second["transaction_id"]])
    ended, missing, done = results
    assert ended["error_code"] == ErrorCode.TRANSACTION_ENDED and ended["state"] == "COMMITTED"
    assert "was committed" in str(ended["message"])
    assert missing["error_code"] == ErrorCode.TRANSACTION_NOT_FOUND and "state" not in missing
    assert done["state"] == "COMMITTED" and "error_code" not in done
    again = end_many(client, "rollback", [second["transaction_id"]])
    assert again[0]["error_code"] == ErrorCode.TRANSACTION_ENDED and again[0]["state"] == "COMMITTED"
    assert [message["body"] for message in queue_messages(client, topic, 0)] == ["one", "two"]


def test_a_batch_of_no_ids_too_many_or_one_twice_is_refused_whole(
    client: httpx.Client, topic: str, group: str
) -> None:
    (begun,) = begin(client, topic, group, {"body": "kept open", "queue_id": 0})
    transaction_id = begun["transaction_id"]
    for body in (
        {"transaction_ids": []},
        {"transaction_ids": [transaction_id, transaction_id]},
        {"transaction_ids": [transaction_id] + [f"{i:032X}" for i in range(MAX_END_BATCH)]},
        {"transaction_ids": [transaction_id], "other": 1},
        {"ids": [transaction_id]},
        {"transaction_ids": transaction_id},
    ):
        for how in ("commit", "rollback"):
            assert_error(client.post(f"/v1/transactions/{how}", json=body), ErrorCode.VALIDATION_FAILED)
    assert queue_messages(client, topic, 0) == []
    assert commit(client, transaction_id).status_code == 200  # nothing refused touched it
