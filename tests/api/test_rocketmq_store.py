"""A broker started on a CommitLog RocketMQ 4.9 wrote (IPv4 and IPv6 hosts, with and without the
last property separator) serves its messages: pulls, key lookups and message ids answer each field
as RocketMQ stored it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.api.server import BrokerProcess
from tests.store.rocketmq_records import NOW_MS
from tests.store.test_rocketmq_store import rocketmq_log

FILE_SIZE = 1024 * 1024  # BrokerProcess's WHARF_COMMITLOG_FILE_SIZE


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    store_dir = tmp_path_factory.mktemp("rocketmq") / "store"
    (store_dir / "commitlog").mkdir(parents=True)
    segment = b"".join(record for record, _, _ in rocketmq_log())
    (store_dir / "commitlog" / f"{0:020d}").write_bytes(segment + bytes(FILE_SIZE - len(segment)))
    (store_dir / "abort").touch()
    # RocketMQ's topic table, which the broker reads at its first start.
    table = {
        "topicConfigTable": {
            "orders": {"topicName": "orders", "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
        }
    }
    (store_dir / "config").mkdir()
    (store_dir / "config" / "topics.json").write_bytes(orjson.dumps(table))
    broker = BrokerProcess(store_dir).start()
    try:
        with httpx.Client(base_url=broker.url, timeout=30.0) as client:
            yield client
    finally:
        broker.stop()


def test_pulls_answer_every_record_rocketmq_wrote(client: httpx.Client) -> None:
    log = rocketmq_log()
    pulled = {}
    for queue_id in (0, 1):
        answer = client.get(f"/v1/topics/orders/queues/{queue_id}/messages", params={"offset": 0})
        assert answer.status_code == 200, answer.text
        pulled.update({m["unique_id"]: m for m in answer.json()["messages"]})
    offset = 0
    for n, (record, host, properties) in enumerate(log):
        message = pulled[properties["UNIQ_KEY"]]
        assert message["msg_id"] == (host.packed() + offset.to_bytes(8, "big")).hex().upper()
        assert (message["queue_id"], message["queue_offset"]) == (n % 2, n // 2)
        assert (message["body"], message["tags"], message["keys"]) == (
            f"body {n} ünïcode",
            properties["TAGS"],
            properties["KEYS"].split(),
        )
        assert (message["properties"], message["store_timestamp"]) == ({"n": str(n)}, NOW_MS + n)
        offset += len(record)


def test_key_lookups_find_records_of_every_host_form(client: httpx.Client) -> None:
    found = client.get("/v1/topics/orders/messages", params={"key": "shared"})
    assert found.status_code == 200, found.text
    assert sorted(m["unique_id"] for m in found.json()["messages"]) == [f"U{n:04d}" for n in range(6)]
