"""A message sent back for another try across a broker's death: SIGKILLed before the message is
due, the broker delivers it after the restart at its time (not early), once, one reconsume
higher, still with the topic it was produced to; sent back past the limit it is a dead letter
that the next SIGKILL keeps."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.transactions.transacting import wait_until

pytestmark = [pytest.mark.crash, pytest.mark.slow]

GROUP = "workers"
RETRY = "%RETRY%workers"


@pytest.fixture
def process(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "store", consumer_offset_persist_interval_ms=50).start()
    yield process
    process.stop()


def join(client: httpx.Client) -> int:
    body = {"client_id": "worker", "subscriptions": {"jobs": "*"}, "consume_from": "first"}
    answer = client.post(f"/v1/groups/{GROUP}/heartbeat", json=body)
    assert answer.status_code == 200, answer.text
    generation: int = answer.json()["generation"]
    return generation


def pull(client: httpx.Client, max_wait_ms: int = 0) -> dict[str, Any]:
    params = {"client_id": "worker", "max_wait_ms": max_wait_ms}
    answer = client.get(f"/v1/groups/{GROUP}/messages", params=params, timeout=30)
    assert answer.status_code == 200, answer.text
    pulled: dict[str, Any] = answer.json()
    return pulled


def commit(client: httpx.Client, pulled: dict[str, Any]) -> None:
    offsets = [
        {"topic": o["topic"], "queue_id": o["queue_id"], "offset": o["next_offset"]}
        for o in pulled["offsets"]
    ]
    # The first send-back made the retry topic: the group rebalanced, so learn the generation.
    body = {"client_id": "worker", "generation": join(client), "offsets": offsets}
    assert client.put(f"/v1/groups/{GROUP}/offsets", json=body).status_code == 200


def wait_saved(process: BrokerProcess, key: str, queue_id: int, offset: int) -> None:
    """Until what a restart loads (the offset snapshot, then the log over it) holds the commit: it
    outlives a SIGKILL. The log may have been folded into the snapshot already."""
    config = process.store_dir / "config"

    def saved() -> bool:
        snapshot = config / "consumerOffset.json"
        table = json.loads(snapshot.read_text())["offsetTable"] if snapshot.exists() else {}
        on_disk = {int(queue): value for queue, value in table.get(key, {}).items()}
        log = config / "consumerOffset.log"
        for line in log.read_text().splitlines() if log.exists() else []:
            entry = json.loads(line)
            if entry.get("k") == key and "q" in entry:
                on_disk[entry["q"]] = entry["o"]
        return on_disk.get(queue_id) == offset

    wait_until(saved, timeout_s=10, what="the commit to be written")


def test_a_sent_back_message_comes_once_at_its_time_after_a_sigkill_then_dies(process: BrokerProcess) -> None:
    client = httpx.Client(base_url=process.url, timeout=30)
    assert client.post("/v1/topics", json={"name": "jobs", "queues": 1}).status_code == 201
    assert client.put(f"/v1/groups/{GROUP}/config", json={"max_reconsume_times": 1}).status_code == 200
    join(client)
    client.post("/v1/topics/jobs/messages", json={"body": "boom"})
    first = pull(client)
    (message,) = first["messages"]
    sent_at_ms = time.time() * 1000
    sent = client.post(f"/v1/groups/{GROUP}/retry", json={"msg_id": message["msg_id"]}).json()
    assert (sent["status"], sent["reconsume_times"]) == ("RETRY", 1)
    commit(client, first)
    wait_saved(process, "jobs@workers", 0, 1)

    process.kill()  # level 3 is 10 s: long before the message is due
    process.start()
    join(client)  # membership lived in memory: join again

    again: dict[str, Any] = {"messages": []}
    deadline = time.monotonic() + 40
    while not again["messages"]:
        assert time.monotonic() < deadline, "the retried message never came back"
        again = pull(client, max_wait_ms=2000)
    (retried,) = again["messages"]
    assert retried["store_timestamp"] - sent_at_ms >= 10_000 - 5  # not early
    assert (retried["topic"], retried["retry_topic"], retried["body"]) == ("jobs", RETRY, "boom")
    assert (retried["reconsume_times"], retried["unique_id"]) == (1, message["unique_id"])
    commit(client, again)
    # Once: nothing more comes, and the retry topic holds one message.
    assert pull(client, max_wait_ms=1500)["messages"] == []
    stored = client.get("/v1/topics/%25RETRY%25workers/queues/0/messages", params={"offset": 0}).json()
    assert len(stored["messages"]) == 1

    fields = {"topic": "jobs", "retry_topic": RETRY, "queue_id": 0, "offset": retried["queue_offset"]}
    dead = client.post(f"/v1/groups/{GROUP}/retry", json=fields).json()
    assert (dead["status"], dead["topic"]) == ("DEAD_LETTER", "%DLQ%workers")
    process.kill()
    process.start()
    (letter,) = client.get(f"/v1/groups/{GROUP}/dlq").json()["dead_letters"]
    assert (letter["original_topic"], letter["reconsume_times"]) == ("jobs", 1)
    assert letter["message"]["unique_id"] == message["unique_id"]
