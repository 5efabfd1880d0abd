"""Queue locks under the ACL: SUB on the group, and a refused unlock releases nothing."""

from __future__ import annotations

from pathlib import Path

from tests.api.acl_setup import ADMIN, CONSUMER, PRODUCER, READ_WRITE, acl_broker, assert_refused, client_for
from tests.api.ordering import join, lock, lock_holders


def test_locks_need_sub_on_the_group(tmp_path: Path) -> None:
    broker = acl_broker(tmp_path).start()
    try:
        with client_for(broker, ADMIN) as admin:
            assert admin.post("/v1/topics", json={"name": "orders", "queues": 1}).status_code == 201
        queues = [{"topic": "orders", "queue_id": 0}]
        with client_for(broker, CONSUMER) as consumer:  # SUB on orders and on the group billing
            join(consumer, "billing", "worker", "orders")
            assert lock(consumer, "billing", "worker", [("orders", 0)]) == [("orders", 0)]
            assert_refused(
                consumer.post("/v1/groups/shipping/locks", json={"client_id": "w", "queues": []}), 403
            )
        body = {"client_id": "worker", "queues": queues}
        with client_for(broker, PRODUCER) as producer:  # no SUB on the group
            assert_refused(producer.post("/v1/groups/billing/locks", json=body), 403)
            assert_refused(producer.request("DELETE", "/v1/groups/billing/locks", json=body), 403)
        with client_for(broker, READ_WRITE) as read_write:  # DENY on the group blocked
            assert_refused(read_write.request("DELETE", "/v1/groups/blocked/locks", json=body), 403)
        with client_for(broker, CONSUMER) as consumer:
            assert lock_holders(consumer, "billing") == {("orders", 0): ["worker"]}
    finally:
        broker.stop()
