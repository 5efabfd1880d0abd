"""Structured Streaming reads: offsets are a JSON map per queue, checkpointed by Spark.

An offset is ``{"<topic>": {"<queue key>": <next offset>, ...}}`` (queue keys as in
:mod:`spark_jobs.planning`). Each micro-batch asks the brokers for their queues' max offsets, so
messages produced after the query started are read by the next trigger, and queues that appear
later (a topic grown, a broker added) are read from their first stored message. Admission control
(``maxOffsetsPerTrigger``) and ``Trigger.AvailableNow`` are supported; the executors' read is the
batch reader's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType
from wharf_client.queues import QueueClient

from spark_jobs.options import ReadOptions
from spark_jobs.planning import OffsetRange, QueueState, discover, lookup, plan_ranges, resolve_starts
from spark_jobs.reader import parse_tags, read_range
from spark_jobs.schema import check_schema


def limit_offsets(starts: dict[str, int], ends: dict[str, int], max_rows: int) -> dict[str, int]:
    """Ends that take at most ``max_rows`` messages in all, shared by queue in proportion to backlog."""
    backlog = {key: max(0, ends[key] - starts.get(key, ends[key])) for key in ends}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(ends)
    limited = {}
    granted = 0
    for key in sorted(ends):
        share = backlog[key] * max_rows // total
        limited[key] = starts.get(key, ends[key]) + share
        granted += share
    # Hand the rounding remainder out one message at a time so the batch is exactly max_rows.
    for key in sorted(ends):
        if granted >= max_rows:
            break
        if limited[key] < ends[key]:
            limited[key] += 1
            granted += 1
    return limited


class WharfStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over every queue of a topic; one input partition per queue's new messages."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        check_schema(schema)
        self.options = options
        self.schema = schema
        self.tags = parse_tags(options.tags)
        self._client: QueueClient | None = None
        self._states: dict[str, QueueState] = {}
        self._target: dict[str, int] | None = None

    @property
    def client(self) -> QueueClient:
        if self._client is None:
            self._client = QueueClient(timeout_s=self.options.timeout_s, user=self.options.user)
        return self._client

    def _discover(self) -> dict[str, QueueState]:
        self._states = {state.ref.key: state for state in discover(self.client, self.options)}
        return self._states

    def _wrap(self, offsets: dict[str, int]) -> dict[str, Any]:
        return {self.options.topic: offsets}

    def _unwrap(self, offset: dict[str, Any]) -> dict[str, int]:
        """The queue offsets of a checkpointed offset, keyed as discovery names the queues now
        (a key written as a bare queue id while the route was not known yet still finds its queue)."""
        offsets = {}
        for key, value in offset.get(self.options.topic, {}).items():
            state = self._find(str(key))
            offsets[state.ref.key if state is not None else str(key)] = int(value)
        return offsets

    def _find(self, key: str) -> QueueState | None:
        state = self._states.get(key)
        if state is not None:
            return state
        queue_id = key.rpartition(":")[2]
        brokers = {state.ref.broker for state in self._states.values()}
        candidates = [state for state in self._states.values() if str(state.ref.queue_id) == queue_id]
        return candidates[0] if len(candidates) == 1 and len(brokers) == 1 else None

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        states = list(self._discover().values())
        starts = resolve_starts(self.client, self.options, states)
        return self._wrap({ref.key: offset for ref, offset in starts.items()})

    def _latest(self) -> dict[str, int]:
        return {key: state.max_offset for key, state in self._discover().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        ends = self._latest()
        starts = self._unwrap(start)
        if self._target is not None:
            ends = {key: min(value, self._target.get(key, value)) for key, value in ends.items()}
        for key, offset in starts.items():
            # A queue never moves back; one that vanished from the route keeps its place.
            ends[key] = max(ends.get(key, offset), offset)
        for key in ends.keys() - starts.keys():
            starts[key] = self._states[key].min_offset if key in self._states else 0
        if isinstance(limit, ReadMaxRows):
            ends = limit_offsets(starts, ends, limit.max_rows)
        return self._wrap(ends)

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, Any]:  # noqa: N802
        return self._wrap(self._latest())

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = self._latest()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if not self._states:
            self._discover()
        starts, ends = self._unwrap(start), self._unwrap(end)
        if ends.keys() - self._states.keys():
            self._discover()
            starts, ends = self._unwrap(start), self._unwrap(end)
        begin, finish = {}, {}
        for key, until in ends.items():
            state = self._states.get(key)
            if state is None:
                continue  # a queue no broker lists any more has nothing left to read
            first = lookup(starts, state.ref)
            begin[state.ref] = state.min_offset if first is None else first
            finish[state.ref] = until
        return list(plan_ranges(self.options.topic, begin, finish, self.options.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, OffsetRange):
            return iter(())
        return read_range(partition, self.options, self.schema, self.tags)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: Spark's checkpoint is where a query's progress lives."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
