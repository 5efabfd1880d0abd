"""Settings the README promises, each seen to act on a real broker process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.api.errors import ErrorCode
from tests.api.server import BrokerProcess
from tests.api.test_errors import assert_error

MAX_WAIT_MS = 300


@pytest.fixture(scope="module")
def strict_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("strict") / "store",
        max_wait_ms=MAX_WAIT_MS,
        auto_create_topics="false",
        hold_check_interval_ms=60_000,
    ).start()
    yield process
    process.stop()


def test_max_wait_ms_caps_what_a_pull_asks_for(strict_broker: BrokerProcess) -> None:
    with httpx.Client(base_url=strict_broker.url, timeout=30.0) as client:
        assert client.post("/v1/topics", json={"name": "capped", "queues": 1}).status_code == 201
        started = time.monotonic()
        answer = client.get(
            "/v1/topics/capped/queues/0/messages", params={"offset": 0, "max_wait_ms": 20_000}
        )
        waited = time.monotonic() - started
    assert answer.json()["status"] == "NO_MESSAGE_IN_QUEUE"
    # Held for the broker's cap, not the 20 s asked for (the bound is generous: the machine is shared).
    assert MAX_WAIT_MS / 1000 * 0.8 <= waited < 10


def test_without_auto_create_an_unknown_topic_is_not_made(strict_broker: BrokerProcess) -> None:
    with httpx.Client(base_url=strict_broker.url, timeout=30.0) as client:
        assert_error(
            client.post("/v1/topics/never-declared/messages", json={"body": "lost?"}),
            ErrorCode.TOPIC_NOT_FOUND,
        )
        assert_error(client.get("/v1/topics/never-declared"), ErrorCode.TOPIC_NOT_FOUND)
        assert "never-declared" not in {t["name"] for t in client.get("/v1/topics").json()["topics"]}


def test_without_auto_upgrade_a_broker_refuses_an_empty_registry(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "store", database_auto_upgrade="false")
    with pytest.raises(RuntimeError, match="exited") as refused:
        broker.start()
    assert "WHARF_DATABASE_AUTO_UPGRADE" in str(refused.value)
    assert "alembic upgrade head" in str(refused.value)
