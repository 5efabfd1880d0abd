"""Pop, ack, nack and invisibility under the ACL: SUB on the group and on the topic, and a refused
ack changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.acl_setup import ADMIN, CONSUMER, PRODUCER, READ_WRITE, acl_broker, assert_refused, client_for
from tests.api.server import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = acl_broker(Path(tmp_path_factory.mktemp("pop-acl"))).start()
    with client_for(process, ADMIN) as admin:
        for name in ("orders", "audit"):
            assert admin.post("/v1/topics", json={"name": name, "queues": 1}).status_code == 201
            assert admin.post(f"/v1/topics/{name}/messages", json={"body": "first"}).status_code == 200
    yield process
    process.stop()


def test_pop_and_its_answers_need_sub_on_the_group_and_the_topic(broker: BrokerProcess) -> None:
    first = {"consume_from": "first"}
    with client_for(broker, PRODUCER) as producer:  # PUB on orders only
        assert_refused(producer.post("/v1/groups/billing/topics/orders/pop", json=first), 403)
    with client_for(broker, READ_WRITE) as read_write:  # DENY on audit and on the group blocked
        assert_refused(read_write.post("/v1/groups/any/topics/audit/pop", json=first), 403)
        assert_refused(read_write.post("/v1/groups/blocked/topics/orders/pop", json=first), 403)
    with client_for(broker, CONSUMER) as consumer:  # SUB on orders and on the group billing
        assert_refused(consumer.post("/v1/groups/shipping/topics/orders/pop", json=first), 403)
        (message,) = consumer.post("/v1/groups/billing/topics/orders/pop", json=first).json()["messages"]
    handles = {"receipt_handles": [message["receipt_handle"]]}
    change = {"receipt_handle": message["receipt_handle"], "invisible_ms": 1000}
    with client_for(broker, PRODUCER) as producer:
        for verb, body in (("ack", handles), ("nack", handles), ("invisibility", change)):
            assert_refused(producer.post(f"/v1/groups/billing/topics/orders/{verb}", json=body), 403)
    with client_for(broker, CONSUMER) as consumer:
        answer = consumer.post("/v1/groups/billing/topics/orders/ack", json=handles).json()
        assert answer["results"][0]["status"] == "ok"  # the refused ones changed nothing
