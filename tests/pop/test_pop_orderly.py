"""Orderly pop: a queue one batch at a time, the next only once the batch is acked; a message
nacked or not acked in time comes again before anything after it (retried in place)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.pop.popping import MAX_RECONSUME_TIMES, handles, make_topic, pop, produce, settle

SHORT_MS = 300


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("pop-orderly") / "store",
        max_reconsume_times=MAX_RECONSUME_TIMES,
        hold_check_interval_ms=60_000,
    ).start()
    with httpx.Client(base_url=process.url, timeout=30) as http:
        yield http
    process.stop()


def ordered_pop(client: httpx.Client, group: str, topic: str, **fields: Any) -> list[dict[str, Any]]:
    return pop(client, group, topic, consume_mode="orderly", **fields)


def bodies(messages: list[dict[str, Any]]) -> list[str]:
    return [message["body"] for message in messages]


def test_a_queue_is_handed_out_one_batch_at_a_time(client: httpx.Client) -> None:
    topic = make_topic(client, queues=1)
    produce(client, topic, *(f"m{i}" for i in range(5)), queue_id=0)
    first = ordered_pop(client, "fifo", topic, max_messages=2)
    assert bodies(first) == ["m0", "m1"]
    # While the batch is out nobody gets the queue, in orderly mode.
    assert ordered_pop(client, "fifo", topic) == []
    assert settle(client, "ack", "fifo", topic, handles(first[:1])) == ["ok"]
    assert ordered_pop(client, "fifo", topic) == []  # m1 is still out
    assert settle(client, "ack", "fifo", topic, handles(first[1:])) == ["ok"]
    assert bodies(ordered_pop(client, "fifo", topic, max_messages=10)) == ["m2", "m3", "m4"]


def test_a_held_orderly_pop_is_answered_when_the_batch_is_acked(client: httpx.Client) -> None:
    topic = make_topic(client, queues=1)
    produce(client, topic, "a", "b", queue_id=0)
    (first,) = ordered_pop(client, "waiters", topic, max_messages=1)
    answers: list[list[dict[str, Any]]] = []
    waiter = threading.Thread(
        target=lambda: answers.append(ordered_pop(client, "waiters", topic, max_wait_ms=20_000))
    )
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive()  # b is there, but a's batch is out
    assert settle(client, "ack", "waiters", topic, handles([first])) == ["ok"]
    waiter.join(10)
    assert bodies(answers[0]) == ["b"]


def test_a_nacked_or_expired_message_comes_again_before_the_rest(client: httpx.Client) -> None:
    topic = make_topic(client, queues=1)
    produce(client, topic, "x0", "x1", "x2", "x3", queue_id=0)
    batch = ordered_pop(client, "inplace", topic, max_messages=2)
    assert settle(client, "ack", "inplace", topic, handles(batch[:1])) == ["ok"]
    assert settle(client, "nack", "inplace", topic, handles(batch[1:])) == ["ok"]
    again = ordered_pop(client, "inplace", topic, max_messages=10)
    assert [(m["body"], m["reconsume_times"]) for m in again] == [("x1", 1)]
    # Not acked within its invisible time: again first, once more, then the dead-letter topic.
    expired = ordered_pop(client, "inplace", topic, invisible_ms=SHORT_MS, max_wait_ms=500)
    assert expired == []  # x1 is still out with its long invisible time
    settle(client, "nack", "inplace", topic, handles(again))
    last = ordered_pop(client, "inplace", topic, invisible_ms=SHORT_MS, max_wait_ms=5_000)
    assert [(m["body"], m["reconsume_times"]) for m in last] == [("x1", MAX_RECONSUME_TIMES)]
    # Its invisible time passes unacked at the max reconsume times: to %DLQ%, and the queue goes on.
    rest = ordered_pop(client, "inplace", topic, max_messages=10, max_wait_ms=10_000)
    assert bodies(rest) == ["x2", "x3"]
    letters = client.get("/v1/groups/inplace/dlq").json()["dead_letters"]
    assert [letter["message"]["body"] for letter in letters] == ["x1"]
