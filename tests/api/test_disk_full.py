"""A full disk through HTTP: a real broker process on a real small file system (a tmpfs with a size
limit). Writes are refused with 507 and the envelope, nothing of a refused batch is stored, every
acknowledged message reads back byte for byte, reads and commits keep working, the process never
dies (a write through a sparse mapping would kill it with SIGBUS), writes come back without a
restart once space returns, and a restart on the full disk comes up and serves reads.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.codec import BATCH_MEDIA_TYPE, RECORDS_MEDIA_TYPE, IncomingMessage, encode_batch, split_records
from app.store import decode_record
from tests.api.server import BrokerProcess
from tests.small_disk import fill, mounted_tmpfs
from tests.store.conftest import wait_until

DISK_MIB = 48
SEGMENT = 1 << 20
BODY_SIZE = 60 * 1024
BATCH = 8  # about 480 KiB per request: a segment every other request
QUEUES = 2
SETTINGS = {
    "commitlog_file_size": SEGMENT,
    "consumequeue_file_entries": 256,
    "max_hash_slots": 256,
    "max_index_count": 1024,
    "disk_check_interval_ms": 100,
    "clean_first_delay_ms": 600_000,  # retention runs only when a test asks
    "delete_files_interval_ms": 0,
}

Acked = dict[tuple[int, int], bytes]  # (queue id, queue offset) -> body


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """The broker's store directory: the root of a fresh 48 MiB tmpfs (its log stays outside)."""
    with mounted_tmpfs(tmp_path / "disk", DISK_MIB) as mount_point:
        yield mount_point


@pytest.fixture
def start_broker(disk: Path) -> Iterator[Callable[..., BrokerProcess]]:
    brokers: list[BrokerProcess] = []

    def start(**settings: object) -> BrokerProcess:
        broker = BrokerProcess(disk, **{**SETTINGS, **settings}).start()
        brokers.append(broker)
        return broker

    yield start
    for broker in brokers:
        broker.stop()


def used_percent(path: Path) -> float:
    stat = os.statvfs(path)
    return (stat.f_blocks - stat.f_bavail) * 100 / stat.f_blocks


def bodies(start: int, count: int) -> list[bytes]:
    """Distinct bodies: a number, then bytes that depend on it (every byte is checked on read)."""
    return [
        (n.to_bytes(8, "big") + bytes((n * 31 + i) % 251 for i in range(251))) * (BODY_SIZE // 259)
        for n in range(start, start + count)
    ]


def produce(client: httpx.Client, topic: str, batch: list[bytes], queue_id: int) -> httpx.Response:
    payload = encode_batch(IncomingMessage(body=body, queue_id=queue_id) for body in batch)
    return client.post(
        f"/v1/topics/{topic}/messages", content=payload, headers={"content-type": BATCH_MEDIA_TYPE}
    )


def fill_until_refused(
    broker: BrokerProcess, client: httpx.Client, topic: str, acked: Acked, limit: int = 400
) -> httpx.Response:
    """Produce batches, alternating queues, until one is refused; returns the refusal."""
    for attempt in range(limit):
        batch = bodies(len(acked) + attempt * BATCH, BATCH)
        try:
            response = produce(client, topic, batch, attempt % QUEUES)
        except httpx.TransportError as error:
            assert broker.process is not None
            pytest.fail(
                f"the broker died ({error}), exit status {broker.process.wait()}:\n{broker.log()[-2000:]}"
            )
        if response.status_code != 200:
            return response
        for body, result in zip(batch, response.json()["results"], strict=True):
            assert result["status"] == "SEND_OK"
            acked[(result["queue_id"], result["queue_offset"])] = body
    pytest.fail(f"{limit} batches were all accepted: the disk never filled")


def assert_refused(response: httpx.Response) -> None:
    assert response.status_code == 507, response.text
    envelope = response.json()
    assert envelope["error_code"] == 50701 and envelope["message"], envelope


def read_all(client: httpx.Client, topic: str, queue_id: int) -> dict[int, bytes]:
    """Every message of a queue, by queue offset, as raw records."""
    found: dict[int, bytes] = {}
    offset = 0
    while True:
        response = client.get(
            f"/v1/topics/{topic}/queues/{queue_id}/messages",
            params={"offset": offset, "max_messages": 64},
            headers={"accept": RECORDS_MEDIA_TYPE},
        )
        assert response.status_code == 200, response.text
        records = [decode_record(raw) for raw in split_records(response.content)]
        for record in records:
            found[record.queue_offset] = record.body
        if not records:
            return found
        offset = int(response.headers["x-wharf-next-offset"])


def max_offsets(client: httpx.Client, topic: str) -> dict[int, int]:
    response = client.get(f"/v1/topics/{topic}/queues")
    assert response.status_code == 200, response.text
    return {queue["queue_id"]: queue["max_offset"] for queue in response.json()["queues"]}


def assert_every_acked_message_reads_back(client: httpx.Client, topic: str, acked: Acked) -> None:
    stored = {
        (queue_id, offset): body
        for queue_id in range(QUEUES)
        for offset, body in read_all(client, topic, queue_id).items()
    }
    # Exactly the acknowledged messages: nothing lost, nothing of a refused batch readable.
    assert stored.keys() == acked.keys()
    assert all(stored[key] == body for key, body in acked.items())


def create_topic(client: httpx.Client, name: str) -> str:
    response = client.post("/v1/topics", json={"name": name, "queues": QUEUES})
    assert response.status_code == 201, response.text
    return name


def test_over_the_refuse_ratio_writes_get_507_reads_and_commits_work_until_space_returns(
    disk: Path, start_broker: Callable[..., BrokerProcess]
) -> None:
    filler = fill(disk, leave_bytes=30 << 20)  # 18 MiB taken by someone else
    broker = start_broker(disk_refuse_writes_ratio=60, disk_accept_writes_ratio=50)
    acked: Acked = {}
    with httpx.Client(base_url=broker.url, timeout=30.0) as client:
        topic = create_topic(client, "ratio")
        assert_refused(fill_until_refused(broker, client, topic, acked))
        # Refused by the ratio on the real probe, long before the disk itself is full.
        assert 60 < used_percent(disk) < 80
        before = max_offsets(client, topic)
        assert_refused(produce(client, topic, bodies(10_000, BATCH), 0))
        assert max_offsets(client, topic) == before
        assert_every_acked_message_reads_back(client, topic, acked)
        commit = client.put(
            "/v1/groups/billing/offsets", json={"offsets": [{"topic": topic, "queue_id": 0, "offset": 3}]}
        )
        assert commit.status_code == 200, commit.text

        filler.unlink()  # space returns: writes are accepted again, no restart
        wait_until(
            lambda: produce(client, topic, bodies(20_000, 1), 1).status_code == 200,
            what="writes accepted again",
        )
        assert broker.process is not None and broker.process.poll() is None


def test_a_disk_that_really_fills_refuses_whole_batches_survives_a_restart_and_recovers(
    disk: Path, start_broker: Callable[..., BrokerProcess]
) -> None:
    """No refuse ratio: the disk really fills, under the broker's feet (another writer takes what
    is left). Then a crash and a restart on the full disk, and writes back once a deleted topic's
    data is cleaned away."""
    broker = start_broker(disk_refuse_writes_ratio=100, disk_accept_writes_ratio=85)
    pid = broker.process.pid
    acked: Acked = {}
    with httpx.Client(base_url=broker.url, timeout=30.0) as client:
        topic = create_topic(client, "full")
        for attempt in range(32):  # 15 MiB of messages
            batch = bodies(attempt * BATCH, BATCH)
            response = produce(client, topic, batch, attempt % QUEUES)
            assert response.status_code == 200, response.text
            for body, result in zip(batch, response.json()["results"], strict=True):
                acked[(result["queue_id"], result["queue_offset"])] = body
        # Someone else fills the disk. Writes go on into the space the store allocated (a sparse
        # segment would fault here and the process would die of SIGBUS), then are refused.
        fill(disk, leave_bytes=1 << 20)
        assert_refused(fill_until_refused(broker, client, topic, acked))
        before = max_offsets(client, topic)
        for attempt in range(5):  # keep knocking: every batch is refused whole
            assert_refused(produce(client, topic, bodies(10_000 + attempt * BATCH, BATCH), attempt % QUEUES))
        assert max_offsets(client, topic) == before
        assert_every_acked_message_reads_back(client, topic, acked)
        assert broker.process.poll() is None and broker.process.pid == pid, broker.log()

    # A crash on the full disk, then a restart on it: recovery needs no new space. (The route
    # registry, SQLite in the store directory, needs the last MiB left free to start.)
    broker.kill()
    broker = start_broker(disk_refuse_writes_ratio=100, disk_accept_writes_ratio=85)
    pid = broker.process.pid
    with httpx.Client(base_url=broker.url, timeout=30.0) as client:
        assert_every_acked_message_reads_back(client, topic, acked)
        assert_refused(produce(client, topic, bodies(30_000, BATCH), 0))

        # The operator deletes the topic and runs retention: over the force-clean ratio the
        # oldest segments go, and writes are accepted again without a restart.
        assert client.delete(f"/v1/topics/{topic}").status_code == 204
        report = client.post("/v1/admin/clean")
        assert report.status_code == 200, report.text
        assert report.json()["forced"] and report.json()["commitlog_segments"] > 0, report.json()
        fresh = create_topic(client, "fresh")
        batch = bodies(40_000, BATCH)
        wait_until(lambda: produce(client, fresh, batch, 1).status_code == 200, what="writes accepted again")
        assert set(read_all(client, fresh, 1).values()) == set(batch)
        assert broker.process.poll() is None and broker.process.pid == pid

    broker.stop()
    # It stops cleanly on that disk too: the store closed (the abort file is gone), nothing failed.
    assert not (disk / "abort").exists()
    assert "Traceback" not in broker.log(), broker.log()
