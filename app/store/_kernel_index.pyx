# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Writing a batch's hash index entries, compiled. Twins: ``app.store.index_file.IndexFile.index_messages``
(the index thread's loop) and ``app.store.index_file.python_key_hash`` (``index_key_hash``).
"""

from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.unicode cimport PyUnicode_READ_CHAR
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.stdlib cimport free, realloc

from app.store._kernel_base cimport (
    TRANSACTION_MASK,
    TRANSACTION_ROLLBACK,
    java_hash_on,
    positive_hash,
    read_i32,
    write_i32,
    write_i64,
)


# ---------------------------------------------------------------------------------------------
# Writing a batch's hash index entries (app.store.index_file.IndexFile.index_messages).

cdef enum:
    INDEX_HEADER_SIZE = 40
    INDEX_ENTRY_SIZE = 20
    INDEX_MAX_INT = 0x7FFFFFFF


cdef struct Hashes:
    uint32_t* items
    Py_ssize_t count
    Py_ssize_t capacity


cdef int add_hash(Hashes* hashes, uint32_t value) except -1:
    cdef uint32_t* grown
    if hashes.count == hashes.capacity:
        grown = <uint32_t*>realloc(hashes.items, (hashes.capacity * 2 + 16) * sizeof(uint32_t))
        if grown == NULL:
            raise MemoryError()
        hashes.items = grown
        hashes.capacity = hashes.capacity * 2 + 16
    hashes.items[hashes.count] = value
    hashes.count += 1
    return 0


def index_key_hash(str key):
    """The hash RocketMQ files an index key under (the twin: ``app.store.index_file.key_hash``)."""
    return positive_hash(java_hash_on(0, key, 0, len(key)))


cdef int key_hashes(Hashes* hashes, str keys, str uniq_key, uint32_t prefix) except -1:
    """The hashes of "topic#key" for each space-separated key, then for the unique id: Java's
    String.hashCode continued from the topic's prefix, as RocketMQ's index takes it."""
    cdef Py_ssize_t length, start = 0, i
    hashes.count = 0
    if keys:
        length = len(keys)
        for i in range(length + 1):
            if i == length or PyUnicode_READ_CHAR(keys, i) == 32:
                if i > start:
                    add_hash(hashes, positive_hash(java_hash_on(prefix, keys, start, i)))
                start = i + 1
    if uniq_key:
        add_hash(hashes, positive_hash(java_hash_on(prefix, uniq_key, 0, len(uniq_key))))
    return 0


cdef uint32_t topic_prefix(str topic) except? 0:
    """Java's hash of "topic#", where every key hash of the topic starts."""
    return 31 * java_hash_on(0, topic, 0, len(topic)) + 35


def index_messages(
    mm,
    records,
    placements,
    Py_ssize_t start,
    dict prefixes,
    int64_t slots,
    int64_t entries_at,
    int64_t begin,
    int64_t number,
    int64_t limit,
    int64_t end_offset,
    int64_t end_timestamp,
):
    """The index thread's loop (the twin: ``IndexFile.index_messages``): write the entries of
    ``records`` from ``start`` into the mapped file ``mm`` until they are done or the next one's keys
    do not all fit. Returns (position of the first message not indexed, next entry number, slots
    newly used, end offset, end timestamp)."""
    cdef Py_buffer view
    cdef uint8_t* base
    cdef Py_ssize_t position = start, count = len(records), k, taken
    cdef Hashes hashes
    cdef int64_t used = 0, offset, store_timestamp, seconds, slot_at
    cdef int32_t previous
    cdef uint32_t hashed, prefix
    cdef object record, placed, topic, keys, uniq_key, sysflag, cached
    hashes.items = NULL
    hashes.count = hashes.capacity = 0
    PyObject_GetBuffer(mm, &view, PyBUF_WRITABLE)
    try:
        base = <uint8_t*>view.buf
        while position < count:
            record = records[position]
            placed = placements[position]
            topic, keys, uniq_key, sysflag = record.topic, record.keys, record.uniq_key, record.sysflag
            if sysflag and (<int64_t>sysflag & TRANSACTION_MASK) == TRANSACTION_ROLLBACK:
                keys = uniq_key = ""  # never looked up; prepared messages are, as in RocketMQ
            cached = prefixes.get(topic)
            if cached is None:
                cached = prefixes[topic] = topic_prefix(topic)
            prefix = <uint32_t>cached
            key_hashes(&hashes, keys, uniq_key, prefix)
            taken = hashes.count
            if taken > limit - number:
                if number > 1:
                    break  # the next file takes this message
                taken = max(limit - number, 0)
            offset = placed.physical_offset
            store_timestamp = placed.store_timestamp
            seconds = (store_timestamp - begin) // 1000
            if store_timestamp < begin:
                seconds = 0
            elif seconds > INDEX_MAX_INT:
                seconds = INDEX_MAX_INT
            if taken and entries_at + (number + taken) * INDEX_ENTRY_SIZE > view.len:
                raise IndexError("index entry past the end of the file")
            for k in range(taken):
                hashed = hashes.items[k]
                slot_at = INDEX_HEADER_SIZE + (hashed % slots) * 4
                previous = read_i32(base + slot_at)
                if previous <= 0 or previous >= number:  # empty, or written after the last flush
                    previous = 0
                    used += 1
                write_i32(<char*>base + entries_at + number * INDEX_ENTRY_SIZE, <int32_t>hashed)
                write_i64(<char*>base + entries_at + number * INDEX_ENTRY_SIZE + 4, offset)
                write_i32(<char*>base + entries_at + number * INDEX_ENTRY_SIZE + 12, <int32_t>seconds)
                write_i32(<char*>base + entries_at + number * INDEX_ENTRY_SIZE + 16, previous)
                write_i32(<char*>base + slot_at, <int32_t>number)  # after the entry: a reader never follows a blank
                number += 1
            end_offset = offset + <int64_t>placed.size
            if store_timestamp > end_timestamp:
                end_timestamp = store_timestamp
            position += 1
    finally:
        free(hashes.items)
        PyBuffer_Release(&view)
    return position, number, used, end_offset, end_timestamp
