"""The idempotency window end to end, through HTTP against real broker processes: a retried unique id
is answered with the first message after a graceful restart and after SIGKILL; the window can be
switched off; it forgets the oldest ids beyond its size, and every id once its time is over."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.server import BrokerProcess

TOPIC = "payments"


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[type[BrokerProcess]]:
    """``start_broker(**settings)``: a broker of its own on ``tmp_path/store``, stopped at teardown."""
    started: list[BrokerProcess] = []

    def start(**settings: object) -> BrokerProcess:
        process = BrokerProcess(tmp_path / "store", hold_check_interval_ms=60000, **settings).start()
        started.append(process)
        return process

    yield start  # type: ignore[misc]
    for process in started:
        process.stop()


def send(broker: BrokerProcess, *unique_ids: str) -> list[dict]:
    messages = [{"body": f"pay {uid}", "unique_id": uid, "queue_id": 0} for uid in unique_ids]
    response = httpx.post(f"{broker.url}/v1/topics/{TOPIC}/messages", json={"messages": messages}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["results"]


def stored(broker: BrokerProcess) -> list[str]:
    """The bodies stored in queue 0, in order."""
    response = httpx.get(
        f"{broker.url}/v1/topics/{TOPIC}/queues/0/messages",
        params={"offset": 0, "max_messages": 1000},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return [message["body"] for message in response.json()["messages"]]


@pytest.mark.slow
def test_a_retry_after_a_graceful_restart_answers_the_first_message(start_broker) -> None:  # type: ignore[no-untyped-def]
    broker = start_broker()
    first = send(broker, "pay-1", "pay-2")
    broker.stop()
    broker.start()

    again = send(broker, "pay-2", "pay-1", "pay-3")
    assert again[:2] == [first[1], first[0]]
    assert again[2]["queue_offset"] == 2
    assert stored(broker) == ["pay pay-1", "pay pay-2", "pay pay-3"]


@pytest.mark.crash
def test_a_retry_after_sigkill_answers_the_first_message(start_broker) -> None:  # type: ignore[no-untyped-def]
    broker = start_broker()
    ids = [f"order-{n}" for n in range(30)]
    first = send(broker, *ids)
    broker.kill()
    broker.start()

    assert send(broker, *ids) == first
    assert stored(broker) == [f"pay {uid}" for uid in ids]


def test_with_a_window_of_zero_seconds_a_retry_is_stored_again(start_broker) -> None:  # type: ignore[no-untyped-def]
    broker = start_broker(idempotency_window_s=0)
    first = send(broker, "pay-1")
    again = send(broker, "pay-1", "pay-1")
    assert len({first[0]["msg_id"], again[0]["msg_id"], again[1]["msg_id"]}) == 3
    assert stored(broker) == ["pay pay-1"] * 3


@pytest.mark.slow
def test_beyond_max_entries_the_oldest_ids_are_forgotten_also_after_a_restart(start_broker) -> None:  # type: ignore[no-untyped-def]
    broker = start_broker(idempotency_max_entries=2)
    first = send(broker, "a", "b", "c")
    assert send(broker, "b", "c") == first[1:]
    # Ids the broker made up are not remembered, so they push no producer's id out, now or after
    # the restart.
    generated = httpx.post(f"{broker.url}/v1/topics/{TOPIC}/messages", json={"body": "anon", "queue_id": 0})
    assert generated.status_code == 200
    broker.stop()
    broker.start()
    assert send(broker, "b", "c") == first[1:]
    forgotten = send(broker, "a")  # the oldest: stored again, and now among the newest two
    assert forgotten[0]["msg_id"] != first[0]["msg_id"]
    assert stored(broker) == ["pay a", "pay b", "pay c", "anon", "pay a"]


def test_once_its_window_is_over_an_id_is_stored_again(start_broker) -> None:  # type: ignore[no-untyped-def]
    broker = start_broker(idempotency_window_s=2)
    sent_at = time.monotonic()
    first = send(broker, "pay-1")[0]
    # Within the window a retry is answered with the first message (a broker that forgot at once,
    # or never remembered, stores it again here).
    assert send(broker, "pay-1")[0] == first
    deadline = time.monotonic() + 30
    while True:
        again = send(broker, "pay-1")[0]
        if again["msg_id"] != first["msg_id"]:
            forgotten_after = time.monotonic() - sent_at
            break
        assert time.monotonic() < deadline, "the id was never forgotten"
        time.sleep(0.05)
    assert forgotten_after >= 2.0, f"forgotten {forgotten_after:.2f} s after it was sent, within its window"
    assert stored(broker) == ["pay pay-1", "pay pay-1"]
