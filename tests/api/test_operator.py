"""The operator's reads: topics and groups searched and paged on the broker, the delay levels'
backlogs, every open transaction, and what the calling account may do."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.api.errors import ErrorCode
from tests.api.acl_setup import ADMIN, CONSUMER, acl_broker, assert_refused, client_for
from tests.api.server import BrokerProcess
from tests.api.test_errors import assert_error


def test_topics_are_searched_and_paged_on_the_broker(client: httpx.Client) -> None:
    names = [f"opsearch-{index:02d}" for index in range(5)] + ["other-topic-x"]
    for name in names:
        assert client.post("/v1/topics", json={"name": name, "queues": 2}).status_code in (200, 201)
    client.post("/v1/topics/opsearch-03/messages", json={"messages": [{"body": "a", "queue_id": 1}] * 3})

    first = client.get("/v1/admin/topics", params={"q": "OPSEARCH", "limit": 2}).json()
    assert first["total"] == 5
    assert [topic["name"] for topic in first["topics"]] == ["opsearch-00", "opsearch-01"]
    seen = [topic["name"] for topic in first["topics"]]
    cursor = first["next_cursor"]
    while cursor:
        page = client.get("/v1/admin/topics", params={"q": "opsearch", "limit": 2, "cursor": cursor}).json()
        seen += [topic["name"] for topic in page["topics"]]
        cursor = page.get("next_cursor")
    assert seen == names[:5]

    found = client.get("/v1/admin/topics", params={"q": "search-03"}).json()
    (topic,) = found["topics"]
    assert topic["messages"] == 3
    assert topic["queues"] == [
        {"queue_id": 0, "min_offset": 0, "max_offset": 0},
        {"queue_id": 1, "min_offset": 0, "max_offset": 3},
    ]
    assert "next_cursor" not in found


def test_bad_paging_is_a_400_in_the_envelope(client: httpx.Client) -> None:
    assert_error(client.get("/v1/admin/topics", params={"limit": "0"}), ErrorCode.INVALID_PARAMETER)
    assert_error(client.get("/v1/admin/groups", params={"cursor": "nonsense"}), ErrorCode.INVALID_CURSOR)
    # A cursor of the other list is refused, not misread.
    client.post("/v1/topics", json={"name": "cursor-a", "queues": 1})
    client.post("/v1/topics", json={"name": "cursor-b", "queues": 1})
    cursor = client.get("/v1/admin/topics", params={"limit": 1}).json()["next_cursor"]
    assert_error(client.get("/v1/admin/groups", params={"cursor": cursor}), ErrorCode.INVALID_CURSOR)


def test_groups_are_searched_with_members_and_lag(client: httpx.Client, topic: str) -> None:
    client.post(f"/v1/topics/{topic}/messages", json={"messages": [{"body": "m", "queue_id": 0}] * 6})
    client.put(
        "/v1/groups/opgroup-lagging/offsets", json={"offsets": [{"topic": topic, "queue_id": 0, "offset": 2}]}
    )
    beat = client.post(
        "/v1/groups/opgroup-live/heartbeat", json={"client_id": "worker-1", "subscriptions": {topic: "*"}}
    )
    assert beat.status_code == 200, beat.text

    page = client.get("/v1/admin/groups", params={"q": "opgroup"}).json()
    assert page["total"] == 2
    lagging, live = page["groups"]
    assert (lagging["group"], lagging["members"], lagging["lag"], lagging["topics"]) == (
        "opgroup-lagging",
        0,
        4,
        [topic],
    )
    assert lagging.get("generation") is None
    # A member reads its group's retry topic too.
    assert (live["group"], live["members"]) == ("opgroup-live", 1)
    assert live["topics"] == sorted([topic, "%RETRY%opgroup-live"])
    assert live["generation"] >= 1
    assert live["lag"] == 6  # no offset committed: behind by all stored


def test_delay_levels_count_pending_and_the_next_due_time(client: httpx.Client, topic: str) -> None:
    before = {level["level"]: level for level in client.get("/v1/admin/delays").json()["levels"]}
    produced_ms = int(time.time() * 1000)
    answer = client.post(
        f"/v1/topics/{topic}/messages",
        json={"messages": [{"body": "later", "delay_level": 18}, {"body": "later too", "delay_level": 18}]},
    )
    assert answer.status_code == 200, answer.text
    view = client.get("/v1/admin/delays").json()
    levels = {level["level"]: level for level in view["levels"]}
    assert len(levels) == 18
    assert (levels[18]["delay"], levels[18]["delay_ms"]) == ("2h", 7_200_000)
    assert levels[18]["pending"] == before[18]["pending"] + 2
    due = levels[18]["next_due_ms"]
    assert produced_ms + 7_200_000 - 5_000 <= due <= view["now_ms"] + 7_200_000
    assert levels[3]["pending"] == 0 and levels[3]["next_due_ms"] is None


def test_timer_messages_are_counted_by_when_they_are_due(client: httpx.Client, topic: str) -> None:
    before = client.get("/v1/admin/delays").json()["timer"]
    now_ms = int(time.time() * 1000)
    answer = client.post(
        f"/v1/topics/{topic}/messages",
        json={
            "messages": [
                {"body": "in half an hour", "delay_ms": 1_800_000},
                {"body": "in three hours", "deliver_at_ms": now_ms + 3 * 3_600_000},
            ]
        },
    )
    assert answer.status_code == 200, answer.text
    timer = client.get("/v1/admin/delays").json()["timer"]
    assert timer["due_next_hour"] == before["due_next_hour"] + 1
    assert timer["due_later"] == before["due_later"] + 1
    assert now_ms + 1_790_000 <= timer["next_due_ms"] <= int(time.time() * 1000) + 1_800_000
    assert timer["complete"] is True


def test_a_timer_message_leaves_the_count_when_delivered(client: httpx.Client, topic: str) -> None:
    before = client.get("/v1/admin/delays").json()["timer"]["due_next_hour"]
    client.post(
        f"/v1/topics/{topic}/messages", json={"body": "in two seconds", "delay_ms": 2000, "queue_id": 0}
    )
    assert client.get("/v1/admin/delays").json()["timer"]["due_next_hour"] == before + 1
    deadline = time.monotonic() + 15
    while client.get(f"/v1/topics/{topic}/queues").json()["queues"][0]["max_offset"] < 1:
        assert time.monotonic() < deadline, "the timer message was not delivered"
        time.sleep(0.1)
    assert client.get("/v1/admin/delays").json()["timer"]["due_next_hour"] == before


def test_a_delayed_message_leaves_the_count_when_delivered(client: httpx.Client, topic: str) -> None:
    client.post(f"/v1/topics/{topic}/messages", json={"body": "soon", "delay_level": 1, "queue_id": 0})
    deadline = time.monotonic() + 15
    while True:
        level = client.get("/v1/admin/delays").json()["levels"][0]
        if level["pending"] == 0:
            break
        assert time.monotonic() < deadline, level
        time.sleep(0.1)
    queues = client.get(f"/v1/topics/{topic}/queues").json()["queues"]
    assert sum(queue["max_offset"] for queue in queues) == 1


def test_open_transactions_are_listed_oldest_first(client: httpx.Client, topic: str) -> None:
    ids = []
    for group in ("op-producers-a", "op-producers-b"):
        answer = client.post(
            f"/v1/topics/{topic}/messages",
            params={"transaction": "begin", "producer_group": group},
            json={"messages": [{"body": f"half of {group}"}]},
        )
        assert answer.status_code == 200, answer.text
        ids.append(answer.json()["results"][0]["transaction_id"])
    listed = client.get("/v1/admin/transactions").json()
    mine = [entry for entry in listed["transactions"] if entry["transaction_id"] in ids]
    assert [entry["transaction_id"] for entry in mine] == ids
    assert mine[0]["producer_group"] == "op-producers-a" and mine[0]["topic"] == topic
    assert mine[0]["check_times"] == 0 and mine[0]["check_url"] is None and mine[0]["age_ms"] >= 0

    only_b = client.get("/v1/admin/transactions", params={"producer_group": "op-producers-b"}).json()
    assert [entry["transaction_id"] for entry in only_b["transactions"]] == [ids[1]]
    assert only_b["total"] == 1

    assert client.post(f"/v1/transactions/{ids[1]}/commit").status_code == 200
    after = client.get("/v1/admin/transactions", params={"producer_group": "op-producers-b"}).json()
    assert after == {"total": 0, "transactions": []}
    assert_error(client.get("/v1/admin/transactions", params={"limit": 0}), ErrorCode.VALIDATION_FAILED)


def test_access_without_an_acl_is_admin(client: httpx.Client) -> None:
    assert client.get("/v1/access").json() == {"acl": False, "account": None, "admin": True}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory: Path = tmp_path_factory.mktemp("operator-acl")
    broker = acl_broker(directory).start()
    yield broker
    broker.stop()


def test_access_names_the_account_and_whether_it_is_admin(guarded: BrokerProcess) -> None:
    with client_for(guarded, ADMIN) as admin:
        assert admin.get("/v1/access").json() == {"acl": True, "account": ADMIN[0], "admin": True}
        assert admin.get("/v1/admin/groups").status_code == 200
    with client_for(guarded, CONSUMER) as consumer:
        assert consumer.get("/v1/access").json() == {"acl": True, "account": CONSUMER[0], "admin": False}
        for path in ("/v1/admin/topics", "/v1/admin/groups", "/v1/admin/delays", "/v1/admin/transactions"):
            assert_refused(consumer.get(path), 403)
    with client_for(guarded, None) as anonymous:
        assert_refused(anonymous.get("/v1/access"), 401)
