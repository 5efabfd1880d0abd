"""Push subscriptions live on masters: a slave refuses one (421, naming its master), copies its
master's, and once promoted pushes them on, signed with the same secret, from where the group was."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from standardwebhooks import Webhook

from tests.api.server import BrokerProcess
from tests.ha.replicas import TOPIC, caught_up
from tests.ha.test_failover import registry, start_pair  # noqa: F401 - a fixture
from tests.push.receiver import Receiver, committed, produce, subscribe, wait_until

pytestmark = pytest.mark.slow

BEFORE, AFTER = b'{"step": "before"}', b'{"step": "after"}'


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


def test_a_promoted_slave_pushes_its_masters_subscriptions(
    tmp_path: Path,
    registry: str,  # noqa: F811
) -> None:
    master, slave = start_pair(tmp_path, registry, push_allow_private="true")
    try:
        with (
            Receiver() as receiver,
            httpx.Client(base_url=master.url, timeout=30) as on_master,
            httpx.Client(base_url=slave.url, timeout=30) as on_slave,
        ):
            secret = subscribe(on_master, "billing", topic=TOPIC, url=receiver.url, batch=1)["secret"]
            copied = wait_until(
                lambda: on_slave.get("/v1/groups/billing/push").status_code == 200,
                what="the subscription on the slave",
            )
            assert copied
            assert on_slave.get("/v1/groups/billing/push").json()["url"] == receiver.url
            produce(on_master, TOPIC, {"body": '{"step": "before"}', "queue_id": 0})
            receiver.wait_for(lambda got: any(r.body == BEFORE for r in got))
            wait_until(lambda: caught_up(master, slave), what="the slave to catch up")
            wait_until(
                lambda: committed(on_slave, "billing", TOPIC).get(0) == 1, what="the offset on the slave"
            )

            master.kill()
            # Forced: the subject is the pushes, not the lease the dead master still holds.
            promoted = on_slave.post("/v1/admin/ha/promote", params={"force": "true"})
            assert promoted.status_code == 200, promoted.text
            produce(on_slave, TOPIC, {"body": '{"step": "after"}', "queue_id": 0})

            got = receiver.wait_for(lambda got: any(r.body == AFTER for r in got))
            after = next(r for r in got if r.body == AFTER)
            # Signed as the master signed: the receiver's secret still verifies it.
            assert Webhook(secret).verify(after.body, after.headers) == {"step": "after"}
            assert [r.body for r in got].count(BEFORE) == 1  # the copied offset: not sent again
    finally:
        slave.kill()
        master.kill()
