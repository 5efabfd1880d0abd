"""Pop consumption through a real broker: pop, the invisible time, ack, nack, change of
invisibility, concurrent poppers, long polling and dead letters."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.api.errors import ErrorCode
from tests.api.server import BrokerProcess
from tests.api.test_errors import assert_error
from tests.api.test_group_members import wait_for
from tests.pop.popping import (
    LONG_MS,
    MAX_RECONSUME_TIMES,
    committed,
    handles,
    make_topic,
    max_offsets,
    pop,
    produce,
    settle,
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # The periodic hold check runs once a minute and a pop may wait two: only an arrival, a
    # deadline or a nack wakes a held pop within a test.
    process = BrokerProcess(
        tmp_path_factory.mktemp("pop") / "store",
        max_reconsume_times=MAX_RECONSUME_TIMES,
        hold_check_interval_ms=60_000,
        max_wait_ms=120_000,
    ).start()
    yield process
    process.stop()


def bodies(messages: list[dict[str, Any]]) -> list[str]:
    return sorted(message["body"] for message in messages)


def test_a_pop_takes_from_every_queue_and_acks_move_the_group_offset(client: httpx.Client) -> None:
    topic = make_topic(client, queues=4)
    produce(client, topic, *(f"m{i}" for i in range(8)))
    popped = pop(client, "takers", topic, max_messages=100)
    assert bodies(popped) == [f"m{i}" for i in range(8)]
    assert {message["queue_id"] for message in popped} == {0, 1, 2, 3}
    assert {message["reconsume_times"] for message in popped} == {0}
    assert len(set(handles(popped))) == 8
    # In flight: no other pop sees them, and the group has consumed nothing yet.
    assert pop(client, "takers", topic) == []
    assert set(committed(client, "takers", topic).values()) == {0}
    assert settle(client, "ack", "takers", topic, handles(popped)) == ["ok"] * 8
    assert committed(client, "takers", topic) == max_offsets(client, topic)
    assert pop(client, "takers", topic) == []
    # Counted once as consumed by the group, the empty pops not at all.
    consumed = [
        sample.value
        for family in text_string_to_metric_families(client.get("/metrics").text)
        for sample in family.samples
        if sample.name == "wharf_messages_consumed_total"
        and sample.labels == {"topic": topic, "group": "takers"}
    ]
    assert consumed == [8]


def test_the_group_offset_stops_at_the_first_message_in_flight(client: httpx.Client) -> None:
    topic = make_topic(client, queues=1)
    produce(client, topic, "a", "b", "c")
    first, second, third = pop(client, "prefix", topic)
    assert settle(client, "ack", "prefix", topic, handles([second, third])) == ["ok", "ok"]
    assert committed(client, "prefix", topic) == {0: 0}
    assert settle(client, "ack", "prefix", topic, handles([first])) == ["ok"]
    assert committed(client, "prefix", topic) == {0: 3}


def test_pops_follow_the_group_offset_when_someone_else_moves_it(client: httpx.Client) -> None:
    topic = make_topic(client, queues=1)
    produce(client, topic, "a", "b", "c", "d")
    first, second, third = pop(client, "moved", topic, max_messages=3)

    def commit(offset: int) -> None:
        body = {"offsets": [{"topic": topic, "queue_id": 0, "offset": offset}]}
        assert client.put("/v1/groups/moved/offsets", json=body).status_code == 200

    commit(2)  # an operator skips the first two
    assert settle(client, "ack", "moved", topic, handles([first, second, third])) == [
        "expired",
        "expired",
        "ok",
    ]
    assert bodies(pop(client, "moved", topic)) == ["d"]
    commit(1)  # and then resets the group to read from the second again
    assert bodies(pop(client, "moved", topic)) == ["b", "c", "d"]


def test_an_unacked_message_comes_back_after_its_invisible_time_one_reconsume_higher(
    client: httpx.Client,
) -> None:
    topic = make_topic(client)
    (unique_id,) = produce(client, topic, "again")
    (first,) = pop(client, "slow", topic, invisible_ms=300)
    # Held until the message becomes visible again: it comes back, not before its time.
    (second,) = pop(client, "slow", topic, max_wait_ms=20_000)
    assert time.time() * 1000 >= first["invisible_until_ms"]
    assert (second["unique_id"], second["reconsume_times"]) == (unique_id, 1)
    assert settle(client, "ack", "slow", topic, [first["receipt_handle"]]) == ["expired"]
    assert settle(client, "ack", "slow", topic, [second["receipt_handle"]]) == ["ok"]


def test_an_ack_after_the_invisible_time_counts_while_nobody_popped_it_again(client: httpx.Client) -> None:
    topic = make_topic(client)
    produce(client, topic, "late")
    (message,) = pop(client, "late", topic, invisible_ms=100)
    wait_for(lambda: time.time() * 1000 > message["invisible_until_ms"] + 50)
    assert settle(client, "ack", "late", topic, handles([message])) == ["ok"]
    assert pop(client, "late", topic) == []


def test_ack_answers_per_handle(client: httpx.Client) -> None:
    topic = make_topic(client)
    other_topic = make_topic(client)
    produce(client, topic, "one", "two")
    produce(client, other_topic, "elsewhere")
    one, two = pop(client, "statuses", topic)
    (elsewhere,) = pop(client, "statuses", other_topic)
    (same_topic_other_group,) = pop(client, "others", other_topic)
    assert settle(client, "ack", "statuses", topic, handles([one])) == ["ok"]
    statuses = settle(
        client,
        "ack",
        "statuses",
        topic,
        [
            one["receipt_handle"],  # acked already
            two["receipt_handle"],
            "not-a-handle",
            elsewhere["receipt_handle"],  # of another topic
            same_topic_other_group["receipt_handle"],  # of another group
            one["receipt_handle"][:-4],  # cut
        ],
    )
    assert statuses == ["expired", "ok", "unknown", "unknown", "unknown", "unknown"]


def test_nack_makes_the_message_visible_now_one_reconsume_higher(client: httpx.Client) -> None:
    topic = make_topic(client)
    (unique_id,) = produce(client, topic, "retry me")
    (first,) = pop(client, "nackers", topic)
    assert settle(client, "nack", "nackers", topic, handles([first])) == ["ok"]
    (again,) = pop(client, "nackers", topic)
    assert (again["unique_id"], again["reconsume_times"]) == (unique_id, 1)
    assert settle(client, "nack", "nackers", topic, handles([first])) == ["expired"]
    assert settle(client, "ack", "nackers", topic, handles([again])) == ["ok"]


def test_nack_with_a_delay_makes_the_message_visible_after_it(client: httpx.Client) -> None:
    topic = make_topic(client)
    (unique_id,) = produce(client, topic, "later")
    (first,) = pop(client, "delayers", topic)
    nacked_at_ms = time.time() * 1000
    assert settle(client, "nack", "delayers", topic, handles([first]), delay_ms=1_500) == ["ok"]
    (again,) = pop(client, "delayers", topic, max_wait_ms=20_000)
    assert time.time() * 1000 >= nacked_at_ms + 1_500
    assert (again["unique_id"], again["reconsume_times"]) == (unique_id, 1)


def test_a_change_of_invisibility_answers_a_new_handle_and_expires_the_old(client: httpx.Client) -> None:
    topic = make_topic(client)
    (unique_id,) = produce(client, topic, "longer")
    (message,) = pop(client, "changers", topic, invisible_ms=LONG_MS)
    old = message["receipt_handle"]
    path = f"/v1/groups/changers/topics/{topic}/invisibility"
    changed = client.post(path, json={"receipt_handle": old, "invisible_ms": 300})
    assert changed.status_code == 200, changed.text
    new = changed.json()["receipt_handle"]
    assert new != old and changed.json()["invisible_until_ms"] < message["invisible_until_ms"]
    assert_error(
        client.post(path, json={"receipt_handle": old, "invisible_ms": 1000}),
        ErrorCode.RECEIPT_HANDLE_EXPIRED,
    )
    assert_error(
        client.post(path, json={"receipt_handle": "bm9wZQ", "invisible_ms": 1000}),
        ErrorCode.RECEIPT_HANDLE_NOT_FOUND,
    )
    assert settle(client, "ack", "changers", topic, [old]) == ["expired"]
    # 300 ms from the change, not a minute from the pop: it comes back within the wait.
    (again,) = pop(client, "changers", topic, max_wait_ms=20_000)
    assert (again["unique_id"], again["reconsume_times"]) == (unique_id, 1)
    assert settle(client, "ack", "changers", topic, [new]) == ["expired"]


def test_concurrent_poppers_never_get_the_same_message(client: httpx.Client, broker: BrokerProcess) -> None:
    topic = make_topic(client, queues=4)
    produced = set(produce(client, topic, *(f"c{i}" for i in range(400))))

    def popper() -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        with httpx.Client(base_url=broker.url, timeout=150.0) as own:
            # Bounded: a broker handing out messages again would otherwise keep them going.
            for _ in range(len(produced)):
                batch = pop(own, "crowd", topic, max_messages=7)
                if not batch:
                    break
                got.extend(batch)
        return got

    with ThreadPoolExecutor(8) as pool:
        shares = list(pool.map(lambda _: popper(), range(8)))
    popped = [message["unique_id"] for share in shares for message in share]
    assert len(popped) == len(set(popped)) == len(produced)
    assert set(popped) == produced
    assert sum(1 for share in shares if share) > 1  # they really raced


def held_pop(broker: BrokerProcess, client: httpx.Client, group: str, topic: str) -> Callable[[], list[Any]]:
    """Start a pop that may wait 100 s; once it is held, a function that waits up to 30 s for its
    answer (a pop not woken would be answered after 100 s) and returns it."""
    answers: list[list[dict[str, Any]]] = []

    def held() -> None:
        with httpx.Client(base_url=broker.url, timeout=150.0) as own:
            answers.append(pop(own, group, topic, max_wait_ms=100_000))

    thread = threading.Thread(target=held)
    thread.start()
    wait_for(lambda: client.get("/v1/stats").json()["held_pulls"] >= 4)  # one hold per queue

    def answer() -> list[Any]:
        thread.join(30)
        assert not thread.is_alive(), "the held pop was not woken"
        (messages,) = answers
        return messages

    return answer


def test_a_held_pop_is_answered_by_a_produce(client: httpx.Client, broker: BrokerProcess) -> None:
    topic = make_topic(client)
    assert pop(client, "waiters", topic) == []  # the group starts at the end of every queue
    answer = held_pop(broker, client, "waiters", topic)
    produce(client, topic, "wake up")
    assert bodies(answer()) == ["wake up"]


def test_a_held_pop_is_answered_by_a_nack(client: httpx.Client, broker: BrokerProcess) -> None:
    topic = make_topic(client)
    produce(client, topic, "given back")
    (message,) = pop(client, "givers", topic)  # invisible for a minute
    answer = held_pop(broker, client, "givers", topic)
    assert settle(client, "nack", "givers", topic, handles([message])) == ["ok"]
    (again,) = answer()
    assert (again["body"], again["reconsume_times"]) == ("given back", 1)


def dead_letters(client: httpx.Client, group: str) -> list[dict[str, Any]]:
    answer = client.get(f"/v1/topics/%25DLQ%25{group}/queues/0/messages", params={"offset": 0})
    return answer.json()["messages"] if answer.status_code == 200 else []


def test_a_message_never_acked_goes_to_the_dead_letter_topic_after_the_max_reconsumes(
    client: httpx.Client,
) -> None:
    topic = make_topic(client, queues=2)
    (unique_id,) = produce(
        client, topic, "poison", tags="TagA", keys=["order-7"], properties={"origin": "shop"}, queue_id=1
    )
    seen = []
    for _ in range(MAX_RECONSUME_TIMES + 1):
        (message,) = pop(client, "doomed", topic, invisible_ms=200, max_wait_ms=20_000)
        seen.append(message["reconsume_times"])
    assert seen == list(range(MAX_RECONSUME_TIMES + 1))
    # Its last invisible time ends with nobody popping: the reviver moves it.
    (dead,) = wait_for(lambda: dead_letters(client, "doomed"))
    assert dead["unique_id"] == unique_id
    assert (dead["body"], dead["tags"], dead["keys"]) == ("poison", "TagA", ["order-7"])
    assert dead["properties"]["origin"] == "shop"
    assert dead["properties"]["DLQ_ORIGIN_TOPIC"] == topic
    assert dead["properties"]["DLQ_ORIGIN_MESSAGE_ID"] == message["msg_id"]
    assert dead["reconsume_times"] == MAX_RECONSUME_TIMES
    wait_for(lambda: committed(client, "doomed", topic)[1] == 1)
    assert pop(client, "doomed", topic, max_wait_ms=500) == []
    (queue,) = client.get("/v1/topics/%25DLQ%25doomed/queues").json()["queues"]
    assert queue["queue_id"] == 0


def test_a_message_nacked_past_the_max_reconsumes_goes_to_the_dead_letter_topic(client: httpx.Client) -> None:
    topic = make_topic(client)
    (unique_id,) = produce(client, topic, "refused")
    for reconsume_times in range(MAX_RECONSUME_TIMES + 1):
        (message,) = pop(client, "refusers", topic)
        assert message["reconsume_times"] == reconsume_times
        assert settle(client, "nack", "refusers", topic, handles([message])) == ["ok"]
    (dead,) = wait_for(lambda: dead_letters(client, "refusers"))
    assert (dead["unique_id"], dead["reconsume_times"]) == (unique_id, MAX_RECONSUME_TIMES)
    assert pop(client, "refusers", topic) == []
    assert settle(client, "ack", "refusers", topic, handles([message])) == ["expired"]


def test_refusals(client: httpx.Client) -> None:
    topic = make_topic(client)
    path = f"/v1/groups/refused/topics/{topic}"
    assert_error(client.post("/v1/groups/refused/topics/nowhere/pop", json={}), ErrorCode.TOPIC_NOT_FOUND)
    assert_error(client.post(f"{path}/pop", json={"max_messages": 10**6}), ErrorCode.INVALID_PARAMETER)
    assert_error(client.post(f"{path}/pop", json={"consume_from": "timestamp"}), ErrorCode.INVALID_PARAMETER)
    assert_error(client.post(f"{path}/pop", json={"invisible_ms": 0}), ErrorCode.VALIDATION_FAILED)
    assert_error(client.post(f"{path}/ack", json={"receipt_handles": []}), ErrorCode.VALIDATION_FAILED)
    assert_error(
        client.post(f"{path}/nack", json={"receipt_handles": ["x"], "delay_ms": -1}),
        ErrorCode.VALIDATION_FAILED,
    )
    assert_error(
        client.post("/v1/groups/refused/topics/nowhere/ack", json={"receipt_handles": ["x"]}),
        ErrorCode.TOPIC_NOT_FOUND,
    )
