"""Delayed messages across a broker's death: SIGKILLed in the middle, a broker delivers on restart
every message it took - those that fell due while it was down at once, the others at their time -
and none early (at least once: a kill may repeat what was delivered since the last saved
progress). A clean stop saves the progress (delayOffset.json, the timer's checkpoint): nothing is
delivered twice."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.delay.consume import lateness_ms, now_ms, read_queue

pytestmark = [pytest.mark.crash, pytest.mark.slow]

TOPIC = "deliveries"
PER_KIND = 10
LATE_BOUND_MS = 5_000  # a generous test bound; the lateness under load is bench/delay.py's figure


@pytest.fixture(params=[100, 10_000], ids=["progress-saved", "progress-not-saved"])
def process(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[BrokerProcess]:
    """A broker that saves its delivery progress every 100 ms (so the kill finds it saved with
    messages pending in the timer log), or every 10 s (the kill comes before the first save)."""
    process = BrokerProcess(tmp_path / "store", delay_offset_persist_interval_ms=request.param).start()
    yield process
    process.stop()


def produce(client: httpx.Client, kind: str, queue_id: int, **delay: int) -> None:
    messages = [{"body": f"{kind}-{n}", "queue_id": queue_id, **delay} for n in range(PER_KIND)]
    answer = client.post(f"/v1/topics/{TOPIC}/messages", json={"messages": messages})
    assert answer.status_code == 200, answer.text


def read_distinct(client: httpx.Client, queue_id: int, count: int, timeout_s: float = 60.0) -> list[Any]:
    """Every message of a queue once ``count`` distinct bodies arrived (copies included)."""
    messages: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len({message["body"] for message in messages}) < count:
        assert time.monotonic() < deadline, f"queue {queue_id}: {len(messages)} messages, {count} wanted"
        messages = read_queue(client, TOPIC, queue_id, len(messages) + 1, timeout_s)
    return messages


def test_a_sigkilled_broker_delivers_everything_on_restart_and_nothing_early(process: BrokerProcess) -> None:
    client = httpx.Client(base_url=process.url, timeout=30)
    assert client.post("/v1/topics", json={"name": TOPIC, "queues": 2}).status_code == 201
    before = now_ms()
    produce(client, "level1", 0, delay_level=1)
    produce(client, "ms1000", 1, delay_ms=1_000)
    produce(client, "level2", 0, delay_level=2)  # 5 s: due while the broker is down
    produce(client, "at5000", 1, deliver_at_ms=before + 5_000)
    produce(client, "level3", 0, delay_level=3)  # 10 s: due after the restart
    produce(client, "ms12000", 1, delay_ms=12_000)
    read_queue(client, TOPIC, 0, PER_KIND)
    read_queue(client, TOPIC, 1, PER_KIND)

    process.kill()
    while now_ms() < before + 5_500:  # let the second kind fall due while the broker is down
        time.sleep(0.05)
    process.start()
    restarted = now_ms()

    delivered = read_distinct(client, 0, 3 * PER_KIND) + read_distinct(client, 1, 3 * PER_KIND)
    delays = {
        "level1": 1_000,
        "ms1000": 1_000,
        "level2": 5_000,
        "at5000": 5_000,
        "level3": 10_000,
        "ms12000": 12_000,
    }
    assert {message["body"] for message in delivered} == {
        f"{kind}-{n}" for kind in delays for n in range(PER_KIND)
    }
    for message in delivered:
        kind = message["body"].split("-")[0]
        assert int(message["properties"]["TIMER_OUT_MS"]) >= before + delays[kind]
        assert lateness_ms(message) >= 0, message  # never early, not even a copy
        if kind in ("level2", "at5000"):
            assert message["store_timestamp"] < restarted + LATE_BOUND_MS  # delivered at start
        elif kind in ("level3", "ms12000"):
            assert lateness_ms(message) < LATE_BOUND_MS
    copies = Counter(message["body"] for message in delivered)
    assert all(count >= 1 for count in copies.values())


def test_a_clean_stop_saves_the_progress_and_delivers_nothing_twice(process: BrokerProcess) -> None:
    client = httpx.Client(base_url=process.url, timeout=30)
    assert client.post("/v1/topics", json={"name": TOPIC, "queues": 2}).status_code == 201
    produce(client, "level1", 0, delay_level=1)
    produce(client, "ms500", 1, delay_ms=500)
    read_queue(client, TOPIC, 0, PER_KIND)
    read_queue(client, TOPIC, 1, PER_KIND)
    assert process.stop() in (0, -signal.SIGTERM), process.log()[-3000:]

    config = process.store_dir / "config"
    assert json.loads((config / "delayOffset.json").read_text())["offsetTable"]["1"] == PER_KIND
    assert json.loads((config / "timerCheckpoint.json").read_text())["enqueue_offset"] == PER_KIND
    process.start()
    # Markers due a second after the restart: a repeat would be delivered before them.
    produce(client, "marker", 0, delay_level=1)
    produce(client, "marker", 1, delay_ms=1_000)
    for queue_id, kind in ((0, "level1"), (1, "ms500")):
        bodies = [message["body"] for message in read_queue(client, TOPIC, queue_id, 2 * PER_KIND)]
        assert bodies == [f"{kind}-{n}" for n in range(PER_KIND)] + [f"marker-{n}" for n in range(PER_KIND)]
