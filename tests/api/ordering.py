"""Helpers of the ordered consumption tests: an ordered member's calls over HTTP."""

from __future__ import annotations

import time
from typing import Any

import httpx

Queue = tuple[str, int]


def join(client: httpx.Client, group: str, client_id: str, topic: str, **fields: Any) -> dict[str, Any]:
    body = {
        "client_id": client_id,
        "subscriptions": {topic: "*"},
        "consume_from": "first",
        "consume_mode": "orderly",
        **fields,
    }
    answer = client.post(f"/v1/groups/{group}/heartbeat", json=body)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def assigned(answer: dict[str, Any], topic: str) -> list[Queue]:
    return sorted(
        (item["topic"], item["queue_id"]) for item in answer["assignments"] if item["topic"] == topic
    )


def lock(client: httpx.Client, group: str, client_id: str, queues: list[Queue]) -> list[Queue]:
    body = {"client_id": client_id, "queues": [{"topic": t, "queue_id": q} for t, q in queues]}
    answer = client.post(f"/v1/groups/{group}/locks", json=body)
    assert answer.status_code == 200, answer.text
    return [(item["topic"], item["queue_id"]) for item in answer.json()["queues"]]


def unlock(
    client: httpx.Client, group: str, client_id: str, queues: list[Queue] | None = None
) -> list[Queue]:
    body: dict[str, Any] = {"client_id": client_id}
    if queues is not None:
        body["queues"] = [{"topic": t, "queue_id": q} for t, q in queues]
    answer = client.request("DELETE", f"/v1/groups/{group}/locks", json=body)
    assert answer.status_code == 200, answer.text
    return [(item["topic"], item["queue_id"]) for item in answer.json()["queues"]]


def pull(client: httpx.Client, group: str, client_id: str, **params: Any) -> dict[str, Any]:
    answer = client.get(f"/v1/groups/{group}/messages", params={"client_id": client_id, **params})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def commit(
    client: httpx.Client, group: str, client_id: str, generation: int, offsets: list[tuple[str, int, int]]
) -> httpx.Response:
    body = {
        "client_id": client_id,
        "generation": generation,
        "offsets": [{"topic": t, "queue_id": q, "offset": o} for t, q, o in offsets],
    }
    return client.put(f"/v1/groups/{group}/offsets", json=body)


def produce_keyed(client: httpx.Client, topic: str, messages: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """Produce ``(key, seq)`` messages with the key as sharding key; the unique id makes a retry
    of the request store nothing twice."""
    body = {
        "messages": [
            {"body": f"{key}:{seq}", "sharding_key": key, "unique_id": f"{key}-{seq}"}
            for key, seq in messages
        ]
    }
    answer = client.post(f"/v1/topics/{topic}/messages", json=body)
    assert answer.status_code == 200, answer.text
    return list(answer.json()["results"])


def lock_holders(client: httpx.Client, group: str) -> dict[Queue, list[str]]:
    """Queue -> the members whose live lock on it the group's view shows."""
    holders: dict[Queue, list[str]] = {}
    view = client.get(f"/v1/groups/{group}")
    if view.status_code == 404:  # nobody joined yet
        return holders
    for member in view.json()["members"]:
        for item in member["locks"]:
            holders.setdefault((item["topic"], item["queue_id"]), []).append(member["client_id"])
    return holders


def wait_for(condition: Any, timeout_s: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")
