"""Batch reads: planning offset ranges on the driver, reading them with paged pulls on executors.

Each input partition is one :class:`~spark_jobs.planning.OffsetRange`. An executor pulls it page
by page in the binary records format (``Accept: application/vnd.wharf.records``) and yields one
Arrow record batch per page: its columns built from the answer's bytes by the compiled kernel
(``BatchBuilder.from_page``), or from records decoded in Python when the kernel is not loaded, a
tag filter must check each record, or the page has holes. Pulls never wait:
the range was planned from offsets that exist, so every page answers at once.

Filters on ``tags`` (=, IN), ``queue_id`` (=, IN) and ``queue_offset`` (=, <, <=, >, >=) can be
pushed into the read: tags become the pull's tag expression, the others prune and trim the ranges.
The pinned PySpark refuses to run a reader that implements pushFilters unless the session sets
``spark.sql.python.filterPushdown.enabled``, so pushdown is a reader of its own, chosen with the
``pushFilters`` option.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import StructType
from wharf_client.queues import PullPage, QueueClient

from app.store.filter import FilterExpressionError, TagFilter
from app.store.results import GetMessageStatus
from spark_jobs.errors import DataLossError, WharfSourceError
from spark_jobs.options import OptionError, ReadOptions
from spark_jobs.planning import OffsetRange, discover, plan_ranges, resolve_ends, resolve_starts
from spark_jobs.schema import BatchBuilder, check_schema, decode_records

log = logging.getLogger(__name__)


def parse_tags(expression: str | None) -> frozenset[str] | None:
    """The tag set of a tag expression; None for every message."""
    try:
        tag_filter = TagFilter.parse(expression)
    except FilterExpressionError as exc:
        raise OptionError(f"option 'tags': {exc}") from None
    return None if tag_filter is None else tag_filter.tags


def read_range(
    piece: OffsetRange, options: ReadOptions, schema: StructType, tags: frozenset[str] | None
) -> Iterator[Any]:
    """The messages of ``piece`` as Arrow record batches, one per pull page.

    Without a tag filter every offset of the range must come back; a hole (retention deleted the
    messages after planning) is data loss: an error, or with failOnDataLoss=false a warning and a skip.
    """
    builder = BatchBuilder(schema, piece.broker)
    until = piece.until_offset
    for offset, page in _pages(piece, options, tags):
        if page.status == GetMessageStatus.FOUND and tags is None:
            made = builder.from_page(page.records, until)
            if made is not None and (made[0].num_rows == 0 or made[1] == offset):
                # Every offset from the page's first: the kernel's columns are the batch.
                batch = made[0]
                if offset + batch.num_rows < min(page.next_offset, until):
                    _lost(piece, options, offset + batch.num_rows, min(page.next_offset, until))
                if batch.num_rows:
                    yield batch
                continue
        if page.status == GetMessageStatus.FOUND:
            expected = offset
            for record in decode_records(page.records):
                if record.queue_offset >= until:
                    break
                if tags is None and record.queue_offset != expected:
                    _lost(piece, options, expected, record.queue_offset)
                expected = record.queue_offset + 1
                if tags is None or record.tags in tags:
                    builder.add(record)
            if tags is None and expected < min(page.next_offset, until):
                _lost(piece, options, expected, min(page.next_offset, until))
        elif page.status == GetMessageStatus.NO_MATCHED_MESSAGE:
            if tags is None:
                _lost(piece, options, offset, min(page.next_offset, until))
        elif page.status == GetMessageStatus.OFFSET_TOO_SMALL:
            _lost(piece, options, offset, min(page.min_offset, until))
        else:
            # The queue now ends before the range does: truncated or deleted since planning.
            _lost(piece, options, offset, until)
        if len(builder):
            yield builder.build()


def _next_offset(page: PullPage, offset: int) -> int | None:
    """Where the read goes on after ``page``; None when the queue has nothing more for it."""
    if page.status in (GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE):
        return page.next_offset
    if page.status == GetMessageStatus.OFFSET_TOO_SMALL:
        return page.min_offset
    return None


def _pages(
    piece: OffsetRange, options: ReadOptions, tags: frozenset[str] | None
) -> Iterator[tuple[int, PullPage]]:
    """(offset, page) over the range, in order. The next page is requested as soon as a page's
    headers say where it ends, so the broker answers it while this page is being decoded."""
    expression = " || ".join(sorted(tags)) if tags is not None else None
    until = piece.until_offset

    def pull(client: QueueClient, offset: int) -> PullPage:
        wanted = min(options.max_messages_per_pull, until - offset)
        return client.pull(piece.address, piece.topic, piece.queue_id, offset, wanted, expression)

    with (
        QueueClient(timeout_s=options.timeout_s, user=options.user) as client,
        ThreadPoolExecutor(1, "wharf-prefetch") as prefetch,
    ):
        if piece.replicas:
            client.fallbacks[piece.address] = piece.replicas
        offset = piece.from_offset
        pending: Future[PullPage] | None = prefetch.submit(pull, client, offset) if offset < until else None
        while pending is not None:
            page = pending.result()
            following = _next_offset(page, offset)
            if following is not None and following <= offset:
                raise WharfSourceError(
                    f"queue {piece.queue_id} of {piece.topic!r} did not move past offset {offset} ({page.status})"
                )
            pending = None
            if following is not None and following < until:
                pending = prefetch.submit(pull, client, following)
            yield offset, page
            if following is None:
                break
            offset = following


def _lost(piece: OffsetRange, options: ReadOptions, first: int, end: int) -> None:
    where = f"{piece.broker + ' ' if piece.broker else ''}queue {piece.queue_id} of {piece.topic!r}"
    message = f"{where}: offsets {first}..{end - 1} are no longer stored (deleted by retention)"
    if options.fail_on_data_loss:
        raise DataLossError(message + "; set failOnDataLoss=false to skip them")
    log.warning("%s; skipped", message)


class WharfBatchReader(DataSourceReader):
    """Plans one partition per (broker, queue, from, until) range and reads each on an executor."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        check_schema(schema)
        self.options = options
        self.schema = schema
        self.tags = parse_tags(options.tags)
        self.queue_ids: frozenset[int] | None = None
        self.low_offset = 0
        self.high_offset: int | None = None

    def partitions(self) -> list[InputPartition]:
        options = self.options
        if self.tags is not None and not self.tags:
            return []  # the tag filters contradict each other: nothing can match
        with QueueClient(timeout_s=options.timeout_s, user=options.user) as client:
            states = discover(client, options)
            if self.queue_ids is not None:
                states = [state for state in states if state.ref.queue_id in self.queue_ids]
            starts = resolve_starts(client, options, states)
            ends = resolve_ends(client, options, states)
        for ref in starts:
            starts[ref] = max(starts[ref], self.low_offset)
            if self.high_offset is not None:
                ends[ref] = min(ends[ref], self.high_offset)
            ends[ref] = max(ends[ref], starts[ref])
        return list(plan_ranges(options.topic, starts, ends, options.min_partitions))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # Spark reads a single InputPartition(None) when planning found nothing to read.
        if not isinstance(partition, OffsetRange):
            return iter(())
        return read_range(partition, self.options, self.schema, self.tags)


def _pushable_tag(value: object) -> bool:
    return isinstance(value, str) and value == value.strip() and value not in ("", "*") and "||" not in value


def _listed(condition: Filter) -> tuple[Any, ...] | None:
    """The values a column must be one of, for = and IN; None for any other filter."""
    if isinstance(condition, EqualTo):
        return (condition.value,)
    if isinstance(condition, In):
        return tuple(condition.value)
    return None


class WharfPushdownReader(WharfBatchReader):
    """The batch reader that also takes filters on tags, queue_id and queue_offset into the read."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 - Spark's name
        for condition in filters:
            if not self._push(condition):
                yield condition

    def _push(self, condition: Filter) -> bool:
        column = getattr(condition, "attribute", None)
        if column == ("tags",):
            return self._push_tags(condition)
        if column == ("queue_id",):
            return self._push_queue_ids(condition)
        if column == ("queue_offset",):
            return self._push_offsets(condition)
        return False

    def _push_tags(self, condition: Filter) -> bool:
        values = _listed(condition)
        if values is None or not all(_pushable_tag(value) for value in values):
            return False
        wanted = frozenset(values)
        self.tags = wanted if self.tags is None else self.tags & wanted
        return True

    def _push_queue_ids(self, condition: Filter) -> bool:
        values = _listed(condition)
        if values is None or not all(isinstance(value, int) for value in values):
            return False
        wanted = frozenset(values)
        self.queue_ids = wanted if self.queue_ids is None else self.queue_ids & wanted
        return True

    def _push_offsets(self, condition: Filter) -> bool:
        value = getattr(condition, "value", None)
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        low, high = 0, None
        if isinstance(condition, EqualTo):
            low, high = value, value + 1
        elif isinstance(condition, GreaterThan):
            low = value + 1
        elif isinstance(condition, GreaterThanOrEqual):
            low = value
        elif isinstance(condition, LessThan):
            high = value
        elif isinstance(condition, LessThanOrEqual):
            high = value + 1
        else:
            return False
        self.low_offset = max(self.low_offset, low)
        if high is not None:
            self.high_offset = max(0, high if self.high_offset is None else min(self.high_offset, high))
        return True
