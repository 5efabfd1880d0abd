# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Runs of records in a CommitLog segment, compiled. Twins: ``app.store.log_codec.python_write_records``
(a batch's records copied into the segment and patched, their ConsumeQueue entries packed per
queue), ``app.store.single_append.python_write_single`` (one message's record and its ConsumeQueue
entry, in one call) and ``app.store.log_codec.python_collect_records`` (a pull's records within one segment,
each checked against its ConsumeQueue entry).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING
from cpython.sequence cimport PySequence_GetSlice
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memcpy

from app.store._kernel_base cimport (
    CQ_UNIT_SIZE,
    POS_PHYSICALOFFSET,
    POS_QUEUEOFFSET,
    POS_STORETIMESTAMP,
    TRANSACTION_MASK,
    TRANSACTION_PREPARED,
    TRANSACTION_ROLLBACK,
    read_i32,
    read_i64,
    write_i32,
    write_i64,
)
from app.store._kernel_records cimport is_record


# ---------------------------------------------------------------------------------------------
# Copying a batch's records into a CommitLog segment (app.store.log_codec.python_write_records).

cdef object _AppendResult = None
cdef object _PUT_OK = None


def bind_writer(append_result, put_ok):
    """Give the kernel the tuple type it returns each record's place as, and the PUT_OK status."""
    global _AppendResult, _PUT_OK
    _AppendResult = append_result
    _PUT_OK = put_ok


# The delay levels' topic and delays (app.store.record_format), bound at import by the twin's module.
cdef object _SCHEDULE_TOPIC = None
cdef tuple _LEVEL_DELAYS_MS = ()


def bind_schedule(str topic, tuple delays_ms):
    """Give the kernel the delay levels' topic and each level's delay in ms."""
    global _SCHEDULE_TOPIC, _LEVEL_DELAYS_MS
    _SCHEDULE_TOPIC, _LEVEL_DELAYS_MS = topic, delays_ms


def write_records(
    mm,
    Py_ssize_t position,
    Py_ssize_t limit,
    int64_t base,
    records,
    Py_ssize_t start,
    int64_t now,
    dict queue_offsets,
    bytes store_host,
    list results,
    dict runs,
):
    """The twin's loop, in C: copy records from ``start`` while each ends by ``limit``, patch the
    store timestamp and the offsets (last), add each AppendResult to ``results`` and each
    ConsumeQueue entry to its queue's run. Returns (the first record not written, the position
    after the last written)."""
    cdef Py_buffer view
    cdef char* out
    cdef Py_ssize_t index, count = len(records), size, end, run_length
    cdef int64_t physical_offset, queue_offset
    cdef int64_t sysflag, kind
    cdef tuple record
    cdef bytes data
    cdef object topic, queue_id, key, last_key = None, known, run, entries, last_run = None
    cdef object tags_code, item
    PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE)
    try:
        out = <char*>view.buf
        if limit > view.len:
            raise ValueError("the limit is past the end of the mapping")
        for index in range(start, count):
            item = records[index]
            if not isinstance(item, tuple) or len(item) != 7:
                raise TypeError(f"an EncodedRecord is a tuple of 7, not {type(item).__name__}")
            record = <tuple>item
            data = record[0]
            size = len(data)
            end = position + size
            if end > limit:
                return index, position
            topic = record[1]
            queue_id = record[2]
            tags_code = record[3]
            sysflag = record[6]
            physical_offset = base + position
            kind = sysflag & TRANSACTION_MASK
            if kind != TRANSACTION_PREPARED and kind != TRANSACTION_ROLLBACK:
                if last_key is not None and (<tuple>last_key)[0] == topic and (<tuple>last_key)[1] == queue_id:
                    key = last_key
                else:
                    key = (topic, queue_id)
                known = queue_offsets.get(key)
                queue_offset = 0 if known is None else <int64_t>known
                queue_offsets[key] = queue_offset + 1
                if key is last_key:
                    run = last_run
                else:
                    run = runs.get(key)
                    if run is None:
                        run = runs[key] = (queue_offset, bytearray())
                    last_key, last_run = key, run
                entries = (<tuple>run)[1]
                run_length = len(entries)
                PyByteArray_Resize(entries, run_length + CQ_UNIT_SIZE)
                write_i64(PyByteArray_AS_STRING(entries) + run_length, physical_offset)
                write_i32(PyByteArray_AS_STRING(entries) + run_length + 8, <int32_t>size)
                if topic is _SCHEDULE_TOPIC or topic == _SCHEDULE_TOPIC:
                    # A delay level's entry holds when its message is due (the twin's queue_tags_code).
                    if 0 <= queue_id < len(_LEVEL_DELAYS_MS):
                        tags_code = now + <int64_t>_LEVEL_DELAYS_MS[queue_id]
                write_i64(PyByteArray_AS_STRING(entries) + run_length + 12, <int64_t>tags_code)
            else:
                queue_offset = 0
            memcpy(out + position, PyBytes_AS_STRING(data), size)
            write_i64(out + position + POS_STORETIMESTAMP, now)
            # Written last: a record whose offsets are still placeholders is not valid.
            write_i64(out + position + POS_QUEUEOFFSET, queue_offset)
            write_i64(out + position + POS_PHYSICALOFFSET, physical_offset)
            results.append(
                tuple.__new__(
                    _AppendResult,
                    (_PUT_OK, topic, queue_id, queue_offset, physical_offset, size, now, store_host),
                )
            )
            position = end
    finally:
        PyBuffer_Release(&view)
    return count, position


# ---------------------------------------------------------------------------------------------
# One message's record and ConsumeQueue entry (app.store.single_append.python_write_single).

def write_single(
    mm,
    Py_ssize_t position,
    int64_t base,
    bytes data,
    int64_t now,
    int64_t queue_offset,
    cq,
    Py_ssize_t cq_position,
    int64_t tags_code,
    topic,
    queue_id,
    bytes store_host,
):
    """The twin, in C: copy one record into the segment mapped as ``mm`` at ``position``, patch
    its store timestamp and offsets (last), then write its ConsumeQueue entry into ``cq`` at
    ``cq_position``; returns its AppendResult."""
    cdef Py_buffer log_view, queue_view
    cdef Py_ssize_t size = len(data)
    cdef int64_t physical_offset = base + position
    cdef char* out
    PyObject_GetBuffer(mm, &log_view, PyBUF_WRITABLE)
    try:
        PyObject_GetBuffer(cq, &queue_view, PyBUF_WRITABLE)
        try:
            if position < 0 or position + size > log_view.len:
                raise ValueError("the record does not fit the mapping")
            if cq_position < 0 or cq_position + CQ_UNIT_SIZE > queue_view.len:
                raise ValueError("the entry does not fit the queue's mapping")
            out = <char*>log_view.buf + position
            memcpy(out, PyBytes_AS_STRING(data), size)
            write_i64(out + POS_STORETIMESTAMP, now)
            # Written last: a record whose offsets are still placeholders is not valid.
            write_i64(out + POS_QUEUEOFFSET, queue_offset)
            write_i64(out + POS_PHYSICALOFFSET, physical_offset)
            out = <char*>queue_view.buf + cq_position
            write_i64(out, physical_offset)
            write_i32(out + 8, <int32_t>size)
            write_i64(out + 12, tags_code)
        finally:
            PyBuffer_Release(&queue_view)
    finally:
        PyBuffer_Release(&log_view)
    return tuple.__new__(
        _AppendResult, (_PUT_OK, topic, queue_id, queue_offset, physical_offset, size, now, store_host)
    )


# ---------------------------------------------------------------------------------------------
# A pull's run of records out of one CommitLog segment (app.store.log_codec.python_collect_records).

def collect_records(
    entries,
    Py_ssize_t at,
    segment,
    int64_t segment_from,
    int64_t readable,
    int64_t commitlog_min,
    bytes topic,
    int32_t queue_id,
    int64_t base_offset,
    Py_ssize_t max_messages,
    int64_t max_bytes,
    list records,
    list queue_offsets,
    int64_t total,
):
    """app.store.log_codec.python_collect_records, compiled: the same slices, offsets and answer."""
    cdef Py_buffer entry_view, segment_view
    cdef const uint8_t* entry
    cdef Py_ssize_t count, index = at, taken = len(records)
    cdef int64_t physical, position, limit
    cdef int32_t size
    PyObject_GetBuffer(entries, &entry_view, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(segment, &segment_view, PyBUF_SIMPLE)
        try:
            count = entry_view.len // CQ_UNIT_SIZE
            limit = readable if readable < segment_view.len else segment_view.len
            while index < count:
                entry = <const uint8_t*>entry_view.buf + index * CQ_UNIT_SIZE
                physical = read_i64(entry)
                size = read_i32(entry + 8)
                if taken and (taken >= max_messages or total + size > max_bytes):
                    break
                if size <= 0 or physical < commitlog_min:
                    index += 1
                    continue
                position = physical - segment_from
                if position < 0 or position + size > limit:
                    break
                if not is_record(
                    <const uint8_t*>segment_view.buf + position, size, topic, queue_id, base_offset + index, physical
                ):
                    break
                records.append(PySequence_GetSlice(segment, position, position + size))
                queue_offsets.append(base_offset + index)
                total += size
                taken += 1
                index += 1
        finally:
            PyBuffer_Release(&segment_view)
    finally:
        PyBuffer_Release(&entry_view)
    return index, total
