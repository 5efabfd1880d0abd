"""What the replication tests share: a replicated topic, producing to it, reading it back, and
each broker's view of replication."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.api.server import BrokerProcess

TOPIC = "replicated"
QUEUES = 2


def topic_config(broker: BrokerProcess, name: str) -> dict[str, Any] | None:
    response = httpx.get(f"{broker.url}/v1/topics/{name}")
    assert response.status_code in (200, 404), response.text
    return dict(response.json()) if response.status_code == 200 else None


def produce(broker: BrokerProcess, bodies: list[str]) -> httpx.Response:
    messages = [{"body": body, "queue_id": number % QUEUES} for number, body in enumerate(bodies)]
    return httpx.post(f"{broker.url}/v1/topics/{TOPIC}/messages", json={"messages": messages}, timeout=30)


def pulled_bodies(broker: BrokerProcess) -> list[str]:
    """Every body of the topic, read page by page from each queue's start."""
    bodies = []
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            response = httpx.get(
                f"{broker.url}/v1/topics/{TOPIC}/queues/{queue_id}/messages",
                params={"offset": offset, "max_messages": 1000},
            )
            assert response.status_code == 200, response.text
            answer = response.json()
            messages = answer["messages"]
            if answer["status"] == "OFFSET_TOO_SMALL":  # retention deleted the start
                offset = answer["next_offset"]
                continue
            if not messages:
                break
            bodies.extend(message["body"] for message in messages)
            offset = messages[-1]["queue_offset"] + 1
    return sorted(bodies)


def ha(broker: BrokerProcess) -> dict[str, Any]:
    response = httpx.get(f"{broker.url}/v1/admin/ha")
    assert response.status_code == 200, response.text
    return dict(response.json())


def commitlog_bytes(store_dir: Path) -> dict[str, bytes]:
    directory = store_dir / "commitlog"
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir()) if path.name.isdigit()}


def caught_up(master: BrokerProcess, slave: BrokerProcess) -> bool:
    return ha(slave)["commitlog_max_offset"] == ha(master)["commitlog_max_offset"]
