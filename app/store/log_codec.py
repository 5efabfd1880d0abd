"""Runs of records in a CommitLog segment: a batch written into it and a pull's records taken out.

:func:`python_write_records` copies a batch's encoded records into the mapped segment, patches
three fields per record (its store timestamp, its queue offset and its physical offset, the offsets
last) and packs each record's ConsumeQueue entry into its queue's run. :func:`python_collect_records`
takes the records a run of ConsumeQueue entries names out of one segment, checking that each is the
message its entry names. Both are the pure-Python twins of the compiled kernel's loops
(app/store/_kernel_log.pyx), byte for byte; :data:`write_records` and :data:`collect_records` are
the compiled ones when the kernel is loaded (:mod:`app.store.kernel`), else the twins, chosen once
at import. The CommitLog calls each once per batch (:meth:`app.store.commit_log.CommitLog.append`)
or per segment of a pull (:meth:`app.store.commit_log.CommitLog.collect`).
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence

from app.store import record_format
from app.store.consume_queue import UNIT
from app.store.kernel import compiled
from app.store.record import record_is
from app.store.record_format import (
    LEVEL_DELAYS_MS,
    OFFSETS,
    POS_QUEUEOFFSET,
    POS_STORETIMESTAMP,
    SCHEDULE_TOPIC,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    TIMESTAMP,
    EncodedRecord,
    queue_tags_code,
)
from app.store.results import AppendResult, PutStatus

PUT_OK = PutStatus.PUT_OK

QueueKey = tuple[str, int]
# A batch's new entries in one queue: (the first one's queue offset, the entries packed back to back).
QueueRun = tuple[int, bytearray]


def python_write_records(
    mm: mmap.mmap,
    position: int,
    limit: int,
    base: int,
    records: Sequence[EncodedRecord],
    start: int,
    now: int,
    queue_offsets: dict[QueueKey, int],
    store_host: bytes,
    results: list[AppendResult],
    runs: dict[QueueKey, QueueRun],
) -> tuple[int, int]:
    """Copy ``records`` from ``start`` into the segment mapped as ``mm`` (at CommitLog offset
    ``base``) from ``position``, while each ends by ``limit``. Each gets its store timestamp
    ``now``, its physical offset and its queue's next offset (``queue_offsets``), written last: a
    record whose offsets are still placeholders is not valid. Appends each one's AppendResult to
    ``results`` and its ConsumeQueue entry to its queue's run in ``runs``. Returns (the index of
    the first record not written, the position after the last one written). The pure-Python twin
    of the kernel's loop."""
    pack_timestamp, pack_offsets, pack_unit = TIMESTAMP.pack_into, OFFSETS.pack_into, UNIT.pack
    add_result = results.append
    new_result = tuple.__new__
    for index in range(start, len(records)):
        data, topic, queue_id, tags_code, _, _, sysflag = records[index]
        size = len(data)
        end = position + size
        if end > limit:
            return index, position
        physical_offset = base + position
        kind = sysflag & SYSFLAG_TRANSACTION_MASK
        if kind != SYSFLAG_TRANSACTION_PREPARED and kind != SYSFLAG_TRANSACTION_ROLLBACK:
            key = (topic, queue_id)
            queue_offset = queue_offsets.get(key, 0)
            queue_offsets[key] = queue_offset + 1
            run = runs.get(key)
            if run is None:
                run = runs[key] = (queue_offset, bytearray())
            if topic == SCHEDULE_TOPIC:
                tags_code = queue_tags_code(topic, queue_id, tags_code, now)
            run[1].extend(pack_unit(physical_offset, size, tags_code))
        else:
            queue_offset = 0
        mm[position:end] = data
        pack_timestamp(mm, position + POS_STORETIMESTAMP, now)
        pack_offsets(mm, position + POS_QUEUEOFFSET, queue_offset, physical_offset)
        add_result(
            new_result(
                AppendResult, (PUT_OK, topic, queue_id, queue_offset, physical_offset, size, now, store_host)
            )
        )
        position = end
    return len(records), position


# The compiled kernel's loop when it is loaded (app.store.kernel), else its twin.
write_records = python_write_records
if compiled is not None:
    compiled.bind_writer(AppendResult, PUT_OK)
    compiled.bind_schedule(SCHEDULE_TOPIC, LEVEL_DELAYS_MS)
    write_records = compiled.write_records


def bind_level_delays(delays_ms: tuple[int, ...]) -> None:
    """Make ``delays_ms`` the delay levels of this process (WHARF_MESSAGE_DELAY_LEVEL): the due times
    written into SCHEDULE_TOPIC's queue entries, by the Python writer and the compiled one."""
    record_format.LEVEL_DELAYS_MS = delays_ms
    if compiled is not None:
        compiled.bind_schedule(SCHEDULE_TOPIC, delays_ms)


def python_collect_records(
    entries: bytes | memoryview,
    at: int,
    segment: memoryview,
    segment_from: int,
    readable: int,
    commitlog_min: int,
    topic: bytes,
    queue_id: int,
    base_offset: int,
    max_messages: int,
    max_bytes: int,
    records: list[memoryview],
    queue_offsets: list[int],
    total: int,
) -> tuple[int, int]:
    """Take the records that ConsumeQueue ``entries`` (entry ``i`` is queue offset ``base_offset +
    i``) name from entry ``at`` on, as long as each lies in one CommitLog segment: ``segment``, its
    mapping, begins at CommitLog offset ``segment_from`` and holds ``readable`` written bytes.
    Appends each record's slice of ``segment`` to ``records`` and its queue offset to
    ``queue_offsets`` and adds its size to ``total``, as :meth:`MessageReader.get_message` reads:
    an entry of no size or before ``commitlog_min`` is passed over, and nothing more is taken once
    ``records`` holds ``max_messages`` or the next record would bring ``total`` past ``max_bytes``.
    Stops at an entry it cannot decide alone: a record outside the segment, or one that is not the
    message its entry names (:func:`record_is`). Returns (the index of the first entry not passed,
    ``total``). The pure-Python twin of the kernel's loop."""
    index = at
    count = len(entries) // UNIT.size
    limit = min(readable, len(segment))
    while index < count:
        physical, size, _tags_code = UNIT.unpack_from(entries, index * UNIT.size)
        if records and (len(records) >= max_messages or total + size > max_bytes):
            break
        if size <= 0 or physical < commitlog_min:
            index += 1
            continue
        position = physical - segment_from
        if position < 0 or position + size > limit:
            break
        data = segment[position : position + size]
        if not record_is(data, topic, queue_id, base_offset + index, physical):
            break
        records.append(data)
        queue_offsets.append(base_offset + index)
        total += size
        index += 1
    return index, total


collect_records = python_collect_records if compiled is None else compiled.collect_records
