"""Writes: each DataFrame row becomes one message, produced in binary batches (``batchSize`` rows).

Columns: ``body`` (binary or string) is required; ``tags`` (string), ``keys`` (array of strings or a
space-separated string), ``properties`` (map of strings), ``queue_id`` (int), ``sharding_key``,
``unique_id`` (strings) and ``born_timestamp`` (timestamp) are used when present. The columns a
read adds (topic, broker, queue_offset, msg_id, store_timestamp, reconsume_times) are ignored, so
a DataFrame read from one topic can be written to another; any other column is an error.

Delivery is at least once with a twist: a row without a unique_id gets one made of the write's id,
the task's partition and the row's position, so a retried task sends the same ids and the broker's
idempotency window (WHARF_IDEMPOTENCY_WINDOW_S) answers the repeats without storing them twice.
Messages are visible as soon as their batch is acknowledged; an aborted write cannot take them back.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
)

from app.api.codec import IncomingMessage, encode_batch
from spark_jobs.client import BrokerClient, WharfSourceError
from spark_jobs.options import WriteOptions

# At most this many body bytes go into one request, whatever batchSize says.
MAX_BATCH_BYTES = 8 * 1024 * 1024

WRITABLE: dict[str, tuple[DataType, ...]] = {
    "body": (BinaryType(), StringType()),
    "tags": (StringType(),),
    "keys": (ArrayType(StringType()), StringType()),
    "properties": (MapType(StringType(), StringType()),),
    "queue_id": (IntegerType(), LongType()),
    "sharding_key": (StringType(),),
    "unique_id": (StringType(),),
    "born_timestamp": (TimestampType(),),
}
IGNORED = frozenset({"topic", "broker", "queue_offset", "msg_id", "store_timestamp", "reconsume_times"})


def check_write_schema(schema: StructType) -> None:
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


def to_message(row: dict[str, Any], unique_id: str) -> IncomingMessage:
    body = row["body"]
    if body is None:
        raise WharfSourceError("a row has a null body; every message needs one")
    keys = row.get("keys") or []
    born = row.get("born_timestamp")
    return IncomingMessage(
        body=body.encode() if isinstance(body, str) else bytes(body),
        tags=row.get("tags") or "",
        keys=keys.split() if isinstance(keys, str) else [key for key in keys if key],
        properties=dict(row.get("properties") or ()),
        queue_id=row.get("queue_id"),
        sharding_key=row.get("sharding_key"),
        unique_id=row.get("unique_id") or unique_id,
        born_timestamp=int(born.timestamp() * 1000) if isinstance(born, datetime) else 0,
    )


@dataclass
class ProducedMessages(WriterCommitMessage):
    """What one task produced."""

    partition: int
    messages: int


def produce_rows(options: WriteOptions, batches: Iterator[Any], id_prefix: str) -> ProducedMessages:
    """Produce every row of ``batches`` in order, ``batch_size`` messages per request."""
    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    produced = 0
    pending: list[IncomingMessage] = []
    pending_bytes = 0
    with BrokerClient(options.timeout_s, user=options.user) as client:

        def flush() -> None:
            nonlocal produced, pending, pending_bytes
            if pending:
                client.produce_batch(options.address, options.topic, encode_batch(pending))
                produced += len(pending)
                pending, pending_bytes = [], 0

        index = 0
        for batch in batches:
            for row in batch.to_pylist():
                message = to_message(row, f"{id_prefix}-{partition}-{index}")
                index += 1
                pending.append(message)
                pending_bytes += len(message.body)
                if len(pending) >= options.batch_size or pending_bytes >= MAX_BATCH_BYTES:
                    flush()
        flush()
    return ProducedMessages(partition, produced)


class WharfWriter(DataSourceArrowWriter):
    """``df.write.format("wharf").option("url", ...).option("topic", ...).mode("append").save()``."""

    def __init__(self, options: WriteOptions, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise WharfSourceError("a topic is append-only: write with mode('append')")
        check_write_schema(schema)
        self.options = options
        # Made once on the driver: every task of this write (and its retries) shares it.
        self.write_id = uuid.uuid4().hex[:16]

    def write(self, iterator: Iterator[Any]) -> ProducedMessages:
        return produce_rows(self.options, iterator, self.write_id)


class WharfStreamWriter(DataSourceStreamArrowWriter):
    """A streaming sink: each micro-batch's rows are produced like a batch write's."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_write_schema(schema)
        self.options = options
        self.query_id = uuid.uuid4().hex[:16]

    def write(self, iterator: Iterator[Any]) -> ProducedMessages:
        # Spark names the micro-batch in a local property; a replayed batch reuses the same ids.
        context = TaskContext.get()
        batch_id = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
        return produce_rows(self.options, iterator, f"{self.query_id}-{batch_id or uuid.uuid4().hex[:8]}")

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Nothing to do: each batch was acknowledged by the broker when it was posted."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Nothing can be taken back: produced messages stay in the topic."""
