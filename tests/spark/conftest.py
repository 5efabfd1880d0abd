"""Fixtures for the Spark tests: one local SparkSession for the run, a real broker per module."""

from __future__ import annotations

import itertools
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")
if shutil.which("java") is None and not os.environ.get("CI"):
    pytest.skip("Spark needs Java 17 or newer on the PATH", allow_module_level=True)

from pyspark.sql import DataFrame, SparkSession  # noqa: E402

from spark_jobs.session import wharf_session  # noqa: E402
from tests.api.server import BrokerProcess  # noqa: E402

_names = itertools.count()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """Two local cores (a failed task is tried up to 4 times, as on a cluster), two shuffle
    partitions, no UI: small and quick to start."""
    session = wharf_session(
        "wharf-tests",
        "local[2,4]",
        **{
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.python.worker.reuse": "true",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def make_topic(client: httpx.Client, prefix: str, queues: int = 4) -> str:
    name = f"{prefix[:60]}-{next(_names)}"
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
    response = client.post("/v1/topics", json={"name": name, "queues": queues})
    assert response.status_code == 201, response.text
    return name


@pytest.fixture
def topic(client: httpx.Client, request: pytest.FixtureRequest) -> str:
    """A fresh topic with 4 queues, named after the test."""
    return make_topic(client, request.node.name)


def produce(client: httpx.Client, topic: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    response = client.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results


@pytest.fixture
def wharf(spark: SparkSession, broker: BrokerProcess) -> Callable[..., DataFrame]:
    """``wharf(topic, startingOffsets=...)``: a batch read of ``topic`` from the module's broker."""

    def read(topic: str, url: str | None = None, **options: object) -> DataFrame:
        reader = spark.read.format("wharf").option("url", url or broker.url).option("topic", topic)
        for name, value in options.items():
            reader = reader.option(name, str(value))
        return reader.load()

    return read


@pytest.fixture
def two_brokers(tmp_path: Path, postgres_url: str) -> Iterator[tuple[BrokerProcess, BrokerProcess]]:
    """broker-a and broker-b sharing one route registry, both serving topic ``spread`` (2 queues each),
    started once the route of ``spread`` names both."""
    first = BrokerProcess(tmp_path / "a", broker_name="broker-a", database_url=postgres_url).start()
    second = BrokerProcess(tmp_path / "b", broker_name="broker-b", database_url=postgres_url).start()
    try:
        with httpx.Client(timeout=30.0) as http:
            for process in (first, second):
                created = http.post(f"{process.url}/v1/topics", json={"name": "spread", "queues": 2})
                assert created.status_code == 201, created.text
            # The registry learns of the second broker's queues with its next heartbeat: poll the route.
            deadline = time.monotonic() + 10
            while len(http.get(f"{first.url}/v1/topics/spread/route").json().get("queue_datas", [])) < 2:
                assert time.monotonic() < deadline, "the second broker never showed in the route"
                time.sleep(0.05)
        yield first, second
    finally:
        second.stop()
        first.stop()
