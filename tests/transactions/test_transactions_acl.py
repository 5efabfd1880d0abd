"""Transactions under the ACL: a begin needs PUB on the topic and on the producer group, a commit
or rollback PUB on the transaction's topic, the pending list and a check endpoint PUB on the group."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.acl_setup import ACL_YAML, ADMIN, CONSUMER, PRODUCER, acl_broker, assert_refused, client_for
from tests.api.server import BrokerProcess

BEGIN = {"transaction": "begin", "producer_group": "shop"}
SHOP = ("shop-ak", "shop-secret-0006")  # PUB on orders and on the producer group shop
SHOP_ACCOUNT = f"""\
  - accessKey: {SHOP[0]}
    secretKey: {SHOP[1]}
    topicPerms: ["orders=PUB"]
    groupPerms: ["shop=PUB"]
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = acl_broker(Path(tmp_path_factory.mktemp("transactions-acl")), ACL_YAML + SHOP_ACCOUNT).start()
    with client_for(process, ADMIN) as admin:
        for name in ("orders", "audit"):
            assert admin.post("/v1/topics", json={"name": name, "queues": 1}).status_code == 201
    yield process
    process.stop()


def test_a_begin_needs_pub_on_the_topic_and_the_producer_group(broker: BrokerProcess) -> None:
    with client_for(broker, PRODUCER) as producer:  # PUB on orders, no group
        assert_refused(producer.post("/v1/topics/orders/messages", params=BEGIN, json={"body": "x"}), 403)
    with client_for(broker, SHOP) as read_write:  # no PUB on audit nor on the group blocked
        assert_refused(read_write.post("/v1/topics/audit/messages", params=BEGIN, json={"body": "x"}), 403)
        blocked = {**BEGIN, "producer_group": "blocked"}
        assert_refused(read_write.post("/v1/topics/orders/messages", params=blocked, json={"body": "x"}), 403)
        begun = read_write.post("/v1/topics/orders/messages", params=BEGIN, json={"body": "x"})
        assert begun.status_code == 200, begun.text


def test_an_end_needs_pub_on_the_transactions_topic(broker: BrokerProcess) -> None:
    with client_for(broker, SHOP) as read_write:
        begun = read_write.post("/v1/topics/orders/messages", params=BEGIN, json={"body": "x"})
        transaction_id = begun.json()["results"][0]["transaction_id"]
    with client_for(broker, CONSUMER) as consumer:  # SUB on orders only
        assert_refused(consumer.post(f"/v1/transactions/{transaction_id}/commit"), 403)
        assert_refused(consumer.post(f"/v1/transactions/{transaction_id}/rollback"), 403)
        assert consumer.post(f"/v1/transactions/{'0' * 32}/commit").status_code == 404
    with client_for(broker, PRODUCER) as producer:  # PUB on orders
        assert producer.post(f"/v1/transactions/{transaction_id}/commit").status_code == 200
        assert producer.post(f"/v1/transactions/{transaction_id}/commit").status_code == 409


def test_a_batch_end_needs_pub_on_the_topic_of_each_transaction_it_names(broker: BrokerProcess) -> None:
    with client_for(broker, ADMIN) as admin:
        on_orders = admin.post("/v1/topics/orders/messages", params=BEGIN, json={"body": "o"})
        on_audit = admin.post("/v1/topics/audit/messages", params=BEGIN, json={"body": "a"})
    orders = on_orders.json()["results"][0]["transaction_id"]
    audit = on_audit.json()["results"][0]["transaction_id"]
    with client_for(broker, PRODUCER) as producer:  # PUB on orders, not on audit
        for how in ("commit", "rollback"):
            assert_refused(
                producer.post(f"/v1/transactions/{how}", json={"transaction_ids": [orders, audit]}), 403
            )
            assert_refused(producer.post(f"/v1/transactions/{how}", json={"transaction_ids": [audit]}), 403)
        unknown = producer.post("/v1/transactions/commit", json={"transaction_ids": ["0" * 32]})
        assert unknown.status_code == 200 and unknown.json()["results"][0]["error_code"] == 40408
        answer = producer.post("/v1/transactions/commit", json={"transaction_ids": [orders, "0" * 32]})
        assert answer.status_code == 200, answer.text
        assert answer.json()["results"][0]["state"] == "COMMITTED"
    with client_for(broker, CONSUMER) as consumer:  # SUB on orders only
        assert_refused(consumer.post("/v1/transactions/rollback", json={"transaction_ids": [audit]}), 403)
    with client_for(broker, ADMIN) as admin:
        answer = admin.post("/v1/transactions/rollback", json={"transaction_ids": [audit]})
        assert answer.json()["results"][0]["state"] == "ROLLED_BACK"


def test_the_pending_list_and_the_check_endpoint_need_pub_on_the_group(broker: BrokerProcess) -> None:
    registration = {"check_url": "http://127.0.0.1:9/check"}
    with client_for(broker, CONSUMER) as consumer:
        assert_refused(consumer.get("/v1/transactions/pending", params={"producer_group": "shop"}), 403)
        assert_refused(consumer.put("/v1/producers/shop", json=registration), 403)
        assert_refused(consumer.get("/v1/producers/shop"), 403)
    with client_for(broker, SHOP) as read_write:
        assert_refused(read_write.get("/v1/transactions/pending", params={"producer_group": "blocked"}), 403)
        assert (
            read_write.get("/v1/transactions/pending", params={"producer_group": "shop"}).status_code == 200
        )
        assert read_write.put("/v1/producers/shop", json=registration).status_code == 200
        assert read_write.get("/v1/producers/shop").json()["check_url"] == registration["check_url"]
