"""Looking messages up by key through the index, and the manual retention trigger."""

from __future__ import annotations

import time

import httpx

from app.api.errors import ErrorCode
from tests.api.test_errors import assert_error


def test_query_by_key_newest_first(client: httpx.Client, topic: str) -> None:
    messages = [{"body": f"v{i}", "keys": ["order-7" if i % 2 else "order-8", f"n{i}"]} for i in range(6)]
    client.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    found = client.get(f"/v1/topics/{topic}/messages", params={"key": "order-7"}).json()
    assert sorted(m["body"] for m in found["messages"]) == ["v1", "v3", "v5"]
    assert all("order-7" in m["keys"] for m in found["messages"])
    assert len(client.get(f"/v1/topics/{topic}/messages", params={"key": "order-7", "max": 2}).json()["messages"]) == 2
    assert client.get(f"/v1/topics/{topic}/messages", params={"key": "absent"}).json()["messages"] == []


def test_query_by_unique_id_and_time_window(client: httpx.Client, topic: str) -> None:
    result = client.post(f"/v1/topics/{topic}/messages", json={"body": "u", "unique_id": "uid-1"}).json()["results"][0]
    found = client.get(f"/v1/topics/{topic}/messages", params={"key": "uid-1"}).json()["messages"]
    assert [m["msg_id"] for m in found] == [result["msg_id"]]
    future = int(time.time() * 1000) + 3_600_000
    later = client.get(f"/v1/topics/{topic}/messages", params={"key": "uid-1", "begin": future}).json()
    assert later["messages"] == []


def test_query_errors(client: httpx.Client, topic: str) -> None:
    assert_error(client.get(f"/v1/topics/{topic}/messages"), ErrorCode.VALIDATION_FAILED)
    assert_error(client.get("/v1/topics/no-such-topic/messages", params={"key": "k"}), ErrorCode.TOPIC_NOT_FOUND)
    assert_error(
        client.get(f"/v1/topics/{topic}/messages", params={"key": "k", "begin": 10, "end": 5}),
        ErrorCode.INVALID_PARAMETER,
    )


def test_manual_clean_answers_a_report(client: httpx.Client) -> None:
    report = client.post("/v1/admin/clean")
    assert report.status_code == 200, report.text
    body = report.json()
    assert "manual" in body["reasons"] and body["commitlog_segments"] >= 0
