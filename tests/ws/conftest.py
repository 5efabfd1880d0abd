"""A real broker process for the WebSocket protocol tests."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.ws.wsclient import WsBroker, new_topic

# Small limits so the flow-control tests reach them with a handful of messages.
MAX_CREDIT = 1_000
MAX_UNACKED = 6


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker per module. Its periodic hold check runs once a minute, so only an arrival can wake
    a waiting subscriber within a test."""
    process = BrokerProcess(
        tmp_path_factory.mktemp("broker") / "store",
        hold_check_interval_ms=60_000,
        ws_max_credit=MAX_CREDIT,
        ws_max_unacked=MAX_UNACKED,
    ).start()
    yield process
    process.stop()


@pytest.fixture
def topic(client: httpx.Client, request: pytest.FixtureRequest) -> str:
    """A fresh topic with 4 queues, named after the test."""
    return new_topic(client, request.node.name)


@pytest.fixture
def ws(broker: BrokerProcess) -> WsBroker:
    return WsBroker(broker)
