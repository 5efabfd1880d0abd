"""Consumer groups served by the broker over HTTP: heartbeat and rebalance, expiry, group pull,
fenced commits, broadcasting, and a SIGKILL + restart in the middle."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.server import BrokerProcess

EXPIRY_S = 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("groups") / "store", consumer_expiry_s=EXPIRY_S)
    process.start()
    yield process
    process.stop()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30) as http:
        yield http


_names = iter(range(10_000))


def make_topic(client: httpx.Client, queues: int) -> str:
    name = f"members-{next(_names)}"
    assert client.post("/v1/topics", json={"name": name, "queues": queues}).status_code == 201
    return name


def heartbeat(client: httpx.Client, group: str, client_id: str, topic: str, **fields: Any) -> dict[str, Any]:
    answer = client.post(
        f"/v1/groups/{group}/heartbeat",
        json={"client_id": client_id, "subscriptions": {topic: "*"}, **fields},
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def queues_of(answer: dict[str, Any]) -> list[int]:
    """The queue ids assigned of the subscribed topic (not of the group's retry topic)."""
    return sorted(
        item["queue_id"] for item in answer["assignments"] if not item["topic"].startswith("%RETRY%")
    )


def produce_to(client: httpx.Client, topic: str, queue_id: int, body: str) -> None:
    answer = client.post(f"/v1/topics/{topic}/messages", json={"body": body, "queue_id": queue_id})
    assert answer.status_code == 200, answer.text
    assert answer.json()["results"][0]["status"] == "SEND_OK"


def wait_for(condition: Any, timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def test_members_share_the_queues_averagely_and_each_join_bumps_the_generation(client: httpx.Client) -> None:
    topic = make_topic(client, 8)
    first = heartbeat(client, "share", "a", topic)
    assert queues_of(first) == list(range(8))
    second = heartbeat(client, "share", "b", topic)
    third = heartbeat(client, "share", "c", topic)
    assert first["generation"] < second["generation"] < third["generation"]
    answers = {cid: heartbeat(client, "share", cid, topic) for cid in ("a", "b", "c")}
    # A renewal changes nothing: the generation stays.
    assert {answer["generation"] for answer in answers.values()} == {third["generation"]}
    assert [queues_of(answers[cid]) for cid in ("a", "b", "c")] == [[0, 1, 2], [3, 4, 5], [6, 7]]

    view = client.get("/v1/groups/share").json()
    assert [member["client_id"] for member in view["members"]] == ["a", "b", "c"]
    assert (view["model"], view["strategy"], view["generation"]) == (
        "clustering",
        "averagely",
        third["generation"],
    )

    assert client.delete("/v1/groups/share/members/c").status_code == 204
    after = {cid: heartbeat(client, "share", cid, topic) for cid in ("a", "b")}
    assert [queues_of(after[cid]) for cid in ("a", "b")] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert after["a"]["generation"] > third["generation"]
    gone = client.delete("/v1/groups/share/members/c")
    assert (gone.status_code, gone.json()["error_code"]) == (404, 40407)


def test_a_silent_member_expires_and_its_queues_go_to_the_others(client: httpx.Client) -> None:
    topic = make_topic(client, 4)
    heartbeat(client, "expiry", "quiet", topic)
    assert queues_of(heartbeat(client, "expiry", "alive", topic)) == [0, 1]  # sorted: alive < quiet
    # "alive" keeps heartbeating; "quiet" stops and is dropped after EXPIRY_S.
    taken = wait_for(
        lambda: (answer := heartbeat(client, "expiry", "alive", topic)) and len(queues_of(answer)) == 4
    )
    assert taken
    pull = client.get("/v1/groups/expiry/messages", params={"client_id": "quiet"})
    assert (pull.status_code, pull.json()["error_code"]) == (404, 40407)


def test_a_member_pulls_only_its_queues_and_commits_fenced_by_generation(client: httpx.Client) -> None:
    topic = make_topic(client, 4)
    one = heartbeat(client, "fence", "one", topic, consume_from="first")
    two = heartbeat(client, "fence", "two", topic, consume_from="first")
    for queue_id in range(4):
        produce_to(client, topic, queue_id, f"m{queue_id}")
    pulled = client.get("/v1/groups/fence/messages", params={"client_id": "two", "max_messages": 10}).json()
    assert sorted(m["queue_id"] for m in pulled["messages"]) == [2, 3]
    assert pulled["generation"] == two["generation"]
    offsets = [
        {"topic": o["topic"], "queue_id": o["queue_id"], "offset": o["next_offset"]}
        for o in pulled["offsets"]
    ]
    assert sorted(o["queue_id"] for o in offsets) == [2, 3]

    # "one" owns queue 0 now too, but its generation is from before "two" joined.
    own_queue = [{"topic": topic, "queue_id": 0, "offset": 1}]
    stale = client.put(
        "/v1/groups/fence/offsets",
        json={"client_id": "one", "generation": one["generation"], "offsets": own_queue},
    )
    assert (stale.status_code, stale.json()["error_code"]) == (409, 40904)
    assert stale.json()["generation"] == two["generation"]
    not_owned = client.put(
        "/v1/groups/fence/offsets",
        json={"client_id": "one", "generation": two["generation"], "offsets": offsets},
    )
    assert (not_owned.status_code, not_owned.json()["error_code"]) == (409, 40904)
    committed = client.put(
        "/v1/groups/fence/offsets",
        json={"client_id": "two", "generation": two["generation"], "offsets": offsets},
    )
    assert committed.status_code == 200, committed.text
    # The fenced commits moved nothing; "two"'s did: its next pull finds nothing new.
    again = client.get("/v1/groups/fence/messages", params={"client_id": "two"}).json()
    assert again["messages"] == []
    mine = client.get("/v1/groups/fence/messages", params={"client_id": "one"}).json()
    assert sorted(m["body"] for m in mine["messages"]) == ["m0", "m1"]
    # Without client_id a commit stays an administrative set of the offset.
    admin = client.put(
        "/v1/groups/fence/offsets", json={"offsets": [{"topic": topic, "queue_id": 0, "offset": 1}]}
    )
    assert admin.status_code == 200


def test_a_group_pull_counts_what_it_hands_out_as_consumed(client: httpx.Client) -> None:
    topic = make_topic(client, 2)
    heartbeat(client, "counted", "c", topic, consume_from="first")
    for n in range(3):
        produce_to(client, topic, n % 2, f"c{n}")
    assert len(client.get("/v1/groups/counted/messages", params={"client_id": "c"}).json()["messages"]) == 3
    families = text_string_to_metric_families(client.get("/metrics").text)
    consumed = {
        (sample.labels["topic"], sample.labels["group"]): sample.value
        for family in families
        if family.name == "wharf_messages_consumed"
        for sample in family.samples
        if sample.name == "wharf_messages_consumed_total"
    }
    assert consumed[(topic, "counted")] == 3


def test_a_held_group_pull_wakes_for_its_own_queues_only(client: httpx.Client) -> None:
    topic = make_topic(client, 2)
    heartbeat(client, "wake", "left", topic)
    right = heartbeat(client, "wake", "right", topic)
    assert queues_of(right) == [1]
    # A message on the other member's queue does not answer the hold.
    produce_to(client, topic, 0, "not for right")
    idle = client.get("/v1/groups/wake/messages", params={"client_id": "right", "max_wait_ms": 800}).json()
    assert idle["messages"] == []

    answers: list[dict[str, Any]] = []
    waiter = threading.Thread(
        target=lambda: answers.append(
            client.get(
                "/v1/groups/wake/messages", params={"client_id": "right", "max_wait_ms": 20_000}
            ).json()
        )
    )
    waiter.start()
    wait_for(lambda: client.get("/v1/stats").json()["held_pulls"] >= 1)
    produce_to(client, topic, 1, "for right")
    waiter.join(25)
    assert [m["body"] for m in answers[0]["messages"]] == ["for right"]


def test_a_rebalance_ends_a_held_group_pull_with_the_new_generation(client: httpx.Client) -> None:
    topic = make_topic(client, 2)
    before = heartbeat(client, "moving", "holder", topic)
    answers: list[dict[str, Any]] = []
    started = time.monotonic()
    waiter = threading.Thread(
        target=lambda: answers.append(
            client.get(
                "/v1/groups/moving/messages", params={"client_id": "holder", "max_wait_ms": 20_000}
            ).json()
        )
    )
    waiter.start()
    wait_for(lambda: client.get("/v1/stats").json()["held_pulls"] >= 2)  # one hold per queue
    joined = heartbeat(client, "moving", "newcomer", topic)
    waiter.join(25)
    assert answers[0]["generation"] == joined["generation"] > before["generation"]
    assert time.monotonic() - started < 20  # ended by the rebalance, not by its wait


def test_broadcasting_gives_every_member_every_queue_with_its_own_offsets(client: httpx.Client) -> None:
    topic = make_topic(client, 2)
    for cid in ("x", "y"):
        answer = heartbeat(client, "radio", cid, topic, model="broadcasting", consume_from="first")
        assert queues_of(answer) == [0, 1]
    produce_to(client, topic, 0, "everyone")
    x = client.get("/v1/groups/radio/messages", params={"client_id": "x"}).json()
    gen = heartbeat(client, "radio", "x", topic, model="broadcasting")["generation"]
    offsets = [
        {"topic": o["topic"], "queue_id": o["queue_id"], "offset": o["next_offset"]} for o in x["offsets"]
    ]
    assert (
        client.put(
            "/v1/groups/radio/offsets", json={"client_id": "x", "generation": gen, "offsets": offsets}
        ).status_code
        == 200
    )
    assert client.get("/v1/groups/radio/messages", params={"client_id": "x"}).json()["messages"] == []
    # y's offsets are its own: it still gets the message x committed past.
    y = client.get("/v1/groups/radio/messages", params={"client_id": "y"}).json()
    assert [m["body"] for m in y["messages"]] == ["everyone"]


def test_a_member_with_another_strategy_is_refused(client: httpx.Client) -> None:
    topic = make_topic(client, 2)
    heartbeat(client, "mixed", "a", topic)
    refused = client.post(
        "/v1/groups/mixed/heartbeat",
        json={"client_id": "b", "subscriptions": {topic: "*"}, "strategy": "circle"},
    )
    assert (refused.status_code, refused.json()["error_code"]) == (409, 40905)
    missing = client.post(
        "/v1/groups/mixed/heartbeat", json={"client_id": "b", "subscriptions": {"nope-x": "*"}}
    )
    assert (missing.status_code, missing.json()["error_code"]) == (404, 40402)


def test_a_heartbeat_of_a_new_member_past_the_cap_is_409(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "store", max_group_members=2).start()
    try:
        with httpx.Client(base_url=process.url, timeout=30) as small:
            topic = make_topic(small, 2)
            heartbeat(small, "crowded", "a", topic)
            heartbeat(small, "crowded", "b", topic)
            body = {"client_id": "c", "subscriptions": {topic: "*"}}
            full = small.post("/v1/groups/crowded/heartbeat", json=body)
            assert (full.status_code, full.json()["error_code"]) == (409, 40906)
            heartbeat(small, "crowded", "a", topic)  # a member already in renews
            members = small.get("/v1/groups/crowded").json()["members"]
            assert [member["client_id"] for member in members] == ["a", "b"]
    finally:
        process.stop()


@pytest.mark.crash
@pytest.mark.slow
def test_offsets_survive_sigkill_and_generations_only_grow(tmp_path: Path) -> None:
    # Offsets are forced to disk every interval (RocketMQ's 5 s); the kill comes after one.
    process = BrokerProcess(
        tmp_path / "store", consumer_expiry_s=EXPIRY_S, consumer_offset_persist_interval_ms=100
    ).start()
    try:
        with httpx.Client(base_url=process.url, timeout=30) as http:
            topic = make_topic(http, 2)
            before = heartbeat(http, "durable", "solo", topic, consume_from="first")
            assert http.get("/v1/groups/durable").json()["config"] == {"max_reconsume_times": 16}
            changed = http.put("/v1/groups/durable/config", json={"max_reconsume_times": 3})
            assert changed.json() == {"max_reconsume_times": 3}
            for n in range(6):
                produce_to(http, topic, n % 2, f"n{n}")
            pulled = http.get(
                "/v1/groups/durable/messages", params={"client_id": "solo", "max_messages": 4}
            ).json()
            offsets = [
                {"topic": o["topic"], "queue_id": o["queue_id"], "offset": o["next_offset"]}
                for o in pulled["offsets"]
            ]
            body = {"client_id": "solo", "generation": before["generation"], "offsets": offsets}
            assert http.put("/v1/groups/durable/offsets", json=body).status_code == 200
            config = tmp_path / "store" / "config"
            wanted = {(o["queue_id"], o["offset"]) for o in offsets}

            def persisted() -> bool:
                # What a restart loads: the snapshot, then the log over it.
                snapshot = config / "consumerOffset.json"
                table = json.loads(snapshot.read_text())["offsetTable"] if snapshot.exists() else {}
                on_disk = {int(q): o for q, o in table.get(f"{topic}@durable", {}).items()}
                log_path = config / "consumerOffset.log"
                for line in log_path.read_text().splitlines() if log_path.exists() else []:
                    entry = json.loads(line)
                    if entry["k"] == f"{topic}@durable" and "q" in entry:
                        on_disk[entry["q"]] = entry["o"]
                return wanted <= set(on_disk.items())

            wait_for(persisted)
        process.kill()
        process.start()
        with httpx.Client(base_url=process.url, timeout=30) as http:
            assert http.get("/v1/groups/durable").json()["config"] == {"max_reconsume_times": 3}
            lost = http.get("/v1/groups/durable/messages", params={"client_id": "solo"})
            assert lost.json()["error_code"] == 40407  # membership is rebuilt by heartbeats
            after = heartbeat(http, "durable", "solo", topic, consume_from="first")
            assert after["generation"] > before["generation"]
            stale = http.put("/v1/groups/durable/offsets", json=body)
            assert stale.status_code == 409
            rest = http.get(
                "/v1/groups/durable/messages", params={"client_id": "solo", "max_messages": 10}
            ).json()
            seen = {m["body"] for m in pulled["messages"]}
            assert sorted(m["body"] for m in rest["messages"]) == sorted({f"n{n}" for n in range(6)} - seen)
    finally:
        process.stop()
