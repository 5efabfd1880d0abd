"""SYNC flush end to end: a SEND_OK is answered only after the CommitLog sync that covers it, and a
sync that hangs answers FLUSH_DISK_TIMEOUT at WHARF_SYNC_FLUSH_TIMEOUT_MS instead of never.

The broker runs through tests/api/stalled_disk.py, which lets the test hold every CommitLog
``fdatasync`` inside the kernel call (while a file exists) and logs each sync's entry and return.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from websockets.sync.client import connect

from tests.api.server import BrokerProcess

SYNC_FLUSH_TIMEOUT_MS = 300


class StalledDiskBroker:
    def __init__(self, root: Path) -> None:
        self.stall_file = root / "stall"
        self.sync_log = root / "syncs.log"
        self.process = BrokerProcess(
            root / "store",
            module="tests.api.stalled_disk",
            flush_mode="SYNC",
            sync_flush_timeout_ms=SYNC_FLUSH_TIMEOUT_MS,
            test_stall_file=self.stall_file,
            test_sync_log=self.sync_log,
        )

    def syncs(self, event: str) -> int:
        """How many CommitLog syncs were entered (``enter``) or returned (``exit``) so far."""
        if not self.sync_log.exists():
            return 0
        return sum(line.startswith(f"{event} ") for line in self.sync_log.read_text().splitlines())

    def stall(self) -> None:
        self.stall_file.touch()

    def release(self) -> None:
        self.stall_file.unlink(missing_ok=True)

    def wait_settled(self, timeout_s: float = 10.0) -> None:
        """Until every sync that was entered has returned."""
        deadline = time.monotonic() + timeout_s
        while self.syncs("enter") != self.syncs("exit"):
            assert time.monotonic() < deadline, "a CommitLog sync did not return after the disk came back"
            time.sleep(0.01)


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StalledDiskBroker]:
    broker = StalledDiskBroker(tmp_path_factory.mktemp("stalled-disk"))
    broker.process.start()
    yield broker
    broker.release()  # a stuck sync would hold the shutdown's last flush
    broker.process.stop()


@pytest.fixture
def client(disk: StalledDiskBroker) -> Iterator[httpx.Client]:
    disk.release()
    disk.wait_settled()
    # A hanging producer fails the test through this timeout rather than holding the run.
    with httpx.Client(base_url=disk.process.url, timeout=10.0) as client:
        yield client
    disk.release()


def produce(client: httpx.Client, topic: str, *bodies: str) -> list[dict]:
    answer = client.post(
        f"/v1/topics/{topic}/messages", json={"messages": [{"body": body, "queue_id": 0} for body in bodies]}
    )
    assert answer.status_code == 200, answer.text
    results: list[dict] = answer.json()["results"]
    return results


def test_send_ok_is_answered_only_after_its_sync_returned(
    client: httpx.Client, disk: StalledDiskBroker
) -> None:
    returned_before = disk.syncs("exit")

    results = produce(client, "synced", "one", "two")
    returned_at_answer = disk.syncs("exit")  # read at once: no sync runs between two requests

    assert [r["status"] for r in results] == ["SEND_OK", "SEND_OK"]
    assert returned_at_answer > returned_before, "SEND_OK was answered before any CommitLog sync returned"


def test_a_hanging_sync_answers_flush_disk_timeout_at_the_deadline(
    client: httpx.Client, disk: StalledDiskBroker
) -> None:
    produce(client, "stalled", "before")  # the topic exists before the disk stops
    disk.stall()

    results = produce(client, "stalled", "a", "b")

    assert [r["status"] for r in results] == ["FLUSH_DISK_TIMEOUT"] * 2
    assert disk.syncs("enter") > disk.syncs("exit"), "the sync was expected to still hang"
    # Stored all the same: the timeout is about durability, and reads keep working.
    pulled = client.get("/v1/topics/stalled/queues/0/messages", params={"offset": 0}).json()["messages"]
    assert [m["body"] for m in pulled] == ["before", "a", "b"]
    # Producers behind the hanging sync are answered at their deadlines too, over WebSocket as well.
    assert [r["status"] for r in produce(client, "stalled", "c")] == ["FLUSH_DISK_TIMEOUT"]
    ws_url = disk.process.url.replace("http://", "ws://") + "/v1/ws/produce?topic=stalled"
    with connect(ws_url, open_timeout=10, close_timeout=5) as socket:
        socket.send(orjson.dumps({"id": "w1", "body": "d", "queue_id": 0}).decode())
        frame = orjson.loads(socket.recv(timeout=10))
    assert frame["type"] == "results"
    assert [(r["id"], r["status"]) for r in frame["results"]] == [("w1", "FLUSH_DISK_TIMEOUT")]

    disk.release()
    disk.wait_settled()
    assert [r["status"] for r in produce(client, "stalled", "after")] == ["SEND_OK"]
