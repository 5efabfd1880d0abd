"""Consumer groups: commit, read back with lag, pull from the committed offset, start policies."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from app.api.errors import ErrorCode
from tests.api.server import BrokerProcess
from tests.api.test_errors import assert_error


def produce(client: httpx.Client, topic: str, queue_id: int, count: int) -> None:
    messages = [{"body": f"m{i}", "queue_id": queue_id} for i in range(count)]
    assert client.post(f"/v1/topics/{topic}/messages", json={"messages": messages}).status_code == 200


def test_commit_and_read_back_with_lag(client: httpx.Client, topic: str) -> None:
    produce(client, topic, 0, 10)
    produce(client, topic, 1, 4)
    response = client.put(
        "/v1/groups/billing/offsets",
        json={
            "offsets": [
                {"topic": topic, "queue_id": 0, "offset": 7},
                {"topic": topic, "queue_id": 1, "offset": 4},
            ]
        },
    )
    assert response.status_code == 200, response.text
    rows = {
        row["queue_id"]: row
        for row in client.get("/v1/groups/billing/offsets", params={"topic": topic}).json()["offsets"]
    }
    assert (rows[0]["committed_offset"], rows[0]["max_offset"], rows[0]["lag"]) == (7, 10, 3)
    assert (rows[1]["committed_offset"], rows[1]["lag"]) == (4, 0)
    assert rows[2]["committed_offset"] is None and rows[2]["lag"] == 0
    assert topic in next(
        g["topics"] for g in client.get("/v1/groups").json()["groups"] if g["group"] == "billing"
    )


def test_pull_with_a_group_starts_at_its_committed_offset(client: httpx.Client, topic: str) -> None:
    produce(client, topic, 2, 6)
    client.put("/v1/groups/resume/offsets", json={"offsets": [{"topic": topic, "queue_id": 2, "offset": 4}]})
    answer = client.get(f"/v1/topics/{topic}/queues/2/messages", params={"group": "resume"}).json()
    assert [m["body"] for m in answer["messages"]] == ["m4", "m5"]


def test_piggybacked_commit(client: httpx.Client, topic: str) -> None:
    produce(client, topic, 3, 5)
    answer = client.get(
        f"/v1/topics/{topic}/queues/3/messages", params={"group": "piggy", "commit_offset": 2}
    ).json()
    assert [m["body"] for m in answer["messages"]] == ["m2", "m3", "m4"]
    rows = client.get("/v1/groups/piggy/offsets", params={"topic": topic}).json()["offsets"]
    assert rows[3]["committed_offset"] == 2


def test_new_group_start_policies_on_a_young_queue(client: httpx.Client, topic: str) -> None:
    """RocketMQ's young-queue rule: a queue that starts at 0 with its first message still in memory
    is read from 0 by a new group whatever its policy (the broker's queryConsumerOffset answers 0)."""
    produce(client, topic, 0, 3)
    url = f"/v1/topics/{topic}/queues/0/messages"
    future = str(int(time.time() * 1000) + 3_600_000)
    for group, start in (("new-a", "first"), ("new-b", "last"), ("new-c", future)):
        answer = client.get(url, params={"group": group, "from": start}).json()
        assert [m["body"] for m in answer["messages"]] == ["m0", "m1", "m2"], start
    assert_error(
        client.get(url, params={"group": "new-d", "from": "yesterday"}),
        ErrorCode.INVALID_PARAMETER,
    )


def test_offset_errors(client: httpx.Client, topic: str) -> None:
    assert_error(client.get("/v1/groups/nobody/offsets"), ErrorCode.GROUP_NOT_FOUND)
    assert_error(
        client.put("/v1/groups/g/offsets", json={"offsets": [{"topic": topic, "queue_id": 9, "offset": 1}]}),
        ErrorCode.QUEUE_NOT_FOUND,
    )
    assert_error(
        client.put(
            "/v1/groups/g/offsets", json={"offsets": [{"topic": "no-such", "queue_id": 0, "offset": 1}]}
        ),
        ErrorCode.TOPIC_NOT_FOUND,
    )
    assert_error(
        client.put("/v1/groups/g/offsets", json={"offsets": [{"topic": topic, "queue_id": 0, "offset": -1}]}),
        ErrorCode.VALIDATION_FAILED,
    )
    assert_error(client.put("/v1/groups/bad name/offsets", json={"offsets": []}), ErrorCode.VALIDATION_FAILED)


def assert_out_of_range(response: httpx.Response, topic: str, queue_id: int, low: int, high: int) -> None:
    body = response.json()
    assert response.status_code == 400, body
    assert body["error_code"] == int(ErrorCode.OFFSET_OUT_OF_RANGE) and body["message"]
    assert (body["topic"], body["queue_id"], body["min_offset"], body["max_offset"]) == (
        topic,
        queue_id,
        low,
        high,
    )


def committed(client: httpx.Client, group: str, topic: str) -> list[int | None]:
    rows = client.get(f"/v1/groups/{group}/offsets", params={"topic": topic}).json()["offsets"]
    return [row["committed_offset"] for row in rows]


def test_a_commit_past_the_end_of_a_queue_is_refused_and_changes_nothing(
    client: httpx.Client, topic: str
) -> None:
    produce(client, topic, 0, 3)
    ok = client.put(
        "/v1/groups/range/offsets", json={"offsets": [{"topic": topic, "queue_id": 0, "offset": 3}]}
    )
    assert ok.status_code == 200
    assert_out_of_range(
        client.put(
            "/v1/groups/range/offsets", json={"offsets": [{"topic": topic, "queue_id": 0, "offset": 4}]}
        ),
        topic,
        0,
        0,
        3,
    )
    # All or nothing: the good entry before the bad one is not committed either.
    batch = [{"topic": topic, "queue_id": 0, "offset": 1}, {"topic": topic, "queue_id": 1, "offset": 1}]
    assert_out_of_range(client.put("/v1/groups/range/offsets", json={"offsets": batch}), topic, 1, 0, 0)
    pulled = client.get(
        f"/v1/topics/{topic}/queues/0/messages", params={"group": "range", "commit_offset": 9, "offset": 0}
    )
    assert_out_of_range(pulled, topic, 0, 0, 3)
    assert committed(client, "range", topic) == [3, None, None, None]


@pytest.fixture(scope="module")
def retaining_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker that keeps no CommitLog segment but the one being written, once asked to clean."""
    process = BrokerProcess(tmp_path_factory.mktemp("retaining") / "store", file_reserved_time_h=0).start()
    yield process
    process.stop()


def test_start_policies_on_a_queue_past_its_beginning(retaining_broker: BrokerProcess) -> None:
    """Once retention has cut a queue's head, `last`, `first` and a time each start elsewhere."""
    with httpx.Client(base_url=retaining_broker.url, timeout=30.0) as client:
        topic = "aged"
        assert client.post("/v1/topics", json={"name": topic, "queues": 1}).status_code == 201
        filler = {"body": "x" * 300_000, "queue_id": 0}
        for _ in range(8):  # fills three or more 1 MiB segments
            assert client.post(f"/v1/topics/{topic}/messages", json=filler).status_code == 200
        for i in range(3):
            body = {"body": f"m{i}", "queue_id": 0}
            assert client.post(f"/v1/topics/{topic}/messages", json=body).status_code == 200
            time.sleep(0.005)
        report = client.post("/v1/admin/clean").json()
        assert "manual" in report["reasons"] and report["commitlog_segments"] >= 1
        url = f"/v1/topics/{topic}/queues/0/messages"
        first = client.get(url, params={"group": "new-first", "from": "first", "max_messages": 100}).json()
        assert 0 < first["min_offset"] == first["messages"][0]["queue_offset"]
        assert [m["body"] for m in first["messages"]][-3:] == ["m0", "m1", "m2"]
        stamps = [m["store_timestamp"] for m in first["messages"][-3:]]
        assert stamps[0] < stamps[1] < stamps[2]
        for params in ({"group": "new-last", "from": "last"}, {"group": "new-default"}):
            last = client.get(url, params=params).json()
            assert (last["messages"], last["next_offset"]) == ([], first["max_offset"])
        at_time = client.get(url, params={"group": "new-time", "from": str(stamps[1])}).json()
        assert [m["body"] for m in at_time["messages"]] == ["m1", "m2"]
        between = client.get(url, params={"group": "new-later", "from": str(stamps[1] + 1)}).json()
        assert [m["body"] for m in between["messages"]] == ["m2"]
