"""The client's group consumer: members of one group share the queues the broker allocates."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from wharf_client import GroupConsumer, Producer

from tests.api.server import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("group-client") / "store")
    process.env["WHARF_ADVERTISED_URL"] = process.url
    process.start()
    yield process
    process.stop()


def drain(consumer: GroupConsumer, into: list[str], stop: threading.Event) -> None:
    while not stop.is_set():
        batch = consumer.poll(max_messages=8, max_wait_ms=300)
        into.extend(message["body"] for message in batch.messages)
        assert consumer.commit(batch)


def test_two_members_share_the_queues_and_every_message_is_read_once(broker: BrokerProcess) -> None:
    httpx.post(f"{broker.url}/v1/topics", json={"name": "shared", "queues": 4})
    one = GroupConsumer(broker.url, "sharers", {"shared": "*"}, client_id="one", consume_from="first")
    two = GroupConsumer(broker.url, "sharers", {"shared": "*"}, client_id="two", consume_from="first")
    try:
        one.heartbeat()  # learns the generation after "two" joined
        queues = {
            cid: sorted(
                item["queue_id"]
                for items in consumer.assignments.values()
                for item in items
                if item["topic"] == "shared"
            )
            for cid, consumer in (("one", one), ("two", two))
        }
        assert queues == {"one": [0, 1], "two": [2, 3]}
        with Producer(broker.url) as producer:
            sent = [producer.send("shared", f"s{i}").queue_id for i in range(40)]
        assert set(sent) == {0, 1, 2, 3}
        read: dict[str, list[str]] = {"one": [], "two": []}
        stop = threading.Event()
        threads = [
            threading.Thread(target=drain, args=(consumer, read[cid], stop))
            for cid, consumer in (("one", one), ("two", two))
        ]
        for thread in threads:
            thread.start()
        deadline = threading.Event()
        for _ in range(100):
            if len(read["one"]) + len(read["two"]) >= 40:
                break
            deadline.wait(0.2)
        stop.set()
        for thread in threads:
            thread.join(10)
        counts = Counter(read["one"] + read["two"])
        assert counts == Counter(f"s{i}" for i in range(40))  # each exactly once
        assert read["one"] and read["two"]
    finally:
        one.close()
        two.close()


def test_a_member_that_closes_leaves_its_queues_to_the_others(broker: BrokerProcess) -> None:
    httpx.post(f"{broker.url}/v1/topics", json={"name": "handover", "queues": 2})
    stays = GroupConsumer(broker.url, "handover", {"handover": "*"}, client_id="a", consume_from="first")
    leaves = GroupConsumer(broker.url, "handover", {"handover": "*"}, client_id="b", consume_from="first")
    leaves.close()
    with Producer(broker.url) as producer:
        for i in range(6):
            producer.send("handover", f"h{i}")
    try:
        batch = stays.poll(max_messages=10)  # the generation moved: the pull answers all queues
        assert sorted(message["body"] for message in batch.messages) == [f"h{i}" for i in range(6)]
        assert stays.commit(batch)
    finally:
        stays.close()


def test_a_member_subscribes_with_a_sql92_expression(broker: BrokerProcess) -> None:
    httpx.post(f"{broker.url}/v1/topics", json={"name": "priced", "queues": 2})
    with Producer(broker.url) as producer:
        for amount in (50, 150, 250, 5):
            producer.send("priced", f"a{amount}", properties={"amount": str(amount)})
    subscription = {"type": "sql92", "expression": "amount > 100"}
    consumer = GroupConsumer(broker.url, "priced-readers", {"priced": subscription}, consume_from="first")
    try:
        got: list[str] = []
        for _ in range(10):
            batch = consumer.poll(max_messages=8, max_wait_ms=300)
            got += [message["body"] for message in batch.messages]
            assert consumer.commit(batch)
            if len(got) >= 2:
                break
        assert sorted(got) == ["a150", "a250"]
    finally:
        consumer.close()


@pytest.mark.slow
def test_a_message_sent_back_comes_again_with_its_topic_and_commits(broker: BrokerProcess) -> None:
    httpx.post(f"{broker.url}/v1/topics", json={"name": "tried", "queues": 1})
    with Producer(broker.url) as producer:
        producer.send("tried", "again")
    with GroupConsumer(broker.url, "triers", {"tried": "*"}, consume_from="first") as consumer:
        batch = consumer.poll(max_wait_ms=5_000)
        (message,) = batch.messages
        sent = consumer.retry(batch, message)
        assert (sent["status"], sent["topic"], sent["reconsume_times"]) == ("RETRY", "%RETRY%triers", 1)
        # The group's retry topic was made at its first heartbeat: the send-back changed none of
        # the group's queues, so the batch's commit is not fenced.
        assert consumer.commit(batch)
        retried = consumer.poll(max_wait_ms=20_000)  # level 3: 10 s
        (again,) = retried.messages
        assert (again["topic"], again["retry_topic"], again["reconsume_times"]) == (
            "tried",
            "%RETRY%triers",
            1,
        )
        assert again["unique_id"] == message["unique_id"]
        assert consumer.commit(retried)
        assert consumer.poll(max_wait_ms=500).messages == []  # committed: not read again
        dead = consumer.retry(retried, again)  # by its id: the retry topic's copy
        assert (dead["status"], dead["reconsume_times"]) == ("RETRY", 2)
