"""The Python client against a broker that enforces an ACL: ``user="AK:SK"`` (or a pair) is sent as
HTTP Basic auth; without it, or without the permission, the broker's refusal reaches the caller."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from wharf_client import Admin, BrokerError, Producer, PullConsumer

from tests.api.acl_setup import ADMIN, CONSUMER, PRODUCER, acl_broker
from tests.api.server import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = acl_broker(tmp_path_factory.mktemp("acl-client")).start()
    yield process
    process.stop()


def test_admin_producer_and_consumer_send_their_credentials(broker: BrokerProcess) -> None:
    with Admin(broker.url, user=f"{ADMIN[0]}:{ADMIN[1]}") as admin:
        assert admin.create_topic("orders", queues=1)["name"] == "orders"
        assert [topic["name"] for topic in admin.iter_topics()] == ["orders"]
    with Producer(broker.url, user=PRODUCER) as producer:  # a pair works too
        sent = producer.send("orders", b"with credentials")
    assert sent.status == "SEND_OK"
    with PullConsumer(
        broker.url, "orders", "billing", user=f"{CONSUMER[0]}:{CONSUMER[1]}", max_wait_ms=500
    ) as consumer:
        consumed = consumer.poll(10.0)
        assert consumed is not None and consumed.body == b"with credentials"
        consumer.commit()
    with Admin(broker.url, user=f"{ADMIN[0]}:{ADMIN[1]}") as admin:
        assert [group["group"] for group in admin.iter_groups()] == ["billing"]


def test_refusals_reach_the_caller(broker: BrokerProcess) -> None:
    with Admin(broker.url) as anonymous, pytest.raises(BrokerError) as raised:
        anonymous.create_topic("never")
    assert (raised.value.status, raised.value.error_code) == (401, 40101)
    with (
        Admin(broker.url, user=f"{PRODUCER[0]}:{PRODUCER[1]}") as producer_admin,
        pytest.raises(BrokerError) as raised,
    ):
        producer_admin.create_topic("never")
    assert (raised.value.status, raised.value.error_code) == (403, 40301)
    # The producer may read the route (PUB) but not pull: the consumer raises instead of retrying.
    with Admin(broker.url, user=f"{ADMIN[0]}:{ADMIN[1]}") as admin:
        admin.create_topic("orders", queues=1)
    consumer = PullConsumer(broker.url, "orders", "billing", user=PRODUCER, max_wait_ms=500).start()
    try:
        with pytest.raises(BrokerError) as raised:
            for _ in consumer:
                pass
        assert raised.value.status == 403
    finally:
        consumer.close()


def test_a_user_without_a_colon_is_refused_at_once(broker: BrokerProcess) -> None:
    with pytest.raises(ValueError, match="accessKey:secretKey"):
        Producer(broker.url, user="no-colon")
