"""Looking messages up by id and by key through the index, and the manual retention trigger."""

from __future__ import annotations

import time

import httpx

from app.api.errors import ErrorCode
from app.store.record_format import encode_host
from tests.api.test_errors import assert_error


def test_an_id_of_this_broker_finds_its_message(client: httpx.Client, topic: str) -> None:
    result = client.post(f"/v1/topics/{topic}/messages", json={"body": "mine"}).json()["results"][0]
    found = client.get(f"/v1/messages/{result['msg_id']}")
    assert found.status_code == 200, found.text
    assert found.json()["body"] == "mine" and found.json()["msg_id"] == result["msg_id"]


def test_an_id_of_another_broker_names_its_owner_and_never_answers_a_local_message(
    client: httpx.Client, topic: str
) -> None:
    result = client.post(f"/v1/topics/{topic}/messages", json={"body": "local"}).json()["results"][0]
    offset = result["msg_id"][16:]  # a physical offset that does hold a record here
    port = client.base_url.port or 0
    for host, other_port in (("10.1.2.3", 9876), ("127.0.0.1", port + 1)):
        other_id = encode_host(host, other_port).hex().upper() + offset
        answer = client.get(f"/v1/messages/{other_id}")
        body = answer.json()
        assert answer.status_code == 404, body
        assert body["error_code"] == ErrorCode.MESSAGE_NOT_FOUND
        assert body["owner"] == f"{host}:{other_port}"
        assert f"{host}:{other_port}" in body["message"]
        assert "body" not in body


def test_query_by_key_newest_first(client: httpx.Client, topic: str) -> None:
    messages = [{"body": f"v{i}", "keys": ["order-7" if i % 2 else "order-8", f"n{i}"]} for i in range(6)]
    client.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    found = client.get(f"/v1/topics/{topic}/messages", params={"key": "order-7"}).json()
    assert [m["body"] for m in found["messages"]] == ["v5", "v3", "v1"]
    assert all("order-7" in m["keys"] for m in found["messages"])
    newest = client.get(f"/v1/topics/{topic}/messages", params={"key": "order-7", "max": 2}).json()
    assert [m["body"] for m in newest["messages"]] == ["v5", "v3"]
    assert client.get(f"/v1/topics/{topic}/messages", params={"key": "absent"}).json()["messages"] == []


def test_query_by_unique_id_and_time_window(client: httpx.Client, topic: str) -> None:
    result = client.post(f"/v1/topics/{topic}/messages", json={"body": "u", "unique_id": "uid-1"}).json()[
        "results"
    ][0]
    found = client.get(f"/v1/topics/{topic}/messages", params={"key": "uid-1"}).json()["messages"]
    assert [m["msg_id"] for m in found] == [result["msg_id"]]
    future = int(time.time() * 1000) + 3_600_000
    later = client.get(f"/v1/topics/{topic}/messages", params={"key": "uid-1", "begin": future}).json()
    assert later["messages"] == []


def test_query_errors(client: httpx.Client, topic: str) -> None:
    assert_error(client.get(f"/v1/topics/{topic}/messages"), ErrorCode.VALIDATION_FAILED)
    assert_error(
        client.get("/v1/topics/no-such-topic/messages", params={"key": "k"}), ErrorCode.TOPIC_NOT_FOUND
    )
    assert_error(
        client.get(f"/v1/topics/{topic}/messages", params={"key": "k", "begin": 10, "end": 5}),
        ErrorCode.INVALID_PARAMETER,
    )


def test_manual_clean_answers_a_report(client: httpx.Client) -> None:
    """Every CommitLog segment is younger than the reserved time here: a manual clean keeps them."""
    before = client.get("/v1/stats").json()["commitlog_min_offset"]
    report = client.post("/v1/admin/clean")
    assert report.status_code == 200, report.text
    body = report.json()
    assert "manual" in body["reasons"]
    assert (body["commitlog_segments"], body["consumequeue_segments"]) == (0, 0)
    assert body["commitlog_min_offset"] == before == client.get("/v1/stats").json()["commitlog_min_offset"]
