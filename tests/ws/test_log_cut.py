"""A cut of the broker's log closes every subscriber with 1012, in process: the broker's own
``log_cut`` is called on its event loop as its slave's replication calls it (a real failover is
tests/ha/test_cut_cursors.py). A subscriber that ends leaves no listener behind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from app.api.app import create_app
from app.broker import Broker
from app.settings import Settings


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        store_dir=tmp_path / "store",
        commitlog_file_size=1 << 20,
        consumequeue_file_entries=1000,
        max_hash_slots=16384,
        max_index_count=65536,
    )
    with TestClient(create_app(settings)) as client:
        response = client.post("/v1/topics", json={"name": "orders", "queues": 1})
        assert response.status_code == 201, response.text
        response = client.post(
            "/v1/topics/orders/messages", json={"messages": [{"body": "a"}, {"body": "b"}]}
        )
        assert response.status_code == 200, response.text
        yield client


def committed(client: TestClient, group: str) -> int | None:
    answer = client.get(f"/v1/groups/{group}/offsets", params={"topic": "orders"}).json()
    return {row["queue_id"]: row["committed_offset"] for row in answer["offsets"]}.get(0)


@pytest.mark.parametrize("group", ["billing", None], ids=["with a group", "without"])
def test_a_cut_closes_every_subscriber_with_1012(client: TestClient, group: str | None) -> None:
    broker: Broker = client.app.state.broker  # type: ignore[attr-defined]
    listening = len(broker.log_cut_listeners)
    query = "topic=orders&credit=10&from=first" + (f"&group={group}" if group else "")
    with client.websocket_connect(f"/v1/ws/subscribe?{query}") as socket:
        assert socket.receive_json()["type"] == "assignment"
        assert [m["body"] for m in socket.receive_json()["messages"]] == ["a", "b"]
        assert len(broker.log_cut_listeners) == listening + 1
        client.portal.call(broker.log_cut)  # type: ignore[union-attr]
        socket.send_json({"type": "status"})  # answered only if the socket stayed open
        with pytest.raises(WebSocketDisconnect) as closed:
            socket.receive_json()
    assert closed.value.code == 1012
    assert "log was cut to follow its new master" in closed.value.reason
    assert len(broker.log_cut_listeners) == listening
    if group is not None:
        assert committed(client, group) == 0  # what it read was never acknowledged


def test_a_subscriber_that_closes_stops_listening(client: TestClient) -> None:
    broker: Broker = client.app.state.broker  # type: ignore[attr-defined]
    listening = len(broker.log_cut_listeners)
    for _ in range(3):
        with client.websocket_connect("/v1/ws/subscribe?topic=orders&group=g&credit=1") as socket:
            assert socket.receive_json()["type"] == "assignment"
            socket.close()
    client.get("/v1/stats")  # the last socket's session has ended on the loop
    assert len(broker.log_cut_listeners) == listening
