"""Deleting a topic end to end: a re-created topic has none of the old messages, committed offsets or
remembered unique ids - after a graceful delete, and after SIGKILL with an unclean recovery that
walks the deleted records again."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.server import BrokerProcess


def recreate(client: httpx.Client, topic: str) -> None:
    assert client.delete(f"/v1/topics/{topic}").status_code == 204
    assert client.post("/v1/topics", json={"name": topic, "queues": 2}).status_code == 201


def produce(client: httpx.Client, topic: str, *unique_ids: str) -> list[dict]:
    messages = [{"body": uid, "unique_id": uid, "keys": [f"k-{uid}"], "queue_id": 0} for uid in unique_ids]
    response = client.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    assert response.status_code == 200, response.text
    return response.json()["results"]


def assert_only_new_incarnation(client: httpx.Client, topic: str, old: list[dict]) -> None:
    """None of the ``old`` messages (ids u0, u1, ...) is readable, findable or remembered."""
    pulled = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0, "max_messages": 100})
    assert pulled.json()["messages"] == []
    for result in old:
        assert client.get(f"/v1/messages/{result['msg_id']}").status_code == 404
        found = client.get(f"/v1/topics/{topic}/messages", params={"key": f"k-{result['unique_id']}"})
        assert found.json()["messages"] == []
    offsets = client.get("/v1/groups/billing/offsets", params={"topic": topic}).json()["offsets"]
    assert [row["committed_offset"] for row in offsets] == [None, None]
    # A retry of an old unique id is a new message of the new topic.
    again = produce(client, topic, old[0]["unique_id"])[0]
    assert again["msg_id"] != old[0]["msg_id"] and again["queue_offset"] == 0


def test_a_recreated_topic_has_no_old_messages_offsets_or_unique_ids(client: httpx.Client) -> None:
    topic = "deleted-and-recreated"
    assert client.post("/v1/topics", json={"name": topic, "queues": 2}).status_code == 201
    old = produce(client, topic, "u0", "u1", "u2")
    committed = client.put(
        "/v1/groups/billing/offsets", json={"offsets": [{"topic": topic, "queue_id": 0, "offset": 2}]}
    )
    assert committed.status_code == 200, committed.text

    recreate(client, topic)

    assert all(topic not in group["topics"] for group in client.get("/v1/groups").json()["groups"])
    assert_only_new_incarnation(client, topic, old)


@pytest.mark.crash
def test_after_sigkill_an_unclean_recovery_does_not_bring_a_deleted_topic_back(tmp_path: Path) -> None:
    # One CommitLog segment: the unclean recovery walks every record, the deleted ones too.
    broker = BrokerProcess(tmp_path / "store", commitlog_file_size=1 << 20).start()
    topic = "deleted-before-a-crash"
    try:
        with httpx.Client(base_url=broker.url, timeout=30.0) as client:
            assert client.post("/v1/topics", json={"name": topic, "queues": 2}).status_code == 201
            old = produce(client, topic, "u0", "u1", "u2")
            client.put(
                "/v1/groups/billing/offsets", json={"offsets": [{"topic": topic, "queue_id": 0, "offset": 3}]}
            )
            recreate(client, topic)
        broker.kill()
        broker.start()
        with httpx.Client(base_url=broker.url, timeout=30.0) as client:
            assert_only_new_incarnation(client, topic, old)
    finally:
        broker.stop()
