"""Push subscriptions live on masters: a slave refuses one (421, naming its master)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.push.receiver import wait_until

pytestmark = pytest.mark.slow


def test_a_slave_takes_no_push_subscription(tmp_path: Path) -> None:
    master = BrokerProcess(tmp_path / "master", push_allow_private="true").start()
    slave = BrokerProcess(
        tmp_path / "slave",
        broker_role="SLAVE",
        broker_id=1,
        ha_master_url=master.url,
        push_allow_private="true",
    ).start()
    try:
        assert httpx.post(f"{master.url}/v1/topics", json={"name": "orders", "queues": 1}).status_code == 201
        wait_until(
            lambda: httpx.get(f"{slave.url}/v1/topics/orders").status_code == 200,
            what="the topic on the slave",
        )
        hook = {"topic": "orders", "url": "http://127.0.0.1:9/hook"}
        refused = httpx.put(f"{slave.url}/v1/groups/billing/push", json=hook)
        assert refused.status_code == 421, refused.text
        assert refused.json()["error_code"] == 42101
        assert httpx.put(f"{master.url}/v1/groups/billing/push", json=hook).status_code == 201
    finally:
        slave.stop()
        master.stop()
