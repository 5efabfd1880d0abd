"""The client's group consumer in ordered mode: members lock their queues, hand them over through
a commit and an unlock when the group rebalances, and each sharding key is read in order."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from wharf_client import GroupConsumer, Producer

from tests.api.server import BrokerProcess

KEYS = [f"customer-{n}" for n in range(8)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("ordered-client") / "store", lock_expiry_s=30)
    process.env["WHARF_ADVERTISED_URL"] = process.url
    process.start()
    yield process
    process.stop()


def drain(consumer: GroupConsumer, into: list[tuple[str, int]], stop: threading.Event) -> None:
    while not stop.is_set():
        batch = consumer.poll(max_messages=8, max_wait_ms=200)
        for message in batch.messages:
            key, seq = message["body"].split(":")
            into.append((key, int(seq)))
        assert consumer.commit(batch)


def test_ordered_members_read_each_key_in_order_across_a_rebalance(broker: BrokerProcess) -> None:
    assert httpx.post(f"{broker.url}/v1/topics", json={"name": "keyed", "queues": 4}).status_code == 201
    read: list[tuple[str, int]] = []
    stop = threading.Event()
    one = GroupConsumer(broker.url, "ordered", {"keyed": "*"}, client_id="one", consume_mode="orderly")
    threads = [threading.Thread(target=drain, args=(one, read, stop))]
    threads[0].start()
    two: GroupConsumer | None = None
    try:
        with Producer(broker.url) as producer:
            for seq in range(40):
                for key in KEYS:
                    producer.send("keyed", f"{key}:{seq}".encode(), sharding_key=key)
                if seq == 15:  # a second member joins: queues move from one to two under the locks
                    two = GroupConsumer(
                        broker.url, "ordered", {"keyed": "*"}, client_id="two", consume_mode="orderly"
                    )
                    one.heartbeat()
                    threads.append(threading.Thread(target=drain, args=(two, read, stop)))
                    threads[1].start()
        deadline = time.monotonic() + 30
        while len(read) < 40 * len(KEYS) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert two is not None and two.locked[broker.url]  # two got queues
        stop.set()
        for thread in threads:
            thread.join(10)
    finally:
        stop.set()
        one.close()
        if two is not None:
            two.close()
    for key in KEYS:
        assert [seq for k, seq in read if k == key] == list(range(40)), key
