"""Topic administration from the Python client: bulk creation past one request's cap, and every
topic and group walked page by page."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from wharf_client import Admin, BrokerError

from tests.api.server import BrokerProcess


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Admin]:
    process = BrokerProcess(tmp_path_factory.mktemp("admin") / "store").start()
    with Admin(process.url) as admin:
        yield admin
    process.stop()


def test_create_topics_in_several_requests_and_walk_them_all(admin: Admin) -> None:
    names = [f"walk-{i:04d}" for i in range(1_234)]
    results = admin.create_topics([{"name": name, "queues": 8} for name in names[:1_200]] + names[1_200:])
    assert [r["name"] for r in results] == names
    assert {r["status"] for r in results} == {201}
    again = admin.create_topics(names[-3:])  # created with the default queues
    assert [r["status"] for r in again] == [200, 200, 200]
    walked = [topic["name"] for topic in admin.iter_topics(page_size=100)]
    assert walked == names
    assert {t["name"]: t["read_queues"] for t in admin.iter_topics()}["walk-0000"] == 8


def test_create_topic_answers_or_raises(admin: Admin) -> None:
    assert admin.create_topic("single", queues=2)["read_queues"] == 2
    with pytest.raises(BrokerError) as raised:
        admin.create_topic("single", queues=3)
    assert raised.value.status == 409


def test_walk_groups(admin: Admin) -> None:
    admin.create_topic("grouped", queues=1)
    # A commit must lie within the queue's offsets: give it 7 messages to commit.
    batch = {"messages": [{"body": f"m{index}"} for index in range(7)]}
    assert admin.http.post("/v1/topics/grouped/messages", json=batch).status_code == 200
    for index in range(7):
        offsets = {"offsets": [{"topic": "grouped", "queue_id": 0, "offset": index}]}
        assert admin.http.put(f"/v1/groups/g{index}/offsets", json=offsets).status_code == 200
    groups = list(admin.iter_groups(page_size=3))
    assert groups == [{"group": f"g{index}", "topics": ["grouped"]} for index in range(7)]
