"""A cut of the broker's log closes every subscriber with 1012: a real uvicorn server runs the broker
in this process, and the test calls the broker's own ``log_cut`` on the server's event loop, as its
slave's replication calls it (a real failover is tests/ha/test_cut_cursors.py). A subscriber that
ends leaves no listener behind."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.api.app import create_app
from app.broker import Broker
from app.server import server_config
from app.settings import Settings
from tests.ws.wsclient import WsBroker, on_a_thread, produce, wait_for


@dataclass
class Served:
    """A broker served by uvicorn on a thread of this process."""

    url: str
    broker: Broker
    loop: asyncio.AbstractEventLoop

    def log_cut(self) -> None:
        """The broker's ``log_cut``, run on its event loop; returns once it ran."""
        done = threading.Event()
        self.loop.call_soon_threadsafe(lambda: (self.broker.log_cut(), done.set()))
        assert done.wait(10), "the server's loop did not run the cut"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    settings = Settings(
        store_dir=tmp_path / "store",
        commitlog_file_size=1 << 20,
        consumequeue_file_entries=1000,
        max_hash_slots=16384,
        max_index_count=65536,
    )
    app = create_app(settings)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    with on_a_thread(server_config(app, settings, timeout_graceful_shutdown=1), listener) as serving:
        with httpx.Client(base_url=serving.url, timeout=10) as client:
            response = client.post("/v1/topics", json={"name": "orders", "queues": 1})
            assert response.status_code == 201, response.text
            produce(client, "orders", "a", "b")
        yield Served(serving.url, app.state.broker, serving.loop)


def committed(served: Served, group: str) -> int | None:
    answer = httpx.get(f"{served.url}/v1/groups/{group}/offsets", params={"topic": "orders"}).json()
    return {row["queue_id"]: row["committed_offset"] for row in answer["offsets"]}.get(0)


@pytest.mark.parametrize("group", ["billing", None], ids=["with a group", "without"])
def test_a_cut_closes_every_subscriber_with_1012(served: Served, group: str | None) -> None:
    listening = len(served.broker.log_cut_listeners)
    with WsBroker(served).subscribe(topic="orders", credit=10, group=group, **{"from": "first"}) as socket:
        assert [m["body"] for m in socket.messages(2)] == ["a", "b"]
        assert len(served.broker.log_cut_listeners) == listening + 1
        served.log_cut()
        code, reason = socket.closed()
    assert code == 1012
    assert "log was cut to follow its new master" in reason
    assert wait_for(lambda: len(served.broker.log_cut_listeners) == listening)
    if group is not None:
        assert committed(served, group) == 0  # what it read was never acknowledged


def test_a_subscriber_that_closes_stops_listening(served: Served) -> None:
    listening = len(served.broker.log_cut_listeners)
    for _ in range(3):
        with WsBroker(served).subscribe(topic="orders", group="g", credit=1):
            pass
    assert wait_for(lambda: len(served.broker.log_cut_listeners) == listening)
