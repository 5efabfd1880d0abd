"""The Python client against one real broker on its embedded defaults (SQLite registry)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from wharf_client import OutgoingMessage, Producer, PullConsumer, TopicRoute
from wharf_client.aio_consumer import AsyncConsumer

from tests.api.server import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("client") / "store")
    process.env["WHARF_ADVERTISED_URL"] = process.url
    process.start()
    yield process
    process.stop()


def consume(consumer: PullConsumer, count: int, timeout_s: float = 20.0) -> list[bytes]:
    bodies: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(bodies) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None:
            bodies.append(message.body)
    return bodies


def test_produce_and_consume_every_message_once(broker: BrokerProcess) -> None:
    httpx.post(f"{broker.url}/v1/topics", json={"name": "e2e", "queues": 4})
    with Producer(broker.url) as producer:
        sent = [producer.send("e2e", f"m{i}", tags="T", keys=[f"k{i}"]) for i in range(40)]
        sent += producer.send_batch("e2e", [OutgoingMessage(f"b{i}".encode()) for i in range(20)])
    assert {r.queue_id for r in sent} == {0, 1, 2, 3}
    with PullConsumer(broker.url, "e2e", "readers", max_wait_ms=300) as consumer:
        bodies = consume(consumer, 60)
        assert consumer.poll(0.5) is None
    assert sorted(bodies) == sorted(
        [f"m{i}".encode() for i in range(40)] + [f"b{i}".encode() for i in range(20)]
    )


def test_iterating_with_stop_at_end_ends_at_the_end(broker: BrokerProcess) -> None:
    httpx.post(f"{broker.url}/v1/topics", json={"name": "to-the-end", "queues": 2})
    with Producer(broker.url) as producer:
        producer.send_batch("to-the-end", [OutgoingMessage(f"e{i}".encode()) for i in range(6)])
    with PullConsumer(
        broker.url, "to-the-end", "once", start="first", stop_at_end=True, max_wait_ms=300
    ) as consumer:
        bodies = [message.body for message in consumer]  # ends: nothing to stop it by hand
    assert sorted(bodies) == [f"e{i}".encode() for i in range(6)]

    async def read_all() -> list[bytes]:
        async with AsyncConsumer(
            broker.url, "to-the-end", "once-async", start="first", stop_at_end=True, max_wait_ms=300
        ) as consumer:
            return [message.body async for message in consumer]

    assert sorted(asyncio.run(asyncio.wait_for(read_all(), 30))) == [f"e{i}".encode() for i in range(6)]


def test_a_restarted_consumer_resumes_after_what_it_finished(broker: BrokerProcess) -> None:
    httpx.post(f"{broker.url}/v1/topics", json={"name": "resume", "queues": 1})
    with Producer(broker.url) as producer:
        for i in range(12):
            producer.send("resume", f"r{i}")
    with PullConsumer(broker.url, "resume", "g1", max_wait_ms=300) as consumer:
        first = consume(consumer, 4)
        consumer.commit()  # the application is done with all four
    assert first == [f"r{i}".encode() for i in range(4)]

    # Committing as it goes, then dying with r7 in hand: r7 was never finished, so it comes again.
    crashed = PullConsumer(broker.url, "resume", "g1", max_wait_ms=300, commit_interval_s=0).start()
    assert consume(crashed, 4) == [f"r{i}".encode() for i in range(4, 8)]
    crashed.consumer.auto_commit = False  # the process dies: no last commit
    crashed.close()

    with PullConsumer(broker.url, "resume", "g1", max_wait_ms=300) as consumer:
        rest = consume(consumer, 5)
    assert rest == [f"r{i}".encode() for i in range(7, 12)]


def test_flow_control_caps_what_the_consumer_caches(broker: BrokerProcess, tmp_path: Path) -> None:
    httpx.post(f"{broker.url}/v1/topics", json={"name": "flow", "queues": 1})
    with Producer(broker.url) as producer:
        producer.send_batch("flow", [OutgoingMessage(f"f{i}".encode()) for i in range(200)])
    consumer = PullConsumer(broker.url, "flow", "slow", batch_size=8, max_cached_messages=20, max_wait_ms=300)
    with consumer:
        deadline = time.monotonic() + 5
        while consumer.consumer._cached_messages < 20 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)  # give the fetcher every chance to overshoot
        assert 20 <= consumer.consumer._cached_messages < 20 + 8
        assert len(consume(consumer, 200)) == 200


class DeadBroker:
    """A listening socket that hangs up on every connection, counting them: a broker that died."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


def test_producer_retries_on_another_broker_after_a_failure(broker: BrokerProcess) -> None:
    """A dead broker in the route costs one failed try: the send lands on the live broker, and the
    sends after it avoid the dead one while the route (a stale registry's) still lists it."""
    httpx.post(f"{broker.url}/v1/topics", json={"name": "retry", "queues": 2})
    dead = DeadBroker()
    try:
        with Producer(broker.url) as producer:
            live = producer.route("retry")
            dead_queue = type(live.write_queues[0])("broker-dead", 0, dead.url)
            stale = type(live)("retry", (dead_queue, *live.write_queues), live.read_queues)

            async def stale_route(topic: str, refresh: bool = False) -> TopicRoute:
                return stale

            producer.routes.get = stale_route  # type: ignore[method-assign]
            results = [producer.send("retry", f"x{i}") for i in range(6)]
    finally:
        dead.close()
    assert all(r.broker_name == live.write_queues[0].broker_name for r in results)
    assert dead.connections == 1
    assert not producer.faults.available("broker-dead")
    with PullConsumer(broker.url, "retry", "check", max_wait_ms=300) as consumer:
        assert sorted(consume(consumer, 6)) == sorted(f"x{i}".encode() for i in range(6))


def test_a_consumer_filters_with_a_sql92_expression(broker: BrokerProcess) -> None:
    httpx.post(f"{broker.url}/v1/topics", json={"name": "sql-e2e", "queues": 2})
    with Producer(broker.url) as producer:
        for i in range(10):
            producer.send("sql-e2e", f"s{i}", properties={"n": str(i)})
    with PullConsumer(
        broker.url, "sql-e2e", "sql-readers", sql92="n BETWEEN 3 AND 5", start="first", max_wait_ms=300
    ) as consumer:
        bodies = consume(consumer, 3)
        assert consumer.poll(0.5) is None
    assert sorted(bodies) == [b"s3", b"s4", b"s5"]


def test_a_transaction_is_seen_only_once_committed(broker: BrokerProcess) -> None:
    httpx.post(f"{broker.url}/v1/topics", json={"name": "txn", "queues": 1})
    with Producer(broker.url) as producer:
        kept = producer.begin("txn", "kept", "shop", keys=["order-1"])
        dropped = producer.begin("txn", "dropped", "shop")
        assert kept.transaction_id is not None and kept.queue_offset is None
        with PullConsumer(broker.url, "txn", "txn-readers", max_wait_ms=300) as consumer:
            assert consumer.poll(0.5) is None
            assert producer.commit(kept)["state"] == "COMMITTED"
            assert producer.rollback(dropped)["state"] == "ROLLED_BACK"
            assert consume(consumer, 1) == [b"kept"]
            assert consumer.poll(0.5) is None


def test_a_delayed_message_answers_no_queue_offset_and_comes_when_due(broker: BrokerProcess) -> None:
    httpx.post(f"{broker.url}/v1/topics", json={"name": "later", "queues": 1})
    with Producer(broker.url) as producer:
        (delayed,) = producer.send_batch("later", [OutgoingMessage(b"later", delay_ms=1_000)])
        (now,) = producer.send_batch("later", [OutgoingMessage(b"now")])
    # Its place in the queue is known only once it is due.
    assert (delayed.queue_offset, now.queue_offset) == (None, 0)
    with PullConsumer(broker.url, "later", "readers", max_wait_ms=300, start="first") as consumer:
        bodies = consume(consumer, 2)
    assert bodies == [b"now", b"later"]
    assert httpx.get(f"{broker.url}/v1/topics/later/queues").json()["queues"][0]["max_offset"] == 2
