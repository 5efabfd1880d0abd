"""Sending a message back: to %RETRY%<group> after delay level 3 + reconsumes, back to the group's
members by itself, and to %DLQ%<group> past the group's max reconsume times."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.server import BrokerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    process = BrokerProcess(tmp_path_factory.mktemp("retry") / "store").start()
    with httpx.Client(base_url=process.url, timeout=30) as http:
        yield http
    process.stop()


def join(client: httpx.Client, group: str, topic: str) -> dict[str, Any]:
    body = {"client_id": "worker", "subscriptions": {topic: "*"}, "consume_from": "first"}
    answer = client.post(f"/v1/groups/{group}/heartbeat", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_message_sent_back_comes_again_after_its_delay_then_goes_to_the_dead_letters(
    client: httpx.Client,
) -> None:
    assert client.post("/v1/topics", json={"name": "jobs", "queues": 1}).status_code == 201
    assert client.put("/v1/groups/workers/config", json={"max_reconsume_times": 1}).status_code == 200
    join(client, "workers", "jobs")
    produced = client.post("/v1/topics/jobs/messages", json={"body": "boom", "keys": ["job-1"]}).json()
    unique_id = produced["results"][0]["unique_id"]
    first = client.get("/v1/groups/workers/messages", params={"client_id": "worker"}).json()
    (message,) = first["messages"]
    assert message["reconsume_times"] == 0

    sent_at_ms = time.time() * 1000
    sent = client.post("/v1/groups/workers/retry", json={"topic": "jobs", "queue_id": 0, "offset": 0})
    assert sent.status_code == 200, sent.text
    assert sent.json() | {"msg_id": None} == {
        "status": "RETRY",
        "topic": "%RETRY%workers",
        "msg_id": None,
        "reconsume_times": 1,
        "delay_level": 3,
    }
    generation = join(client, "workers", "jobs")["generation"]
    offsets = [{"topic": "jobs", "queue_id": 0, "offset": 1}]
    body = {"client_id": "worker", "generation": generation, "offsets": offsets}
    assert client.put("/v1/groups/workers/offsets", json=body).status_code == 200

    again: dict[str, Any] = {"messages": []}
    deadline = time.monotonic() + 30
    while not again["messages"] and time.monotonic() < deadline:
        again = client.get(
            "/v1/groups/workers/messages", params={"client_id": "worker", "max_wait_ms": 2000}
        ).json()
    (retried,) = again["messages"]
    # Its consumer sees the topic it was produced to; the queue it came from is the retry topic's.
    assert (retried["topic"], retried["retry_topic"]) == ("jobs", "%RETRY%workers")
    assert (retried["queue_id"], retried["queue_offset"]) == (0, 0)
    assert (retried["body"], retried["reconsume_times"]) == ("boom", 1)
    assert (retried["unique_id"], retried["keys"]) == (unique_id, ["job-1"])
    assert retried["properties"]["RETRY_TOPIC"] == "jobs"
    # Level 3 is 10 s: never sooner.
    assert retried["store_timestamp"] - sent_at_ms >= 10_000 - 5
    # The answer's offsets commit the retry topic's queue, as a member's commit must name it.
    assert again["offsets"] == [{"topic": "%RETRY%workers", "queue_id": 0, "next_offset": 1}]
    generation = join(client, "workers", "jobs")["generation"]
    offsets = [
        {"topic": o["topic"], "queue_id": o["queue_id"], "offset": o["next_offset"]} for o in again["offsets"]
    ]
    body = {"client_id": "worker", "generation": generation, "offsets": offsets}
    assert client.put("/v1/groups/workers/offsets", json=body).status_code == 200
    assert client.get("/v1/groups/workers/messages", params={"client_id": "worker"}).json()["messages"] == []

    # Sent back again by its fields as they came: the place is in the retry topic.
    place = {"queue_id": retried["queue_id"], "offset": retried["queue_offset"]}
    elsewhere = client.post(
        "/v1/groups/workers/retry", json={"topic": "other", "retry_topic": "%RETRY%workers"} | place
    )
    assert (elsewhere.status_code, elsewhere.json()["error_code"]) == (404, 40404)
    foreign = client.post(
        "/v1/groups/workers/retry", json={"topic": "jobs", "retry_topic": "%RETRY%x"} | place
    )
    assert (foreign.status_code, foreign.json()["error_code"]) == (400, 40001)
    fields = {"topic": retried["topic"], "retry_topic": retried["retry_topic"]} | place
    dead = client.post("/v1/groups/workers/retry", json=fields)
    assert dead.status_code == 200, dead.text
    assert (dead.json()["status"], dead.json()["topic"]) == ("DEAD_LETTER", "%DLQ%workers")
    letters = client.get("/v1/topics/%25DLQ%25workers/queues/0/messages", params={"offset": 0}).json()
    (letter,) = letters["messages"]
    assert (letter["body"], letter["unique_id"]) == ("boom", unique_id)
    assert letter["properties"]["DLQ_ORIGIN_TOPIC"] == "%RETRY%workers"

    listed = client.get("/v1/groups/workers/dlq").json()
    (entry,) = listed["dead_letters"]
    assert (entry["original_topic"], entry["reconsume_times"], listed["resent_until"]) == ("jobs", 1, 0)
    assert entry["original_msg_id"] == retried["msg_id"]
    resent = client.post("/v1/groups/workers/dlq/resend", json={"all": True}).json()["resent"]
    assert [(item["msg_id"], item["topic"]) for item in resent] == [(entry["msg_id"], "jobs")]
    # Back in its topic with its id, keys and body, fresh (reconsume 0), and not resent twice.
    back = client.get("/v1/groups/workers/messages", params={"client_id": "worker", "max_wait_ms": 5000})
    (fresh,) = [m for m in back.json()["messages"] if m["topic"] == "jobs"]
    assert (fresh["body"], fresh["unique_id"], fresh["keys"], fresh["reconsume_times"]) == (
        "boom",
        unique_id,
        ["job-1"],
        0,
    )
    assert client.post("/v1/groups/workers/dlq/resend", json={"all": True}).json()["resent"] == []
    assert client.get("/v1/groups/workers/dlq").json()["resent_until"] == 1


def test_a_send_back_names_one_message_one_way(client: httpx.Client) -> None:
    assert client.post("/v1/topics", json={"name": "named", "queues": 1}).status_code == 201
    both = client.post(
        "/v1/groups/g/retry", json={"msg_id": "0" * 32, "topic": "named", "queue_id": 0, "offset": 0}
    )
    assert (both.status_code, both.json()["error_code"]) == (400, 40001)
    neither = client.post("/v1/groups/g/retry", json={})
    assert (neither.status_code, neither.json()["error_code"]) == (400, 40001)
    missing = client.post("/v1/groups/g/retry", json={"topic": "named", "queue_id": 0, "offset": 5})
    assert (missing.status_code, missing.json()["error_code"]) == (404, 40404)
    vague = client.post("/v1/groups/g/dlq/resend", json={})
    assert (vague.status_code, vague.json()["error_code"]) == (400, 40001)
    unknown = client.post("/v1/groups/g/dlq/resend", json={"msg_ids": ["0" * 32]})
    assert (unknown.status_code, unknown.json()["error_code"]) == (404, 40404)


def test_a_resend_of_all_crosses_its_cap_over_successive_calls(client: httpx.Client) -> None:
    """1,001 dead letters: a resend of all sends the first 1,000, the next call the last one, then
    none; each comes back to its topic exactly once."""
    assert client.post("/v1/topics", json={"name": "bulk", "queues": 1}).status_code == 201
    # No reconsume allowed: every message sent back goes straight to the dead letters.
    assert client.put("/v1/groups/bulk-workers/config", json={"max_reconsume_times": 0}).status_code == 200
    count = 1_001
    unique_ids: list[str] = []
    for first in range(0, count, 500):
        batch = [{"body": f"m{n}"} for n in range(first, min(first + 500, count))]
        answer = client.post("/v1/topics/bulk/messages", json={"messages": batch})
        unique_ids += [result["unique_id"] for result in answer.json()["results"]]
    for offset in range(count):
        place = {"topic": "bulk", "queue_id": 0, "offset": offset}
        assert client.post("/v1/groups/bulk-workers/retry", json=place).json()["status"] == "DEAD_LETTER"

    calls = [
        len(client.post("/v1/groups/bulk-workers/dlq/resend", json={"all": True}).json()["resent"])
        for _ in range(3)
    ]
    assert calls == [1_000, 1, 0]
    back = client.get("/v1/topics/bulk/queues/0/messages", params={"offset": count, "max_messages": 1_000})
    copies = back.json()["messages"]
    more = client.get("/v1/topics/bulk/queues/0/messages", params={"offset": count + len(copies)})
    copies += more.json()["messages"]
    assert sorted(message["unique_id"] for message in copies) == sorted(unique_ids)  # none twice, none lost
    assert client.get("/v1/groups/bulk-workers/dlq").json()["resent_until"] == count
