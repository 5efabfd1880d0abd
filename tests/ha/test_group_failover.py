"""A group consumer across a failover: once the slave is promoted, the member reads from it within
a few seconds, not when its cached route expires (30 s by default)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from app.client import GroupConsumer
from app.client.errors import BrokerError, BrokerUnavailableError
from tests.ha.replicas import TOPIC, ha
from tests.ha.test_failover import FAILOVER_S, registry, start_pair, statuses  # noqa: F401 - a fixture
from tests.transactions.transacting import wait_until

# From the promotion to the first message read from the new master: a poll that fails, the route
# fetched again, a join. Far below the route cache's 30 s.
FOLLOW_S = 5.0


def test_a_group_member_follows_the_promoted_slave_within_seconds(tmp_path: Path, registry: str) -> None:  # noqa: F811
    master, slave = start_pair(tmp_path, registry, ha_auto_failover="true")
    try:
        with GroupConsumer(master.url, "followers", {TOPIC: "*"}, consume_from="first") as consumer:
            sent = httpx.post(f"{master.url}/v1/topics/{TOPIC}/messages", json={"body": "before"}, timeout=10)
            assert statuses(sent) == {"SEND_OK"}
            received = [m["body"] for m in consumer.poll(max_messages=10, max_wait_ms=2_000).messages]
            assert received == ["before"]

            master.kill()
            wait_until(lambda: ha(slave)["role"] != "SLAVE", timeout_s=FAILOVER_S * 10, what="the promotion")
            after = httpx.post(f"{slave.url}/v1/topics/{TOPIC}/messages", json={"body": "after"}, timeout=10)
            assert statuses(after) == {"SEND_OK"}
            promoted = time.monotonic()
            bodies: list[str] = []
            while "after" not in bodies and time.monotonic() - promoted < FOLLOW_S:
                try:
                    batch = consumer.poll(max_messages=10, max_wait_ms=200)
                except (httpx.HTTPError, BrokerError, BrokerUnavailableError):  # the old master is gone
                    time.sleep(0.1)
                    continue
                bodies += [m["body"] for m in batch.messages]
                if batch.offsets:
                    consumer.commit(batch)
            assert "after" in bodies, f"no message from the new master within {FOLLOW_S} s: {bodies}"
    finally:
        slave.kill()
        master.kill()
