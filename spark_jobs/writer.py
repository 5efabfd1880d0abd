"""Writes: each DataFrame row becomes one message, produced in binary batches (``batchSize`` rows).

Rows go where a producer would send them (wharf_client.Producer): the topic's route, asked of the
``url`` brokers, spreads the batches over the writable queues of every broker that serves the
topic, and a batch a broker fails is retried on another. Rows with a ``queue_id`` go to a queue of
that id, rows with a ``sharding_key`` to the queue the key picks, always the same one.

Columns: ``body`` (binary or string) is required; ``tags`` (string), ``keys`` (array of strings or a
space-separated string), ``properties`` (map of strings), ``queue_id`` (int), ``sharding_key``,
``unique_id`` (strings) and ``born_timestamp`` (timestamp) are used when present. The columns a
read adds (topic, broker, queue_offset, msg_id, store_timestamp, reconsume_times) are ignored, so
a DataFrame read from one topic can be written to another; any other column is an error.

Delivery (option ``deliveryGuarantee``):

* ``exactly_once`` (the default): each task stores its rows as batch transactions, and the driver's
  commit makes them visible (:mod:`spark_jobs.exactly_once`): nothing of a write is visible before
  its commit, every row once after it, whatever tasks were retried or ran speculatively; a failed or
  aborted write leaves nothing; a replayed micro-batch finds what it stored before.
* ``at_least_once``: a row without a unique_id gets one made of the write's id, the task's
  partition and the row's position, so a retried task sends the same ids and the broker's
  idempotency window (WHARF_IDEMPOTENCY_WINDOW_S) answers the repeats without storing them twice.
  Messages are visible as soon as their batch is acknowledged; an aborted write cannot take them
  back, and a repeat after the window is stored again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark import TaskContext
from pyspark.sql import types as T
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from wharf_client.codec import IncomingMessage
from wharf_client.producer import OutgoingMessage, Producer

from spark_jobs.errors import WharfSourceError
from spark_jobs.exactly_once import (
    MAX_TRANSACTION_BYTES,
    BegunTransactions,
    TransactionSender,
    abort_write,
    commit_write,
    resolve,
)
from spark_jobs.options import WriteOptions

# At most this many body bytes go into one request, whatever batchSize says.
MAX_BATCH_BYTES = 8 * 1024 * 1024

WRITABLE: dict[str, tuple[T.DataType, ...]] = {
    "body": (T.BinaryType(), T.StringType()),
    "tags": (T.StringType(),),
    "keys": (T.ArrayType(T.StringType()), T.StringType()),
    "properties": (T.MapType(T.StringType(), T.StringType()),),
    "queue_id": (T.IntegerType(), T.LongType()),
    "sharding_key": (T.StringType(),),
    "unique_id": (T.StringType(),),
    "born_timestamp": (T.TimestampType(),),
}
IGNORED = frozenset({"topic", "broker", "queue_offset", "msg_id", "store_timestamp", "reconsume_times"})


def check_write_schema(schema: T.StructType) -> None:
    names = set(schema.fieldNames())
    if "body" not in names:
        raise WharfSourceError("writing to wharf needs a 'body' column (binary or string)")
    for field in schema.fields:
        if field.name in IGNORED:
            continue
        accepted = WRITABLE.get(field.name)
        if accepted is None:
            raise WharfSourceError(
                f"column {field.name!r} has no place in a message; use {', '.join(WRITABLE)}"
            )
        if not any(field.dataType == data_type for data_type in accepted):
            raise WharfSourceError(
                f"column {field.name!r} must be {' or '.join(t.simpleString() for t in accepted)}, "
                f"not {field.dataType.simpleString()}"
            )


# Rows of one (queue_id, sharding_key) go out together, in one batch.
BatchKey = tuple[int | None, str | None]


def to_message(row: dict[str, Any], unique_id: str) -> tuple[BatchKey, OutgoingMessage]:
    body = row["body"]
    if body is None:
        raise WharfSourceError("a row has a null body; every message needs one")
    keys = row.get("keys") or []
    born = row.get("born_timestamp")
    message = OutgoingMessage(
        body=body.encode() if isinstance(body, str) else bytes(body),
        tags=row.get("tags") or "",
        keys=keys.split() if isinstance(keys, str) else [key for key in keys if key],
        properties=dict(row.get("properties") or ()),
        unique_id=row.get("unique_id") or unique_id,
        born_timestamp=int(born.timestamp() * 1000) if isinstance(born, datetime) else 0,
    )
    return (row.get("queue_id"), row.get("sharding_key")), message


@dataclass
class ProducedMessages(WriterCommitMessage):
    """What one task produced."""

    partition: int
    messages: int


def produce_rows(options: WriteOptions, batches: Iterator[Any], id_prefix: str) -> ProducedMessages:
    """Produce every row of ``batches``, ``batch_size`` rows at a time (one request per queue_id and
    sharding_key among them); rows of one sharding key keep their order."""
    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    produced = 0
    pending: dict[BatchKey, list[OutgoingMessage]] = {}
    pending_rows = pending_bytes = 0
    with Producer(options.addresses, retries=3, timeout_s=options.timeout_s, user=options.user) as producer:

        def flush() -> None:
            nonlocal produced, pending_rows, pending_bytes
            for (queue_id, sharding_key), messages in pending.items():
                producer.send_batch(options.topic, messages, queue_id=queue_id, sharding_key=sharding_key)
                produced += len(messages)
            pending.clear()
            pending_rows = pending_bytes = 0

        index = 0
        for batch in batches:
            for row in batch.to_pylist():
                key, message = to_message(row, f"{id_prefix}-{partition}-{index}")
                index += 1
                pending.setdefault(key, []).append(message)
                pending_rows += 1
                pending_bytes += len(message.body)
                if pending_rows >= options.batch_size or pending_bytes >= MAX_BATCH_BYTES:
                    flush()
        flush()
    return ProducedMessages(partition, produced)


def begin_rows(
    options: WriteOptions, batches: Iterator[Any], producer_group: str, key_prefix: str, id_prefix: str
) -> BegunTransactions:
    """Store every row of ``batches`` as batch transactions of ``producer_group`` (``batch_size``
    rows, or MAX_TRANSACTION_BYTES, at a time; one transaction per queue_id and sharding_key among
    them), keys ``<key_prefix>-<n>``; what the driver needs to commit them."""
    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    sender = TransactionSender(options, producer_group, f"{key_prefix}-{partition}")
    sender.begun.partition = partition
    pending: dict[BatchKey, list[IncomingMessage]] = {}
    pending_rows = pending_bytes = 0
    limit_bytes = min(MAX_BATCH_BYTES, MAX_TRANSACTION_BYTES)
    try:

        def flush() -> None:
            nonlocal pending_rows, pending_bytes
            for (queue_id, sharding_key), messages in pending.items():
                sender.send(messages, queue_id, sharding_key)
            pending.clear()
            pending_rows = pending_bytes = 0

        index = 0
        for batch in batches:
            for row in batch.to_pylist():
                key, outgoing = to_message(row, f"{id_prefix}-{partition}-{index}")
                index += 1
                pending.setdefault(key, []).append(
                    IncomingMessage(
                        body=outgoing.body,
                        tags=outgoing.tags,
                        keys=list(outgoing.keys),
                        properties=outgoing.properties,
                        unique_id=outgoing.unique_id,
                        born_timestamp=outgoing.born_timestamp,
                        sharding_key=key[1],
                    )
                )
                pending_rows += 1
                pending_bytes += len(outgoing.body)
                if pending_rows >= options.batch_size or pending_bytes >= limit_bytes:
                    flush()
        flush()
    finally:
        sender.close()
    return sender.begun


def _attempt() -> tuple[int, int]:
    context = TaskContext.get()
    return (context.partitionId(), context.attemptNumber()) if context is not None else (0, 0)


class WharfWriter(DataSourceArrowWriter):
    """``df.write.format("wharf").option("url", ...).option("topic", ...).mode("append").save()``."""

    def __init__(self, options: WriteOptions, schema: T.StructType, overwrite: bool) -> None:
        if overwrite:
            raise WharfSourceError("a topic is append-only: write with mode('append')")
        check_write_schema(schema)
        self.options = options
        # Made once on the driver: every task of this write (and its retries) shares it.
        self.write_id = uuid.uuid4().hex[:16]
        self.producer_group = options.producer_group or f"spark-{self.write_id}"
        if options.exactly_once and options.producer_group is not None:
            # A fixed group: what an earlier run of this write left open, Spark never committed.
            resolve(options, options.producer_group)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        if not self.options.exactly_once:
            return produce_rows(self.options, iterator, self.write_id)
        _, attempt = _attempt()
        # Each attempt its own keys: the driver commits the attempts Spark committed and rolls back
        # the others' transactions.
        return begin_rows(
            self.options, iterator, self.producer_group, f"{self.write_id}-a{attempt}", self.write_id
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.options.exactly_once:
            commit_write(self.options, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.options.exactly_once:
            abort_write(self.options, messages, (self.producer_group,))


class WharfStreamWriter(DataSourceStreamArrowWriter):
    """A streaming sink: each micro-batch's rows are written like a batch write's; exactly once, a
    micro-batch's keys and unique ids derive from the query's id, the micro-batch id, the partition
    and the row, so a replay after a restart finds what the first run stored."""

    def __init__(self, options: WriteOptions, schema: T.StructType) -> None:
        check_write_schema(schema)
        self.options = options
        self.query_id = uuid.uuid4().hex[:16]

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        # Spark names the query and the micro-batch in local properties, the same after a restart
        # from the checkpoint; a replayed batch reuses the same ids.
        context = TaskContext.get()
        batch_id = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
        query_id = context.getLocalProperty("sql.streaming.queryId") if context is not None else None
        if not self.options.exactly_once:
            return produce_rows(self.options, iterator, f"{self.query_id}-{batch_id or uuid.uuid4().hex[:8]}")
        if batch_id is None or query_id is None:
            raise WharfSourceError("a streaming write runs in a streaming query: its ids are missing")
        group = self.options.producer_group or f"spark-{query_id}"
        prefix = f"{query_id}-{batch_id}"
        return begin_rows(self.options, iterator, group, prefix, prefix)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Exactly once: commit the micro-batch's transactions (see :func:`commit_write`). At least
        once: nothing to do, each batch was acknowledged when it was posted."""
        if self.options.exactly_once:
            commit_write(self.options, messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Exactly once: roll back the micro-batch's transactions; a replay sends its rows again.
        At least once: nothing can be taken back."""
        if self.options.exactly_once:
            abort_write(self.options, messages, ())
