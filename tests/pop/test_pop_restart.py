"""Pop state across SIGKILL and restart: a message in flight is neither lost nor handed out
before its invisible time, acks stay acked, and the journal's offsets win over the consumer
offset table's last write."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.pop.popping import LONG_MS, committed, handles, make_topic, pop, produce, settle

pytestmark = pytest.mark.slow

SHORT_MS = 1_500


def unique_ids(messages: list[dict[str, Any]]) -> set[str]:
    return {message["unique_id"] for message in messages}


def pop_until(client: httpx.Client, topic: str, wanted: set[str], **fields: Any) -> list[dict[str, Any]]:
    """Pop (held) until every message of ``wanted`` came back; they must be the only ones."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + 30
    while unique_ids(got) != wanted:
        assert time.monotonic() < deadline, (unique_ids(got), wanted)
        batch = pop(client, "crash", topic, max_wait_ms=10_000, **fields)
        assert unique_ids(batch) <= wanted
        got.extend(batch)
    return got


def test_a_sigkill_neither_loses_nor_redelivers_early_what_was_in_flight(tmp_path: Path) -> None:
    # The consumer offset table is never written before the kill: what the group consumed is in
    # the pop journal only.
    broker = BrokerProcess(
        tmp_path / "store", hold_check_interval_ms=60_000, consumer_offset_persist_interval_ms=600_000
    ).start()
    try:
        with httpx.Client(base_url=broker.url, timeout=90.0) as client:
            topic = make_topic(client, queues=1)
            produce(client, topic, *(f"m{i}" for i in range(10)))
            done = pop(client, "crash", topic, max_messages=3, invisible_ms=LONG_MS)
            assert settle(client, "ack", "crash", topic, handles(done)) == ["ok"] * 3
            held = pop(client, "crash", topic, max_messages=3, invisible_ms=LONG_MS)
            short = pop(client, "crash", topic, max_messages=2, invisible_ms=SHORT_MS)
            assert committed(client, "crash", topic) == {0: 3}
        broker.kill()
        broker.start()

        with httpx.Client(base_url=broker.url, timeout=90.0) as client:
            assert committed(client, "crash", topic) == {0: 3}
            # Within a minute of the pop: the held messages stay invisible, the acked ones done.
            assert time.time() * 1000 < min(message["invisible_until_ms"] for message in held)
            fresh = pop(client, "crash", topic, max_messages=10, invisible_ms=SHORT_MS)
            assert not unique_ids(fresh) & (unique_ids(held) | unique_ids(done))
            never_popped = [message for message in fresh if message["reconsume_times"] == 0]
            assert len(never_popped) == 2
            assert settle(client, "ack", "crash", topic, handles(never_popped)) == ["ok", "ok"]
            # The short ones come back once their time is over, one reconsume higher: again
            # invisible for a short while, and the broker is killed again before their ack.
            back = [message for message in fresh if message["unique_id"] in unique_ids(short)]
            back += pop_until(client, topic, unique_ids(short) - unique_ids(back), invisible_ms=SHORT_MS)
            assert {message["reconsume_times"] for message in back} == {1}
        broker.kill()
        broker.start()

        with httpx.Client(base_url=broker.url, timeout=90.0) as client:
            # Replayed from the snapshot made at the last start plus the journal since.
            again = pop_until(client, topic, unique_ids(short))
            assert {message["reconsume_times"] for message in again} == {2}
            assert settle(client, "ack", "crash", topic, handles(back)) == ["expired"] * 2
            assert settle(client, "ack", "crash", topic, handles(done)) == ["expired"] * 3
            # Handles from before both kills still ack what they name.
            assert settle(client, "ack", "crash", topic, handles(held) + handles(again)) == ["ok"] * 5
            assert committed(client, "crash", topic) == {0: 10}
            assert pop(client, "crash", topic) == []
    finally:
        broker.stop()


def test_a_clean_restart_keeps_the_pop_state(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "store", hold_check_interval_ms=60_000).start()
    try:
        with httpx.Client(base_url=broker.url, timeout=90.0) as client:
            topic = make_topic(client, queues=2)
            produce(client, topic, "x", "y")
            held = pop(client, "clean", topic, invisible_ms=LONG_MS)
        assert broker.stop() in (0, -signal.SIGTERM)
        assert "Traceback" not in broker.log()
        broker.start()
        with httpx.Client(base_url=broker.url, timeout=90.0) as client:
            assert pop(client, "clean", topic) == []
            assert settle(client, "ack", "clean", topic, handles(held)) == ["ok", "ok"]
            assert committed(client, "clean", topic) == {0: 1, 1: 1}
    finally:
        broker.stop()
