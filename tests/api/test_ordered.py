"""Ordered consumption over HTTP: queue locks (lock, renew, expire, unlock, across a rebalance),
group pull of locked queues only, commits fenced by the locks, and a failed message retried in
place. SIGKILL and restart: tests/api/test_ordered_crash.py."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from wharf_client.sharding import queue_for_key

from tests.api.ordering import (
    assigned,
    commit,
    join,
    lock,
    lock_holders,
    produce_keyed,
    pull,
    unlock,
    wait_for,
)
from tests.api.server import BrokerProcess

LOCK_EXPIRY_S = 4
SUSPEND_MS = 1000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("ordered") / "store",
        lock_expiry_s=LOCK_EXPIRY_S,
        orderly_suspend_ms=SUSPEND_MS,
    )
    process.start()
    yield process  # the client fixture of tests/conftest.py talks to it
    process.stop()


_names = iter(range(10_000))


def make_topic(client: httpx.Client, queues: int) -> str:
    name = f"ordered-{next(_names)}"
    assert client.post("/v1/topics", json={"name": name, "queues": queues}).status_code == 201
    return name


def test_a_sharding_key_lands_on_the_queue_java_clients_choose(client: httpx.Client) -> None:
    topic = make_topic(client, 8)
    results = produce_keyed(client, topic, [(key, 0) for key in ("hello", "order-1", "Zürich-42", "😀")])
    assert [result["queue_id"] for result in results] == [2, 6, 3, 3]
    assert [result["queue_id"] for result in results] == [
        queue_for_key(key, 8) for key in ("hello", "order-1", "Zürich-42", "😀")
    ]


def test_a_member_locks_only_its_own_queues_and_another_never_gets_a_held_one(client: httpx.Client) -> None:
    topic = make_topic(client, 4)
    a = join(client, "locks", "a", topic)
    assert lock(client, "locks", "a", assigned(a, topic)) == [(topic, q) for q in range(4)]
    b = join(client, "locks", "b", topic)  # the rebalance gives b queues 2 and 3
    assert assigned(b, topic) == [(topic, 2), (topic, 3)]
    # a's locks live on across the rebalance: b gets none of them, nor a queue that is not its own.
    assert lock(client, "locks", "b", [(topic, q) for q in range(4)]) == []
    # a may renew only what is still allocated to it; the rest it releases.
    assert lock(client, "locks", "a", [(topic, q) for q in range(4)]) == [(topic, 0), (topic, 1)]
    assert unlock(client, "locks", "a", [(topic, 2), (topic, 3)]) == [(topic, 2), (topic, 3)]
    assert lock(client, "locks", "b", assigned(b, topic)) == [(topic, 2), (topic, 3)]
    holders = lock_holders(client, "locks")
    assert holders == {(topic, 0): ["a"], (topic, 1): ["a"], (topic, 2): ["b"], (topic, 3): ["b"]}
    view = client.get("/v1/groups/locks").json()
    assert view["consume_mode"] == "orderly"
    # A member that leaves releases its locks at once.
    assert client.delete("/v1/groups/locks/members/a").status_code == 204
    b = join(client, "locks", "b", topic)
    assert lock(client, "locks", "b", assigned(b, topic)) == [(topic, q) for q in range(4)]


def test_a_lock_lives_while_renewed_and_expires_after_its_last_renewal(client: httpx.Client) -> None:
    topic = make_topic(client, 2)
    a = join(client, "expiry", "a", topic)
    asked_at = time.monotonic()  # the lock's time is after this
    lock(client, "expiry", "a", assigned(a, topic))
    locked_at = time.monotonic()  # ... and before this
    b = join(client, "expiry", "b", topic)
    theirs = assigned(b, topic)
    assert theirs == [(topic, 1)]
    # a cannot renew queue 1, no longer its own, but its lock lives LOCK_EXPIRY_S after the last
    # renewal, heartbeats or not (half of it checked: a request may be slow to arrive).
    while time.monotonic() - locked_at < LOCK_EXPIRY_S / 2:
        assert lock(client, "expiry", "b", theirs) == []
        join(client, "expiry", "a", topic)
        join(client, "expiry", "b", topic)
        time.sleep(0.1)
    won = wait_for(lambda: lock(client, "expiry", "b", theirs), timeout_s=LOCK_EXPIRY_S + 5)
    assert won == theirs
    assert time.monotonic() - asked_at >= LOCK_EXPIRY_S
    # Renewing keeps a lock past twice its expiry time; a heartbeat alone renews none.
    renewing_since = time.monotonic()
    while time.monotonic() - renewing_since < 2 * LOCK_EXPIRY_S:
        mine = assigned(join(client, "expiry", "a", topic), topic)
        assert lock(client, "expiry", "a", mine) == [(topic, 0)]
        join(client, "expiry", "b", topic)
        time.sleep(0.25)
    assert lock_holders(client, "expiry") == {(topic, 0): ["a"]}


def test_an_ordered_member_pulls_only_locked_queues_and_commits_under_its_locks(client: httpx.Client) -> None:
    topic = make_topic(client, 2)
    a = join(client, "pulls", "a", topic)
    for seq in range(3):
        produce_keyed(client, topic, [("hello", seq)])  # queue 0 of 2
    produce_keyed(client, topic, [("Zürich-42", 0)])  # queue 1 of 2
    key_queue = queue_for_key("hello", 2)
    assert pull(client, "pulls", "a")["messages"] == []  # nothing locked yet
    lock(client, "pulls", "a", [(topic, key_queue)])
    first = pull(client, "pulls", "a", max_messages=2)
    assert [m["body"] for m in first["messages"]] == ["hello:0", "hello:1"]
    # Until it commits, the same batch again: never the next one.
    assert [m["body"] for m in pull(client, "pulls", "a", max_messages=2)["messages"]] == [
        "hello:0",
        "hello:1",
    ]
    # b joins: the generation moves, but a still holds queue 0's lock: its commit goes through.
    join(client, "pulls", "b", topic)
    done = commit(client, "pulls", "a", a["generation"], [(topic, key_queue, 2)])
    assert done.status_code == 200, done.text
    # A queue whose lock it does not hold it cannot commit.
    other = 1 - key_queue
    refused = commit(client, "pulls", "a", a["generation"], [(topic, other, 1)])
    assert (refused.status_code, refused.json()["error_code"]) == (409, 40930)
    assert [m["body"] for m in pull(client, "pulls", "a")["messages"]] == ["hello:2"]
    unlock(client, "pulls", "a")
    assert pull(client, "pulls", "a")["messages"] == []


def test_a_failed_ordered_message_comes_again_in_place_then_goes_to_the_dead_letters(
    client: httpx.Client,
) -> None:
    topic = make_topic(client, 1)
    assert client.put("/v1/groups/inplace/config", json={"max_reconsume_times": 2}).status_code == 200
    mine = assigned(join(client, "inplace", "w", topic), topic)
    produce_keyed(client, topic, [("k", seq) for seq in range(3)])
    seen = []
    for attempt in range(3):
        # Renewed before each pull, as an ordered consumer does: three suspensions can outlast
        # the lock's expiry on a busy machine.
        assert lock(client, "inplace", "w", mine) == [(topic, 0)]
        (head, *_) = pull(client, "inplace", "w", max_wait_ms=5_000)["messages"]
        seen.append((head["body"], head["reconsume_times"]))
        failed_at = time.time() * 1000
        sent = client.post("/v1/groups/inplace/retry", json={"topic": topic, "queue_id": 0, "offset": 0})
        assert sent.status_code == 200, sent.text
        if attempt < 2:
            assert sent.json()["status"] == "SUSPENDED"
            assert sent.json()["topic"] == topic
            assert sent.json()["reconsume_times"] == attempt + 1
            assert sent.json()["suspended_until_ms"] >= failed_at + SUSPEND_MS - 50
            # Suspended: a pull without a wait finds nothing (unless it came late), and the next
            # message never jumps ahead.
            early = pull(client, "inplace", "w")["messages"]
            assert early == [] or time.time() * 1000 >= sent.json()["suspended_until_ms"]
            assert [m["body"] for m in early][:1] in ([], ["k:0"])
    assert seen == [("k:0", 0), ("k:0", 1), ("k:0", 2)]
    assert sent.json()["status"] == "DEAD_LETTER"
    assert sent.json()["topic"] == "%DLQ%inplace"
    # The queue goes on past it; nothing went to the retry topic.
    assert lock(client, "inplace", "w", mine) == [(topic, 0)]
    assert [m["body"] for m in pull(client, "inplace", "w", max_wait_ms=5_000)["messages"]] == ["k:1", "k:2"]
    (letter,) = client.get("/v1/groups/inplace/dlq").json()["dead_letters"]
    assert (letter["original_topic"], letter["message"]["body"]) == (topic, "k:0")
    # Nothing went through the group's retry topic (made at the first heartbeat, and left empty).
    retry_queues = client.get("/v1/topics/%25RETRY%25inplace/queues").json()["queues"]
    assert [queue["max_offset"] for queue in retry_queues] == [0]


def test_mixed_consume_modes_and_a_concurrent_lock_are_refused(client: httpx.Client) -> None:
    topic = make_topic(client, 2)
    join(client, "mixed", "a", topic)
    body = {"client_id": "b", "subscriptions": {topic: "*"}, "consume_mode": "concurrently"}
    conflict = client.post("/v1/groups/mixed/heartbeat", json=body)
    assert (conflict.status_code, conflict.json()["error_code"]) == (409, 40905)
    assert client.post("/v1/groups/plain/heartbeat", json=body).status_code == 200
    refused = client.post("/v1/groups/plain/locks", json={"client_id": "b", "queues": []})
    assert (refused.status_code, refused.json()["error_code"]) == (400, 40001)
    stranger = client.post("/v1/groups/plain/locks", json={"client_id": "nobody", "queues": []})
    assert (stranger.status_code, stranger.json()["error_code"]) == (404, 40407)
    broadcast = client.post(
        "/v1/groups/wide/heartbeat",
        json={**body, "consume_mode": "orderly", "model": "broadcasting"},
    )
    assert (broadcast.status_code, broadcast.json()["error_code"]) == (400, 40001)
