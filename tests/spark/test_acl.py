"""The Spark source and sink against a broker that enforces an ACL: the ``user`` option
(``accessKey:secretKey``) goes with every call the driver and the executors make."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark_jobs.options import OptionError, ReadOptions
from tests.api.acl_setup import ADMIN, CONSUMER, PRODUCER, READ_WRITE, acl_broker, client_for
from tests.api.server import BrokerProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = acl_broker(tmp_path_factory.mktemp("acl-spark")).start()
    with client_for(process, ADMIN) as admin:
        assert admin.post("/v1/topics", json={"name": "orders", "queues": 2}).status_code == 201
        messages = [{"body": f"m{i}", "queue_id": i % 2} for i in range(6)]
        assert admin.post("/v1/topics/orders/messages", json={"messages": messages}).status_code == 200
    yield process
    process.stop()


def user(account: tuple[str, str]) -> str:
    return f"{account[0]}:{account[1]}"


def test_a_read_and_a_write_send_the_user(spark: SparkSession, broker: BrokerProcess) -> None:
    def read(account: tuple[str, str]) -> int:
        reader = spark.read.format("wharf").option("url", broker.url).option("topic", "orders")
        return int(reader.option("user", user(account)).load().count())

    assert read(CONSUMER) == 6
    frame = spark.createDataFrame([("w1",), ("w2",)], ["body"])
    frame.write.format("wharf").option("url", broker.url).option("topic", "orders").option(
        "user", user(PRODUCER)
    ).option("deliveryGuarantee", "at_least_once").mode("append").save()
    assert read(READ_WRITE) == 8
    # Exactly once, the write's transactions belong to a producer group: PRODUCER has no PUB on it.
    with pytest.raises(Exception, match="403"):
        frame.write.format("wharf").option("url", broker.url).option("topic", "orders").option(
            "user", user(PRODUCER)
        ).mode("append").save()
    assert read(READ_WRITE) == 8


def test_without_the_permission_the_read_fails(spark: SparkSession, broker: BrokerProcess) -> None:
    reader = spark.read.format("wharf").option("url", broker.url).option("topic", "orders")
    with pytest.raises(Exception, match="401"):
        reader.load().count()
    with pytest.raises(Exception, match="403"):  # PUB only: the pulls are refused
        reader.option("user", user(PRODUCER)).load().count()


def test_a_malformed_user_is_an_option_error_that_hides_it() -> None:
    with pytest.raises(OptionError) as raised:
        ReadOptions.parse({"url": "http://127.0.0.1:1", "topic": "t", "user": "no-colon-secret"})
    assert "no-colon-secret" not in str(raised.value)
    options = ReadOptions.parse({"url": "http://127.0.0.1:1", "topic": "t", "user": "ak-123:sk-123456"})
    assert "sk-123456" not in repr(options)
