"""A batch commit torn by a crash (app.broker.transaction_torn): the broker dies in the middle of
the append that writes a batch transaction's messages and its op record, so the first messages are
whole in the CommitLog and the rest, op record included, are not. After the restart none of them is
visible and the transaction is open; its commit then stores every message once.

The tear is made as the crash makes it: a SIGKILL after the commit, then the bytes from the first
lost record to the log's end zeroed (what the page cache had not received yet)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from unittest.mock import ANY

import httpx
import pytest

from app.broker.transaction_message import OP_TOPIC
from app.codec import IncomingMessage
from app.store.record import StoredMessage, decode_record, message_size
from app.store.record_format import NO_HOST
from tests.api.server import BrokerProcess
from tests.transactions.test_batch_restart import GROUP, TOPIC, kernel, restart, start  # noqa: F401
from tests.transactions.test_batch_transaction import begin_batch, rows, topic_messages
from tests.transactions.transacting import begin, commit

pytestmark = [pytest.mark.crash]

BATCH = 6


@pytest.fixture
def process(tmp_path: Path, kernel: str) -> Iterator[BrokerProcess]:  # noqa: F811
    process = start(tmp_path / "store", kernel, transaction_timeout_s=600)
    yield process
    process.stop()


def records(segment: Path) -> list[tuple[int, StoredMessage]]:
    """(offset, record) of every record of a CommitLog segment, in log order."""
    data = segment.read_bytes()
    found, offset = [], 0
    while offset + 8 <= len(data) and (size := message_size(data, offset)) is not None:
        found.append((offset, decode_record(data, offset)))
        offset += size
    return found


def tear(store: Path, kept: int) -> None:
    """Zero the log from the commit's record ``kept`` on: its op record and the messages after."""
    segment = store / "commitlog" / f"{0:020d}"
    written = records(segment)
    assert written[-1][1].topic == OP_TOPIC  # the commit's op record ends the log
    commit_records = written[-1 - BATCH : -1]
    assert [record.body for _, record in commit_records] == [f"torn-{i}".encode() for i in range(BATCH)]
    # The commit gives its messages the producer's address, as a produce from it does.
    assert {record.born_host for _, record in commit_records} != {NO_HOST}
    assert {record.born_host[:4] for _, record in commit_records} == {written[0][1].born_host[:4]}
    zero_from(segment, commit_records[kept][0] if kept < BATCH else written[-1][0], written)


def zero_from(segment: Path, cut: int, written: list[tuple[int, StoredMessage]]) -> None:
    """Zero ``segment`` from ``cut`` to the end of its last record."""
    end = written[-1][0] + written[-1][1].size
    descriptor = os.open(segment, os.O_WRONLY)
    try:
        os.pwrite(descriptor, bytes(end - cut), cut)
    finally:
        os.close(descriptor)


@pytest.mark.parametrize(
    ("ids", "kept"),
    [("supplied", 2), ("given by the broker", BATCH)],
    ids=["supplied-ids-2-kept", "broker-ids-all-kept-op-lost"],
)
def test_a_torn_commit_is_cut_whole_and_its_commit_stores_every_message_once(
    process: BrokerProcess, ids: str, kept: int
) -> None:
    client = httpx.Client(base_url=process.url, timeout=30)
    before = [{"body": f"before-{i}"} for i in range(5)]
    assert client.post(f"/v1/topics/{TOPIC}/messages", json={"messages": before}).status_code == 200
    batch = (
        rows(BATCH, "torn")
        if ids == "supplied"
        else [IncomingMessage(body=f"torn-{i}".encode()) for i in range(BATCH)]
    )
    begun = begin_batch(client, TOPIC, GROUP, batch, key="job-7-part-0")
    assert commit(client, begun["transaction_id"]).status_code == 200

    process.kill()
    tear(process.store_dir, kept)
    client = restart(process)

    # Recovery alone would keep the commit's first records whole: the broker cut them too.
    assert sorted(m["body"] for m in topic_messages(client, TOPIC)) == [f"before-{i}" for i in range(5)]
    assert client.get(f"/v1/producers/{GROUP}").json()["open_transactions"] == 1
    found = begin_batch(client, TOPIC, GROUP, batch, key="job-7-part-0")
    assert (found["transaction_id"], found["state"]) == (begun["transaction_id"], "OPEN")

    assert commit(client, begun["transaction_id"]).status_code == 200
    client = restart(process)  # and it stays so
    bodies = sorted(m["body"] for m in topic_messages(client, TOPIC))
    assert bodies == sorted([f"before-{i}" for i in range(5)] + [f"torn-{i}" for i in range(BATCH)])
    assert client.get(f"/v1/producers/{GROUP}").json()["open_transactions"] == 0


def test_a_produce_of_the_same_messages_that_ends_the_log_is_not_cut(process: BrokerProcess) -> None:
    """The log ends with a plain produce of the very messages an open batch transaction holds,
    from the same connection: bodies, properties, hosts and one append all alike. Only its unique
    ids tell it from a torn commit, and it stays."""
    client = httpx.Client(base_url=process.url, timeout=30)
    batch = [IncomingMessage(body=f"torn-{i}".encode()) for i in range(BATCH)]
    begin_batch(client, TOPIC, GROUP, batch)
    same = [{"body": f"torn-{i}"} for i in range(BATCH)]
    assert client.post(f"/v1/topics/{TOPIC}/messages", json={"messages": same}).status_code == 200

    client = restart(process)
    assert sorted(m["body"] for m in topic_messages(client, TOPIC)) == [f"torn-{i}" for i in range(BATCH)]
    assert client.get(f"/v1/producers/{GROUP}").json()["open_transactions"] == 1


def test_a_single_message_commit_torn_before_its_op_record_is_cut(process: BrokerProcess) -> None:
    """A transaction of one message: its commit's message whole, its op record lost."""
    client = httpx.Client(base_url=process.url, timeout=30)
    assert client.post(f"/v1/topics/{TOPIC}/messages", json={"body": "before"}).status_code == 200
    (begun,) = begin(client, TOPIC, GROUP, {"body": "single"})
    assert commit(client, begun["transaction_id"]).status_code == 200

    process.kill()
    segment = process.store_dir / "commitlog" / f"{0:020d}"
    written = records(segment)
    assert [(record.topic, record.body) for _, record in written[-2:]] == [
        (TOPIC, b"single"),
        (OP_TOPIC, ANY),
    ]
    zero_from(segment, written[-1][0], written)
    client = restart(process)

    assert [m["body"] for m in topic_messages(client, TOPIC)] == ["before"]
    assert client.get(f"/v1/producers/{GROUP}").json()["open_transactions"] == 1
    assert commit(client, begun["transaction_id"]).status_code == 200
    client = restart(process)
    assert sorted(m["body"] for m in topic_messages(client, TOPIC)) == ["before", "single"]
