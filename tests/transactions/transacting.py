"""Small calls of the transaction API that the tests share."""

from __future__ import annotations

import time
from typing import Any

import httpx


def begin(client: httpx.Client, topic: str, group: str, *messages: dict[str, Any]) -> list[dict[str, Any]]:
    """Begin a transaction per message; the produce answers."""
    answer = client.post(
        f"/v1/topics/{topic}/messages",
        params={"transaction": "begin", "producer_group": group},
        json={"messages": list(messages)},
    )
    assert answer.status_code == 200, answer.text
    return list(answer.json()["results"])


def commit(client: httpx.Client, transaction_id: str) -> httpx.Response:
    return client.post(f"/v1/transactions/{transaction_id}/commit")


def rollback(client: httpx.Client, transaction_id: str) -> httpx.Response:
    return client.post(f"/v1/transactions/{transaction_id}/rollback")


def queue_messages(client: httpx.Client, topic: str, queue_id: int) -> list[dict[str, Any]]:
    answer = client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"offset": 0})
    assert answer.status_code == 200, answer.text
    return list(answer.json()["messages"])


def topic_messages(client: httpx.Client, topic: str) -> list[dict[str, Any]]:
    """Every message of every queue of the topic."""
    queues = client.get(f"/v1/topics/{topic}/queues").json()["queues"]
    return [message for queue in queues for message in queue_messages(client, topic, queue["queue_id"])]


def pending(client: httpx.Client, group: str) -> list[dict[str, Any]]:
    answer = client.get("/v1/transactions/pending", params={"producer_group": group})
    assert answer.status_code == 200, answer.text
    return list(answer.json()["transactions"])


def wait_until(condition: Any, timeout_s: float = 30.0, what: str = "the condition") -> Any:
    """Poll ``condition`` until it answers something true; that answer."""
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout_s} s"
        time.sleep(0.05)
    return found
