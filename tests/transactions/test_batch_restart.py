"""Batch transactions across a broker's death (SIGKILL): an open one is still open after the
restart and its commit makes every message visible once; a committed one stays committed and its
key still finds it; one nobody resolves is rolled back after WHARF_TRANSACTION_CHECK_MAX checks.
Run with the compiled kernel and with its pure-Python twin (WHARF_KERNEL=python)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.server import BrokerProcess
from tests.transactions.test_batch_transaction import begin_batch, rows, topic_messages
from tests.transactions.transacting import commit, wait_until

pytestmark = [pytest.mark.crash]

TOPIC = "ledger"
GROUP = "ledger-writers"


@pytest.fixture(params=["compiled", "python"])
def kernel(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def start(store: Path, kernel: str, **settings: object) -> BrokerProcess:
    if kernel == "python":
        settings["kernel"] = "python"
    process = BrokerProcess(store, **settings).start()
    with httpx.Client(base_url=process.url) as client:
        assert client.post("/v1/topics", json={"name": TOPIC, "queues": 3}).status_code == 201
    return process


@pytest.fixture
def process(tmp_path: Path, kernel: str) -> Iterator[BrokerProcess]:
    process = start(tmp_path / "store", kernel, transaction_timeout_s=600)
    yield process
    process.stop()


def restart(process: BrokerProcess) -> httpx.Client:
    process.kill()
    process.start()
    return httpx.Client(base_url=process.url, timeout=30)


def test_open_and_committed_batches_survive_sigkill(process: BrokerProcess) -> None:
    client = httpx.Client(base_url=process.url, timeout=30)
    committed = begin_batch(client, TOPIC, GROUP, rows(100, "early"), key="job-1-part-0")
    assert commit(client, committed["transaction_id"]).status_code == 200
    left_open = begin_batch(client, TOPIC, GROUP, rows(300, "late"), key="job-1-part-1")

    client = restart(process)
    assert client.get(f"/v1/producers/{GROUP}").json()["open_transactions"] == 1
    assert sorted(m["body"] for m in topic_messages(client, TOPIC)) == sorted(
        f"early-{i}" for i in range(100)
    )
    found = begin_batch(client, TOPIC, GROUP, rows(100, "early"), key="job-1-part-0")
    assert (found["transaction_id"], found["state"]) == (committed["transaction_id"], "COMMITTED")
    found = begin_batch(client, TOPIC, GROUP, rows(300, "late"), key="job-1-part-1")
    assert (found["transaction_id"], found["state"]) == (left_open["transaction_id"], "OPEN")

    assert commit(client, left_open["transaction_id"]).status_code == 200
    client = restart(process)
    bodies = [m["body"] for m in topic_messages(client, TOPIC)]
    assert len(bodies) == 400 and len(set(bodies)) == 400
    assert commit(client, left_open["transaction_id"]).status_code == 409
    assert begin_batch(client, TOPIC, GROUP, rows(300, "late"), key="job-1-part-1")["state"] == "COMMITTED"
    assert client.get(f"/v1/producers/{GROUP}").json()["open_transactions"] == 0


def test_an_unresolved_batch_is_rolled_back_after_the_last_check(tmp_path: Path, kernel: str) -> None:
    process = start(
        tmp_path / "store",
        kernel,
        transaction_timeout_s=1,
        transaction_check_interval_s=1,
        transaction_check_max=2,
    )
    try:
        client = httpx.Client(base_url=process.url, timeout=30)
        begun = begin_batch(client, TOPIC, GROUP, rows(50), key="abandoned")
        # Checked once, then the broker dies; after the restart the count goes on from the log.
        wait_until(
            lambda: client.get("/v1/transactions/pending", params={"producer_group": GROUP}).json()[
                "transactions"
            ]
        )
        client = restart(process)
        wait_until(
            lambda: client.get(f"/v1/producers/{GROUP}").json()["open_transactions"] == 0,
            what="the rollback after the last check",
        )
        assert topic_messages(client, TOPIC) == []
        found = begin_batch(client, TOPIC, GROUP, rows(50), key="abandoned")
        assert (found["transaction_id"], found["state"]) == (begun["transaction_id"], "ROLLED_BACK")
    finally:
        process.stop()
