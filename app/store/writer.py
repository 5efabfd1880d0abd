"""MessageWriter: the write path. It validates and encodes a batch outside the lock, appends it
through the CommitLog (whose dispatch fills the ConsumeQueues under the lock), tells the arrival
listeners, and waits for the group commit when the flush mode asks for it. A single message takes
the shorter path of :mod:`app.store.single_append` when it can: the same bytes, fewer steps."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import cast

from app.store.commit_log import CommitLog, check_fits, skips_consume_queue
from app.store.disk_guard import DiskGuard
from app.store.errors import InvalidQueueError
from app.store.kernel import compiled
from app.store.log_replica import append_replica, check_replica
from app.store.mapped_file import MappedFile
from app.store.queue_table import QueueTable
from app.store.record_format import BLANK_MIN_SIZE, EncodedRecord, Limits, Message, encode_record
from app.store.results import AppendResult, PutStatus
from app.store.single_append import SingleAppend
from app.store.store_services import StoreServices

# (topic, queue_id, next queue offset, tags_code): called after every append, outside the lock, once
# per queue and tags code the append stored messages of (the next offset after the last of them).
ArrivalListener = Callable[[str, int, int, int], None]

MAX_QUEUE_ID = 1 << 16

_DONE: Future[bool] = Future()
_DONE.set_result(True)


Encoded = tuple[list[EncodedRecord], int, dict[tuple[str, int], int]]


def encode_records(
    messages: Sequence[Message], store_host: bytes, now_ms: int, limits: Limits, segment_size: int
) -> Encoded:
    """Validate and encode ``messages``: their records, the records' total size and the new
    ConsumeQueue entries per (topic, queue id); every record must fit a CommitLog segment of
    ``segment_size`` bytes. The kernel's ``encode_records`` when it is loaded, which leaves a batch
    it must not take (a message to refuse, an odd shape) to :func:`python_encode_records`."""
    if compiled is not None:
        encoded = compiled.encode_records(messages, store_host, now_ms, limits, segment_size - BLANK_MIN_SIZE)
        if encoded is not None:
            return cast(Encoded, encoded)
    return python_encode_records(messages, store_host, now_ms, limits, segment_size)


def python_encode_records(
    messages: Sequence[Message], store_host: bytes, now_ms: int, limits: Limits, segment_size: int
) -> Encoded:
    """The pure-Python twin of the kernel's ``encode_records``: raises the first message's error."""
    records: list[EncodedRecord] = []
    entries: dict[tuple[str, int], int] = {}
    total_size = 0
    for message in messages:
        if not 0 <= message.queue_id < MAX_QUEUE_ID:
            raise InvalidQueueError(f"queue id {message.queue_id} is out of range")
        record = encode_record(message, store_host, now_ms, limits)
        size = len(record.data)
        check_fits(size, segment_size)
        total_size += size
        records.append(record)
        if not skips_consume_queue(message.sysflag):
            key = (message.topic, message.queue_id)
            entries[key] = entries.get(key, 0) + 1
    return records, total_size, entries


def end_of(results: Sequence[AppendResult]) -> int:
    """Where the last of an append's records ends in the CommitLog: what its group commit waits for."""
    return max(result.end_offset for result in results)


class MessageWriter:
    def __init__(
        self,
        commitlog: CommitLog,
        queues: QueueTable,
        disk_guard: DiskGuard,
        limits: Limits,
        services: StoreServices,
        dispatchers: Sequence[ArrivalListener],
        single: SingleAppend | None = None,
    ) -> None:
        """``single`` takes single messages by the shorter path (None: every one as a batch)."""
        self.commitlog = commitlog
        self.single = single
        self.queues = queues
        self.disk_guard = disk_guard
        self.limits = limits
        self.services = services
        self.dispatchers = tuple(dispatchers)

    def append(self, messages: Sequence[Message]) -> list[AppendResult]:
        """Validate, encode (outside the lock) and append messages; no waiting for the disk.

        Either every message is valid and all are stored, or a MessageRejectedError names the
        first bad one and nothing is stored.
        """
        if len(messages) == 1 and self.single is not None:
            return self._append_one(messages[0])
        self.disk_guard.check_writable()
        now = int(time.time() * 1000)
        commitlog = self.commitlog
        return self._append_encoded(
            *encode_records(messages, commitlog.store_host, now, self.limits, commitlog.file_size)
        )

    def append_records(
        self, records: Sequence[EncodedRecord], total_size: int, entries: dict[tuple[str, int], int]
    ) -> list[AppendResult]:
        """Append records encoded already (as :func:`encode_record` does, validated against the
        store's limits): ``total_size`` their bytes, ``entries`` the ConsumeQueue entries they add
        per queue. No waiting for the disk."""
        self.disk_guard.check_writable()
        if len(records) == 1 and self.single is not None:
            return self._append_single(records[0], entries)
        return self._append_encoded(records, total_size, entries)

    def _append_one(self, message: Message) -> list[AppendResult]:
        """:meth:`append` of one message."""
        self.disk_guard.check_writable()
        if not 0 <= message.queue_id < MAX_QUEUE_ID:
            raise InvalidQueueError(f"queue id {message.queue_id} is out of range")
        record = encode_record(message, self.commitlog.store_host, int(time.time() * 1000), self.limits)
        self.commitlog.check_fits(len(record.data))
        return self._append_single(record, None)

    def _append_single(
        self, record: EncodedRecord, entries: dict[tuple[str, int], int] | None
    ) -> list[AppendResult]:
        """Append one record by :class:`SingleAppend`, or as a batch of one when it must (``entries``:
        its ConsumeQueue entry, None to derive it)."""
        assert self.single is not None
        result = self.single.append(record)
        if result is None:
            if entries is None:
                skips = skips_consume_queue(record.sysflag)
                entries = {} if skips else {(record.topic, record.queue_id): 1}
            return self._append_encoded([record], len(record.data), entries)
        for listener in self.dispatchers:
            listener(result.topic, result.queue_id, result.queue_offset + 1, record.tags_code)
        return [result]

    def _append_encoded(
        self, records: Sequence[EncodedRecord], total_size: int, entries: dict[tuple[str, int], int]
    ) -> list[AppendResult]:
        held: list[MappedFile] = []
        try:
            results = self.commitlog.append(records, total_size, lambda: self._prepare_queues(entries, held))
        finally:
            for mapped in held:
                mapped.release()
        arrived: dict[tuple[str, int, int], int] = {}
        for result, record in zip(results, records, strict=True):
            arrived[result.topic, result.queue_id, record.tags_code] = result.queue_offset + 1
        self._tell(arrived)
        return results

    def _tell(self, arrived: dict[tuple[str, int, int], int]) -> None:
        """Tell the arrival listeners, once per queue and tags code, the next offset after the last
        message of that code an append stored: what a held pull learns from each of the messages
        (another of its tags arrived; its queue moved past an offset) it learns from that one."""
        for listener in self.dispatchers:
            for (topic, queue_id, tags_code), next_offset in arrived.items():
                listener(topic, queue_id, next_offset, tags_code)

    def append_replica(self, offset: int, data: bytes) -> list[AppendResult]:
        """Write bytes replicated from a master at ``offset`` (this CommitLog's end), dispatch their
        messages to the ConsumeQueues and the index, and tell the arrival listeners
        (:func:`app.store.log_replica.append_replica`). ReplicaError when the bytes do not fit there."""
        self.disk_guard.check_writable()
        checked = check_replica(data, offset, self.commitlog.file_size)
        entries: dict[tuple[str, int], int] = {}
        for _, record in checked:
            if not skips_consume_queue(record.sysflag):
                key = (record.topic, record.queue_id)
                entries[key] = entries.get(key, 0) + 1
        held: list[MappedFile] = []
        try:
            results = append_replica(
                self.commitlog, offset, data, checked, lambda: self._prepare_queues(entries, held)
            )
        finally:
            for mapped in held:
                mapped.release()
        arrived: dict[tuple[str, int, int], int] = {}
        for result, (_, record) in zip(results, checked, strict=True):
            if not skips_consume_queue(record.sysflag):
                arrived[result.topic, result.queue_id, record.tags_code] = result.queue_offset + 1
        self._tell(arrived)
        return results

    def _prepare_queues(self, entries: dict[tuple[str, int], int], held: list[MappedFile]) -> None:
        """Under the CommitLog lock, before a batch writes anything: map and hold the ConsumeQueue
        segments its entries go to. On a full disk (DiskFullError) or out of descriptors or
        mappings (ResourceExhaustedError) the batch is refused whole rather than cut between
        CommitLog and queues."""
        self.queues.prepare(entries, self.commitlog.queue_offsets, held, self.disk_guard.check_room)

    def durable(self, results: Sequence[AppendResult]) -> Future[bool]:
        """A future that is True once ``results`` are on disk as the flush mode promises.

        Under ASYNC_FLUSH it is already done; under SYNC_FLUSH it completes with the group commit
        that covers the last result (False after the flush timeout).
        """
        group_commit = self.services.group_commit
        if group_commit is None or not results:
            return _DONE
        return group_commit.request(end_of(results))

    async def wait_durable(self, results: Sequence[AppendResult]) -> bool:
        """As :meth:`durable`, awaited on the running event loop: True at once under ASYNC_FLUSH.
        The group commit answers every waiter of this loop that one flush covered together."""
        group_commit = self.services.group_commit
        if group_commit is None or not results:
            return True
        return await group_commit.request_async(end_of(results))

    def put(self, messages: Sequence[Message]) -> list[AppendResult]:
        """Append and, under SYNC_FLUSH, block until the group commit acknowledges the bytes."""
        results = self.append(messages)
        group_commit = self.services.group_commit
        if group_commit is not None and results:
            ok = group_commit.wait(end_of(results))
            if not ok:
                results = [result._replace(status=PutStatus.FLUSH_DISK_TIMEOUT) for result in results]
        return results

    async def put_async(self, messages: Sequence[Message]) -> list[AppendResult]:
        """As :meth:`put`, awaiting the group commit without blocking the event loop."""
        results = self.append(messages)
        if self.services.group_commit is not None and results:
            ok = await self.wait_durable(results)
            if not ok:
                results = [result._replace(status=PutStatus.FLUSH_DISK_TIMEOUT) for result in results]
        return results
