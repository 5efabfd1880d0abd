"""Transactions across a broker's death: SIGKILLed in the middle, a restarted broker still knows
every open transaction (commit and rollback work), every ended one (a second end is 409), how
often each was checked, and the producer groups' check endpoints. Checks run with small settings:
first after 1 s, then every 1 s, rolled back after 3."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.api.errors import ErrorCode
from tests.api.server import BrokerProcess
from tests.transactions.check_endpoint import check_endpoint
from tests.transactions.transacting import (
    begin,
    commit,
    pending,
    queue_messages,
    rollback,
    topic_messages,
    wait_until,
)

pytestmark = [pytest.mark.crash]

TOPIC = "payments"
CHECK_MAX = 3


def start(store: Path, **settings: object) -> BrokerProcess:
    process = BrokerProcess(store, **settings).start()
    with httpx.Client(base_url=process.url) as client:
        assert client.post("/v1/topics", json={"name": TOPIC, "queues": 2}).status_code == 201
    return process


@pytest.fixture
def process(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker that checks no transaction within a test (the first check comes after 10 min)."""
    process = start(tmp_path / "store", transaction_timeout_s=600)
    yield process
    process.stop()


@pytest.fixture
def checking(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = start(
        tmp_path / "store",
        transaction_timeout_s=1,
        transaction_check_interval_s=1,
        transaction_check_max=CHECK_MAX,
    )
    yield process
    process.stop()


@pytest.fixture
def polling(tmp_path: Path) -> Iterator[BrokerProcess]:
    """Checked as ``checking`` is, with a check limit no restart reaches: what is polled stays open
    however long the restart takes on a loaded machine."""
    process = start(
        tmp_path / "store",
        transaction_timeout_s=1,
        transaction_check_interval_s=1,
        transaction_check_max=10_000,
    )
    yield process
    process.stop()


def restart(process: BrokerProcess) -> None:
    process.kill()
    process.start()


def open_transactions(client: httpx.Client, group: str) -> int:
    count: int = client.get(f"/v1/producers/{group}").json()["open_transactions"]
    return count


def ended_as(answer: httpx.Response) -> str | None:
    assert answer.status_code == 409, answer.text
    assert answer.json()["error_code"] == ErrorCode.TRANSACTION_ENDED
    state: str | None = answer.json()["state"]
    return state


def test_commit_and_rollback_after_sigkill_and_409_after_another(process: BrokerProcess) -> None:
    client = httpx.Client(base_url=process.url, timeout=30)
    kept, dropped, late = begin(
        client, TOPIC, "orders", {"body": "kept", "queue_id": 0}, {"body": "dropped"}, {"body": "late"}
    )
    assert commit(client, late["transaction_id"]).status_code == 200

    restart(process)
    assert [message["body"] for message in topic_messages(client, TOPIC)] == ["late"]
    assert commit(client, kept["transaction_id"]).status_code == 200
    assert rollback(client, dropped["transaction_id"]).status_code == 200
    assert ended_as(commit(client, late["transaction_id"])) == "COMMITTED"

    restart(process)
    assert ended_as(commit(client, kept["transaction_id"])) == "COMMITTED"
    assert ended_as(rollback(client, kept["transaction_id"])) == "COMMITTED"
    assert ended_as(commit(client, dropped["transaction_id"])) == "ROLLED_BACK"
    assert sorted(message["body"] for message in topic_messages(client, TOPIC)) == ["kept", "late"]
    assert client.get("/v1/producers/orders").json()["open_transactions"] == 0


def test_a_check_answered_commit_delivers_the_message_after_sigkill(checking: BrokerProcess) -> None:
    client = httpx.Client(base_url=checking.url, timeout=30)
    with check_endpoint() as endpoint:
        endpoint.default = "commit"
        assert client.put("/v1/producers/shop", json={"check_url": endpoint.url}).status_code == 200
        (begun,) = begin(client, TOPIC, "shop", {"body": "checked", "keys": ["order-3"], "queue_id": 1})
        restart(checking)  # before the first check
        assert client.get("/v1/producers/shop").json()["check_url"] == endpoint.url

        (delivered,) = wait_until(lambda: queue_messages(client, TOPIC, 1), what="the checked commit")
        (check,) = endpoint.checks_of(begun["transaction_id"])
    assert delivered["body"] == "checked" and delivered["unique_id"] == begun["unique_id"]
    assert check["producer_group"] == "shop" and check["topic"] == TOPIC and check["queue_id"] == 1
    assert (check["body"], check["keys"], check["check_times"]) == ("checked", ["order-3"], 1)
    assert ended_as(commit(client, begun["transaction_id"])) == "COMMITTED"
    assert pending(client, "shop") == []


def test_a_check_answered_rollback_drops_the_message(checking: BrokerProcess) -> None:
    client = httpx.Client(base_url=checking.url, timeout=30)
    with check_endpoint() as endpoint:
        endpoint.default = "rollback"
        assert client.put("/v1/producers/shop", json={"check_url": endpoint.url}).status_code == 200
        (begun,) = begin(client, TOPIC, "shop", {"body": "refused"})
        endpoint.wait_for_checks(begun["transaction_id"], 1)
        wait_until(lambda: open_transactions(client, "shop") == 0, what="the rollback")
    assert ended_as(commit(client, begun["transaction_id"])) == "ROLLED_BACK"
    assert topic_messages(client, TOPIC) == []


def test_an_unanswered_transaction_is_rolled_back_after_the_last_check(checking: BrokerProcess) -> None:
    client = httpx.Client(base_url=checking.url, timeout=30)
    with check_endpoint() as endpoint:  # answers "unknown"
        assert client.put("/v1/producers/shop", json={"check_url": endpoint.url}).status_code == 200
        (begun,) = begin(client, TOPIC, "shop", {"body": "undecided"})
        transaction_id = begun["transaction_id"]
        endpoint.wait_for_checks(transaction_id, 1)
        restart(checking)  # after the first check: the count survives
        wait_until(lambda: open_transactions(client, "shop") == 0, what="the rollback")
        checks = endpoint.checks_of(transaction_id)
    assert ended_as(commit(client, transaction_id)) == "ROLLED_BACK"
    assert topic_messages(client, TOPIC) == []
    # At most CHECK_MAX checks, counted on across the restart (a kill may cost the one under way).
    counts = [check["check_times"] for check in checks]
    assert counts == sorted(set(counts)) and counts[0] == 1 and counts[-1] == CHECK_MAX, counts


def test_a_polling_producer_sees_its_open_transactions_across_sigkill(polling: BrokerProcess) -> None:
    client = httpx.Client(base_url=polling.url, timeout=30)
    (first, other) = begin(client, TOPIC, "poller", {"body": "polled", "tags": "T"}, {"body": "other"})
    (listed_before, _) = wait_until(lambda: pending(client, "poller"), what="the first check")
    assert listed_before["transaction_id"] == first["transaction_id"]
    assert (listed_before["body"], listed_before["tags"], listed_before["check_times"]) == ("polled", "T", 1)
    assert pending(client, "someone-else") == []

    restart(polling)
    listed = {item["transaction_id"]: item for item in pending(client, "poller")}
    assert listed[first["transaction_id"]]["check_times"] >= 1
    assert commit(client, first["transaction_id"]).status_code == 200
    assert rollback(client, other["transaction_id"]).status_code == 200
    assert pending(client, "poller") == []
    assert [message["body"] for message in topic_messages(client, TOPIC)] == ["polled"]


def test_a_clean_stop_writes_the_checkpoint_before_the_open_transactions(process: BrokerProcess) -> None:
    client = httpx.Client(base_url=process.url, timeout=30)
    ended, still_open = begin(client, TOPIC, "orders", {"body": "ended"}, {"body": "open"})
    assert commit(client, ended["transaction_id"]).status_code == 200
    assert process.stop() == 0
    checkpoint = json.loads((process.store_dir / "config" / "transactionCheckpoint.json").read_bytes())
    # The open one is the second half message; the one op record ends the first.
    assert checkpoint == {"halfOffset": 1, "opOffset": 1}

    process.start()
    assert commit(client, still_open["transaction_id"]).status_code == 200
    assert ended_as(commit(client, ended["transaction_id"])) == "COMMITTED"
