"""Consumer groups over WebSocket: acks commit offsets, reconnects resume, nacks redeliver, and the
queues of a group are shared by its subscribers."""

from __future__ import annotations

import httpx

from tests.ws.conftest import MAX_UNACKED
from tests.ws.wsclient import WsBroker, produce


def test_an_ack_commits_the_next_offset_and_a_reconnect_resumes_there(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    produce(client, topic, *[f"m{i}" for i in range(5)], queue_id=0)
    with ws.subscribe(topic=topic, group="resume", queues="0", **{"from": "first"}, credit=5) as socket:
        received = socket.messages(5)
        socket.send(type="ack", queue_id=0, offsets=[m["queue_offset"] for m in received[:3]])
        assert socket.next("committed") == {"type": "committed", "queue_id": 0, "offset": 3}
    with ws.subscribe(topic=topic, group="resume", queues="0", **{"from": "first"}, credit=5) as again:
        assert again.assignment["queues"] == [{"queue_id": 0, "offset": 3}]
        assert [m["body"] for m in again.messages(2)] == ["m3", "m4"]


def test_a_group_s_first_position_is_committed_at_once(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    with ws.subscribe(topic=topic, group="fresh", queues="0", credit=5) as socket:
        assert socket.assignment["queues"] == [{"queue_id": 0, "offset": 0}]
    # Even without a single ack, a message stored while the group is away is not skipped.
    offsets = client.get("/v1/groups/fresh/offsets", params={"topic": topic}).json()["offsets"]
    assert offsets[0]["committed_offset"] == 0
    produce(client, topic, "while away", queue_id=0)
    with ws.subscribe(topic=topic, group="fresh", queues="0", credit=5) as socket:
        assert [m["body"] for m in socket.messages(1)] == ["while away"]


def test_a_committed_offset_wins_over_from(ws: WsBroker, client: httpx.Client, topic: str) -> None:
    produce(client, topic, "a", "b", queue_id=0)
    client.put("/v1/groups/chosen/offsets", json={"offsets": [{"topic": topic, "queue_id": 0, "offset": 1}]})
    with ws.subscribe(topic=topic, group="chosen", queues="0", **{"from": "first"}, credit=5) as socket:
        assert [m["body"] for m in socket.messages(1)] == ["b"]


def test_the_commit_waits_for_the_oldest_unacknowledged_message(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    produce(client, topic, "a", "b", "c", queue_id=1)
    with ws.subscribe(topic=topic, group="order", queues="1", **{"from": "first"}, credit=3) as socket:
        socket.messages(3)
        socket.send(type="ack", queue_id=1, offset=2)
        socket.send(type="ack", queue_id=1, offset=1)
        status = socket.status()
        assert status["queues"][0]["committed"] == 0  # offset 0 is still out
        assert status["queues"][0]["inflight"] == 1
        assert not [frame for frame in socket.skipped if frame["type"] == "committed"]
        socket.send(type="ack", queue_id=1, offset=0)
        assert socket.next("committed")["offset"] == 3


def test_unacknowledged_messages_are_delivered_again_after_a_reconnect(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    produce(client, topic, "x", "y", queue_id=2)
    with ws.subscribe(topic=topic, group="again", queues="2", **{"from": "first"}, credit=2) as socket:
        socket.messages(2)  # never acknowledged
    with ws.subscribe(topic=topic, group="again", queues="2", credit=2) as socket:
        assert [m["body"] for m in socket.messages(2)] == ["x", "y"]


def test_a_nack_redelivers_the_message_with_its_reconsume_count(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    produce(client, topic, "retry me", "next", queue_id=3)
    with ws.subscribe(topic=topic, group="nack", queues="3", **{"from": "first"}, credit=2) as socket:
        first, second = socket.messages(2)
        assert first["reconsume_times"] == 0
        socket.send(type="ack", queue_id=3, offset=1)
        socket.send(type="nack", queue_id=3, offset=0)
        assert socket.status()["credit"] == 0  # a redelivery needs credit like any delivery
        socket.send(type="permit", n=1)
        (again,) = socket.messages(1)
        assert (again["msg_id"], again["reconsume_times"]) == (first["msg_id"], 1)
        assert socket.status()["queues"][0]["committed"] == 0
        socket.send(type="ack", queue_id=3, offset=0)
        assert socket.next("committed")["offset"] == 2


def test_a_redelivered_retry_message_shows_the_topic_it_was_first_shown_under(
    ws: WsBroker, client: httpx.Client
) -> None:
    # A socket on a retry topic shows each message under the topic it was produced to (with
    # retry_topic beside it), on its first delivery and on a redelivery after a nack alike.
    retry = "%RETRY%shown"
    assert client.post("/v1/topics", json={"name": retry, "queues": 1}).status_code == 201
    produce(client, "%25RETRY%25shown", "again", queue_id=0, properties={"RETRY_TOPIC": "orders"})
    with ws.subscribe(topic=retry, group="shown", **{"from": "first"}, credit=2) as socket:
        (first,) = socket.messages(1)
        assert (first["topic"], first["retry_topic"]) == ("orders", retry)
        socket.send(type="nack", queue_id=0, offset=0)
        (again,) = socket.messages(1)
        assert (again["msg_id"], again["reconsume_times"]) == (first["msg_id"], 1)
        assert {key: value for key, value in again.items() if key != "reconsume_times"} == {
            key: value for key, value in first.items() if key != "reconsume_times"
        }


def test_a_group_subscriber_stops_at_the_unacknowledged_limit(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    produce(client, topic, *[f"m{i}" for i in range(MAX_UNACKED + 4)], queue_id=0)
    with ws.subscribe(topic=topic, group="limit", queues="0", **{"from": "first"}, credit=100) as socket:
        received = socket.messages(MAX_UNACKED)
        status = socket.status()
        assert (status["unacked"], status["credit"]) == (MAX_UNACKED, 100 - MAX_UNACKED)
        socket.send(type="ack", queue_id=0, offsets=[m["queue_offset"] for m in received[:4]])
        received += socket.messages(4)
        assert [m["body"] for m in received] == [f"m{i}" for i in range(MAX_UNACKED + 4)]


def test_acks_of_messages_not_in_flight_are_ignored(ws: WsBroker, client: httpx.Client, topic: str) -> None:
    produce(client, topic, "only", queue_id=0)
    with ws.subscribe(topic=topic, group="ignored", queues="0", **{"from": "first"}, credit=1) as socket:
        socket.messages(1)
        socket.send(type="ack", queue_id=0, offsets=[5, 6])  # never delivered
        socket.send(type="ack", queue_id=3, offset=0)  # a queue this socket does not read
        status = socket.status()
        assert (status["unacked"], status["queues"][0]["committed"]) == (1, 0)


def test_the_queues_of_a_group_are_shared_by_its_subscribers(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    def queues(frame: dict[str, object]) -> list[int]:
        return [q["queue_id"] for q in frame["queues"]]  # type: ignore[attr-defined]

    with ws.subscribe(topic=topic, group="shared", credit=10) as first:
        assert queues(first.assignment) == [0, 1, 2, 3]
        with ws.subscribe(topic=topic, group="shared", credit=10) as second:
            assert queues(second.assignment) == [2, 3]
            assert queues(first.next("assignment")) == [0, 1]
            produce(client, topic, "to 3", queue_id=3)
            produce(client, topic, "to 0", queue_id=0)
            assert [m["body"] for m in second.messages(1)] == ["to 3"]
            assert [m["body"] for m in first.messages(1)] == ["to 0"]
        # The second one left: the first reads every queue again.
        assert queues(first.next("assignment")) == [0, 1, 2, 3]


def test_a_revoked_queue_is_read_again_from_the_group_offset_by_its_new_owner(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    produce(client, topic, "unacked on 3", queue_id=3)
    with ws.subscribe(topic=topic, group="handover", **{"from": "first"}, credit=10) as first:
        (message,) = first.messages(1)
        assert message["queue_id"] == 3
        with ws.subscribe(topic=topic, group="handover", credit=10) as second:
            assert [m["body"] for m in second.messages(1)] == ["unacked on 3"]
            first.send(type="ack", queue_id=3, offset=0)  # too late: queue 3 is not the first's now
            assert first.status()["unacked"] == 0  # answered after the ack: the ack was handled
            offsets = client.get("/v1/groups/handover/offsets", params={"topic": topic}).json()["offsets"]
            assert {o["queue_id"]: o["committed_offset"] for o in offsets}[3] == 0
            assert not [frame for frame in first.skipped if frame["type"] == "committed"]


def test_an_ack_after_the_topic_was_deleted_commits_nothing_and_closes_the_socket(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    produce(client, topic, "a", "b", queue_id=0)
    with ws.subscribe(topic=topic, group="orphan", queues="0", **{"from": "first"}, credit=5) as socket:
        received = socket.messages(2)
        assert client.delete(f"/v1/topics/{topic}").status_code == 204
        socket.send(type="ack", queue_id=0, offsets=[m["queue_offset"] for m in received])
        code, reason = socket.closed()
        assert (code, reason.split()[0]) == (4400, "40014")
    assert all(g["group"] != "orphan" for g in client.get("/v1/groups").json()["groups"])


def test_a_message_nacked_past_the_group_s_max_reconsume_times_goes_to_the_dead_letters(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    assert client.put("/v1/groups/doomed/config", json={"max_reconsume_times": 1}).status_code == 200
    produce(client, topic, "poison", queue_id=0)
    with ws.subscribe(topic=topic, group="doomed", queues="0", **{"from": "first"}, credit=5) as socket:
        (first,) = socket.messages(1)
        socket.send(type="nack", queue_id=0, offset=first["queue_offset"])
        (again,) = socket.messages(1)
        assert (again["body"], again["reconsume_times"]) == ("poison", 1)
        socket.send(type="nack", queue_id=0, offset=first["queue_offset"])
        # Past the limit: to %DLQ%doomed, acknowledged here, and the commit moves past it.
        assert socket.next("committed")["offset"] == 1
    letters = client.get("/v1/topics/%25DLQ%25doomed/queues/0/messages", params={"offset": 0}).json()
    assert [(m["body"], m["reconsume_times"]) for m in letters["messages"]] == [("poison", 1)]
    assert letters["messages"][0]["properties"]["DLQ_ORIGIN_TOPIC"] == topic
