"""3,000 queues on a broker limited to 1,024 open files: every produce and pull answers, also after
a restart that follows SIGKILL (the store keeps a bounded set of queue files open)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.low_nofile import NOFILE
from tests.api.server import BrokerProcess

TOPICS = 1_500
QUEUES = 2
pytestmark = [pytest.mark.slow, pytest.mark.crash]


def start(store_dir: Path) -> BrokerProcess:
    return BrokerProcess(store_dir, module="tests.api.low_nofile", default_topic_queue_nums=QUEUES).start(
        60.0
    )


def produce_everywhere(client: httpx.Client) -> None:
    for topic in range(TOPICS):
        messages = [{"body": f"m{topic}/{q}", "queue_id": q} for q in range(QUEUES)]
        response = client.post(f"/v1/topics/many{topic}/messages", json={"messages": messages})
        assert response.status_code == 200, response.text


def read_everywhere(client: httpx.Client) -> None:
    for topic in range(TOPICS):
        for queue_id in range(QUEUES):
            response = client.get(f"/v1/topics/many{topic}/queues/{queue_id}/messages", params={"offset": 0})
            assert response.status_code == 200, response.text
            assert [m["body"] for m in response.json()["messages"]] == [f"m{topic}/{queue_id}"]


@pytest.fixture
def store_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "store"


def test_thousands_of_queues_under_1024_open_files(store_dir: Path) -> None:
    assert TOPICS * QUEUES > 2 * NOFILE
    broker = start(store_dir)
    try:
        with httpx.Client(base_url=broker.url, timeout=30.0) as client:
            produce_everywhere(client)
            read_everywhere(client)
    finally:
        broker.kill()  # SIGKILL: the next start recovers
    broker = start(store_dir)
    try:
        with httpx.Client(base_url=broker.url, timeout=30.0) as client:
            read_everywhere(client)
    finally:
        broker.stop()
