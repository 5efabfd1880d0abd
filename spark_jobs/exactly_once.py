"""Exactly-once writes: Spark's commit protocol over the broker's batch transactions.

Each task stores its rows as **batch transactions** (``POST /v1/topics/{topic}/transactions``, one
per batch of rows): nothing of them is visible. The task's :class:`BegunTransactions` (its
``WriterCommitMessage``) names them; the driver's ``commit`` commits the transactions of the
attempts Spark committed, then rolls back every other open transaction of the write's producer
group (a failed attempt's, a speculative duplicate's); ``abort`` rolls back all of them. Nothing
of a write is visible before its commit, and after it each row is visible once.

Every batch transaction is named by a **transaction key** made of where its rows come from:

* a batch write: ``<write id>-<partition>-<attempt>-<n>``, the write's producer group
  ``spark-<write id>`` (or the ``producerGroup`` option);
* a streaming write: ``<query id>-<micro-batch id>-<partition>-<n>``, the producer group
  ``spark-<query id>`` (or ``producerGroup``). A micro-batch replayed after a restart sends the same
  keys: the broker answers each with the earlier transaction and its state. Committed: the rows are
  visible already and are not sent again. Open: the replay adopts it and the commit commits it.
  Rolled back: the rows are sent again under the next key (``~1``, ``~2``, ...). However long the
  query was down, as long as the broker stores the transaction's half record.

A driver that dies between its tasks' writes and its commit leaves open transactions. A restarted
streaming query adopts them (above); a batch write with a fixed ``producerGroup`` rolls back the
group's open transactions when it starts; :func:`resolve` (``python -m spark_jobs.resolve``) does it
by hand; otherwise the broker rolls them back after WHARF_TRANSACTION_CHECK_MAX checks. Nothing is
made visible that Spark did not commit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from pyspark.sql.datasource import WriterCommitMessage
from wharf_client.auth import basic_auth
from wharf_client.codec import BATCH_MEDIA_TYPE, IncomingMessage, encode_batch
from wharf_client.producer import Producer
from wharf_client.routes import MessageQueue, TopicRoute
from wharf_client.sharding import queue_for_key

from spark_jobs.errors import WharfSourceError
from spark_jobs.options import WriteOptions

log = logging.getLogger(__name__)

MAX_END_BATCH = 1000  # ids per commit or rollback request (the broker's limit)
MAX_PENDING_LIST = 1000
TRANSACTION_ENDED = 40920
REQUEST_RETRIES = 3
# A batch transaction's half record is one message: its body must stay under the broker's
# maximum message size (4 MiB by default), with room for the batch's own framing.
MAX_TRANSACTION_BYTES = 3 * 1024 * 1024


class ExactlyOnceError(WharfSourceError):
    """A write's transactions could not be committed as Spark asked."""


@dataclass
class BegunTransactions(WriterCommitMessage):
    """What one task stored: its transactions (broker address, transaction id) to commit, and how
    many of its rows were visible already (a replayed micro-batch's committed transactions)."""

    partition: int
    messages: int
    producer_group: str
    transactions: list[tuple[str, str]] = field(default_factory=list)
    already_visible: int = 0


def _client(options: WriteOptions) -> httpx.Client:
    return httpx.Client(timeout=options.timeout_s, auth=basic_auth(options.user))


def _post(client: httpx.Client, url: str, **kwargs: Any) -> httpx.Response:
    """POST, again after a connection failure (every request here may be repeated safely)."""
    for attempt in range(REQUEST_RETRIES):
        try:
            return client.post(url, **kwargs)
        except httpx.TransportError:
            if attempt == REQUEST_RETRIES - 1:
                raise
    raise AssertionError("unreachable")


def _fail(answer: httpx.Response, what: str) -> ExactlyOnceError:
    try:
        message = answer.json().get("message", answer.text)
    except ValueError:
        message = answer.text
    return ExactlyOnceError(f"{what}: the broker answered {answer.status_code}: {message}")


class TransactionSender:
    """A task's side: stores batches of rows as batch transactions on the brokers of the topic."""

    def __init__(self, options: WriteOptions, producer_group: str, key_prefix: str) -> None:
        self.options = options
        self.producer_group = producer_group
        self.key_prefix = key_prefix
        self.client = _client(options)
        with Producer(
            options.addresses, retries=3, timeout_s=options.timeout_s, user=options.user
        ) as producer:
            self.route: TopicRoute = producer.route(options.topic)
        masters = sorted({queue.address for queue in self.route.write_queues})
        if not masters:
            raise WharfSourceError(f"topic {options.topic!r} has no writable queue")
        self.masters = masters
        self.sequence = 0
        self.begun = BegunTransactions(0, 0, producer_group)

    def close(self) -> None:
        self.client.close()

    def _queue_of(self, queue_id: int | None, sharding_key: str | None) -> MessageQueue | None:
        if queue_id is not None:
            found = [queue for queue in self.route.write_queues if queue.queue_id == queue_id]
            if not found:
                raise WharfSourceError(f"topic {self.options.topic!r} has no writable queue {queue_id}")
            return found[0]
        if sharding_key is not None:
            keyed = self.route.keyed_queues or self.route.write_queues
            return keyed[queue_for_key(sharding_key, len(keyed))]
        return None

    def send(
        self, messages: Sequence[IncomingMessage], queue_id: int | None, sharding_key: str | None
    ) -> None:
        """Store ``messages`` (rows of one queue id or sharding key, or of neither) as one batch
        transaction, or find the transaction an earlier attempt stored them in."""
        queue = self._queue_of(queue_id, sharding_key)
        if queue is not None:
            address = queue.address
            for message in messages:
                message.queue_id, message.sharding_key = queue.queue_id, None
        else:  # spread over the brokers batch by batch; each spreads its batch over its queues
            address = self.masters[self.sequence % len(self.masters)]
        key = f"{self.key_prefix}-{self.sequence}"
        self.sequence += 1
        data = encode_batch(messages)
        for retry in range(1000):
            answer = self._begin(address, data, key if retry == 0 else f"{key}~{retry}")
            state = answer["state"]
            if state == "OPEN":
                self.begun.transactions.append((address, answer["transaction_id"]))
                self.begun.messages += len(messages)
                return
            if state == "COMMITTED":
                self.begun.already_visible += len(messages)
                return
            if state == "UNKNOWN":
                raise ExactlyOnceError(
                    f"transaction {answer['transaction_id']} (key {key}) ended and its end is no longer "
                    "stored: cannot tell whether its rows are visible"
                )
            # ROLLED_BACK: its rows are not visible; they go again under the next key.
        raise ExactlyOnceError(f"key {key}: too many rolled-back attempts")

    def _begin(self, address: str, data: bytes, key: str) -> dict[str, Any]:
        answer = _post(
            self.client,
            f"{address}/v1/topics/{self.options.topic}/transactions",
            params={"producer_group": self.producer_group, "transaction_key": key},
            content=data,
            headers={"content-type": BATCH_MEDIA_TYPE},
        )
        if answer.status_code != 200:
            raise _fail(answer, f"beginning a transaction of {self.options.topic!r}")
        found: dict[str, Any] = answer.json()
        return found


def _chunks(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for first in range(0, len(items), size):
        yield items[first : first + size]


def _by_broker(transactions: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for address, transaction_id in transactions:
        ids = found.setdefault(address, [])
        if transaction_id not in ids:
            ids.append(transaction_id)
    return found


def _end(client: httpx.Client, address: str, how: str, ids: Sequence[str]) -> list[dict[str, Any]]:
    answer = _post(client, f"{address}/v1/transactions/{how}", json={"transaction_ids": list(ids)})
    if answer.status_code != 200:
        raise _fail(answer, f"the {how} of {len(ids)} transactions")
    results: list[dict[str, Any]] = answer.json()["results"]
    return results


def open_transactions(client: httpx.Client, address: str, producer_group: str) -> list[str]:
    """Every open transaction of ``producer_group`` on the broker at ``address``."""
    answer = client.get(
        f"{address}/v1/transactions/pending",
        params={"producer_group": producer_group, "checked": "false", "limit": MAX_PENDING_LIST},
    )
    if answer.status_code != 200:
        raise _fail(answer, f"listing the open transactions of {producer_group!r}")
    return [one["transaction_id"] for one in answer.json()["transactions"]]


def roll_back_open(
    client: httpx.Client, addresses: Iterable[str], producer_group: str, keep: frozenset[str] = frozenset()
) -> int:
    """Roll back every open transaction of ``producer_group`` on these brokers but those in
    ``keep``; how many were rolled back."""
    rolled_back = 0
    for address in addresses:
        while True:
            ids = [one for one in open_transactions(client, address, producer_group) if one not in keep]
            if not ids:
                break
            for chunk in _chunks(ids, MAX_END_BATCH):
                results = _end(client, address, "rollback", chunk)
                rolled_back += sum(1 for result in results if result.get("state") == "ROLLED_BACK")
    return rolled_back


def commit_write(options: WriteOptions, messages: Sequence[WriterCommitMessage | None]) -> int:
    """The driver's commit: commit every transaction the committed tasks name, then roll back the
    producer group's other open transactions (failed and speculative attempts). The number of rows
    made visible. ExactlyOnceError when a transaction can no longer be committed (rolled back
    after WHARF_TRANSACTION_CHECK_MAX checks): then the rest is rolled back."""
    begun = [message for message in messages if isinstance(message, BegunTransactions)]
    groups = {message.producer_group for message in begun}
    to_commit = _by_broker(pair for message in begun for pair in message.transactions)
    addresses = set(to_commit) | set(_brokers(options))
    committed = 0
    with _client(options) as client:
        try:
            for address, ids in to_commit.items():
                for chunk in _chunks(ids, MAX_END_BATCH):
                    for result in _end(client, address, "commit", chunk):
                        if result.get("state") == "COMMITTED":
                            committed += int(result.get("messages") or 1)
                        elif (
                            result.get("error_code") == TRANSACTION_ENDED
                            and result.get("state") == "COMMITTED"
                        ):
                            continue  # committed by an earlier try of this commit
                        else:
                            raise ExactlyOnceError(
                                f"transaction {result['transaction_id']} could not be committed: "
                                f"{result.get('message') or result.get('state')} (was the write open longer "
                                "than the broker keeps transactions open? see WHARF_TRANSACTION_CHECK_MAX)"
                            )
        except ExactlyOnceError:
            keep: frozenset[str] = frozenset()
            for group in groups:
                roll_back_open(client, addresses, group, keep)
            raise
        every = frozenset(one for ids in to_commit.values() for one in ids)
        for group in groups:
            rolled_back = roll_back_open(client, addresses, group, every)
            if rolled_back:
                log.info("rolled back %d transactions of %s left by other task attempts", rolled_back, group)
    return committed


def abort_write(
    options: WriteOptions, messages: Sequence[WriterCommitMessage | None], groups: Iterable[str]
) -> None:
    """The driver's abort: roll back every transaction of the write (reported or not)."""
    begun = [message for message in messages if isinstance(message, BegunTransactions)]
    every_group = set(groups) | {message.producer_group for message in begun}
    reported = _by_broker(pair for message in begun for pair in message.transactions)
    with _client(options) as client:
        for address, ids in reported.items():
            for chunk in _chunks(ids, MAX_END_BATCH):
                _end(client, address, "rollback", chunk)
        for group in every_group:
            roll_back_open(client, set(reported) | set(_brokers(options)), group)


def _brokers(options: WriteOptions) -> list[str]:
    """The master addresses of the brokers that serve the topic."""
    with Producer(options.addresses, retries=3, timeout_s=options.timeout_s, user=options.user) as producer:
        route = producer.route(options.topic)
    return sorted({queue.address for queue in route.write_queues})


def resolve(options: WriteOptions, producer_group: str) -> int:
    """Roll back the open transactions of ``producer_group`` (a batch write whose driver died before
    its commit: Spark committed none of them); how many."""
    with _client(options) as client:
        return roll_back_open(client, _brokers(options), producer_group)
