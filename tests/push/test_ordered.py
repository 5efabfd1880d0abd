"""Ordered push subscriptions: one request in flight per queue, in queue order; a failure suspends
its queue and sends the same message again (its reconsume times one higher) while the other queues
go on, and past max_reconsume_times the message goes to the dead letters and the queue moves on."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.push.receiver import (
    Received,
    Receiver,
    committed,
    produce,
    push_broker,
    state,
    subscribe,
    wait_until,
)

pytestmark = pytest.mark.slow


def test_a_failure_suspends_its_queue_only_and_is_retried_in_place(tmp_path: Path) -> None:
    other_queue_done = threading.Event()
    attempts: dict[str, int] = {}
    open_by_queue = {"0": 0, "1": 0}
    most_open_by_queue = {"0": 0, "1": 0}
    lock = threading.Lock()

    def respond(request: Received) -> int:
        queue_id = request.headers["wharf-queue-id"]
        with lock:
            open_by_queue[queue_id] += 1
            most_open_by_queue[queue_id] = max(most_open_by_queue[queue_id], open_by_queue[queue_id])
        time.sleep(0.005)  # the receiver at work: another request of the queue would overlap it
        with lock:
            open_by_queue[queue_id] -= 1
        return answer(request)

    def answer(request: Received) -> int:
        body = request.body.decode()
        attempts[body] = attempts.get(body, 0) + 1
        if body.startswith("q1-"):
            if body == "q1-m4":
                other_queue_done.set()
            return 200
        if body == "q0-m1":
            # Fails until every message of queue 1 came: queue 1 does not wait for queue 0.
            return 200 if other_queue_done.is_set() and attempts[body] >= 2 else 500
        if body == "q0-m3":
            return 503  # always: dead-lettered after max_reconsume_times
        return 200

    with (
        Receiver(respond=respond) as receiver,
        push_broker(tmp_path / "store", orderly_suspend_ms=50) as (_, http),
    ):
        assert http.post("/v1/topics", json={"name": "seq", "queues": 2}).status_code == 201
        subscribe(
            http,
            "in-order",
            topic="seq",
            url=receiver.url,
            ordered=True,
            max_reconsume_times=4,
            max_in_flight=8,
            paused=True,
        )
        for queue_id in (0, 1):
            produce(http, "seq", *({"body": f"q{queue_id}-m{i}", "queue_id": queue_id} for i in range(5)))
        subscribe(
            http,
            "in-order",
            topic="seq",
            url=receiver.url,
            ordered=True,
            max_reconsume_times=4,
            max_in_flight=8,
        )
        assert wait_until(
            lambda: committed(http, "in-order", "seq") == {0: 5, 1: 5}, what="both queues consumed"
        )
        queue0 = [request for request in receiver.received if request.headers["wharf-queue-id"] == "0"]
        queue1 = [request for request in receiver.received if request.headers["wharf-queue-id"] == "1"]
        assert [request.body.decode() for request in queue1] == [f"q1-m{i}" for i in range(5)]
        bodies = [request.body.decode() for request in queue0]
        # In queue order, each message sent again until it passed, none overtaking it.
        assert bodies == ["q0-m0", *["q0-m1"] * attempts["q0-m1"], "q0-m2", *["q0-m3"] * 5, "q0-m4"]
        assert attempts["q0-m1"] >= 2
        assert [r.headers["wharf-reconsume-times"] for r in queue0 if r.body == b"q0-m3"] == [
            "0",
            "1",
            "2",
            "3",
            "4",
        ]
        # One request at a time per queue.
        assert most_open_by_queue == {"0": 1, "1": 1}
        # Retried in place: no retry topic, one dead letter.
        assert http.get("/v1/topics/%25RETRY%25in-order").status_code == 404
        letters = http.get("/v1/groups/in-order/dlq").json()["dead_letters"]
        assert [letter["message"]["body"] for letter in letters] == ["q0-m3"]
        shown = state(http, "in-order")
        assert shown["dead_lettered"] == 1
        assert shown["delivered"] == 9
