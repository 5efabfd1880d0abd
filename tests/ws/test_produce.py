"""Producing over WebSocket: pipelined frames, results with the client's ids, per-message errors."""

from __future__ import annotations

import httpx

from tests.ws.wsclient import Socket, WsBroker


def results(socket: Socket, count: int) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    while len(found) < count:
        found.extend(socket.next("results")["results"])
    assert len(found) == count
    return found


def test_pipelined_messages_are_answered_in_order_with_their_ids(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    count = 300
    with ws.produce(topic) as socket:
        for number in range(count):  # no waiting between sends
            socket.send(id=f"c{number}", body=f"m{number}", queue_id=number % 2)
        answered = results(socket, count)
    assert [result["id"] for result in answered] == [f"c{number}" for number in range(count)]
    assert {result["status"] for result in answered} == {"SEND_OK"}
    for queue_id in (0, 1):
        offsets = [r["queue_offset"] for r in answered if r["queue_id"] == queue_id]
        assert offsets == list(range(count // 2))
        pulled = client.get(
            f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"offset": 0, "max_messages": count}
        ).json()["messages"]
        assert [m["body"] for m in pulled] == [f"m{n}" for n in range(queue_id, count, 2)]


def test_a_bad_message_is_answered_with_an_error_and_the_socket_stays_open(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    with ws.produce(topic) as socket:
        socket.send(id=1, body="fine", queue_id=0)
        socket.send(id=2, body="", queue_id=0)
        socket.send(id=3, bdy="typo")
        socket.send(id=4, body="%%%", encoding="base64")
        socket.send(id=5, body="reserved", properties={"TAGS": "x"})
        socket.send(id=6, body="after", queue_id=0, tags="T", keys=["k"])
        answered = results(socket, 6)
    assert [(r["id"], r.get("error_code")) for r in answered] == [
        (1, None),
        (2, 40006),
        (3, 42201),
        (4, 40003),
        (5, 40008),
        (6, None),
    ]
    assert "bdy" in str(answered[2]["message"])
    pulled = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0}).json()["messages"]
    assert [(m["body"], m["tags"], m["keys"]) for m in pulled] == [("fine", "", []), ("after", "T", ["k"])]


def test_a_repeated_unique_id_is_stored_once(ws: WsBroker, client: httpx.Client, topic: str) -> None:
    with ws.produce(topic) as socket:
        socket.send(id="a", body="once", unique_id="producer-1", queue_id=0)
        socket.send(id="b", body="once", unique_id="producer-1", queue_id=0)
        first, second = results(socket, 2)
    assert first["msg_id"] == second["msg_id"]
    assert client.get(f"/v1/topics/{topic}/queues").json()["queues"][0]["max_offset"] == 1


def test_frames_without_an_id_are_answered_in_order(ws: WsBroker, topic: str) -> None:
    with ws.produce(topic) as socket:
        for number in range(3):
            socket.send(body=f"anonymous {number}", queue_id=1)
        answered = results(socket, 3)
    assert [(r["id"], r["queue_offset"]) for r in answered] == [(None, 0), (None, 1), (None, 2)]


def test_a_frame_that_is_not_json_closes_the_producer(ws: WsBroker, topic: str) -> None:
    with ws.produce(topic) as socket:
        socket.connection.send("{oops")
        assert socket.closed() == (4400, "40002 a frame is not valid JSON")


def test_produced_messages_reach_a_subscriber(ws: WsBroker, topic: str) -> None:
    with ws.subscribe(topic=topic, credit=10) as subscriber, ws.produce(topic) as producer:
        producer.send(id=1, body="over the wire", tags="Live")
        (result,) = results(producer, 1)
        (message,) = subscriber.messages(1)
    assert (message["msg_id"], message["body"], message["tags"]) == (
        result["msg_id"],
        "over the wire",
        "Live",
    )
