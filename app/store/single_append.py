"""SingleAppend: one message's append, its record and its ConsumeQueue entry in one step.

A batch goes through :meth:`CommitLog.append`: it reserves every byte it will write, holds every
ConsumeQueue segment its entries go to, copies its records, packs their entries into one run per
queue and hands the runs to the dispatcher (:meth:`ConsumeQueue.put_run`). For one message that
machinery is most of the cost. Here, under one acquisition of the CommitLog's lock and one hold of
the queue's segment, one call (:func:`write_single`, compiled when the kernel is loaded) copies
the record into the CommitLog segment, patches its store timestamp and offsets (the offsets last:
until then the record is not valid), and then writes its 20-byte ConsumeQueue entry. The rest of
the bookkeeping is the batch path's, in the same order: the ends of both segments, the queue's
next offset, the dirty mark the ConsumeQueue flush reads, the CommitLog's newest record, the
message index's submission, the allocating thread's wake-up.

It takes the usual case only: a queue that exists and whose next entry goes at its end, both
segments with room already allocated on disk (so a full disk cannot be met halfway), a record that
goes to a ConsumeQueue and not to a delay level. Anything else (a segment's end and its blank, a
new queue, an allocation, a half transaction) is answered None before a byte is written, and the
caller takes the batch path: the single message is then a batch of one.
"""

from __future__ import annotations

import mmap

from app.store.commit_log import CommitLog, store_time_ms
from app.store.consume_queue import UNIT, UNIT_SIZE
from app.store.errors import StoreClosedError
from app.store.kernel import compiled
from app.store.queue_table import QueueDispatcher
from app.store.record_format import (
    BLANK_MIN_SIZE,
    OFFSETS,
    POS_QUEUEOFFSET,
    POS_STORETIMESTAMP,
    SCHEDULE_TOPIC,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    TIMESTAMP,
    EncodedRecord,
)
from app.store.results import AppendResult, PutStatus

PUT_OK = PutStatus.PUT_OK
_SKIPS_QUEUE = (SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK)


def python_write_single(
    mm: mmap.mmap,
    position: int,
    base: int,
    data: bytes,
    now: int,
    queue_offset: int,
    cq: mmap.mmap,
    cq_position: int,
    tags_code: int,
    topic: str,
    queue_id: int,
    store_host: bytes,
) -> AppendResult:
    """Copy one record into the CommitLog segment mapped as ``mm`` (at CommitLog offset ``base``)
    at ``position``, write its store timestamp ``now`` and then its offsets (``queue_offset`` and
    its physical offset), then its ConsumeQueue entry into the segment mapped as ``cq`` at
    ``cq_position``; returns its AppendResult. ValueError, with nothing written, when either does
    not fit its mapping. The pure-Python twin of the kernel's ``write_single``."""
    size = len(data)
    if position < 0 or position + size > len(mm):
        raise ValueError("the record does not fit the mapping")
    if cq_position < 0 or cq_position + UNIT_SIZE > len(cq):
        raise ValueError("the entry does not fit the queue's mapping")
    physical_offset = base + position
    mm[position : position + size] = data
    TIMESTAMP.pack_into(mm, position + POS_STORETIMESTAMP, now)
    OFFSETS.pack_into(mm, position + POS_QUEUEOFFSET, queue_offset, physical_offset)
    UNIT.pack_into(cq, cq_position, physical_offset, size, tags_code)
    return tuple.__new__(
        AppendResult, (PUT_OK, topic, queue_id, queue_offset, physical_offset, size, now, store_host)
    )


# The compiled call when the kernel is loaded (app.store.kernel), else its twin. The kernel's
# AppendResult type and PUT_OK were bound by app.store.log_codec.
write_single = python_write_single if compiled is None else compiled.write_single


class SingleAppend:
    """The single message's path into ``commitlog`` and the ConsumeQueues ``dispatcher`` writes."""

    def __init__(self, commitlog: CommitLog, dispatcher: QueueDispatcher) -> None:
        self.commitlog = commitlog
        self.dispatcher = dispatcher

    def append(self, record: EncodedRecord) -> AppendResult | None:
        """Store ``record`` (encoded, validated against the store's limits) and its ConsumeQueue
        entry; None, with nothing written, when it is not the usual case (see the module)."""
        data, topic, queue_id, tags_code, _, _, sysflag = record
        if sysflag & SYSFLAG_TRANSACTION_MASK in _SKIPS_QUEUE or topic == SCHEDULE_TOPIC:
            return None
        dispatcher = self.dispatcher
        key = (topic, queue_id)
        queue = dispatcher.queues.queues.get(key)
        if queue is None:
            return None
        commitlog = self.commitlog
        size = len(data)
        with commitlog.lock:
            if commitlog.closed:
                raise StoreClosedError("the CommitLog is closed")
            files = commitlog.files.files
            segments = queue.files.files
            if not files or not segments:
                return None
            mapped = files[-1]
            position = mapped.wrote_position
            # Room allocated for the record and a blank after it: not full, no reservation to make.
            if position + size + BLANK_MIN_SIZE > mapped.allocated:
                return None
            queue_offsets = commitlog.queue_offsets
            queue_offset = queue_offsets.get(key, 0)
            segment = segments[-1]
            cq_position = queue_offset * UNIT_SIZE - segment.file_from_offset
            if cq_position != segment.wrote_position or cq_position + UNIT_SIZE > segment.allocated:
                return None
            base = mapped.file_from_offset
            deletions = dispatcher.deletions
            if deletions.floors and deletions.is_dead(topic, base + position):
                return None
            if not segment.hold():  # mapped now if the segment cache had let it go
                return None
            try:
                now = store_time_ms()
                result = write_single(
                    mapped.mm,
                    position,
                    base,
                    data,
                    now,
                    queue_offset,
                    segment.mm,
                    cq_position,
                    tags_code,
                    topic,
                    queue_id,
                    commitlog.store_host,
                )
            finally:
                segment.release()
            mapped.wrote_position = position + size
            segment.wrote_position = cq_position + UNIT_SIZE
            queue_offsets[key] = queue_offset + 1
            physical_offset = base + position
            queue.max_physical_end = physical_offset + size
            dispatcher.dirty.mark(queue.files)
            mapped.last_store_timestamp = now
            commitlog.last_record_offset = physical_offset
            if commitlog.on_batch is not None:
                commitlog.on_batch([record], [result])
            if mapped.allocated - mapped.wrote_position < commitlog.chunk_size // 2:
                wake = commitlog.files.on_new_file
                if wake is not None:
                    wake()  # the allocating thread adds the next chunk
        return result
