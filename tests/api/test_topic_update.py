"""Changing a topic in place (PUT /v1/topics/{topic}, RocketMQ's updateTopic): more queues are added,
fewer write queues stop writes to the dropped ones while their messages stay readable, a permission
holds at once, and the route answers the change before the update does."""

from __future__ import annotations

import httpx
import pytest

from app.broker.delay_message import SCHEDULE_TOPIC
from app.broker.transaction_message import HALF_TOPIC


def produce(client: httpx.Client, topic: str, *messages: dict[str, object]) -> httpx.Response:
    return client.post(f"/v1/topics/{topic}/messages", json={"messages": list(messages)})


def queue_ends(client: httpx.Client, topic: str) -> dict[int, int]:
    answer = client.get(f"/v1/topics/{topic}/queues")
    assert answer.status_code == 200, answer.text
    return {queue["queue_id"]: queue["max_offset"] for queue in answer.json()["queues"]}


def update(client: httpx.Client, topic: str, **fields: object) -> httpx.Response:
    return client.put(f"/v1/topics/{topic}", json=fields)


def test_more_queues_are_added_and_routed_before_the_answer(client: httpx.Client, topic: str) -> None:
    answer = update(client, topic, queues=6)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"name": topic, "read_queues": 6, "write_queues": 6, "perm": 6, "order": False}
    assert client.get(f"/v1/topics/{topic}").json()["read_queues"] == 6
    route = client.get(f"/v1/topics/{topic}/route").json()["queue_datas"][0]
    assert (route["read_queue_nums"], route["write_queue_nums"]) == (6, 6)
    assert produce(client, topic, {"body": "into the new queue", "queue_id": 5}).status_code == 200
    assert queue_ends(client, topic) == {0: 0, 1: 0, 2: 0, 3: 0, 4: 0, 5: 1}


def test_fewer_write_queues_stop_writes_there_and_keep_their_messages_readable(
    client: httpx.Client, topic: str
) -> None:
    assert produce(client, topic, {"body": "before the shrink", "queue_id": 3}).status_code == 200
    answer = update(client, topic, write_queues=2)
    assert answer.status_code == 200, answer.text
    assert (answer.json()["read_queues"], answer.json()["write_queues"]) == (4, 2)

    refused = produce(client, topic, {"body": "to a dropped queue", "queue_id": 3})
    assert refused.status_code == 400 and refused.json()["error_code"] == 40011, refused.text
    # Messages without a queue go round the two write queues only.
    assert produce(client, topic, *[{"body": f"m{n}"} for n in range(6)]).status_code == 200
    assert queue_ends(client, topic) == {0: 3, 1: 3, 2: 0, 3: 1}
    # The dropped queue's message is still there to consume.
    pulled = client.get(f"/v1/topics/{topic}/queues/3/messages", params={"offset": 0})
    assert [m["body"] for m in pulled.json()["messages"]] == ["before the shrink"]


def test_a_permission_holds_at_once(client: httpx.Client, topic: str) -> None:
    assert update(client, topic, perm=4).json()["perm"] == 4
    refused = produce(client, topic, {"body": "to a read-only topic"})
    assert refused.status_code == 409 and refused.json()["error_code"] == 40902, refused.text
    assert client.get(f"/v1/topics/{topic}/route").json()["queue_datas"][0]["perm"] == 4
    assert update(client, topic, perm=6).status_code == 200
    assert produce(client, topic, {"body": "writable again"}).status_code == 200


def test_fields_left_out_keep_their_values(client: httpx.Client, topic: str) -> None:
    assert update(client, topic, order=True).json() == {
        "name": topic,
        "read_queues": 4,
        "write_queues": 4,
        "perm": 6,
        "order": True,
    }
    same = update(client, topic)
    assert same.status_code == 200 and same.json()["order"] is True


@pytest.mark.parametrize(
    ("fields", "status", "code"),
    [
        ({"read_queues": 2, "write_queues": 4}, 400, 40012),  # a queue written but never read
        ({"read_queues": 2}, 400, 40012),  # under the current 4 write queues
        ({"queues": 4, "read_queues": 4}, 400, 40012),
        ({"queues": 0}, 422, 42201),
        ({"queues": 1025}, 422, 42201),
        ({"perm": 8}, 422, 42201),
        ({"perm": "rw"}, 422, 42201),
        ({"name": "other"}, 422, 42201),
    ],
)
def test_bad_values_are_refused_and_change_nothing(
    client: httpx.Client, topic: str, fields: dict[str, object], status: int, code: int
) -> None:
    answer = update(client, topic, **fields)
    assert (answer.status_code, answer.json()["error_code"]) == (status, code), answer.text
    assert client.get(f"/v1/topics/{topic}").json()["read_queues"] == 4


def test_an_unknown_topic_is_404(client: httpx.Client) -> None:
    answer = update(client, "no-such-topic-to-change", queues=8)
    assert (answer.status_code, answer.json()["error_code"]) == (404, 40402), answer.text


@pytest.mark.parametrize("name", ["%RETRY%billing", "%DLQ%billing", SCHEDULE_TOPIC, HALF_TOPIC])
def test_system_topics_are_refused(client: httpx.Client, name: str) -> None:
    answer = update(client, name, queues=8)
    assert (answer.status_code, answer.json()["error_code"]) == (400, 40005), answer.text
