from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.server import BrokerProcess

_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One real broker process per test module; tests keep apart by using their own topics."""
    process = BrokerProcess(tmp_path_factory.mktemp("broker") / "store", hold_check_interval_ms=60000).start()
    yield process
    process.stop()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30.0) as client:
        yield client


@pytest.fixture
def topic(client: httpx.Client, request: pytest.FixtureRequest) -> str:
    """A fresh topic with 4 queues, named after the test."""
    name = f"{request.node.name[:80]}-{next(_names)}".replace("[", "_").replace("]", "_")
    name = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
    response = client.post("/v1/topics", json={"name": name, "queues": 4})
    assert response.status_code == 201, response.text
    return name


def store_path(broker: BrokerProcess) -> Path:
    return broker.store_dir
