"""Topics at scale through the API: bulk create with per-topic results, paged lists of topics and
groups, routes in place before a create answers, and the topic log across restarts."""

from __future__ import annotations

import itertools
from pathlib import Path

import httpx
import pytest

from app.api.errors import ErrorCode
from app.api.paging import encode_cursor
from tests.api.server import BrokerProcess

_batches = itertools.count()


def fresh_prefix() -> str:
    return f"bulk{next(_batches):03d}"


def every_page(client: httpx.Client, path: str, key: str, limit: int) -> list[dict]:
    items: list[dict] = []
    cursor = None
    while True:
        params = {"limit": str(limit), **({"cursor": cursor} if cursor is not None else {})}
        answer = client.get(path, params=params)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        assert len(page[key]) <= limit
        items += page[key]
        cursor = page.get("next_cursor")
        if cursor is None:
            return items


def test_a_bulk_create_answers_per_topic_and_routes_each_before_answering(client: httpx.Client) -> None:
    prefix = fresh_prefix()
    assert client.post("/v1/topics", json={"name": f"{prefix}-b", "queues": 4}).status_code == 201
    request = [
        {"name": f"{prefix}-a", "queues": 8},
        {"name": f"{prefix}-b", "queues": 4},  # there already, same configuration
        {"name": f"{prefix}-c", "queues": 2},
        {"name": f"{prefix}-b", "queues": 16},  # there already, another configuration
        {"name": f"{prefix}-a", "queues": 8},  # twice in one list
    ]
    answer = client.post("/v1/topics", json={"topics": request})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [(r["name"], r["status"]) for r in body["results"]] == [
        (f"{prefix}-a", 201),
        (f"{prefix}-b", 200),
        (f"{prefix}-c", 201),
        (f"{prefix}-b", 409),
        (f"{prefix}-a", 200),
    ]
    assert (body["created"], body["existing"], body["failed"]) == (2, 2, 1)
    assert body["results"][0]["topic"] == {
        "name": f"{prefix}-a",
        "read_queues": 8,
        "write_queues": 8,
        "perm": 6,
        "order": False,
    }
    assert body["results"][3]["error"]["error_code"] == ErrorCode.TOPIC_EXISTS
    assert "another configuration" in body["results"][3]["error"]["message"]
    for name, queues in ((f"{prefix}-a", 8), (f"{prefix}-c", 2)):
        route = client.get(f"/v1/topics/{name}/route")  # no waiting: published before the answer
        assert route.status_code == 200, route.text
        assert route.json()["queue_datas"][0]["write_queue_nums"] == queues


def test_a_single_create_and_a_delete_are_routed_before_they_answer(client: httpx.Client) -> None:
    name = f"{fresh_prefix()}-one"
    assert client.post("/v1/topics", json={"name": name, "queues": 3}).status_code == 201
    assert client.get(f"/v1/topics/{name}/route").json()["queue_datas"][0]["read_queue_nums"] == 3
    assert client.delete(f"/v1/topics/{name}").status_code == 204
    assert client.get(f"/v1/topics/{name}/route").status_code == 404


def test_a_bulk_create_is_capped_and_checked_whole(client: httpx.Client) -> None:
    prefix = fresh_prefix()
    over = client.post("/v1/topics", json={"topics": [{"name": f"{prefix}-{i}"} for i in range(1001)]})
    assert over.status_code == 413
    assert over.json()["error_code"] == ErrorCode.TOO_MANY_ITEMS
    assert "at most 1000" in over.json()["message"]
    bad = client.post("/v1/topics", json={"topics": [{"name": f"{prefix}-ok"}, {"name": "bad name!"}]})
    assert bad.status_code == 422 and "topics.1.name" in bad.json()["message"]
    assert client.post("/v1/topics", json={"topics": []}).status_code == 422
    across = client.post("/v1/topics", json={"topics": [{"name": f"{prefix}-x", "cluster": "c"}]})
    assert across.status_code == 422
    assert client.get(f"/v1/topics/{prefix}-ok").status_code == 404  # nothing of a refused list


def test_a_thousand_topics_in_one_request_are_all_listed_once_across_pages(client: httpx.Client) -> None:
    prefix = fresh_prefix()
    names = [f"{prefix}-{i:04d}" for i in range(1000)]
    answer = client.post("/v1/topics", json={"topics": [{"name": n, "queues": 8} for n in reversed(names)]})
    assert answer.json()["created"] == 1000
    listed = [topic["name"] for topic in every_page(client, "/v1/topics", "topics", 97)]
    assert len(listed) == len(set(listed))
    assert listed == sorted(listed)
    assert set(names) <= set(listed)
    first = client.get("/v1/topics").json()
    assert len(first["topics"]) == 100 and "next_cursor" in first  # default limit
    last = client.get("/v1/topics", params={"limit": "1000", "cursor": first["next_cursor"]}).json()
    assert "next_cursor" not in last or len(last["topics"]) == 1000


@pytest.mark.parametrize("path", ["/v1/topics", "/v1/groups"])
def test_paging_parameters_are_checked(client: httpx.Client, path: str) -> None:
    for limit in ("0", "1001", "-1", "ten", ""):
        answer = client.get(path, params={"limit": limit})
        assert answer.status_code == 400, (limit, answer.text)
        assert answer.json()["error_code"] == ErrorCode.INVALID_PARAMETER
    assert client.get(path, params={"limit": "1000"}).status_code == 200
    assert client.get(path, params={"limit": "1"}).status_code == 200
    wrong_list = encode_cursor("groups" if path == "/v1/topics" else "topics", "a")
    right_list = encode_cursor("topics" if path == "/v1/topics" else "groups", "a")
    assert client.get(path, params={"cursor": right_list}).status_code == 200
    for cursor in ("%%%", "bm90IGpzb24", "e30", wrong_list):
        answer = client.get(path, params={"cursor": cursor})
        assert answer.status_code == 400, (cursor, answer.text)
        assert answer.json()["error_code"] == ErrorCode.INVALID_CURSOR


def test_groups_are_listed_once_across_pages(client: httpx.Client) -> None:
    prefix = fresh_prefix()
    topic = f"{prefix}-offsets"
    assert client.post("/v1/topics", json={"name": topic, "queues": 2}).status_code == 201
    groups = [f"{prefix}-group-{i:02d}" for i in range(25)]
    for group in groups:
        offsets = [{"topic": topic, "queue_id": q, "offset": 0} for q in range(2)]
        assert client.put(f"/v1/groups/{group}/offsets", json={"offsets": offsets}).status_code == 200
    listed = every_page(client, "/v1/groups", "groups", 4)
    names = [entry["group"] for entry in listed]
    assert len(names) == len(set(names)) and names == sorted(names)
    mine = [entry for entry in listed if entry["group"].startswith(prefix)]
    assert mine == [{"group": group, "topics": [topic]} for group in groups]


@pytest.mark.crash
def test_topics_survive_a_graceful_stop_and_a_sigkill(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "store").start()
    try:
        with httpx.Client(base_url=broker.url, timeout=30.0) as client:
            client.post(
                "/v1/topics", json={"topics": [{"name": f"kept-{i:03d}", "queues": 8} for i in range(300)]}
            )
            assert client.delete("/v1/topics/kept-007").status_code == 204
            assert client.post("/v1/topics", json={"name": "single", "queues": 2}).status_code == 201
        expected = sorted([f"kept-{i:03d}" for i in range(300) if i != 7] + ["single"])
        broker.stop()
        broker.start()
        with httpx.Client(base_url=broker.url, timeout=30.0) as client:
            assert [t["name"] for t in every_page(client, "/v1/topics", "topics", 1000)] == expected
            assert client.post("/v1/topics", json={"name": "after-kill", "queues": 2}).status_code == 201
        broker.kill()  # SIGKILL: no shutdown
        broker.start()
        with httpx.Client(base_url=broker.url, timeout=30.0) as client:
            listed = every_page(client, "/v1/topics", "topics", 1000)
            assert [t["name"] for t in listed] == sorted([*expected, "after-kill"])
            assert {t["name"]: t["read_queues"] for t in listed}["kept-000"] == 8
            assert client.get("/v1/topics/after-kill/route").status_code == 200
    finally:
        broker.stop()
    assert (tmp_path / "store" / "config" / "topics.log").exists()
