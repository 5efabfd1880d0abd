"""What the pop tests share: a broker process whose messages go to the dead-letter topic after
two reconsumes, and small calls of the pop API."""

from __future__ import annotations

import itertools
import time
from typing import Any

import httpx

MAX_RECONSUME_TIMES = 2
LONG_MS = 60_000  # an invisible time no test outlives

_names = itertools.count()


def make_topic(client: httpx.Client, queues: int = 4) -> str:
    name = f"pop-{next(_names)}-{time.monotonic_ns() % 1_000_000}"
    assert client.post("/v1/topics", json={"name": name, "queues": queues}).status_code == 201
    return name


def produce(client: httpx.Client, topic: str, *bodies: str, **fields: Any) -> list[str]:
    """Store each body; their unique ids."""
    answer = client.post(
        f"/v1/topics/{topic}/messages", json={"messages": [{"body": b, **fields} for b in bodies]}
    )
    assert answer.status_code == 200, answer.text
    return [result["unique_id"] for result in answer.json()["results"]]


def pop(
    client: httpx.Client,
    group: str,
    topic: str,
    max_messages: int = 32,
    invisible_ms: int = LONG_MS,
    **fields: Any,
) -> list[dict[str, Any]]:
    body = {"max_messages": max_messages, "invisible_ms": invisible_ms, "consume_from": "first", **fields}
    answer = client.post(f"/v1/groups/{group}/topics/{topic}/pop", json=body)
    assert answer.status_code == 200, answer.text
    messages: list[dict[str, Any]] = answer.json()["messages"]
    return messages


def settle(
    client: httpx.Client, verb: str, group: str, topic: str, handles: list[str], **fields: Any
) -> list[str]:
    """Ack or nack; the status of each handle."""
    answer = client.post(
        f"/v1/groups/{group}/topics/{topic}/{verb}", json={"receipt_handles": handles, **fields}
    )
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [result["receipt_handle"] for result in results] == handles
    return [result["status"] for result in results]


def handles(messages: list[dict[str, Any]]) -> list[str]:
    return [message["receipt_handle"] for message in messages]


def committed(client: httpx.Client, group: str, topic: str) -> dict[int, int | None]:
    offsets = client.get(f"/v1/groups/{group}/offsets", params={"topic": topic}).json()["offsets"]
    return {row["queue_id"]: row["committed_offset"] for row in offsets}


def max_offsets(client: httpx.Client, topic: str) -> dict[int, int]:
    queues = client.get(f"/v1/topics/{topic}/queues").json()["queues"]
    return {queue["queue_id"]: queue["max_offset"] for queue in queues}
