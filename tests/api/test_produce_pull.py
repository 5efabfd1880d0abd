"""Produce and pull round trips through a real server, in every format."""

from __future__ import annotations

import base64

import httpx

from app.codec import BATCH_MEDIA_TYPE, RECORDS_MEDIA_TYPE, IncomingMessage, encode_batch, split_records
from app.store import decode_record


def pull(client: httpx.Client, topic: str, queue_id: int, offset: int = 0, **params: object) -> dict:
    response = client.get(
        f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"offset": offset, **params}
    )
    assert response.status_code == 200, response.text
    return response.json()


def test_json_batch_round_trip(client: httpx.Client, topic: str) -> None:
    sent = [
        {
            "body": "hello",
            "tags": "TagA",
            "keys": ["k1", "k2"],
            "properties": {"color": "red"},
            "queue_id": 1,
        },
        {"body": base64.b64encode(b"\x00\xff\x10").decode(), "encoding": "base64", "queue_id": 1},
    ]
    response = client.post(f"/v1/topics/{topic}/messages", json={"messages": sent})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["status"] for r in results] == ["SEND_OK", "SEND_OK"]
    assert [r["queue_offset"] for r in results] == [0, 1]
    assert all(len(r["msg_id"]) == 32 and r["unique_id"] for r in results)

    answer = pull(client, topic, 1)
    assert answer["status"] == "FOUND"
    assert (answer["next_offset"], answer["min_offset"], answer["max_offset"]) == (2, 0, 2)
    first, second = answer["messages"]
    assert first["body"] == "hello" and first["encoding"] == "utf8"
    assert first["tags"] == "TagA" and first["keys"] == ["k1", "k2"]
    assert first["properties"] == {"color": "red"}
    assert first["msg_id"] == results[0]["msg_id"] and first["unique_id"] == results[0]["unique_id"]
    assert first["topic"] == topic and first["queue_id"] == 1 and first["queue_offset"] == 0
    assert first["store_timestamp"] >= first["born_timestamp"] > 0
    assert first["reconsume_times"] == 0
    assert second["encoding"] == "base64" and base64.b64decode(second["body"]) == b"\x00\xff\x10"


def test_single_message_object_without_list(client: httpx.Client, topic: str) -> None:
    response = client.post(f"/v1/topics/{topic}/messages", json={"body": "alone", "queue_id": 2})
    assert response.status_code == 200, response.text
    assert [m["body"] for m in pull(client, topic, 2)["messages"]] == ["alone"]


def test_raw_body_with_query_parameters(client: httpx.Client, topic: str) -> None:
    payload = bytes(range(256)) * 3
    response = client.post(
        f"/v1/topics/{topic}/messages",
        content=payload,
        headers={"content-type": "application/octet-stream"},
        params=[("tags", "Raw"), ("keys", "a b"), ("queue_id", 3), ("property", "x:1"), ("property", "y:2")],
    )
    assert response.status_code == 200, response.text
    (message,) = pull(client, topic, 3)["messages"]
    assert base64.b64decode(message["body"]) == payload
    assert message["tags"] == "Raw" and message["keys"] == ["a", "b"]
    assert message["properties"] == {"x": "1", "y": "2"}


def test_ndjson_stream(client: httpx.Client, topic: str) -> None:
    lines = "\n".join(f'{{"body": "line {i}", "queue_id": 0}}' for i in range(50)) + "\n"
    response = client.post(
        f"/v1/topics/{topic}/messages", content=lines, headers={"content-type": "application/x-ndjson"}
    )
    assert response.status_code == 200, response.text
    assert len(response.json()["results"]) == 50
    bodies = [m["body"] for m in pull(client, topic, 0, max_messages=100)["messages"]]
    assert bodies == [f"line {i}" for i in range(50)]


def test_binary_batch_and_binary_pull(client: httpx.Client, topic: str) -> None:
    batch = [
        IncomingMessage(
            body=f"bin {i}".encode(), tags="B", keys=[f"k{i}"], properties={"n": str(i)}, queue_id=2
        )
        for i in range(20)
    ]
    response = client.post(
        f"/v1/topics/{topic}/messages",
        content=encode_batch(batch),
        headers={"content-type": BATCH_MEDIA_TYPE},
    )
    assert response.status_code == 200, response.text
    assert [r["queue_offset"] for r in response.json()["results"]] == list(range(20))

    response = client.get(
        f"/v1/topics/{topic}/queues/2/messages",
        params={"offset": 5, "max_messages": 10},
        headers={"accept": RECORDS_MEDIA_TYPE},
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == RECORDS_MEDIA_TYPE
    assert response.headers["x-wharf-status"] == "FOUND"
    assert response.headers["x-wharf-next-offset"] == "15"
    assert response.headers["x-wharf-message-count"] == "10"
    records = [decode_record(raw) for raw in split_records(response.content)]
    assert [r.body for r in records] == [f"bin {i}".encode() for i in range(5, 15)]
    assert [r.properties["n"] for r in records] == [str(i) for i in range(5, 15)]
    assert all(r.tags == "B" for r in records)


def test_queue_choice_sharding_key_and_round_robin(client: httpx.Client, topic: str) -> None:
    keyed = [{"body": f"o{i}", "sharding_key": "customer-7"} for i in range(8)]
    results = client.post(f"/v1/topics/{topic}/messages", json={"messages": keyed}).json()["results"]
    assert len({r["queue_id"] for r in results}) == 1
    spread = [{"body": f"r{i}"} for i in range(8)]
    results = client.post(f"/v1/topics/{topic}/messages", json={"messages": spread}).json()["results"]
    assert sorted(r["queue_id"] for r in results) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_pull_statuses_and_paging(client: httpx.Client, topic: str) -> None:
    assert pull(client, topic, 0)["status"] == "NO_MESSAGE_IN_QUEUE"
    client.post(
        f"/v1/topics/{topic}/messages",
        json={"messages": [{"body": str(i), "queue_id": 0} for i in range(10)]},
    )
    page = pull(client, topic, 0, max_messages=4)
    assert [m["body"] for m in page["messages"]] == ["0", "1", "2", "3"] and page["next_offset"] == 4
    assert pull(client, topic, 0, offset=10)["status"] == "OFFSET_OVERFLOW_ONE"
    badly = pull(client, topic, 0, offset=99)
    assert badly["status"] == "OFFSET_OVERFLOW_BADLY" and badly["next_offset"] == 0


def test_tag_filter(client: httpx.Client, topic: str) -> None:
    messages = [{"body": f"m{i}", "tags": ["TagA", "TagB", "TagC"][i % 3], "queue_id": 1} for i in range(9)]
    client.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    answer = pull(client, topic, 1, tags="TagA || TagC", max_messages=100)
    assert [m["body"] for m in answer["messages"]] == ["m0", "m2", "m3", "m5", "m6", "m8"]
    assert {m["body"] for m in pull(client, topic, 1, tags="*", max_messages=100)["messages"]} == {
        f"m{i}" for i in range(9)
    }


def test_idempotent_retry_stores_nothing_twice(client: httpx.Client, topic: str) -> None:
    message = {"body": "pay 10", "unique_id": "payment-42", "queue_id": 0}
    first = client.post(f"/v1/topics/{topic}/messages", json=message).json()["results"][0]
    again = client.post(f"/v1/topics/{topic}/messages", json=message).json()["results"][0]
    assert again == first
    both = client.post(
        f"/v1/topics/{topic}/messages",
        json={
            "messages": [
                {"body": "x", "unique_id": "dup", "queue_id": 0},
                {"body": "x", "unique_id": "dup", "queue_id": 0},
            ]
        },
    ).json()["results"]
    assert both[0] == both[1]
    assert [m["body"] for m in pull(client, topic, 0, max_messages=10)["messages"]] == ["pay 10", "x"]


def test_topics_and_queues_endpoints(client: httpx.Client, topic: str) -> None:
    assert client.get(f"/v1/topics/{topic}").json()["read_queues"] == 4
    assert topic in [t["name"] for t in client.get("/v1/topics").json()["topics"]]
    client.post(f"/v1/topics/{topic}/messages", json={"body": "q", "queue_id": 3})
    queues = client.get(f"/v1/topics/{topic}/queues").json()["queues"]
    assert [q["max_offset"] for q in queues] == [0, 0, 0, 1]
    assert queues[3]["last_store_timestamp"] > 0 and queues[0]["last_store_timestamp"] is None
    same = client.post("/v1/topics", json={"name": topic, "queues": 4})
    assert same.status_code == 200
    assert client.delete(f"/v1/topics/{topic}").status_code == 204
    assert client.get(f"/v1/topics/{topic}").status_code == 404


def test_auto_created_topic_has_default_queues(client: httpx.Client) -> None:
    response = client.post("/v1/topics/auto-made/messages", json={"body": "first"})
    assert response.status_code == 200
    assert client.get("/v1/topics/auto-made").json()["write_queues"] == 4
