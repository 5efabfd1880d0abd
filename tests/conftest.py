"""Fixtures every end-to-end suite shares: one real broker process per module and a client for it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.api.server import BrokerProcess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One real broker process per test module; tests keep apart by using their own topics. Its
    periodic hold check runs once a minute, so only an arrival can wake a held pull within a test."""
    process = BrokerProcess(tmp_path_factory.mktemp("broker") / "store", hold_check_interval_ms=60000).start()
    yield process
    process.stop()


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30.0) as client:
        yield client
