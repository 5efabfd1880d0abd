"""Long polling through a real server: wake on produce, deadline, disconnect, shutdown."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx

from tests.api.server import BrokerProcess


def held_pulls(client: httpx.Client) -> int:
    return int(client.get("/v1/stats").json()["held_pulls"])


def wait_for(condition, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_a_held_pull_is_answered_by_the_produce(client: httpx.Client, topic: str) -> None:
    answers = []

    def pull() -> None:
        answers.append(
            client.get(
                f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0, "max_wait_ms": 5000}
            ).json()
        )

    thread = threading.Thread(target=pull)
    thread.start()
    assert wait_for(lambda: held_pulls(client) >= 1)
    client.post(f"/v1/topics/{topic}/messages", json={"body": "wake up", "queue_id": 0})
    thread.join(10)
    # The periodic check runs every 60 s in this broker: only the arrival can have answered.
    (answer,) = answers
    assert answer["status"] == "FOUND"
    assert [m["body"] for m in answer["messages"]] == ["wake up"]


def test_a_held_pull_with_a_filter_answers_only_with_matching_messages(
    client: httpx.Client, topic: str
) -> None:
    answers = []

    def pull() -> None:
        params = {"offset": 0, "max_wait_ms": 5000, "tags": "Wanted"}
        answers.append(client.get(f"/v1/topics/{topic}/queues/1/messages", params=params).json())

    thread = threading.Thread(target=pull)
    thread.start()
    assert wait_for(lambda: held_pulls(client) >= 1)
    client.post(f"/v1/topics/{topic}/messages", json={"body": "other", "tags": "Other", "queue_id": 1})
    client.post(f"/v1/topics/{topic}/messages", json={"body": "wanted", "tags": "Wanted", "queue_id": 1})
    thread.join(10)
    # Woken by "other", the pull skips it and holds on; an answer at that wake would be empty.
    (answer,) = answers
    assert answer["status"] == "FOUND"
    assert [m["body"] for m in answer["messages"]] == ["wanted"]
    assert answer["next_offset"] == 2
    assert answer["next_offset"] == 2


def test_nothing_arrives_so_the_deadline_answers_empty(client: httpx.Client, topic: str) -> None:
    client.post(f"/v1/topics/{topic}/messages", json={"body": "old", "queue_id": 2})
    started = time.monotonic()
    answer = client.get(
        f"/v1/topics/{topic}/queues/2/messages", params={"offset": 1, "max_wait_ms": 300}
    ).json()
    assert time.monotonic() - started >= 0.3
    assert answer["status"] == "OFFSET_OVERFLOW_ONE" and answer["messages"] == []
    assert answer["next_offset"] == 1


def test_without_max_wait_the_answer_is_immediate(client: httpx.Client, topic: str) -> None:
    answer = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0}).json()
    assert answer["status"] == "NO_MESSAGE_IN_QUEUE"
    assert held_pulls(client) == 0


def test_a_disconnected_client_is_dropped_at_once(
    broker: BrokerProcess, client: httpx.Client, topic: str
) -> None:
    before = held_pulls(client)
    with socket.create_connection(("127.0.0.1", broker.port)) as sock:
        sock.sendall(
            f"GET /v1/topics/{topic}/queues/3/messages?offset=0&max_wait_ms=5000 HTTP/1.1\r\n"
            f"Host: 127.0.0.1\r\n\r\n".encode()
        )
        assert wait_for(lambda: held_pulls(client) == before + 1)
    # Closed long before the 5 s deadline: the hold must be gone well before it too.
    assert wait_for(lambda: held_pulls(client) == before, timeout_s=2.0)


def test_shutdown_answers_every_held_pull(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "store", max_wait_ms=30000).start()
    try:
        with httpx.Client(base_url=process.url, timeout=60) as client:
            client.post("/v1/topics", json={"name": "stopping", "queues": 1})
            answers = []

            def pull() -> None:
                response = client.get(
                    "/v1/topics/stopping/queues/0/messages", params={"offset": 0, "max_wait_ms": 30000}
                )
                answers.append((response.status_code, response.json()))

            threads = [threading.Thread(target=pull) for _ in range(3)]
            for thread in threads:
                thread.start()
            assert wait_for(lambda: held_pulls(client) == 3)
            started = time.monotonic()
            process.stop()
            for thread in threads:
                thread.join(30)
            assert time.monotonic() - started < 15  # far below the 30 s hold
            assert [status for status, _ in answers] == [200, 200, 200]
            assert all(body["status"] == "NO_MESSAGE_IN_QUEUE" for _, body in answers)
            assert not (process.store_dir / "abort").exists(), "the store was not closed cleanly"
    finally:
        process.stop()
