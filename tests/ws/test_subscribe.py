"""WebSocket subscriptions through a real server: push on arrival, credit, filters, queues, start."""

from __future__ import annotations

import time

import httpx

from tests.ws.conftest import MAX_CREDIT
from tests.ws.wsclient import WsBroker, held_pulls, produce, wait_for


def test_a_message_is_pushed_as_it_arrives_by_the_hold_service(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    assert wait_for(lambda: held_pulls(client) == 0)  # earlier tests' sockets are gone
    with ws.subscribe(topic=topic, credit=10) as socket:
        # Four idle queues wait in the hold service, as four long polls would.
        assert wait_for(lambda: held_pulls(client) == 4)
        produce(client, topic, "hello", queue_id=2)
        # The periodic check runs once a minute and a hold lasts 30 s: only the arrival can wake it.
        (message,) = socket.messages(1, timeout_s=5)
        assert (message["body"], message["queue_id"], message["queue_offset"]) == ("hello", 2, 0)
        assert {"msg_id", "unique_id", "topic", "tags", "keys", "properties", "store_timestamp"} <= set(
            message
        )


def test_messages_have_the_pull_api_shape(ws: WsBroker, client: httpx.Client, topic: str) -> None:
    produce(client, topic, "shaped", queue_id=0, tags="TagA", keys=["k1", "k2"], properties={"p": "v"})
    with ws.subscribe(topic=topic, queues="0", **{"from": "first"}, credit=1) as socket:
        (pushed,) = socket.messages(1)
        pulled = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0}).json()
        assert pushed == pulled["messages"][0]


def test_the_broker_never_sends_beyond_the_credit_granted(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    produce(client, topic, *[f"m{i}" for i in range(10)], queue_id=1)
    with ws.subscribe(topic=topic, queues="1", **{"from": "first"}) as socket:
        assert socket.status()["credit"] == 0  # nothing was granted: nothing came before the reply
        socket.send(type="permit", n=3)
        first = socket.messages(3)
        status = socket.status()
        assert status["credit"] == 0
        assert status["queues"] == [{"queue_id": 1, "offset": 3, "committed": None, "inflight": 0}]
        socket.send(type="permit", n=7)
        rest = socket.messages(7)
        assert [m["body"] for m in first + rest] == [f"m{i}" for i in range(10)]
        assert socket.status()["credit"] == 0


def test_credit_is_shared_by_the_queues_of_one_socket(ws: WsBroker, client: httpx.Client, topic: str) -> None:
    for queue_id in range(4):
        produce(client, topic, f"q{queue_id}-a", f"q{queue_id}-b", queue_id=queue_id)
    with ws.subscribe(topic=topic, **{"from": "first"}, credit=5) as socket:
        received = socket.messages(5)
        assert socket.status()["credit"] == 0
        socket.send(type="permit", n=3)
        received += socket.messages(3)
        assert sorted(m["body"] for m in received) == sorted(f"q{q}-{s}" for q in range(4) for s in "ab")


def test_a_tag_filter_lets_only_matching_messages_through(
    ws: WsBroker, client: httpx.Client, topic: str
) -> None:
    with ws.subscribe(topic=topic, tags="TagA || TagB", credit=10) as socket:
        for tags in ("TagC", "TagA", "TagD", "TagB"):
            produce(client, topic, f"with {tags}", queue_id=0, tags=tags)
        received = socket.messages(2)
        assert [m["tags"] for m in received] == ["TagA", "TagB"]
        assert socket.status()["queues"][0]["offset"] == 4  # the others were read past, not sent


def test_named_queues_are_the_only_ones_read(ws: WsBroker, client: httpx.Client, topic: str) -> None:
    with ws.subscribe(topic=topic, queues="3,1", credit=10) as socket:
        assert [q["queue_id"] for q in socket.assignment["queues"]] == [1, 3]
        for queue_id in range(4):
            produce(client, topic, f"to {queue_id}", queue_id=queue_id)
        received = socket.messages(2)
        assert sorted(m["queue_id"] for m in received) == [1, 3]
        assert [q["queue_id"] for q in socket.status()["queues"]] == [1, 3]


def test_from_last_skips_what_was_stored_before(ws: WsBroker, client: httpx.Client, topic: str) -> None:
    produce(client, topic, "old", queue_id=0)
    with ws.subscribe(topic=topic, queues="0", credit=10) as socket:
        assert socket.assignment["queues"] == [{"queue_id": 0, "offset": 1}]
        produce(client, topic, "new", queue_id=0)
        assert [m["body"] for m in socket.messages(1)] == ["new"]


def test_from_first_and_from_a_timestamp(ws: WsBroker, client: httpx.Client, topic: str) -> None:
    produce(client, topic, "a", "b", queue_id=0)
    with ws.subscribe(topic=topic, queues="0", **{"from": "first"}, credit=10) as first:
        assert [m["body"] for m in first.messages(2)] == ["a", "b"]
    with ws.subscribe(topic=topic, queues="0", **{"from": "0"}) as since_epoch:
        assert since_epoch.assignment["queues"] == [{"queue_id": 0, "offset": 0}]
    future = int(time.time() * 1000) + 3_600_000
    with ws.subscribe(topic=topic, queues="0", **{"from": str(future)}) as later:
        assert later.assignment["queues"] == [{"queue_id": 0, "offset": 2}]


def test_an_anonymous_subscriber_may_grant_up_to_the_credit_limit(ws: WsBroker, topic: str) -> None:
    with ws.subscribe(topic=topic, credit=MAX_CREDIT - 1) as socket:
        socket.send(type="permit", n=1)
        assert socket.status()["credit"] == MAX_CREDIT


def test_closing_the_socket_releases_its_held_reads(ws: WsBroker, client: httpx.Client, topic: str) -> None:
    assert wait_for(lambda: held_pulls(client) == 0)
    with ws.subscribe(topic=topic, credit=1):
        assert wait_for(lambda: held_pulls(client) == 4)
    assert wait_for(lambda: held_pulls(client) == 0)
