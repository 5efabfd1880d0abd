"""A SIGKILL of the broker in the middle of deliveries loses nothing and delivers again only what was
in flight: an acknowledged request's commit is on disk before its slot goes to the next one."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.push.receiver import Receiver, produce, subscribe

pytestmark = [pytest.mark.slow, pytest.mark.crash]

ANSWERED = 40
IN_FLIGHT = 4
MESSAGES = 100


def test_sigkill_mid_delivery_loses_nothing_and_repeats_only_what_was_in_flight(tmp_path: Path) -> None:
    with Receiver() as receiver:
        process = BrokerProcess(tmp_path / "store", push_allow_private="true").start()
        try:
            with httpx.Client(base_url=process.url, timeout=30) as http:
                assert http.post("/v1/topics", json={"name": "events", "queues": 2}).status_code == 201
                subscribe(
                    http, "sink", topic="events", url=receiver.url, max_in_flight=IN_FLIGHT, paused=True
                )
                produced = produce(http, "events", *({"body": f"e{i}"} for i in range(MESSAGES)))
                # The first ANSWERED requests are answered, the next IN_FLIGHT never.
                receiver.hang_after(ANSWERED)
                subscribe(http, "sink", topic="events", url=receiver.url, max_in_flight=IN_FLIGHT)
                receiver.wait_for(lambda received: len(received) >= ANSWERED + IN_FLIGHT)
                in_flight = {request.headers["wharf-unique-id"] for request in receiver.received[ANSWERED:]}

                assert len(receiver.received) == ANSWERED + IN_FLIGHT
                process.kill()
            receiver.answer_all()
            process.start()
            everything = {result["unique_id"] for result in produced}
            got = receiver.wait_for(
                lambda received: {r.headers["wharf-unique-id"] for r in received} >= everything
            )
            ids = [request.headers["wharf-unique-id"] for request in got]
            repeated = {unique_id for unique_id in ids if ids.count(unique_id) > 1}
            assert repeated <= in_flight
            assert in_flight <= set(ids[ANSWERED + IN_FLIGHT :])  # what was in flight came again
        finally:
            process.stop()
