"""A WebSocket subscriber and an HTTP member of one consumer group share the topic's queues."""

from __future__ import annotations

import httpx

from tests.ws.wsclient import WsBroker, wait_for


def test_a_browser_and_an_http_member_of_one_group_split_the_queues(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    with ws.subscribe(topic=topic, group="mixed", credit=10) as socket:
        assert [q["queue_id"] for q in socket.assignment["queues"]] == [0, 1, 2, 3]
        joined = client.post(
            "/v1/groups/mixed/heartbeat", json={"client_id": "http-1", "subscriptions": {topic: "*"}}
        ).json()
        # "http-1" sorts before the subscriber's id: it takes the first half, the socket keeps the rest.
        assert [item["queue_id"] for item in joined["assignments"] if item["topic"] == topic] == [0, 1]
        assert [q["queue_id"] for q in socket.next("assignment")["queues"]] == [2, 3]
        view = client.get("/v1/groups/mixed").json()
        assert len(view["members"]) == 2
        assert client.delete("/v1/groups/mixed/members/http-1").status_code == 204
        assert [q["queue_id"] for q in socket.next("assignment")["queues"]] == [0, 1, 2, 3]
    # The socket closed: it left the group (which keeps the offsets its members committed).
    assert wait_for(lambda: client.get("/v1/groups/mixed").json()["members"] == [])
