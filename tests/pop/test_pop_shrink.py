"""A topic whose read queues shrank: messages popped from a queue no longer read still come back
once their invisible time passes (nothing new is read from that queue)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.api.server import BrokerProcess
from tests.pop.popping import make_topic, pop, produce, settle


def test_messages_in_flight_on_a_queue_no_longer_read_come_back(tmp_path: Path) -> None:
    process = BrokerProcess(tmp_path / "store").start()
    try:
        client = httpx.Client(base_url=process.url, timeout=30)
        topic = make_topic(client, queues=2)
        (unique_id,) = produce(client, topic, "in flight", queue_id=1)
        (first,) = pop(client, "shrunk", topic, invisible_ms=1_000)
        process.stop()
        # The topic now reads one queue of its two (as RocketMQ's updateTopic shrinks readQueueNums).
        put = {
            "op": "put",
            "name": topic,
            "read_queue_nums": 1,
            "write_queue_nums": 2,
            "perm": 6,
            "order": False,
        }
        with (process.store_dir / "config" / "topics.log").open("a") as log:
            log.write(json.dumps(put) + "\n")
        process.start()
        assert client.get(f"/v1/topics/{topic}").json()["read_queues"] == 1

        (again,) = pop(client, "shrunk", topic, max_wait_ms=20_000)
        assert (again["unique_id"], again["queue_id"], again["reconsume_times"]) == (unique_id, 1, 1)
        assert again["store_timestamp"] == first["store_timestamp"]
        assert settle(client, "ack", "shrunk", topic, [again["receipt_handle"]]) == ["ok"]
        # Done with: nothing more comes from the queue no longer read.
        produce(client, topic, "never read", queue_id=1)
        assert pop(client, "shrunk", topic, max_wait_ms=1_500) == []
    finally:
        process.stop()
